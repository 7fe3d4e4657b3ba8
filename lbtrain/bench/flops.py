"""What a model costs and what the machine gives: training FLOPs per sample counted from the
layers' shapes, and the machine's float32 matmul peak."""

from __future__ import annotations

import math
import time


def forward_macs_per_sample(model) -> int:
    """Multiply-accumulates of one sample's forward pass through the Dense and Conv layers of a
    functional Keras model (nested models included): per layer, the output's positions (all
    axes but batch and channels) x the kernel's size. Other layers count 0."""
    import tensorflow as tf

    counted = (tf.keras.layers.Dense, tf.keras.layers.Conv1D, tf.keras.layers.Conv2D, tf.keras.layers.Conv3D)
    total = 0
    for layer in model.layers:
        if isinstance(layer, tf.keras.Model):
            total += forward_macs_per_sample(layer)
        elif isinstance(layer, counted):
            positions = math.prod(int(d) for d in layer.output.shape[1:-1])
            total += positions * math.prod(int(d) for d in layer.kernel.shape)
    return total


def training_flops_per_sample(model) -> float | None:
    """FLOPs of one sample's training step, ~3x the forward pass (the backward pass computes
    gradients of activations and of weights, each about one forward pass): 3 x 2 x MACs.
    None where the layers' shapes cannot be read (a subclassed model's layers have no graph)."""
    try:
        return 6.0 * forward_macs_per_sample(model)
    except (AttributeError, ValueError, RuntimeError):
        return None


def matmul_peak_flops(size: int = 2048, chain: int = 4, repeats: int = 5) -> float:
    """This process's float32 matmul FLOP/s: the best of ``repeats`` timed chains of ``chain``
    ``size x size`` products (2 x size^3 FLOPs each) in one ``tf.function``, with the threads
    TensorFlow is configured for."""
    import tensorflow as tf

    left = tf.random.normal((size, size), seed=1)
    right = tf.random.normal((size, size), seed=2) / math.sqrt(size)  # keeps the chain's scale

    @tf.function
    def products(matrix):
        for _ in range(chain):
            matrix = tf.matmul(matrix, right)
        return tf.reduce_sum(matrix)

    products(left).numpy()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        products(left).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 * chain / best
