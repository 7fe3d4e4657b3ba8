"""Flatness of a minimum, three ways: Keskar et al.'s epsilon-sharpness, the Hessian's top
eigenvalue, and Jiang et al.'s magnitude-aware PAC-Bayes flatness. Each takes a built model and
its training set, works in inference mode (dropout off, batch norm on its moving statistics) and
leaves the weights as it found them; ``f`` is always the model's mean loss plus its
regularization losses.

``sharpness``: Keskar et al. 2017 ("On Large-Batch Training for Deep Learning: Generalization
Gap and Sharp Minima", ICLR 2017, metric 2.3). For weights ``x`` and an ``n x p`` matrix ``A``
(the identity for the full space, else ``p`` random columns)::

    C_eps = { y in R^p : |y_i| <= eps * (|(A^+ x)_i| + 1) }
    phi(x, f, eps, A) = 100 * (max_{y in C_eps} f(x + A y) - f(x)) / (1 + f(x))

The maximisation is scipy's L-BFGS-B on the box, 10 iterations as in the paper. It starts at
a random point of the box (seeded): at an exact minimum the gradient vanishes and L-BFGS-B
would not leave its starting point. ``f`` is taken over the whole dataset given.

``hessian_top_eigenvalue``: the eigenvalue of largest magnitude of ``H = nabla^2 f(x)`` by
power iteration on Hessian-vector products, ``v <- H v / |H v|``, ``lambda = v^T H v``, as
PyHessian does (Yao et al. 2020, "PyHessian: Neural Networks Through the Lens of the
Hessian", IEEE BigData 2020): ``H v`` is the gradient of ``grad f(x) . v`` (double
backpropagation), ``f`` over a fixed, seeded subset of the training set, and the iteration stops
when ``|lambda_k - lambda_{k-1}| / (|lambda_{k-1}| + 1e-6) < tolerance`` (PyHessian's 1e-3).

``pac_bayes_flatness``: Jiang et al. 2020's ``pacbayes.mag.flatness`` ("Fantastic
Generalization Measures and Where to Find Them", ICLR 2020, measure (61))::

    mu = 1 / sigma'^2,   u_i ~ N(0, sigma'^2 w_i^2 + eps^2),   eps = 1e-3

with ``sigma'`` the largest ``sigma`` whose perturbation moves the expected training accuracy
by at most 0.1: ``|E_u[acc(w + u)] - acc(w)| <= 0.1`` (the paper bounds the perturbed training
error by 0.1, for networks trained to about 100% training accuracy; its search bounds the
deviation), found by bisection with Monte-Carlo estimates of the expectation. The search's
defaults are those of the public implementation of Dziugaite et al. 2020 ("In Search of Robust
Measures of Generalization", NeurIPS 2020), which adapts the authors' code.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal

import numpy as np
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


def _flatten(tensors) -> np.ndarray:
    """Tensors (one per variable) as one flat float64 vector."""
    return np.concatenate([np.asarray(tensor, dtype=np.float64).ravel() for tensor in tensors])


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

    def __call__(self, flat: np.ndarray) -> tuple[float, np.ndarray]:
        self.assign(flat)
        value, gradient = 0.0, np.zeros(flat.size)
        for inputs, targets in self.batches:
            total, gradients = self._batch_sum(inputs, targets)
            value += float(total)
            gradient += _flatten(gradients)
        regularization, regularization_gradients = self._regularization()
        return value / self.count + float(regularization), gradient / self.count + _flatten(regularization_gradients)


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

        # Imported here: scipy.optimize costs every process that imports the trainer a quarter second.
        import scipy.optimize

        start = rng.uniform(-bound, bound)
        result = scipy.optimize.minimize(
            negative_loss, start, jac=True, method="L-BFGS-B", bounds=scipy.optimize.Bounds(-bound, bound),
            options={"maxiter": max_iterations},
        )
        highest = max(-float(result.fun), base_value)
    finally:
        flat_loss.assign(origin)
    return 100.0 * (highest - base_value) / (1.0 + base_value)


# The Hessian's top eigenvalue ----------------------------------------------------------------


def _positive_integer(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _subset(dataset: Any, samples: int | None, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` samples of the training set drawn without replacement by ``rng``, in dataset
    order; all of them when ``samples`` is None or not less than the dataset."""
    x, y = _arrays(dataset)
    if not len(x):
        raise ValueError("dataset has no samples to measure the loss on")
    if samples is None or samples >= len(x):
        return x, y
    index = np.sort(rng.choice(len(x), size=samples, replace=False))
    return x[index], y[index]


