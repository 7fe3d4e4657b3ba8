import numpy as np
import pytest
import tensorflow as tf

from lbtrain._keras import KERAS_3
from lbtrain.optimizers import LAMB
from lbtrain.schedules import Warmup
from reference import gradient_steps, lamb_reference, run_keras, variable_set

STEPS = 6

VARIANTS = {
    "default": {},
    "strong_decay": {"weight_decay": 0.1, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-4},
    "custom_masks": {"exclude_from_weight_decay": [r"conv"], "exclude_from_layer_adaptation": [r"beta"]},
    "no_exclusions": {"exclude_from_weight_decay": [], "exclude_from_layer_adaptation": []},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_lamb_matches_numpy_reference_for_every_kind_of_variable(variant):
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    options = VARIANTS[variant]
    got = run_keras(LAMB(learning_rate=0.01, **options), weights, grads)
    # Keras keeps a float learning rate in a float32 variable.
    expected = lamb_reference(weights, grads, lr=lambda step: float(np.float32(0.01)), **options)
    for name in weights:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_excluded_variables_follow_adam():
    weights = variable_set()
    grads = gradient_steps(weights, STEPS, zero_gradient=None)
    got = run_keras(LAMB(learning_rate=0.01, epsilon=1e-7), weights, grads)
    adam = run_keras(tf.keras.optimizers.Adam(learning_rate=0.01, epsilon=1e-7), weights, grads)
    for name in ("dense_0/bias:0", "batch_norm_0/gamma:0", "batch_norm_0/beta:0"):
        # Keras's Adam adds epsilon to the uncorrected sqrt(v): equal up to epsilon-sized terms.
        np.testing.assert_allclose(got[name], adam[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_zero_weights_take_a_plain_adam_step():
    weights = {"zero/kernel:0": np.zeros(3)}
    grads = [{"zero/kernel:0": np.array([1.0, -2.0, 0.5])}]
    got = run_keras(LAMB(learning_rate=0.1, weight_decay=0.0), weights, grads)
    np.testing.assert_allclose(got["zero/kernel:0"], [-0.1, 0.1, -0.1], rtol=1e-5)


def test_schedule_drives_the_learning_rate_per_step():
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    schedule = Warmup(0.02, 3)
    got = run_keras(LAMB(learning_rate=schedule), weights, grads)
    expected = lamb_reference(weights, grads, lr=lambda step: float(schedule(step)))
    for name in weights:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beta_1": 1.0}, r"LAMB: beta_1 must be >= 0 and < 1, got 1.0"),
        ({"beta_2": -0.5}, r"LAMB: beta_2 must be >= 0 and < 1, got -0.5"),
        ({"epsilon": 0}, r"LAMB: epsilon must be > 0, got 0"),
        ({"weight_decay": "0.01"}, r"LAMB: weight_decay must be a number, got '0.01'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LAMB(**kwargs)


@pytest.mark.skipif(not KERAS_3, reason="keras.optimizers.Lamb is Keras 3's")
def test_lamb_equals_keras_3_lamb_where_the_conventions_agree():
    """Keras 3's Lamb adapts every variable and has no weight decay inside its trust ratio (its
    ``weight_decay`` is decoupled, applied before the update as ``w -= lr * wd * w``): with no
    decay, every variable adapted and the same epsilon, the two are the same algorithm."""
    weights = variable_set()
    grads = gradient_steps(weights, 6)
    ours = run_keras(LAMB(0.25, weight_decay=0.0, epsilon=1e-7, exclude_from_layer_adaptation=[]), weights, grads)
    keras = run_keras(tf.keras.optimizers.Lamb(0.25, epsilon=1e-7), weights, grads)
    reference = lamb_reference(weights, grads, lr=lambda step: 0.25, weight_decay=0.0, epsilon=1e-7,
                               exclude_from_layer_adaptation=[])
    for name in weights:
        # Keras 3 rounds its Python constants (1 - beta_1, ...) through float32 on float64 variables.
        np.testing.assert_allclose(ours[name], keras[name], rtol=2e-5, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(ours[name], reference[name], rtol=1e-9, atol=1e-12, err_msg=name)
        assert not np.allclose(ours[name], weights[name]), f"{name} did not move"


@pytest.mark.skipif(not KERAS_3, reason="keras.optimizers.Lamb is Keras 3's")
def test_lamb_differs_from_keras_3_lamb_with_weight_decay_and_on_excluded_variables():
    """Where they differ (README, "Keras 3's Lamb"): lbtrain adds ``wd * w`` to the update before
    the trust ratio (You et al. 2019, Algorithm 2) and, by default, neither decays nor adapts
    biases and normalization weights; Keras 3 decays every variable outside the trust ratio and
    adapts every variable."""
    weights = variable_set()
    grads = gradient_steps(weights, 3)
    ours = run_keras(LAMB(0.01, weight_decay=0.1, epsilon=1e-7), weights, grads)
    keras = run_keras(tf.keras.optimizers.Lamb(0.01, epsilon=1e-7, weight_decay=0.1), weights, grads)
    for name in ("dense_0/kernel:0", "dense_0/bias:0", "batch_norm_0/gamma:0"):
        assert not np.allclose(ours[name], keras[name], rtol=1e-4), name
