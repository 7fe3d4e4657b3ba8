import inspect
import json

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.config import AnalysisConfig, ExperimentConfig
from lbtrain.measures.flatness import hessian_top_eigenvalue, pac_bayes_flatness, random_subspace, sharpness
from lbtrain.reports.prose import unsupported_numbers
from lbtrain.reports.report import write_report
from lbtrain.studies.runner import run_experiment


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


# The Hessian's top eigenvalue and the PAC-Bayes flatness, against a quadratic with a known Hessian


def quadratic(eigenvalues, minimum, seed=0, regularizer=None):
    """f(w) = 0.5 (w - m)^T A (w - m) with A = Q diag(eigenvalues) Q^T, Q a seeded random rotation:
    a bias-free Dense(1) whose kernel is w, sample j the row sqrt(n) q_j with targets
    (lambda_j, sqrt(n) q_j . m), and ``half_weighted_square`` as the loss."""
    eigenvalues, minimum = np.asarray(eigenvalues, dtype=np.float64), np.asarray(minimum, dtype=np.float64)
    n = len(eigenvalues)
    rotation, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    x = (np.sqrt(n) * rotation.T).astype(np.float32)
    y = np.stack([eigenvalues, x @ minimum], axis=1).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input(shape=(n,)), tf.keras.layers.Dense(1, use_bias=False, kernel_regularizer=regularizer)])
    model.layers[0].kernel.assign(minimum.astype(np.float32).reshape(-1, 1))
    return model, (x, y), rotation @ np.diag(eigenvalues) @ rotation.T


def half_weighted_square(y_true, y_pred):
    return tf.reduce_mean(0.5 * y_true[:, 0] * (y_pred[:, 0] - y_true[:, 1]) ** 2)


SPECTRUM = [5.0, 2.5, 2.0, 1.0, 0.5, 0.2, 0.1, 0.05]
MINIMUM = [1.5, -0.75, 2.0, 0.5, -1.25, 1.0, -2.0, 0.8]


def weights_of(model):
    return [w.copy() for w in model.get_weights()]


def same_weights(before, model):
    return all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_top_eigenvalue_of_a_quadratic_is_that_of_its_matrix():
    model, data, matrix = quadratic(SPECTRUM, MINIMUM)
    before = weights_of(model)
    found = hessian_top_eigenvalue(model, data, loss=half_weighted_square)
    assert found.value == pytest.approx(np.linalg.eigvalsh(matrix).max(), rel=1e-3)
    assert found.converged and 2 < found.iterations < 100
    assert same_weights(before, model)


def test_power_iteration_finds_the_eigenvalue_of_largest_magnitude_with_its_sign():
    model, data, matrix = quadratic([1.0, -3.0, 0.5, 0.2], [1.0, 1.0, 1.0, 1.0], seed=2)
    assert hessian_top_eigenvalue(model, data, loss=half_weighted_square).value == pytest.approx(np.linalg.eigvalsh(matrix).min(), rel=1e-3)


def test_regularization_losses_enter_the_hessian():
    model, data, matrix = quadratic(SPECTRUM, MINIMUM, regularizer=tf.keras.regularizers.L2(0.25))  # + 0.25 |w|^2
    found = hessian_top_eigenvalue(model, data, loss=half_weighted_square)
    assert found.value == pytest.approx(np.linalg.eigvalsh(matrix).max() + 0.5, rel=1e-3)


def test_a_subset_is_fixed_by_the_seed():
    # Sample j alone contributes n lambda_j q_j q_j^T: k of the n samples have eigenvalues (n / k) lambda_j.
    model, data, _ = quadratic(SPECTRUM, MINIMUM)
    first, again = (hessian_top_eigenvalue(model, data, samples=3, seed=4, loss=half_weighted_square) for _ in range(2))
    assert first == again
    assert min(abs(first.value / (8 / 3 * value) - 1) for value in SPECTRUM) < 1e-3


