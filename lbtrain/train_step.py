"""A train step that computes the gradient in pieces of the global batch and measures the
gradient noise scale from the gradients it computes anyway.

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", app. A.1) estimate the
simple noise scale ``B_simple = tr(Sigma) / |G|^2`` from gradients at two batch sizes. Since
``E|g_B|^2 = |G|^2 + tr(Sigma) / B``, squared norms at ``B_small`` and ``B_big`` give::

    |G|^2 ~ (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
    S     ~ (|g_small|^2 - |g_big|^2) / (1 / B_small - 1 / B_big)

both unbiased. A synchronous step already holds both: the ``k`` pieces it is computed from
(``B_small = B / k``, ``|g_small|^2`` the mean of the pieces' squared norms) and their mean, the
gradient it applies (``B_big = B``). So the estimate costs ``k`` squared norms and a few scalar
ops inside the same compiled step, with no host copies (AdaptDL measures the same way):

- a simulated world computes its global batch in ``k`` pieces of whole workers (default 2);
- Horovod: each rank's own gradient is a piece (``B_small`` = the per-worker batch), one
  allreduce of the local squared norm gives ``|g_small|^2``, and the allreduced gradient the
  optimizer applies gives ``|g_big|^2``.

Each step's estimates enter bias-corrected exponential moving averages (``decay`` per step), and
the step's logs carry ``noise_scale`` (their ratio, NaN when undetermined: the ``|G|^2`` average
is not positive or the ``S`` average negative, ``lbtrain.measures.noise_scale.simple_noise_scale``),
``noise_trace``, ``gradient_norm_sq`` and ``noise_scale_undetermined`` (1 or 0).

Pieces are applied as one update: the gradient is the mean of the pieces' gradients (the
gradient of the mean loss, since pieces are equal), and every batch-norm layer's moving
statistics move once, by the mean of what each piece would have moved them (exact, since the
update ``m * v + (1 - m) * batch_statistic`` is affine in the batch statistic).

The same step carries two more ways of training (``lbtrain.worlds.simulated`` and ``lbtrain.worlds.horovod`` build it for them):

- gradient accumulation (Goyal et al. 2017 sec. 2: the minibatch of ``k n`` samples gives the
  update ``w_{t+1} = w_t - eta / (k n) sum_{x in B} grad l(x, w_t)``): every worker feeds ``k``
  of its batches per update, the step computes them one after another and applies their mean,
  so W workers of batch b update as synchronous SGD at the global batch ``W b k``;
- simulated staleness (``StaleGradients``): the gradient applied at update t is the one computed
  ``tau`` updates earlier.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from lbtrain._keras import KERAS_3, tensorflow_variables
from lbtrain.layers import is_batch_norm
from lbtrain.measures.noise_scale import two_batch_estimates


class NoiseScaleTracker(tf.Module):
    """The in-graph moving averages of the two-batch estimates (see the module doc); a
    checkpoint of the model holds them, so a resumed run continues its averages."""

    def __init__(self, small_batch: int, big_batch: int, decay: float):
        super().__init__(name="noise_scale")
        if not 0 < small_batch < big_batch:
            raise ValueError(f"the noise scale needs 0 < B_small < B_big, got {small_batch} and {big_batch}")
        self.small_batch, self.big_batch, self.decay = small_batch, big_batch, decay

        def state(name: str, dtype=tf.float64) -> tf.Variable:
            return tf.Variable(tf.zeros((), dtype), trainable=False, name=f"noise_scale_{name}")

        self.trace_average, self.norm_sq_average = state("trace_average"), state("norm_sq_average")
        self.step_trace, self.step_norm_sq = state("step_trace"), state("step_norm_sq")
        self.measurements = state("measurements", tf.int64)

    def update(self, small_sq: tf.Tensor, big_sq: tf.Tensor) -> dict[str, tf.Tensor]:
        """Adds one step's ``|g_small|^2`` and ``|g_big|^2``; returns the logs of the averages."""
        trace, norm_sq = two_batch_estimates(small_sq, big_sq, self.small_batch, self.big_batch)
        self.step_trace.assign(trace)
        self.step_norm_sq.assign(norm_sq)
        self.trace_average.assign(self.decay * self.trace_average + (1.0 - self.decay) * trace)
        self.norm_sq_average.assign(self.decay * self.norm_sq_average + (1.0 - self.decay) * norm_sq)
        self.measurements.assign_add(1)
        return self.logs()

    def logs(self) -> dict[str, tf.Tensor]:
        """``noise_scale``, ``noise_trace``, ``gradient_norm_sq`` and ``noise_scale_undetermined``
        of the bias-corrected averages."""
        correction = 1.0 - tf.pow(tf.constant(self.decay, tf.float64), tf.cast(self.measurements, tf.float64))
        trace = tf.math.divide_no_nan(self.trace_average, correction)
        norm_sq = tf.math.divide_no_nan(self.norm_sq_average, correction)
        undetermined = tf.logical_or(tf.logical_not(norm_sq > 0), trace < 0)
        scale = tf.where(undetermined, tf.constant(float("nan"), tf.float64), tf.math.divide_no_nan(trace, norm_sq))
        return {"noise_scale": scale, "noise_trace": trace, "gradient_norm_sq": norm_sq,
                "noise_scale_undetermined": tf.cast(undetermined, tf.float64)}

    def estimate(self) -> dict[str, float]:
        """The logs as floats (all NaN before the first measurement)."""
        if int(self.measurements.numpy()) == 0:
            return dict.fromkeys(("noise_scale", "noise_trace", "gradient_norm_sq", "noise_scale_undetermined"), float("nan"))
        return {name: float(value.numpy()) for name, value in self.logs().items()}


