import numpy as np
import pytest
import tensorflow as tf

from lbtrain.optimizers import LARS
from lbtrain.schedules import Warmup
from reference import (
    gradient_steps,
    lars_reference,
    model_garden_lars_reference,
    optax_lars_reference,
    run_keras,
    variable_set,
)

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
        ({"trust_ratio_denominator": "optax"}, ValueError,
         r"LARS: trust_ratio_denominator must be 'paper' or 'decayed_gradient', got 'optax'"),
        ({"classic_momentum": False, "trust_ratio_denominator": "decayed_gradient"}, ValueError,
         r"LARS: trust_ratio_denominator applies to classic momentum; with classic_momentum=False"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        LARS(**kwargs)


# ---------------------------------------------------------------- trust-ratio conventions

# Both conventions under every kind of momentum Model Garden has; weight decay large enough
# that the two denominators differ clearly.
MOMENTUM_KINDS = {
    "classic": {"classic_momentum": True, "nesterov": False},
    "classic_nesterov": {"classic_momentum": True, "nesterov": True},
    "non_classic": {"classic_momentum": False, "nesterov": False},
    "non_classic_nesterov": {"classic_momentum": False, "nesterov": True},
}
DECAY_EXCLUDED, ADAPTATION_EXCLUDED = [r"bias", r"gamma"], [r"beta", r"bias"]


def lars_in_model_gardens_terms(kind, trust_ratio_denominator):
    momentum_kind = MOMENTUM_KINDS[kind]
    extra = {} if not momentum_kind["classic_momentum"] else {"trust_ratio_denominator": trust_ratio_denominator}
    return LARS(learning_rate=0.5, momentum=0.8, weight_decay=0.05, eta=0.01, epsilon=0.0,
                exclude_from_weight_decay=DECAY_EXCLUDED, exclude_from_layer_adaptation=ADAPTATION_EXCLUDED,
                **momentum_kind, **extra)


def model_garden(weights, grads, kind):
    return model_garden_lars_reference(weights, grads, learning_rate=lambda step: 0.5, momentum=0.8, weight_decay_rate=0.05,
                                       eeta=0.01, exclude_from_weight_decay=DECAY_EXCLUDED,
                                       exclude_from_layer_adaptation=ADAPTATION_EXCLUDED, **MOMENTUM_KINDS[kind])


@pytest.mark.parametrize("kind", MOMENTUM_KINDS)
def test_decayed_gradient_denominator_is_model_gardens_lars(kind):
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    got = run_keras(lars_in_model_gardens_terms(kind, "decayed_gradient"), weights, grads)
    expected = model_garden(weights, grads, kind)
    for name in weights:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("kind", MOMENTUM_KINDS)
def test_paper_denominator_is_the_papers_lars_and_differs_from_model_garden_only_with_classic_momentum(kind):
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    got = run_keras(lars_in_model_gardens_terms(kind, "paper"), weights, grads)
    paper = lars_reference(weights, grads, lr=lambda step: 0.5, momentum=0.8, weight_decay=0.05, eta=0.01,
                           exclude_from_weight_decay=DECAY_EXCLUDED, exclude_from_layer_adaptation=ADAPTATION_EXCLUDED,
                           **MOMENTUM_KINDS[kind])
    for name in weights:
        np.testing.assert_allclose(got[name], paper[name], rtol=1e-6, atol=1e-6, err_msg=name)
    # Non-classic momentum divides by the update's norm in both; classic momentum differs on
    # every variable that decays and adapts.
    garden = model_garden(weights, grads, kind)
    differs = not np.allclose(got["dense_0/kernel:0"], garden["dense_0/kernel:0"], rtol=1e-4, atol=0)
    assert differs == MOMENTUM_KINDS[kind]["classic_momentum"]
    np.testing.assert_allclose(got["dense_0/bias:0"], garden["dense_0/bias:0"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_decayed_gradient_denominator_with_epsilon_is_optax_lars(nesterov):
    """optax.lars with masks that skip what lbtrain's exclude lists name."""
    weights = variable_set()
    grads = gradient_steps(weights, STEPS)
    got = run_keras(LARS(learning_rate=0.5, momentum=0.8, weight_decay=0.05, eta=0.01, epsilon=1e-3, nesterov=nesterov,
                         trust_ratio_denominator="decayed_gradient", exclude_from_weight_decay=DECAY_EXCLUDED,
                         exclude_from_layer_adaptation=ADAPTATION_EXCLUDED), weights, grads)
    expected = optax_lars_reference(
        weights, grads, learning_rate=lambda step: 0.5, weight_decay=0.05, trust_coefficient=0.01, eps=1e-3,
        momentum=0.8, nesterov=nesterov, weight_decay_mask=lambda name: not any(p in name for p in DECAY_EXCLUDED),
        trust_ratio_mask=lambda name: not any(p in name for p in ADAPTATION_EXCLUDED))
    for name in weights:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6, err_msg=name)


def test_trust_ratio_denominator_survives_the_config_and_changes_a_step_as_the_formulas_say():
    optimizer = LARS(learning_rate=1.0, momentum=0.0, weight_decay=0.5, eta=1.0, trust_ratio_denominator="decayed_gradient",
                     exclude_from_weight_decay=[])
    config = optimizer.get_config()
    assert config["trust_ratio_denominator"] == "decayed_gradient"
    assert LARS.from_config(config).trust_ratio_denominator == "decayed_gradient"
    # w = (3, 4), g = (0, 2), wd = 0.5: g + wd*w = (1.5, 4), ||w|| = 5, ||g|| = 2.
    # paper: trust = 5 / (2 + 0.5 * 5) = 10/9; decayed gradient: trust = 5 / ||(1.5, 4)|| = 5 / sqrt(18.25).
    weights, grads = {"k/kernel:0": np.array([3.0, 4.0])}, [{"k/kernel:0": np.array([0.0, 2.0])}]
    decayed = np.array([1.5, 4.0])
    for denominator, trust in (("paper", 10 / 9), ("decayed_gradient", 5 / np.sqrt(18.25))):
        got = run_keras(LARS(learning_rate=1.0, momentum=0.0, weight_decay=0.5, eta=1.0, exclude_from_weight_decay=[],
                             trust_ratio_denominator=denominator), weights, grads)
        np.testing.assert_allclose(got["k/kernel:0"], weights["k/kernel:0"] - trust * decayed, rtol=1e-12)