class _HessianVectorProduct:
    """``H v`` for a flat float64 ``v``, ``H`` the Hessian of ``f`` (the mean loss over ``(x, y)``
    in batches, plus the model's regularization losses, as ``_FlatLoss``): per batch, the gradient
    of ``grad(batch loss sum) . v`` (double backpropagation), summed and divided by the count."""

    def __init__(self, model: tf.keras.Model, x: np.ndarray, y: np.ndarray, loss: LossFunction, batch_size: int):
        self.variables = tensorflow_variables(model.trainable_variables)
        self.sizes = [int(np.prod(variable.shape)) for variable in self.variables]
        self.size = sum(self.sizes)
        self.batches = [(x[start:start + batch_size], y[start:start + batch_size]) for start in range(0, len(x), batch_size)]
        self.count = len(x)
        zero = tf.UnconnectedGradients.ZERO

        def product(total_of, vector):
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    total = total_of()
                gradients = inner.gradient(total, self.variables, unconnected_gradients=zero)
                projection = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(gradients, vector)])
            return outer.gradient(projection, self.variables, unconnected_gradients=zero)

        def batch_total(inputs, targets):
            mean = loss(targets, model(inputs, training=False))
            return mean * tf.cast(tf.shape(inputs)[0], mean.dtype)

        @tf.function(reduce_retracing=True)
        def batch_product(inputs, targets, vector):
            return product(lambda: batch_total(inputs, targets), vector)

        @tf.function
        def regularization_product(vector):
            return product(lambda: tf.add_n(model.losses), vector)

        self._batch_product = batch_product
        self._regularization_product = regularization_product if model.losses else None

    def _pieces(self, flat: np.ndarray) -> list[tf.Tensor]:
        return [tf.constant(piece.reshape(variable.shape), dtype=variable.dtype)
                for variable, piece in zip(self.variables, np.split(flat, np.cumsum(self.sizes)[:-1]))]

    def __call__(self, flat: np.ndarray) -> np.ndarray:
        vector = self._pieces(flat)
        image = sum(_flatten(self._batch_product(inputs, targets, vector)) for inputs, targets in self.batches) / self.count
        if self._regularization_product is not None:
            image = image + _flatten(self._regularization_product(vector))
        return image


@dataclasses.dataclass(frozen=True)
class TopEigenvalue:
    """What ``hessian_top_eigenvalue`` found: ``value``, the Rayleigh quotient ``v^T H v`` of the
    last iterate, after ``iterations`` Hessian-vector products; ``converged`` says whether its
    relative change fell below the tolerance within the iteration limit."""

    value: float
    iterations: int
    converged: bool


def hessian_top_eigenvalue(
    model: tf.keras.Model,
    dataset: Any,
    *,
    samples: int | None = 500,
    iterations: int = 100,
    tolerance: float = 1e-3,
    seed: int = 0,
    loss: LossFunction | None = None,
    batch_size: int = 500,
) -> TopEigenvalue:
    """The Hessian's eigenvalue of largest magnitude at ``model``'s weights, by power iteration
    (PyHessian, Yao et al. 2020; the module doc has the iteration and its stopping rule).

    Power iteration converges to the eigenvalue of largest *magnitude*: at a minimum the Hessian
    is positive semi-definite and that is the top eigenvalue; elsewhere a negative eigenvalue
    larger in magnitude than the top one is what it returns (with its sign). It converges at
    the rate ``|lambda_2 / lambda_1|``; ``converged`` is False when ``iterations`` ran out first.

    Args:
      model: a built Keras model; its weights are not changed.
      dataset: an ``lbtrain.data.Dataset`` (its training set is used) or an ``(x, y)`` pair.
      samples: the size of the fixed subset ``f`` is taken over, drawn without replacement
        (seeded); None for the whole dataset. The default keeps one measurement of lbtrain's
        mlp 512-512 on Fashion-MNIST within 2 training epochs of 20000 images
        (``benchmarks/bench_flatness.py``).
      iterations: the most Hessian-vector products (PyHessian's 100).
      tolerance: the relative change of the eigenvalue estimate that stops the iteration.
      seed: the subset and the random starting vector.
      loss: ``loss(y_true, y_pred)`` reduced to a mean; default the model's compiled loss, else
        sparse categorical cross-entropy on logits (lbtrain's models).
      batch_size: samples per double-backpropagation pass.

    Returns:
      ``TopEigenvalue(value, iterations, converged)``.
    """
    _positive_integer("iterations", iterations)
    _positive_integer("batch_size", batch_size)
    if samples is not None:
        _positive_integer("samples", samples)
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance!r}")
    rng = np.random.default_rng(seed)
    x, y = _subset(dataset, samples, rng)
    product = _HessianVectorProduct(model, x, y, _model_loss(model, loss), batch_size)
    vector = rng.standard_normal(product.size)
    vector /= np.linalg.norm(vector)
    previous = None
    for step in range(1, iterations + 1):
        image = product(vector)
        value, norm = float(vector @ image), float(np.linalg.norm(image))
        if norm == 0.0:
            return TopEigenvalue(0.0, step, True)
        vector = image / norm
        if previous is not None and abs(value - previous) / (abs(previous) + 1e-6) < tolerance:
            return TopEigenvalue(value, step, True)
        previous = value
    return TopEigenvalue(value, iterations, False)


