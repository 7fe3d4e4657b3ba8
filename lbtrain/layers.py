"""Ghost batch normalization in one reshape, with its gradient written out.

Ghost BN (Hoffer, Hubara, Soudry 2017, "Train longer, generalize better", sec. 4) normalizes a
large batch in groups of ``virtual_batch_size`` samples, each with its own mean and variance:
what W workers with their own BatchNormalization do to their shares of a global batch.

Layout (as Keras and ``lbtrain.data``): a batch of ``N = G * b`` samples is read as ``[b, G]``,
so group r holds samples ``r, r + G, r + 2G, ...``. The layer reshapes the input once to
``[b, G, S, C]`` (S: a sample's positions, C: channels); a group's statistics are sums over axes
0 and 2 and broadcast back over them: no transposes, no per-group slices. The backward pass is
the batch-norm gradient (Ioffe and Szegedy 2015, sec. 3) on the same layout, a few passes
instead of the many elementwise ops autodiff would record.

Speed on CPU: TensorFlow has no fused kernel that normalizes per (group, channel), so each
elementwise pass in TensorFlow ops reads and writes the whole tensor (8 such passes per training
step, against 2 for Keras's fused BN; folding the groups into the channel axis around the fused
kernel needs four full transposes per step and measured slower). Where lbtrain's compiled kernels
are built (``lbtrain.kernels``) the layer computes the same formulas with them, one group at a
time while its samples are in the core's cache: about as fast as the fused kernel on the
benchmarks' conv layers. XLA-compiled steps, SavedModel traces, GPUs and dtypes other than float32 use the ops.
"""

from __future__ import annotations

import tensorflow as tf

from lbtrain._keras import default_training
from lbtrain._registration import keras_serializable


@keras_serializable()
class GhostBatchNormalization(tf.keras.layers.Layer):
    """Batch normalization over groups of ``virtual_batch_size`` samples (last axis = channels).

    Training: ``y = gamma * (x - mean_g) / sqrt(var_g + epsilon) + beta`` with the statistics of
    x's group g (over the group's samples and all spatial positions). The moving statistics
    move towards the mean over groups of the group statistics (variance Bessel-corrected, as
    Keras's fused BN). Inference uses the moving statistics, as ``BatchNormalization``.

    Weights are named and ordered as Keras's: gamma, beta, moving_mean, moving_variance.
    """

    def __init__(self, virtual_batch_size: int, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(virtual_batch_size, bool) or not isinstance(virtual_batch_size, int) or virtual_batch_size < 1:
            raise ValueError(f"virtual_batch_size must be a positive integer, got {virtual_batch_size!r}")
        self.virtual_batch_size = virtual_batch_size
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)

    def build(self, input_shape):
        channels = int(input_shape[-1])
        def weight(name, initializer, trainable):
            return self.add_weight(name=name, shape=(channels,), initializer=initializer, trainable=trainable)

        self.gamma = weight("gamma", "ones", True) if self.scale else None
        self.beta = weight("beta", "zeros", True) if self.center else None
        self.moving_mean = weight("moving_mean", "zeros", False)
        self.moving_variance = weight("moving_variance", "ones", False)
        super().build(input_shape)

    def build_from_config(self, config):
        # Keras builds restored custom layers outside their name scope; keep the weight names
        # ("<layer>/gamma:0") that exclusion regexes such as LARS's match on.
        with tf.name_scope(self.name):
            super().build_from_config(config)

    def _scale_and_offset(self, channels: int) -> tuple[tf.Tensor, tf.Tensor]:
        scale = self.gamma if self.gamma is not None else tf.ones((channels,), self.compute_dtype)
        offset = self.beta if self.beta is not None else tf.zeros((channels,), self.compute_dtype)
        return scale, offset

    def _train(self, inputs: tf.Tensor) -> tf.Tensor:
        channels = inputs.shape[-1]
        scale, offset = self._scale_and_offset(channels)
        grouped = tf.reshape(inputs, [self.virtual_batch_size, -1, _positions(inputs), channels])
        normalized, mean, variance = _ghost_batch_norm(grouped, scale, offset, self.epsilon)
        # Each group's variance Bessel-corrected (n samples x positions), as Keras's fused BN.
        count = tf.cast(self.virtual_batch_size * tf.shape(grouped)[2], variance.dtype)
        corrected = variance * count / tf.maximum(count - 1.0, 1.0)
        for moving, batch_value in ((self.moving_mean, mean), (self.moving_variance, corrected)):
            group_mean = tf.reduce_mean(batch_value, axis=[0, 1, 2])
            moving.assign(moving * self.momentum + tf.cast(group_mean, moving.dtype) * (1.0 - self.momentum))
        return tf.reshape(normalized, tf.shape(inputs))

    def _infer(self, inputs: tf.Tensor) -> tf.Tensor:
        scale, offset = self._scale_and_offset(inputs.shape[-1])
        return tf.nn.batch_normalization(inputs, self.moving_mean, self.moving_variance, offset, scale, self.epsilon)

    def call(self, inputs, training=None, mask=None):
        # Keras 3's BatchNormalization takes a mask, and cloning it into this layer
        # (``lbtrain.models.set_virtual_batch_size``) passes the same arguments.
        if mask is not None:
            raise ValueError(f"{self.name}: GhostBatchNormalization does not support masked inputs")
        if training is None:
            training = default_training()
        if isinstance(training, bool) or isinstance(training, int):
            return self._train(inputs) if training else self._infer(inputs)
        return tf.cond(tf.cast(training, tf.bool), lambda: self._train(inputs), lambda: self._infer(inputs))

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "virtual_batch_size": self.virtual_batch_size,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
        }


