"""Precise batch-norm statistics before every evaluation (Wu & Johnson 2021, "Rethinking 'Batch'
in BatchNorm", sec. 3: "PreciseBN").

A BatchNormalization layer evaluates with moving averages of the batch statistics it saw in
training, updated once a step with momentum ``m`` (Keras: 0.99). After ``t`` steps the average
holds ``1 - m**t`` of the statistics and ``m**t`` of its initial values (mean 0, variance 1),
and the statistics it holds come from weights up to ~``1 / (1 - m)`` steps old. Large-batch
runs have few steps: at 64 workers a 6-epoch run over 8000 samples makes 42 steps of batch
1024, and ``1 - 0.99**42 = 0.34``, so the model is evaluated with statistics a third of the way
from their initial values, and its validation accuracy says nothing about its weights (chance,
in lbtrain's goyal_bn study before this existed). A fair comparison across batch sizes
evaluates every model with the statistics its final weights produce.

``recompute_batch_norm_statistics`` sets every batch-norm layer's moving mean and variance to
the population statistics of the current weights: the mean over ``x`` of the per-group batch
mean and of the per-group (Bessel-corrected) batch variance, groups being what the layer
normalizes in training (``group_size`` samples: one worker's batch, strided as lbtrain's ghost
batch norm groups them), i.e. the value the moving averages converge to with the weights fixed.
Training itself is unchanged: a training step normalizes with its batch's statistics, never the
moving ones. ``PreciseBatchNorm`` does this before every evaluation (``on_test_begin``: the
validation inside ``fit`` and any ``evaluate`` given the callback). Every rank computes it on
the same samples, so the ranks of a Horovod world agree without communicating.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from lbtrain.layers import GhostBatchNormalization, is_batch_norm

# Samples pushed through the model at once when only ghost batch norm is present (a multiple of
# the group size): more at once is faster, and ghost groups do not depend on it.
PROBE_SAMPLES = 1024


def batch_norm_layers(model: tf.keras.Model) -> list[tf.keras.layers.Layer]:
    """The model's batch-norm layers (Keras's and ``GhostBatchNormalization``), in order."""
    return [layer for layer in model._flatten_layers(include_self=False) if is_batch_norm(layer)]


def _group_statistics(inputs: tf.Tensor, group_size: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per group of ``group_size`` strided samples (sample ``i * G + r`` in group r of G, as
    ghost batch norm lays them out): the mean and Bessel-corrected variance per channel.
    Returns their sums over the groups and the number of groups."""
    channels = inputs.shape[-1]
    grouped = tf.reshape(tf.cast(inputs, tf.float64), [group_size, -1, tf.reduce_prod(tf.shape(inputs)[1:-1]), channels])
    mean, variance = tf.nn.moments(grouped, axes=[0, 2])
    count = tf.cast(group_size * tf.shape(grouped)[2], tf.float64)
    variance = variance * count / tf.maximum(count - 1.0, 1.0)
    return tf.reduce_sum(mean, axis=0), tf.reduce_sum(variance, axis=0), tf.shape(grouped)[1]


def recompute_batch_norm_statistics(model: tf.keras.Model, x: np.ndarray, group_size: int) -> int:
    """Sets every batch-norm layer's moving statistics to the population statistics of the
    current weights over ``x`` (see the module doc); returns the number of layers set (0 when
    the model has none). ``x`` is cut to a multiple of the probe batch; ``group_size`` is the
    per-worker batch the layers normalize over in training."""
    layers = batch_norm_layers(model)
    if not layers:
        return 0
    plain = any(not isinstance(layer, GhostBatchNormalization) for layer in layers)
    # A plain layer normalizes over its whole input: feed it exactly one group at a time.
    batch = group_size if plain else group_size * max(1, min(PROBE_SAMPLES, len(x)) // group_size)
    usable = len(x) // batch * batch
    if usable == 0:
        raise ValueError(f"precise batch norm needs at least {batch} samples, got {len(x)}")
    # ``model.input``, the inputs as the model takes them (one tensor for one input): ``model.inputs``
    # is always a list, which Keras 3 warns about at every call with one tensor.
    probe = tf.keras.Model(model.input, [layer.input for layer in layers])
    sums = [[np.zeros(layer.moving_mean.shape, np.float64), np.zeros(layer.moving_mean.shape, np.float64)] for layer in layers]
    groups = 0
    for start in range(0, usable, batch):
        outputs = probe(x[start:start + batch], training=True)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        for total, inputs in zip(sums, outputs):
            mean, variance, count = _group_statistics(inputs, group_size)
            total[0] += mean.numpy()
            total[1] += variance.numpy()
        groups += int(count)
    for layer, (mean_total, variance_total) in zip(layers, sums):
        layer.moving_mean.assign((mean_total / groups).astype(layer.moving_mean.numpy().dtype))
        layer.moving_variance.assign((variance_total / groups).astype(layer.moving_variance.numpy().dtype))
    return len(layers)


class PreciseBatchNorm(tf.keras.callbacks.Callback):
    """Recomputes the batch-norm statistics (``recompute_batch_norm_statistics`` over ``x``)
    before every evaluation: validation inside ``fit``, and ``evaluate`` given this callback."""

    def __init__(self, x: np.ndarray, group_size: int):
        super().__init__()
        self.x, self.group_size = x, group_size

    def on_test_begin(self, logs=None):
        recompute_batch_norm_statistics(self.model, self.x, self.group_size)


__all__ = ["PreciseBatchNorm", "batch_norm_layers", "recompute_batch_norm_statistics"]