def tiny_classifier(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((256, 4)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1).astype(np.int32)
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(5, activation="tanh"), tf.keras.layers.Dense(3)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=20, batch_size=32, verbose=0)
    return model, (x, y)


def full_hessian(model, x, y):
    """The Hessian of the mean cross-entropy, built column by column with tf's Jacobian."""
    variables = model.trainable_weights
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            value = loss(y, model(x, training=False))
        gradient = tf.concat([tf.reshape(g, [-1]) for g in inner.gradient(value, variables)], axis=0)
    blocks = [tf.reshape(outer.jacobian(gradient, variable), (gradient.shape[0], -1)) for variable in variables]
    return np.concatenate([block.numpy() for block in blocks], axis=1).astype(np.float64)


def test_top_eigenvalue_of_a_trained_classifier_matches_its_full_hessian():
    model, (x, y) = tiny_classifier()
    eigenvalues = np.linalg.eigvalsh((lambda h: (h + h.T) / 2)(full_hessian(model, x, y)))
    found = hessian_top_eigenvalue(model, (x, y), samples=None, tolerance=1e-7, iterations=3000)
    assert found.converged
    assert found.value == pytest.approx(eigenvalues[np.argmax(np.abs(eigenvalues))], rel=1e-3)


def expected_magnitude_sigma_squared(matrix, minimum, deviation, epsilon=1e-3):
    """At the minimum, E[f(m + u)] - f(m) = 0.5 sum_i A_ii Var(u_i) = 0.5 sum_i A_ii (s^2 m_i^2 + eps^2)."""
    diagonal, minimum = np.diag(matrix), np.asarray(minimum)
    return (2 * deviation - epsilon**2 * diagonal.sum()) / (diagonal @ minimum**2)


def test_pac_bayes_sigma_of_a_quadratic_has_a_closed_form():
    model, data, matrix = quadratic(SPECTRUM, MINIMUM)
    before = weights_of(model)
    found = pac_bayes_flatness(model, data, metric="loss", loss=half_weighted_square, monte_carlo=200, tolerance=1e-4)
    assert found.converged and found.deviation == pytest.approx(0.1, abs=1e-4)
    assert found.sigma**2 == pytest.approx(expected_magnitude_sigma_squared(matrix, MINIMUM, 0.1), rel=0.05)
    assert found.value == 1 / found.sigma**2
    assert same_weights(before, model)


def test_pac_bayes_flatness_grows_with_the_curvature():
    flat, sharp = (pac_bayes_flatness(*quadratic(np.multiply(scale, SPECTRUM), MINIMUM)[:2], metric="loss", loss=half_weighted_square,
                                      monte_carlo=50, tolerance=1e-4) for scale in (1, 4))
    assert sharp.value > flat.value
    assert sharp.value / flat.value == pytest.approx(4, rel=0.05)  # the same draws: the deviation scales by 4


def test_pac_bayes_flatness_says_when_even_the_widest_noise_is_too_little():
    found = pac_bayes_flatness(*quadratic(np.multiply(1e-4, SPECTRUM), MINIMUM)[:2], metric="loss", loss=half_weighted_square)
    assert not found.converged and found.sigma == pytest.approx(2.0, rel=1e-3) and found.deviation < 0.1


def test_pac_bayes_flatness_of_a_classifier_is_seeded_and_restores_the_weights_exactly():
    model, data = tiny_classifier()
    before = weights_of(model)
    found = pac_bayes_flatness(model, data, samples=None)
    assert found.converged and abs(found.deviation - 0.1) < 0.01 and found.value == 1 / found.sigma**2
    assert same_weights(before, model)
    assert pac_bayes_flatness(model, data, samples=None) == found
    assert pac_bayes_flatness(model, data, samples=128, seed=1).sigma > 0


