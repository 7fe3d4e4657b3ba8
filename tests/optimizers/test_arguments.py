"""Arguments of every registered optimizer, driven by ``OPTIMIZERS`` and ``FOREIGN_NAMES``:
an unknown keyword lists the accepted ones and says "did you mean" for other libraries' names
and near misses; learning rates are checked like Keras takes them; NumPy scalars are numbers."""

import math
import re

import numpy as np
import pytest
import tensorflow as tf

from lbtrain._keras import KERAS_3
from lbtrain.optimizers import LAMB, LARS, OPTIMIZERS, build_optimizer
from lbtrain.optimizers._arguments import FOREIGN_NAMES, accepted_arguments
from lbtrain.schedules import Warmup
from reference import gradient_steps, run_keras, variable_set

# The base optimizer's arguments: tf.keras 2.15 has jit_compile; Keras 3 has gradient
# accumulation and loss scaling instead (jit_compile is the model's there).
BASE = ["clipnorm", "clipvalue", "ema_momentum", "ema_overwrite_frequency", "global_clipnorm", "name", "use_ema"]
BASE += ["gradient_accumulation_steps", "loss_scale_factor"] if KERAS_3 else ["jit_compile"]
ACCEPTED = {
    "lars": sorted(BASE + ["classic_momentum", "epsilon", "eta", "exclude_from_layer_adaptation", "exclude_from_weight_decay",
                           "momentum", "nesterov", "trust_ratio_denominator", "weight_decay"]),
    "lamb": sorted(BASE + ["beta_1", "beta_2", "epsilon", "exclude_from_layer_adaptation", "exclude_from_weight_decay",
                           "weight_decay"]),
    "sgd": sorted(BASE + ["momentum", "nesterov", "weight_decay"]),
    "momentum": sorted(BASE + ["momentum", "nesterov", "weight_decay"]),
    "adam": sorted(BASE + ["amsgrad", "beta_1", "beta_2", "epsilon", "weight_decay"]),
}
CLASSES = {"lars": LARS, "lamb": LAMB}


def test_accepted_arguments_of_every_registered_optimizer():
    assert set(ACCEPTED) == set(OPTIMIZERS)
    for name, factory in OPTIMIZERS.items():
        assert accepted_arguments(factory) == ACCEPTED[name], name


# Every (optimizer, foreign name) where the optimizer has the argument the foreign name means.
FOREIGN_CASES = [(optimizer, foreign) for optimizer in OPTIMIZERS for foreign, (ours, _) in FOREIGN_NAMES.items()
                 if ours in ACCEPTED[optimizer]]


def test_foreign_names_cover_model_garden_optax_timm_and_tfa():
    assert {("lars", "eeta"), ("lars", "trust_coefficient"), ("lars", "trust_coeff"), ("lars", "weight_decay_rate"),
            ("lamb", "weight_decay_rate"), ("lamb", "b1"), ("lamb", "b2"), ("adam", "b1")} <= set(FOREIGN_CASES)


@pytest.mark.parametrize("optimizer, foreign", FOREIGN_CASES)
def test_another_librarys_name_says_which_argument_it_is(optimizer, foreign):
    ours, note = FOREIGN_NAMES[foreign]
    message = (f"optimizer {optimizer!r}: unknown argument {foreign!r} (did you mean {ours!r}? {note}); "
               f"accepted: {', '.join(ACCEPTED[optimizer])}")
    with pytest.raises(ValueError) as error:
        build_optimizer(optimizer, 0.1, **{foreign: 0.5})
    assert str(error.value) == message
    if optimizer in CLASSES:
        with pytest.raises(ValueError, match=re.escape(f"{CLASSES[optimizer].__name__}: unknown argument {foreign!r} "
                                                       f"(did you mean {ours!r}? {note})")):
            CLASSES[optimizer](**{foreign: 0.5})


@pytest.mark.parametrize("cls", [LARS, LAMB])
def test_pytorchs_lr_and_keras_legacy_decay_get_their_hints(cls):
    """The calls users make: ``LARS(lr=0.1)`` (the learning rate is every optimizer's first
    argument, so it is not among the accepted keywords the hint looked in) and ``decay=``."""
    with pytest.raises(ValueError, match=re.escape(f"{cls.__name__}: unknown argument 'lr' (did you mean 'learning_rate'? "
                                                   "PyTorch optimizers call it lr); accepted: ")):
        cls(lr=0.1)
    with pytest.raises(ValueError, match=re.escape(f"{cls.__name__}: unknown argument 'decay' (Keras's legacy optimizers "
                                                   "decayed the rate as lr / (1 + decay * step);")):
        cls(0.1, decay=0.01)


