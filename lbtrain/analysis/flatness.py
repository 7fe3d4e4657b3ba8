"""Sharpness of a minimum, as Keskar et al. 2017 measure it ("On Large-Batch Training for Deep
Learning: Generalization Gap and Sharp Minima", ICLR 2017, metric 2.3).

For weights ``x``, the training loss ``f`` and an ``n x p`` matrix ``A`` (the identity for the
full space, else ``p`` random columns)::

    C_eps = { y in R^p : |y_i| <= eps * (|(A^+ x)_i| + 1) }
    phi(x, f, eps, A) = 100 * (max_{y in C_eps} f(x + A y) - f(x)) / (1 + f(x))

The maximisation is scipy's L-BFGS-B on the box, 10 iterations as in the paper. It starts at
a random point of the box (seeded): at an exact minimum the gradient vanishes and L-BFGS-B
would not leave its starting point. ``f`` is the model's loss in inference mode (dropout off,
batch norm on its moving statistics) plus its regularization losses, over the whole dataset.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.optimize
import tensorflow as tf

from lbtrain._keras import tensorflow_variables

LossFunction = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def random_subspace(parameters: int, dimension: int, seed: int = 0) -> np.ndarray:
    """The ``parameters x dimension`` matrix ``A`` of a random subspace: i.i.d. standard normal
    entries from ``numpy.random.default_rng(seed)``."""
    if not isinstance(dimension, int) or not 0 < dimension <= parameters:
        raise ValueError(f"subspace_dim must be an integer in 1..{parameters} (the number of weights), got {dimension!r}")
    return np.random.default_rng(seed).standard_normal((parameters, dimension))


def _arrays(dataset: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of an ``lbtrain.data.Dataset`` (its training set) or of an ``(x, y)`` pair."""
    if hasattr(dataset, "x_train"):
        return dataset.x_train, dataset.y_train
    if isinstance(dataset, (tuple, list)) and len(dataset) == 2:
        return np.asarray(dataset[0]), np.asarray(dataset[1])
    raise TypeError(f"dataset must be an lbtrain Dataset or an (x, y) pair, got {type(dataset).__name__}")


def _model_loss(model: tf.keras.Model, loss: LossFunction | None) -> LossFunction:
    if loss is not None:
        return loss
    if getattr(model, "loss", None) is not None:
        return tf.keras.losses.get(model.loss)
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class _FlatLoss:
    """``f(w)`` and ``grad f(w)`` for a flat float64 weight vector: the mean loss over all of
    ``(x, y)`` in batches, plus the model's regularization losses."""

    def __init__(self, model: tf.keras.Model, x: np.ndarray, y: np.ndarray, loss: LossFunction, batch_size: int):
        self.model, self.variables = model, tensorflow_variables(model.trainable_variables)
        self.shapes = [tuple(variable.shape) for variable in self.variables]
        self.sizes = [int(np.prod(shape)) for shape in self.shapes]
        self.batches = [(x[start:start + batch_size], y[start:start + batch_size]) for start in range(0, len(x), batch_size)]
        self.count = len(x)

        @tf.function(reduce_retracing=True)
        def batch_sum(inputs, targets):
            with tf.GradientTape() as tape:
                predictions = model(inputs, training=False)
                total = tf.cast(loss(targets, predictions), tf.float64) * tf.cast(tf.shape(inputs)[0], tf.float64)
            return total, tape.gradient(total, self.variables)

        @tf.function
        def regularization():
            with tf.GradientTape() as tape:
                total = tf.add_n([tf.cast(term, tf.float64) for term in model.losses]) if model.losses else tf.constant(0.0, tf.float64)
            gradients = tape.gradient(total, self.variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return total, gradients

        self._batch_sum, self._regularization = batch_sum, regularization

    def weights(self) -> np.ndarray:
        return np.concatenate([variable.numpy().astype(np.float64).ravel() for variable in self.variables])

    def assign(self, flat: np.ndarray) -> None:
        for variable, piece in zip(self.variables, np.split(flat, np.cumsum(self.sizes)[:-1])):
            variable.assign(piece.reshape(variable.shape).astype(variable.dtype.as_numpy_dtype))

    def _flatten(self, gradients) -> np.ndarray:
        return np.concatenate([np.asarray(gradient, dtype=np.float64).ravel() for gradient in gradients])

    def __call__(self, flat: np.ndarray) -> tuple[float, np.ndarray]:
        self.assign(flat)
        value, gradient = 0.0, np.zeros(flat.size)
        for inputs, targets in self.batches:
            total, gradients = self._batch_sum(inputs, targets)
            value += float(total)
            gradient += self._flatten(gradients)
        regularization, regularization_gradients = self._regularization()
        return value / self.count + float(regularization), gradient / self.count + self._flatten(regularization_gradients)


def sharpness(
    model: tf.keras.Model,
    dataset: Any,
    epsilon: float = 1e-3,
    subspace_dim: int | None = None,
    seed: int = 0,
    *,
    loss: LossFunction | None = None,
    max_iterations: int = 10,
    batch_size: int = 2048,
) -> float:
    """Keskar et al.'s sharpness of ``model``'s current weights (the formula in the module doc).

    Args:
      model: a built Keras model; its weights are restored before returning.
      dataset: an ``lbtrain.data.Dataset`` (its training set is used) or an ``(x, y)`` pair.
      epsilon: the box size (the paper reports 1e-3 and 5e-4).
      subspace_dim: None for the full space (``A = I``), else the ``p`` of a random subspace
        (``random_subspace(n, p, seed)``).
      seed: the random subspace and the starting point of the search.
      loss: ``loss(y_true, y_pred)`` reduced to a mean; default the model's compiled loss, else
        sparse categorical cross-entropy on logits (lbtrain's models).
      max_iterations: L-BFGS-B iterations.
      batch_size: samples per forward pass while evaluating ``f``.

    Returns:
      ``phi`` in percent (>= 0).
    """
    if not epsilon > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon!r}")
    if not isinstance(max_iterations, int) or max_iterations < 1:
        raise ValueError(f"max_iterations must be a positive integer, got {max_iterations!r}")
    x, y = _arrays(dataset)
    if not len(x):
        raise ValueError("dataset has no samples to measure the loss on")
    flat_loss = _FlatLoss(model, x, y, _model_loss(model, loss), batch_size)
    origin = flat_loss.weights()
    rng = np.random.default_rng(seed)
    try:
        base_value, _ = flat_loss(origin)
        if subspace_dim is None:
            matrix, coordinates = None, origin
        else:
            matrix = random_subspace(origin.size, subspace_dim, seed)
            coordinates = np.linalg.pinv(matrix) @ origin
        bound = epsilon * (np.abs(coordinates) + 1.0)

        def negative_loss(step: np.ndarray) -> tuple[float, np.ndarray]:
            value, gradient = flat_loss(origin + (step if matrix is None else matrix @ step))
            return -value, -(gradient if matrix is None else matrix.T @ gradient)

        start = rng.uniform(-bound, bound)
        result = scipy.optimize.minimize(
            negative_loss, start, jac=True, method="L-BFGS-B", bounds=scipy.optimize.Bounds(-bound, bound),
            options={"maxiter": max_iterations},
        )
        highest = max(-float(result.fun), base_value)
    finally:
        flat_loss.assign(origin)
    return 100.0 * (highest - base_value) / (1.0 + base_value)