@pytest.mark.parametrize("arguments, message", [
    ({"iterations": 0}, "iterations must be a positive integer"),
    ({"tolerance": 0.0}, "tolerance must be positive"),
    ({"samples": 0}, "samples must be a positive integer"),
    ({"batch_size": 2.5}, "batch_size must be a positive integer"),
])
def test_hessian_bad_arguments_name_what_is_allowed(arguments, message):
    model, data, _ = quadratic(SPECTRUM, MINIMUM)
    with pytest.raises(ValueError, match=message):
        hessian_top_eigenvalue(model, data, loss=half_weighted_square, **arguments)


@pytest.mark.parametrize("arguments, message", [
    ({"metric": "error"}, "metric must be 'accuracy' or 'loss', got 'error'"),
    ({"deviation": 0.0}, "deviation must be positive"),
    ({"tolerance": 0.2}, r"tolerance must be positive and less than the deviation \(0.1\)"),
    ({"sigma_max": -1.0}, "sigma_max must be positive"),
    ({"magnitude_epsilon": -1e-3}, "magnitude_epsilon must be non-negative"),
    ({"monte_carlo": 0}, "monte_carlo must be a positive integer"),
    ({"search_depth": True}, "search_depth must be a positive integer"),
])
def test_pac_bayes_bad_arguments_name_what_is_allowed(arguments, message):
    model, data, _ = quadratic(SPECTRUM, MINIMUM)
    with pytest.raises(ValueError, match=message):
        pac_bayes_flatness(model, data, loss=half_weighted_square, **arguments)


def test_bad_arguments_leave_the_weights_alone_and_an_empty_dataset_is_refused():
    model, _, _ = quadratic(SPECTRUM, MINIMUM)
    empty = (np.zeros((0, 8), np.float32), np.zeros((0, 2), np.float32))
    with pytest.raises(ValueError, match="dataset has no samples"):
        hessian_top_eigenvalue(model, empty, loss=half_weighted_square)
    with pytest.raises(ValueError, match="dataset has no samples"):
        pac_bayes_flatness(model, empty, loss=half_weighted_square)


def test_the_analysis_section_defaults_are_the_functions_defaults():
    defaults = AnalysisConfig()
    assert defaults.hessian_samples == inspect.signature(hessian_top_eigenvalue).parameters["samples"].default
    assert defaults.pac_bayes_samples == inspect.signature(pac_bayes_flatness).parameters["samples"].default
    assert not defaults.hessian and not defaults.pac_bayes


def test_runs_measure_both_and_the_report_shows_them_beside_sharpness(tmp_path):
    experiment = ExperimentConfig.model_validate({
        "name": "flat", "output_dir": str(tmp_path),
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 400}},
        "model": {"name": "mlp", "options": {"widths": [32]}},
        "lr": {"base_lr": 0.05, "base_batch": 16},
        "training": {"per_worker_batch": 16, "epochs": 2, "checkpoint": False},
        "analysis": {"sharpness": True, "sharpness_samples": 64, "hessian": True, "hessian_samples": 128, "pac_bayes": True,
                     "pac_bayes_samples": 128},
        "grid": {"world_sizes": [1, 2]},
    })
    run_experiment(experiment, progress=lambda line: None)
    text = write_report(tmp_path / "flat").read_text()
    record = json.loads((tmp_path / "flat" / "report.json").read_text())
    assert ("## Sharpness (Keskar et al. 2017), top Hessian eigenvalue (Yao et al. 2020), magnitude-aware PAC-Bayes flatness "
            "(Jiang et al. 2020)") in text
    assert "| recipe | global batch | train acc | test acc | sharpness | top Hessian eigenvalue | PAC-Bayes flatness |" in text
    for key in ("hessian_top_eigenvalue", "pac_bayes_flatness"):
        assert [entry["global_batch"] for entry in record[key]] == [16, 32]
        assert all(entry[key] > 0 and entry["n"] == 1 for entry in record[key])
        assert f" {record[key][0][key]:.3f} (n=1) |" in text
    assert unsupported_numbers(text, record) == []