# Magnitude-aware PAC-Bayes flatness ----------------------------------------------------------


class _TrainingMetric:
    """Training accuracy (``argmax`` of the outputs against integer labels) or ``f`` (mean loss
    plus regularization losses) of the model's current weights over ``(x, y)``, in inference mode."""

    def __init__(self, model: tf.keras.Model, x: np.ndarray, y: np.ndarray, loss: LossFunction, metric: str, batch_size: int):
        self.batches = [(x[start:start + batch_size], y[start:start + batch_size]) for start in range(0, len(x), batch_size)]
        self.count, self.model, self.metric = len(x), model, metric

        @tf.function(reduce_retracing=True)
        def batch_sum(inputs, targets):
            predictions = model(inputs, training=False)
            if metric == "accuracy":
                labels = tf.cast(tf.reshape(targets, [-1]), tf.int64)
                return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(predictions, axis=-1), labels), tf.float64))
            return tf.cast(loss(targets, predictions), tf.float64) * tf.cast(tf.shape(inputs)[0], tf.float64)

        self._batch_sum = batch_sum

    def __call__(self) -> float:
        value = sum(float(self._batch_sum(inputs, targets)) for inputs, targets in self.batches) / self.count
        if self.metric == "loss" and self.model.losses:
            value += float(tf.add_n([tf.cast(term, tf.float64) for term in self.model.losses]))
        return value


class _MagnitudePerturbation:
    """Sets each trainable weight to ``w_i + sqrt(sigma^2 w_i^2 + eps^2) z_i``: ``z`` is draw
    ``draw`` of seeded stateless standard normal noise, the same at every ``sigma`` (common random
    numbers: every ``sigma`` is judged on the same draws). ``restore`` assigns the original weights
    back, bit for bit."""

    def __init__(self, model: tf.keras.Model, epsilon: float, seed: int):
        self.variables = tensorflow_variables(model.trainable_variables)
        self.origin = [np.array(variable.numpy(), copy=True) for variable in self.variables]
        weights = [tf.constant(value) for value in self.origin]
        streams = len(self.variables)

        @tf.function
        def perturb(sigma, draw):
            for index, (variable, weight) in enumerate(zip(self.variables, weights)):
                stream = tf.cast(draw * streams + index, tf.int64)
                noise = tf.random.stateless_normal(tf.shape(weight), seed=tf.stack([tf.constant(seed, tf.int64), stream]),
                                                   dtype=weight.dtype)
                scale = tf.sqrt(tf.cast(sigma, weight.dtype) ** 2 * weight**2 + tf.cast(epsilon, weight.dtype) ** 2)
                variable.assign(weight + scale * noise)

        self.perturb = perturb

    def restore(self) -> None:
        for variable, value in zip(self.variables, self.origin):
            variable.assign(value)


@dataclasses.dataclass(frozen=True)
class PacBayesFlatness:
    """What ``pac_bayes_flatness`` found: ``value = 1 / sigma^2`` for the ``sigma`` the bisection
    ended at, the ``deviation`` measured there, after ``iterations`` bisection steps;
    ``converged`` says whether that deviation came within the tolerance of the target before the
    steps ran out. When even ``sigma_max`` moves the metric less, the search ends just below
    ``sigma_max`` unconverged, and the value is an upper bound."""

    value: float
    sigma: float
    deviation: float
    iterations: int
    converged: bool


def _check_pac_bayes_arguments(metric: str, target: float, tolerance: float, sigma_max: float, epsilon: float) -> None:
    if metric not in ("accuracy", "loss"):
        raise ValueError(f"metric must be 'accuracy' or 'loss', got {metric!r}")
    if not target > 0:
        raise ValueError(f"deviation must be positive, got {target!r}")
    if not 0 < tolerance < target:
        raise ValueError(f"tolerance must be positive and less than the deviation ({target!r}), got {tolerance!r}")
    if not sigma_max > 0:
        raise ValueError(f"sigma_max must be positive, got {sigma_max!r}")
    if not epsilon >= 0:
        raise ValueError(f"magnitude_epsilon must be non-negative, got {epsilon!r}")