@pytest.mark.parametrize(
    "optimizer, params, described",
    [
        ("lars", {"nestrov": True}, "'nestrov' (did you mean 'nesterov'?)"),
        ("lars", {"trust_clip": True}, "'trust_clip'"),
        ("lamb", {"betas": (0.9, 0.99)}, "'betas' (did you mean 'beta_2' or 'beta_1'?)"),
        ("momentum", {"momentun": 0.9}, "'momentun' (did you mean 'momentum' or 'ema_momentum'?)"),
        ("lars", {"b1": 0.9, "eeta": 0.01}, "'b1', 'eeta' (did you mean 'eta'? Model Garden's LARS calls it eeta)"),
    ],
)
def test_unknown_arguments_are_listed_with_close_matches_and_the_accepted_names(optimizer, params, described):
    plural = "s" if len(params) > 1 else ""
    with pytest.raises(ValueError) as error:
        build_optimizer(optimizer, 0.1, **params)
    assert str(error.value) == (f"optimizer {optimizer!r}: unknown argument{plural} {described}; "
                                f"accepted: {', '.join(ACCEPTED[optimizer])}")


BAD_LEARNING_RATES = [-0.1, 0, 0.0, math.nan, math.inf, np.float32(-0.1), np.float64("nan"), "0.1", None, True]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("learning_rate", BAD_LEARNING_RATES, ids=repr)
def test_a_learning_rate_that_is_not_positive_or_not_a_number_is_named(optimizer, learning_rate):
    message = (f"learning_rate must be a positive number, a LearningRateSchedule or a callable, "
               f"got {re.escape(repr(learning_rate))}$")
    with pytest.raises(ValueError, match=f"^optimizer {optimizer!r}: {message}"):
        build_optimizer(optimizer, learning_rate)
    if optimizer in CLASSES:
        with pytest.raises(ValueError, match=f"^{CLASSES[optimizer].__name__}: {message}"):
            CLASSES[optimizer](learning_rate)


@pytest.mark.parametrize("optimizer", CLASSES)
def test_schedules_callables_and_variables_pass_through_as_learning_rates(optimizer):
    weights = variable_set()
    grads = gradient_steps(weights, 3)
    reference = run_keras(CLASSES[optimizer](0.5), weights, grads)
    for learning_rate in (lambda: 0.5, tf.Variable(0.5), np.float32(0.5), Warmup(0.5, 1)):
        got = run_keras(CLASSES[optimizer](learning_rate), weights, grads)
        for name in weights:
            np.testing.assert_allclose(got[name], reference[name], rtol=1e-6, err_msg=f"{learning_rate!r} {name}")


# Every numeric argument of LARS and LAMB as a NumPy scalar of each common type.
NUMERIC = {
    "lars": {"learning_rate": 0.5, "momentum": 0.8, "weight_decay": 0.05, "eta": 0.01, "epsilon": 1e-3},
    "lamb": {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-4, "weight_decay": 0.1},
}


@pytest.mark.parametrize("scalar", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("optimizer", CLASSES)
def test_numpy_scalars_are_numbers_for_every_numeric_argument(optimizer, scalar):
    as_numpy = {name: scalar(value) for name, value in NUMERIC[optimizer].items()}
    as_float = {name: float(value) for name, value in as_numpy.items()}
    from_numpy, from_float = CLASSES[optimizer](**as_numpy), CLASSES[optimizer](**as_float)
    config = from_numpy.get_config()
    for name, value in as_float.items():
        if name != "learning_rate":  # Keras keeps a float learning rate in a float32 variable
            assert type(config[name]) is float and config[name] == value, name
    assert config == from_float.get_config()
    weights = variable_set()
    grads = gradient_steps(weights, 3)
    got, expected = run_keras(from_numpy, weights, grads), run_keras(from_float, weights, grads)
    for name in weights:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_numpy_integers_and_values_out_of_range_are_checked_alike():
    assert LARS(np.int64(1), momentum=np.int32(0), eta=np.int64(1)).get_config()["eta"] == 1.0
    with pytest.raises(ValueError, match=r"^LARS: momentum must be >= 0 and < 1, got "):
        LARS(momentum=np.float32(1.5))
    with pytest.raises(ValueError, match=r"^LAMB: epsilon must be a number, got "):
        LAMB(epsilon=np.float32("nan"))
    with pytest.raises(ValueError, match=r"^LARS: eta must be a number, got "):
        LARS(eta=np.bool_(True))


def test_params_may_name_the_optimizer_but_not_set_the_learning_rate():
    assert build_optimizer("adam", 0.1, name="adam_for_lbtrain").name == "adam_for_lbtrain"
    with pytest.raises(ValueError, match=r"^optimizer 'lars': learning_rate is build_optimizer's second argument"):
        build_optimizer("lars", 0.1, learning_rate=0.2)
    with pytest.raises(ValueError, match=r"^LARS: exclude_from_weight_decay must be a list of regular expressions, got 5$"):
        build_optimizer("lars", 0.1, exclude_from_weight_decay=5)