def _positions(inputs: tf.Tensor) -> tf.Tensor | int:
    """How many positions (all axes between batch and channels) one sample has."""
    return tf.reduce_prod(tf.shape(inputs)[1:-1]) if len(inputs.shape) > 2 else 1


def _group_sum(values: tf.Tensor) -> tf.Tensor:
    """``[b, G, S, C] -> [1, G, 1, C]``: the sum over each group's samples and positions.
    Axis 0 first, then axis 2: two reductions that only read, several times faster on CPU than
    one reduction over both axes."""
    return tf.reduce_sum(tf.reduce_sum(values, axis=0, keepdims=True), axis=2, keepdims=True)


def _in_xla_context() -> bool:
    """Whether the ops being built go into an XLA-compiled function (``jit_compile=True``, the
    trainer's ``training.jit_compile`` or a user's ``model.compile(jit_compile=True)``). Read
    from TensorFlow's graph (``control_flow_util``, the same check TensorFlow's own ops make;
    checked on TF 2.15 and 2.21)."""
    from tensorflow.python.ops import control_flow_util

    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _group_sum_of_squares(values: tf.Tensor) -> tf.Tensor:
    """``sum(values**2)`` per group as ``_group_sum``, without writing ``values**2`` out: two
    Euclidean-norm reductions, which only read. XLA has no kernel for that reduction, so a
    compiled step takes ``_group_sum(values**2)``, whose square XLA fuses into the sums."""
    if _in_xla_context():
        return _group_sum(tf.square(values))
    norm = tf.math.reduce_euclidean_norm(tf.math.reduce_euclidean_norm(values, axis=0, keepdims=True), axis=2, keepdims=True)
    return tf.square(norm)


def _in_save_context() -> bool:
    """Whether the ops being built are traced into a SavedModel (``tf.saved_model.save``, Keras 2's
    ``model.save`` to a folder, Keras 3's ``model.export``): a SavedModel holding lbtrain's
    compiled kernels would load only where they are built."""
    from tensorflow.python.saved_model import save_context

    return save_context.in_save_context()


def _compiled_kernels(grouped: tf.Tensor):
    """lbtrain's compiled ghost batch norm (``lbtrain.kernels``) where it applies: float32, an
    eager or ``tf.function`` step that is neither XLA-compiled nor traced for a SavedModel, no GPU
    visible (the kernel is the CPU's: on a GPU the activations would cross to the host and back),
    and a library built for this TensorFlow; else None."""
    if grouped.dtype != tf.float32 or _in_xla_context() or _in_save_context() or tf.config.list_physical_devices("GPU"):
        return None
    from lbtrain.kernels import ghost_batch_norm_ops

    return ghost_batch_norm_ops()