def pac_bayes_flatness(
    model: tf.keras.Model,
    dataset: Any,
    *,
    samples: int | None = 500,
    metric: Literal["accuracy", "loss"] = "accuracy",
    deviation: float = 0.1,
    tolerance: float = 1e-2,
    search_depth: int = 15,
    monte_carlo: int = 10,
    sigma_max: float = 2.0,
    magnitude_epsilon: float = 1e-3,
    seed: int = 0,
    loss: LossFunction | None = None,
    batch_size: int = 2048,
) -> PacBayesFlatness:
    """Jiang et al. 2020's magnitude-aware PAC-Bayes flatness ``1 / sigma'^2`` of ``model``'s
    weights (the formula in the module doc).

    Bisection on ``[0, sigma_max]``: at the midpoint ``sigma``, ``monte_carlo`` perturbations
    ``u_i = sqrt(sigma^2 w_i^2 + eps^2) z_i`` of every trainable weight give the mean metric;
    its deviation ``d = |mean - metric(w)|`` above ``deviation`` halves the interval downwards,
    below it upwards, and ``|d - deviation| < tolerance`` (or ``search_depth`` steps) ends the
    search at that ``sigma``. Defaults: accuracy deviation 0.1 and ``eps = 1e-3`` (Jiang et al.);
    tolerance 0.01, 15 steps, 10 Monte-Carlo draws, ``sigma`` in ``[0, 2]`` (the public
    implementation of Dziugaite et al. 2020, adapted from the authors' code). Two differences
    from that implementation: the noise has *variance* ``sigma^2 w_i^2 + eps^2`` as the paper
    states (it passes that to ``torch.normal`` as the standard deviation), and each draw ``z`` is
    the same at every ``sigma`` (seeded stateless noise), so the search is deterministic.
    Batch-norm moving statistics are not perturbed (they are not trainable).

    Args:
      model: a built Keras model; its weights are restored exactly before returning.
      dataset: an ``lbtrain.data.Dataset`` (its training set) or an ``(x, y)`` pair.
      samples: the size of the fixed, seeded subset the metric is taken over; None for the
        whole dataset. The default keeps one measurement of lbtrain's mlp 512-512 on
        Fashion-MNIST within 2 training epochs of 20000 images (``benchmarks/bench_flatness.py``).
      metric: ``"accuracy"`` (Jiang et al.: outputs' argmax against integer labels) or
        ``"loss"`` (``f``, the mean loss plus regularization losses).
      deviation: the bound on the metric's expected deviation.
      tolerance: how close to ``deviation`` the measured deviation must come to stop.
      search_depth: the most bisection steps.
      monte_carlo: perturbations averaged per step.
      sigma_max: the upper end of the search interval.
      magnitude_epsilon: ``eps``, the noise every weight gets whatever its magnitude.
      seed: the subset and the noise.
      loss: for ``metric="loss"``: ``loss(y_true, y_pred)`` reduced to a mean; default the
        model's compiled loss, else sparse categorical cross-entropy on logits.
      batch_size: samples per forward pass.

    Returns:
      ``PacBayesFlatness(value, sigma, deviation, iterations, converged)``.
    """
    _check_pac_bayes_arguments(metric, deviation, tolerance, sigma_max, magnitude_epsilon)
    for name, value in (("search_depth", search_depth), ("monte_carlo", monte_carlo), ("batch_size", batch_size)):
        _positive_integer(name, value)
    if samples is not None:
        _positive_integer("samples", samples)
    x, y = _subset(dataset, samples, np.random.default_rng(seed))
    evaluate = _TrainingMetric(model, x, y, _model_loss(model, loss), metric, batch_size)
    perturbation = _MagnitudePerturbation(model, magnitude_epsilon, seed)
    lower, upper = 0.0, float(sigma_max)
    try:
        base = evaluate()
        for step in range(1, search_depth + 1):
            sigma = (lower + upper) / 2
            draws = []
            for draw in range(monte_carlo):
                perturbation.perturb(tf.constant(sigma, tf.float64), tf.constant(draw, tf.int64))
                draws.append(evaluate())
            measured = abs(float(np.mean(draws)) - base)
            if abs(measured - deviation) < tolerance:
                return PacBayesFlatness(1.0 / sigma**2, sigma, measured, step, True)
            lower, upper = (lower, sigma) if measured > deviation else (sigma, upper)
    finally:
        perturbation.restore()
    return PacBayesFlatness(1.0 / sigma**2, sigma, measured, search_depth, False)