def noise_scale_tracker(model: tf.keras.Model) -> NoiseScaleTracker | None:
    """The tracker of a model whose train step measures the noise scale, else None."""
    return model.noise_scale if isinstance(model, GradientStepModel) else None


def squared_norm(tensors: list[tf.Tensor], compiled: bool = False) -> tf.Tensor:
    """``sum_i |t_i|^2`` as a float64 scalar. Each tensor's norm is one reduction that only
    reads it (no squared or float64 copy of the gradients is written); the sum over tensors is
    in float64. ``compiled``: in an XLA-compiled step, which has no kernel for TensorFlow's
    Euclidean-norm reduction, each is ``sum(t**2)``, whose square XLA fuses into the sum."""
    if compiled:
        return tf.add_n([tf.cast(tf.reduce_sum(tf.square(tensor)), tf.float64) for tensor in tensors])
    return tf.add_n([tf.square(tf.cast(tf.math.reduce_euclidean_norm(tensor), tf.float64)) for tensor in tensors])


class StaleGradients(tf.Module):
    """A ring buffer of ``staleness`` gradient copies in variables, which makes a train step
    apply every gradient ``tau = staleness`` updates after it was computed: asynchronous SGD with
    a constant delay (Lian et al. 2015, "Asynchronous Parallel Stochastic Gradient for Nonconvex
    Optimization", sec. 3, with all delays equal to ``tau``; Dutta et al. 2018, "Slow and Stale
    Gradients Can Win the Race", where ``tau + 1`` workers take turns at a parameter server)::

        w_{t+1} = w_t - eta_t * g(w_{max(t - tau, 0)}; batch_{max(t - tau, 0)})

    Workers start from ``w_0``, so the gradients of updates ``0 .. tau`` are all computed at
    ``w_0``: here updates ``0 .. tau`` all apply the gradient of update 0, the one gradient this
    process computed at ``w_0`` (the convention ``w_s = w_0``, ``batch_s = batch_0`` for ``s < 0``;
    a parameter server would get ``tau + 1`` batches' gradients at ``w_0``), so every update moves
    the weights and the optimizer's step counts updates as in a synchronous run. Slot
    ``t mod tau`` holds the gradient of update ``t - tau`` until update t reads and replaces it.
    The buffer and its update counter are variables of the model, so a checkpoint of the model
    holds them and a resumed run applies the same gradients as an uninterrupted one.
    """

    def __init__(self, variables: list, staleness: int):
        super().__init__(name="stale_gradients")
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 1:
            raise ValueError(f"staleness must be an integer >= 1, got {staleness!r}")
        self.staleness = staleness
        self.slots = [tf.Variable(tf.zeros((staleness, *variable.shape), variable.dtype), trainable=False,
                                  name=f"stale_gradient_{index}")
                      for index, variable in enumerate(tensorflow_variables(variables))]
        self.updates = tf.Variable(tf.zeros((), tf.int64), trainable=False, name="stale_gradient_updates")

    def exchange(self, gradients: list[tf.Tensor]) -> tuple[list[tf.Tensor], tf.Tensor]:
        """Stores the gradients of this update and returns the ones to apply now, with their
        staleness ``min(t, tau)`` (how many updates ago the weights they were computed at were
        current)."""
        step, tau = self.updates.read_value(), tf.constant(self.staleness, tf.int64)
        slot = step % tau
        oldest = tf.where(step >= tau, slot, tf.zeros_like(slot))
        stale = tf.cond(step > 0, lambda: [buffer[oldest] for buffer in self.slots], lambda: list(gradients))
        for buffer, gradient in zip(self.slots, gradients):
            buffer[slot].assign(gradient)
        self.updates.assign_add(1)
        return stale, tf.cast(tf.minimum(step, tau), tf.float64)


