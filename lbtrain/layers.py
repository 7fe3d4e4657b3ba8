"""Ghost batch normalization on TensorFlow's fused kernel.

Ghost BN (Hoffer, Hubara, Soudry 2017, "Train longer, generalize better", sec. 4) normalizes a
large batch in groups of ``virtual_batch_size`` samples, each with its own mean and variance:
what W workers with their own BatchNormalization do to their shares of a global batch. Keras's
``BatchNormalization(virtual_batch_size=b)`` computes the same thing but cannot use the fused
kernel, and costs about 7x a fused BN on conv features. This layer folds the groups into the
channel axis so that one fused call computes all group statistics at once (about 2.5x a fused
BN, transposes included).

Layout (as Keras and ``lbtrain.data``): a batch of ``N = G * b`` samples is read as ``[b, G]``,
so group r holds samples ``r, r + G, r + 2G, ...``.
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
        shape = tf.shape(inputs)
        groups = shape[0] // self.virtual_batch_size
        spatial = len(inputs.shape) > 2
        # [b, G, S, C] -> [b, S, G, C] -> [b, S, 1, G*C]: each (group, channel) is one channel.
        # Without spatial axes [b, G, C] is already [b, 1, 1, G*C] in memory: no transpose.
        folded = tf.reshape(inputs, [self.virtual_batch_size, groups, -1, channels])
        if spatial:
            folded = tf.transpose(folded, [0, 2, 1, 3])
        folded = tf.reshape(folded, [self.virtual_batch_size, -1, 1, groups * channels])
        scale, offset = self._scale_and_offset(channels)
        normalized, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            folded, tf.tile(scale, [groups]), tf.tile(offset, [groups]), epsilon=self.epsilon, is_training=True
        )
        if spatial:
            normalized = tf.transpose(tf.reshape(normalized, [self.virtual_batch_size, -1, groups, channels]), [0, 2, 1, 3])
        for moving, batch_value in ((self.moving_mean, mean), (self.moving_variance, variance)):
            group_mean = tf.reduce_mean(tf.reshape(batch_value, [groups, channels]), axis=0)
            moving.assign(moving * self.momentum + group_mean * (1.0 - self.momentum))
        return tf.reshape(normalized, shape)

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


def is_batch_norm(layer: tf.keras.layers.Layer) -> bool:
    """Keras's BatchNormalization or lbtrain's ghost version."""
    return isinstance(layer, (tf.keras.layers.BatchNormalization, GhostBatchNormalization))