def _ghost_batch_norm(grouped: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor, epsilon: float):
    """Batch norm of ``grouped`` (``[b, G, S, C]``) per group and channel, with its gradient.

    Forward, with n = b * S: ``mean = sum(x) / n``, ``var = sum((x - mean)**2) / n`` (two-pass,
    as the fused kernel), ``y = (x - mean) * k + offset`` with ``k = scale / sqrt(var + epsilon)``.
    Backward (Ioffe and Szegedy 2015, sec. 3), sums per group and channel:
    ``d_offset = sum(dy)``, ``d_scale = sum(dy * (x - mean)) / sqrt(var + epsilon)`` (both summed
    over the groups, which share the weights), and
    ``dx = k * (dy - sum(dy) / n - (x - mean) * sum(dy * (x - mean)) / (n * (var + epsilon)))``.

    Returns ``(y, mean, var)``, the statistics as ``[1, G, 1, C]`` (not differentiated). The
    compiled kernels compute the same formulas (``lbtrain.kernels``) where they apply; these ops
    everywhere else.
    """
    scale, offset = tf.cast(scale, grouped.dtype), tf.cast(offset, grouped.dtype)
    kernels = _compiled_kernels(grouped)
    if kernels is not None:
        return _ghost_batch_norm_compiled(kernels, grouped, scale, offset, epsilon)
    return _ghost_batch_norm_ops(grouped, scale, offset, epsilon)


def _ghost_batch_norm_ops(grouped: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor, epsilon: float):
    """``_ghost_batch_norm`` in TensorFlow ops: a few passes over the whole tensor, each of them
    reading (and most writing) all of it."""
    count = tf.cast(tf.shape(grouped)[0] * tf.shape(grouped)[2], grouped.dtype)

    @tf.custom_gradient
    def normalize(x, scale, offset):
        mean = _group_sum(x) / count
        centered = x - mean
        variance = _group_sum_of_squares(centered) / count
        inverse = tf.math.rsqrt(variance + epsilon)
        k = scale * inverse

        def gradient(dy, *_):
            sum_dy = _group_sum(dy)
            sum_dy_centered = _group_sum(dy * centered)
            # Ordered so that only dy * centered needs a new full-size buffer: the last use of
            # centered, then of dy, can overwrite their buffers in place.
            correction = centered * (tf.square(inverse) * sum_dy_centered / count) + sum_dy / count
            dx = (dy - correction) * k
            return dx, tf.reduce_sum(sum_dy_centered * inverse, axis=[0, 1, 2]), tf.reduce_sum(sum_dy, axis=[0, 1, 2])

        return (centered * k + offset, tf.stop_gradient(mean), tf.stop_gradient(variance)), gradient

    return normalize(grouped, scale, offset)


def _ghost_batch_norm_compiled(kernels, grouped: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor, epsilon: float):
    """``_ghost_batch_norm`` by lbtrain's compiled kernels: the forward pass, and its gradient."""
    statistics_shape = [1, -1, 1, grouped.shape[-1]]

    @tf.custom_gradient
    def normalize(x, scale, offset):
        y, mean, variance = kernels.lbtrain_ghost_batch_norm(x, scale, offset, epsilon=epsilon)

        def gradient(dy, *_):
            return kernels.lbtrain_ghost_batch_norm_grad(dy, x, scale, mean, variance, epsilon=epsilon)

        return (y, tf.stop_gradient(tf.reshape(mean, statistics_shape)), tf.stop_gradient(tf.reshape(variance, statistics_shape))), gradient

    return normalize(grouped, scale, offset)


def is_batch_norm(layer: tf.keras.layers.Layer) -> bool:
    """Keras's BatchNormalization or lbtrain's ghost version."""
    return isinstance(layer, (tf.keras.layers.BatchNormalization, GhostBatchNormalization))
