import numpy as np
import pytest
import tensorflow as tf

from lbtrain.optimizers import LARS
from lbtrain.schedules import Warmup
from reference import gradient_steps, lars_reference, run_keras, variable_set

STEPS = 6

VARIANTS = {
    "classic": {},
    "classic_nesterov": {"nesterov": True},
    "non_classic": {"classic_momentum": False},
    "non_classic_nesterov": {"classic_momentum": False, "nesterov": True},
    "strong_decay_eps": {"weight_decay": 0.05, "epsilon": 1e-3, "eta": 0.01},
    "custom_masks": {"exclude_from_weight_decay": [r"conv"], "exclude_from_layer_adaptation": [r"bias"]},
    "no_exclusions": {"exclude_from_weight_decay": [], "exclude_from_layer_adaptation": []},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_lars_matches_numpy_reference_for_every_kind_of_variable(variant):
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    options = VARIANTS[variant]
    got = run_keras(LARS(learning_rate=0.5, **options), weights, grads)
    expected = lars_reference(weights, grads, lr=lambda step: 0.5, **options)
    for name in weights:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-10, atol=1e-12, err_msg=name)
        if name != "zero/kernel:0" or variant == "no_exclusions":
            assert not np.allclose(got[name], weights[name]), f"{name} did not move"


def test_excluded_variables_follow_plain_momentum_sgd():
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    got = run_keras(LARS(learning_rate=0.5, momentum=0.9), weights, grads)
    sgd = run_keras(tf.keras.optimizers.SGD(learning_rate=0.5, momentum=0.9), weights, grads)
    for name in ("dense_0/bias:0", "batch_norm_0/gamma:0", "batch_norm_0/beta:0"):
        # Keras's SGD rounds momentum through float32 even for float64 variables.
        np.testing.assert_allclose(got[name], sgd[name], rtol=1e-6, err_msg=name)
    # An adapted kernel moves by about eta * ||w|| per step instead: far less than SGD.
    assert np.linalg.norm(got["dense_0/kernel:0"] - weights["dense_0/kernel:0"]) < 0.1 * np.linalg.norm(
        sgd["dense_0/kernel:0"] - weights["dense_0/kernel:0"])


def test_zero_weight_norm_and_zero_gradient_use_trust_one():
    weights = {"zero/kernel:0": np.zeros((2, 2)), "k/kernel:0": np.ones((2, 2))}
    grads = [{"zero/kernel:0": np.full((2, 2), 0.5), "k/kernel:0": np.zeros((2, 2))}]
    got = run_keras(LARS(learning_rate=0.1, momentum=0.0, weight_decay=0.0), weights, grads)
    np.testing.assert_allclose(got["zero/kernel:0"], np.full((2, 2), -0.05))
    np.testing.assert_allclose(got["k/kernel:0"], np.ones((2, 2)))


def test_schedule_drives_the_learning_rate_per_step():
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    schedule = Warmup(1.0, 4, start_lr=0.2)
    got = run_keras(LARS(learning_rate=schedule), weights, grads)
    expected = lars_reference(weights, grads, lr=lambda step: float(schedule(step)))
    for name in weights:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"momentum": -0.1}, ValueError, r"LARS: momentum must be >= 0 and < 1, got -0.1"),
        ({"momentum": 1.0}, ValueError, r"LARS: momentum must be >= 0 and < 1, got 1.0"),
        ({"eta": 0}, ValueError, r"LARS: eta must be > 0, got 0"),
        ({"weight_decay": -1e-4}, ValueError, r"LARS: weight_decay must be >= 0, got -0.0001"),
        ({"epsilon": float("nan")}, ValueError, r"LARS: epsilon must be a number, got nan"),
        ({"exclude_from_weight_decay": "bias"}, ValueError, r"exclude_from_weight_decay must be a list of regular expressions"),
        ({"trust_clip": True}, TypeError, r"LARS got an unknown argument 'trust_clip' \(allowed: clipnorm, clipvalue, ema_momentum"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        LARS(**kwargs)