class GradientStepModel(tf.keras.Model):
    """``model`` (same layers and weights) with a train step that computes the gradient in
    ``pieces`` equal pieces of the batch it is fed, applies their mean once, with a
    ``noise_scale`` tracker measures the noise scale (see the module doc), and with
    ``stale_gradients`` applies the gradient of ``tau`` updates earlier (``StaleGradients``).

    The batch is ``accumulation_steps`` (k) consecutive blocks, one per accumulated batch, each
    cut into ``pieces / k`` pieces. In a simulated world of ``world_size > 1`` a block is laid out
    ``[per_worker_batch, world_size]`` (position ``i * W + r`` is worker r's i-th sample, see
    ``lbtrain.data``) and piece j of it holds workers ``j*W/m .. (j+1)*W/m - 1`` (``m = pieces /
    k``) in the same layout, so ghost batch norm still sees each worker's own samples; with one
    worker, or one rank's batch under Horovod, the pieces are consecutive samples (the model then
    has no batch norm, whose statistics a split would change, unless the pieces are exactly the
    worker's accumulated batches). With ``sequential`` (micro-batches and accumulated batches,
    which exist because the whole batch does not fit in memory) the pieces run in a
    ``tf.while_loop``, one after another, so only one piece's activations are alive at a
    time; otherwise (pieces that exist only to measure the noise scale) they are unrolled in the
    graph, where TensorFlow may run them side by side, as a step without pieces would hold the
    whole batch's activations anyway. ``world`` averages gradients and scalars over real ranks
    (Horovod); a simulated world is its own average. With ``compiled_gradients`` each piece's
    forward and backward pass is one XLA cluster of its own while the rest of the step is not:
    for a world whose step cannot be compiled whole (Horovod's allreduce has no XLA kernel;
    ``training.jit_compile``). Where the whole step can be compiled, ``compile(jit_compile=True)``
    compiles this step like any other.
    """

    def __init__(self, model: tf.keras.Model, *, world: Any, per_worker_batch: int, pieces: int = 1,
                 accumulation_steps: int = 1, noise_scale: NoiseScaleTracker | None = None, sequential: bool = True,
                 staleness: int = 0, compiled_gradients: bool = False):
        super().__init__(inputs=model.inputs, outputs=model.outputs, name=model.name)
        if pieces % accumulation_steps:
            raise ValueError(f"pieces ({pieces}) must be a multiple of accumulation_steps ({accumulation_steps})")
        self.world_size, self.per_worker_batch, self.pieces = world.size, per_worker_batch, pieces
        self.accumulation_steps = accumulation_steps
        self.sequential = sequential
        self.noise_scale = noise_scale
        self.stale_gradients = StaleGradients(self.trainable_variables, staleness) if staleness else None
        self.compiled_gradients = compiled_gradients
        self._world = world

    def _split(self, tensor: tf.Tensor) -> tf.Tensor:
        """``[pieces, batch / pieces, ...]``: the pieces, whole workers each (see the class doc)."""
        features = tf.shape(tensor)[1:]
        if self.world_size == 1 or self._world.input_shard()[1] > 1:
            return tf.reshape(tensor, tf.concat([[self.pieces, -1], features], 0))
        blocks, per_block = self.accumulation_steps, self.pieces // self.accumulation_steps
        workers_per_piece = self.world_size // per_block
        grid = tf.reshape(tensor, tf.concat([[blocks, self.per_worker_batch, per_block, workers_per_piece], features], 0))
        grid = tf.transpose(grid, [0, 2, 1, 3, *range(4, len(tensor.shape) + 3)])
        return tf.reshape(grid, tf.concat([[self.pieces, self.per_worker_batch * workers_per_piece], features], 0))

    def _moving_statistics(self) -> list[tf.Variable]:
        if self.pieces == 1:
            return []
        layers = [layer for layer in self._flatten_layers(include_self=False) if is_batch_norm(layer)]
        return tensorflow_variables([weight for layer in layers for weight in (layer.moving_mean, layer.moving_variance)])

    def _piece_gradient(self, x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
        with tf.GradientTape() as tape:
            prediction = self(x, training=True)
            loss = self.compute_loss(x, y, prediction)
        if KERAS_3:  # Keras 3's compute_loss does not track the loss; its train_step does
            self._loss_tracker.update_state(loss, sample_weight=tf.shape(x)[0])
        self.compute_metrics(x, y, prediction, None)
        return tape.gradient(loss, self.trainable_variables)

    @tf.function(jit_compile=True)
    def _compiled_piece_gradient(self, x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
        """``_piece_gradient`` as one XLA cluster (``compiled_gradients``)."""
        return self._piece_gradient(x, y)

    def train_step(self, data):
        x, y, _ = tf.keras.utils.unpack_x_y_sample_weight(data)
        x_pieces, y_pieces = self._split(x), self._split(y)
        statistics = self._moving_statistics()
        start = [tf.identity(variable) for variable in statistics]

        def accumulate(piece, totals, squares, moved):
            for variable, value in zip(statistics, start):
                variable.assign(value)
            piece_gradient = self._compiled_piece_gradient if self.compiled_gradients else self._piece_gradient
            gradients = piece_gradient(x_pieces[piece], y_pieces[piece])
            return (piece + 1, [total + gradient for total, gradient in zip(totals, gradients)],
                    squares + (squared_norm(gradients, self.jit_compile) if self.noise_scale is not None else 0.0),
                    [total + tf.identity(variable) for total, variable in zip(moved, statistics)])

        state = (tf.constant(0), [tf.zeros_like(v) for v in self.trainable_variables], tf.constant(0.0, tf.float64),
                 [tf.zeros_like(v) for v in statistics])
        if self.sequential:
            state = tf.while_loop(lambda piece, *_: piece < self.pieces, accumulate, state)
        else:
            for _ in range(self.pieces):
                state = accumulate(*state)
        _, totals, squares, moved = state
        for variable, total in zip(statistics, moved):
            variable.assign(total / self.pieces)
        gradients = [total / self.pieces for total in totals]
        small_sq = squares / self.pieces
        gradients = self._world.average_gradients(gradients, self.trainable_variables, self.optimizer)
        applied, staleness = gradients, None
        if self.stale_gradients is not None:
            applied, staleness = self.stale_gradients.exchange(gradients)
        self.optimizer.apply_gradients(zip(applied, self.trainable_variables))
        logs = dict(self.get_metrics_result())
        if staleness is not None:
            logs["staleness"] = staleness
        if self.noise_scale is not None:
            logs.update(self.noise_scale.update(self._world.mean_over_ranks(small_sq), squared_norm(gradients, self.jit_compile)))
        return logs
