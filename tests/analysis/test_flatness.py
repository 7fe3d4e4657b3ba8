import numpy as np
import pytest
import tensorflow as tf

from lbtrain.analysis.flatness import random_subspace, sharpness


def quadratic_model(weights):
    """f(w) = mean_i (w_i - t_i)^2: sample i is the unit vector e_i with target t_i, the model
    a bias-free Dense(1) whose kernel is w, the loss mean squared error."""
    model = tf.keras.Sequential([tf.keras.Input(shape=(len(weights),)), tf.keras.layers.Dense(1, use_bias=False)])
    model.layers[0].kernel.assign(np.asarray(weights, dtype=np.float32).reshape(-1, 1))
    return model


def unit_samples(targets):
    return np.eye(len(targets), dtype=np.float32), np.asarray(targets, dtype=np.float32).reshape(-1, 1)


def test_full_space_sharpness_of_a_quadratic_at_its_minimum_is_the_box_corner():
    targets = np.array([0.5, -2.0, 0.0, 3.0, -0.25, 1.0])
    model = quadratic_model(targets)
    epsilon = 1e-2
    bound = epsilon * (np.abs(targets) + 1)
    expected = 100 * np.mean(bound**2) / (1 + 0.0)
    value = sharpness(model, unit_samples(targets), epsilon=epsilon, loss=tf.keras.losses.MeanSquaredError())
    assert value == pytest.approx(expected, rel=1e-3)


def test_sharpness_away_from_the_minimum_divides_by_one_plus_the_loss():
    targets = np.array([1.0, -1.0, 2.0, 0.0])
    offset = np.array([0.3, -0.2, 0.1, 0.4])
    weights = targets + offset
    model = quadratic_model(weights)
    epsilon = 5e-3
    bound = epsilon * (np.abs(weights) + 1)
    base = np.mean(offset**2)
    highest = np.mean((np.abs(offset) + bound) ** 2)  # each coordinate moves away from its target
    value = sharpness(model, unit_samples(targets), epsilon=epsilon, loss=tf.keras.losses.MeanSquaredError())
    assert value == pytest.approx(100 * (highest - base) / (1 + base), rel=1e-3)


def test_one_dimensional_subspace_has_a_closed_form():
    targets = np.array([0.5, -1.5, 2.0, 0.25, -0.75])
    model = quadratic_model(targets)
    epsilon, seed = 1e-2, 3
    column = random_subspace(len(targets), 1, seed)[:, 0]
    coordinate = column @ targets / (column @ column)  # A^+ x for a single column
    bound = epsilon * (abs(coordinate) + 1)
    expected = 100 * np.mean((column * bound) ** 2)
    value = sharpness(model, unit_samples(targets), epsilon=epsilon, subspace_dim=1, seed=seed,
                      loss=tf.keras.losses.MeanSquaredError())
    assert value == pytest.approx(expected, rel=1e-3)


def test_weights_are_restored_and_a_trained_classifier_is_measured():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    before = [w.copy() for w in model.get_weights()]
    small = sharpness(model, (x, y), epsilon=1e-4)
    large = sharpness(model, (x, y), epsilon=1e-2)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert 0 < small < large


@pytest.mark.parametrize("arguments, message", [
    ({"epsilon": 0.0}, "epsilon must be positive"),
    ({"subspace_dim": 100}, "subspace_dim must be an integer in 1..4"),
    ({"max_iterations": 0}, "max_iterations must be a positive integer"),
])
def test_bad_arguments_name_what_is_allowed(arguments, message):
    targets = np.zeros(4)
    with pytest.raises(ValueError, match=message):
        sharpness(quadratic_model(targets), unit_samples(targets), loss=tf.keras.losses.MeanSquaredError(), **arguments)
