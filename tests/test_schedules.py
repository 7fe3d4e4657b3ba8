"""Every schedule against a NumPy reference at the steps that matter (0, end of warmup,
around every decay boundary, the end), directly and after a serialization round trip; every
decay in ``DECAYS`` through one contract, with and without warmup, under both decay clocks."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.schedules import (
    DECAY_CLOCKS,
    DECAYS,
    SCHEDULE_KEYS,
    Constant,
    ConstantLearningRate,
    ScheduleError,
    Warmup,
    build_schedule,
    schedule_values,
    warmup_lr,
)

schedules = tf.keras.optimizers.schedules


# ---------------------------------------------------------------- NumPy references


def ref_warmup(step, target, warmup, start, after=None, offset=False):
    if step < warmup:
        return warmup_lr(step, warmup, start, target)
    if after is None:
        return target
    return after(step - warmup if offset else step)


def ref_exponential(lr, period, rate, staircase=False):
    return lambda s: lr * rate ** ((s // period) if staircase else s / period)


def ref_piecewise(boundaries, values):
    """Keras semantics: value i while step <= boundary i."""
    return lambda s: values[sum(s > b for b in boundaries)]


def ref_cosine(lr, decay_steps, alpha=0.0):
    return lambda s: lr * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * min(s, decay_steps) / decay_steps)) + alpha)


def ref_polynomial(lr, decay_steps, end, power=1.0):
    return lambda s: (lr - end) * (1 - min(s, decay_steps) / decay_steps) ** power + end


def round_trip(schedule):
    """get_config -> from_config, then Keras's serialize -> deserialize (the optimizer's path)."""
    rebuilt = schedule.__class__.from_config(schedule.get_config())
    return schedules.deserialize(schedules.serialize(rebuilt))


def assert_matches(schedule, reference, steps):
    for candidate in (schedule, round_trip(schedule)):
        got = [float(candidate(tf.constant(s, tf.int64))) for s in steps]
        np.testing.assert_allclose(got, [reference(s) for s in steps], rtol=1e-5, err_msg=type(candidate).__name__)


# Each case: (schedule, NumPy reference, the steps that matter). Drives the contract tests.
CASES = {
    "constant": (Constant(0.4), lambda s: 0.4, [0, 1, 10**6]),
    "warmup_alone": (Warmup(3.2, 500, start_lr=0.1), lambda s: ref_warmup(s, 3.2, 500, 0.1), [0, 1, 498, 499, 500, 501, 10**5]),
    "warmup_from_scaling_factor": (Warmup(3.2, 10, scaling_factor=32), lambda s: ref_warmup(s, 3.2, 10, 0.1), [0, 9, 10]),
    "warmup_from_zero": (Warmup(1.0, 4), lambda s: ref_warmup(s, 1.0, 4, 0.0), [0, 1, 2, 3, 4]),
    "warmup_exponential": (
        Warmup(2.0, 20, after=schedules.ExponentialDecay(2.0, 10, 0.5), start_lr=0.5, offset_after=True),
        lambda s: ref_warmup(s, 2.0, 20, 0.5, ref_exponential(2.0, 10, 0.5), offset=True),
        [0, 19, 20, 21, 25, 30, 40],
    ),
    "warmup_exponential_staircase": (
        Warmup(2.0, 20, after=schedules.ExponentialDecay(2.0, 10, 0.5, staircase=True), start_lr=0.5, offset_after=True),
        lambda s: ref_warmup(s, 2.0, 20, 0.5, ref_exponential(2.0, 10, 0.5, True), offset=True),
        [19, 20, 29, 30, 31, 39, 40],
    ),
    "warmup_piecewise": (
        Warmup(1.0, 10, after=schedules.PiecewiseConstantDecay([99, 199], [1.0, 0.1, 0.01]), start_lr=0.25, offset_after=True),
        lambda s: ref_warmup(s, 1.0, 10, 0.25, ref_piecewise([99, 199], [1.0, 0.1, 0.01]), offset=True),
        [0, 9, 10, 108, 109, 110, 208, 209, 210],
    ),
    "warmup_piecewise_not_offset": (
        Warmup(1.0, 10, after=schedules.PiecewiseConstantDecay([99], [1.0, 0.1]), start_lr=0.25, offset_after=False),
        lambda s: ref_warmup(s, 1.0, 10, 0.25, ref_piecewise([99], [1.0, 0.1]), offset=False),
        [9, 10, 98, 99, 100, 101],
    ),
    "warmup_piecewise_default_clock_from_step_0": (
        Warmup(1.0, 10, after=schedules.PiecewiseConstantDecay([49, 99], [1.0, 0.1, 0.01]), start_lr=0.25),
        lambda s: ref_warmup(s, 1.0, 10, 0.25, ref_piecewise([49, 99], [1.0, 0.1, 0.01])),
        [0, 9, 10, 49, 50, 99, 100],
    ),
    "warmup_cosine_default_clock_from_step_0": (
        Warmup(0.8, 50, after=schedules.CosineDecay(0.8, 200, alpha=0.1), start_lr=0.1),
        lambda s: ref_warmup(s, 0.8, 50, 0.1, ref_cosine(0.8, 200, 0.1)),
        [0, 49, 50, 51, 150, 199, 200, 201, 1000],
    ),
    "warmup_cosine": (
        Warmup(0.8, 50, after=schedules.CosineDecay(0.8, 200, alpha=0.1), start_lr=0.1, offset_after=True),
        lambda s: ref_warmup(s, 0.8, 50, 0.1, ref_cosine(0.8, 200, 0.1), offset=True),
        [0, 49, 50, 51, 150, 249, 250, 251, 1000],
    ),
    "warmup_polynomial": (
        Warmup(0.8, 50, after=schedules.PolynomialDecay(0.8, 100, 0.008, power=2.0), start_lr=0.1, offset_after=True),
        lambda s: ref_warmup(s, 0.8, 50, 0.1, ref_polynomial(0.8, 100, 0.008, 2.0), offset=True),
        [0, 49, 50, 51, 100, 149, 150, 151],
    ),
    "warmup_nested_warmup": (
        Warmup(1.0, 5, after=Warmup(2.0, 5, start_lr=1.0), start_lr=0.5, offset_after=True),
        lambda s: ref_warmup(s, 1.0, 5, 0.5, lambda t: ref_warmup(t, 2.0, 5, 1.0), offset=True),
        [0, 4, 5, 9, 10, 11],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_schedule_matches_reference_before_and_after_round_trip(case):
    schedule, reference, steps = CASES[case]
    assert_matches(schedule, reference, steps)


@pytest.mark.parametrize("case", CASES)
def test_schedule_values_evaluates_every_step_at_once(case):
    schedule, reference, steps = CASES[case]
    count = min(max(steps) + 1, 400)
    np.testing.assert_allclose(schedule_values(schedule, count), [reference(s) for s in range(count)], rtol=1e-5)


def test_warmup_first_step_is_never_zero_and_last_warmup_step_is_the_target():
    schedule = Warmup(3.2, 500)
    assert float(schedule(0)) == pytest.approx(3.2 / 500, rel=1e-6) and float(schedule(0)) > 0
    assert float(schedule(499)) == pytest.approx(3.2, rel=1e-7)


def test_warmup_lr_is_goyals_linear_ramp_on_floats_arrays_and_tensors():
    assert warmup_lr(0, 500, 0.1, 3.2) == pytest.approx(0.1 + 3.1 / 500, rel=1e-12)
    assert warmup_lr(499, 500, 0.1, 3.2) == pytest.approx(3.2, rel=1e-12)
    assert warmup_lr(4, 10, 0.0, 1.0) == pytest.approx(0.5, rel=1e-12)
    steps = np.arange(10)
    np.testing.assert_allclose(warmup_lr(steps, 10, 0.25, 1.0), 0.25 + 0.75 * (steps + 1) / 10, rtol=1e-12)
    tensor = warmup_lr(tf.range(10, dtype=tf.float32), 10, 0.25, 1.0)
    assert tensor.dtype == tf.float32
    np.testing.assert_allclose(tensor.numpy(), 0.25 + 0.75 * (steps + 1) / 10, rtol=1e-6)


def test_warmup_default_is_the_decay_clock_from_step_0():
    after = schedules.CosineDecay(1.0, 100)
    schedule = Warmup(1.0, 10, after=after, start_lr=0.1)
    assert schedule.offset_after is False and schedule.get_config()["offset_after"] is False
    assert SCHEDULE_KEYS["decay_clock"] == "from_step_0" and DECAY_CLOCKS == ("from_step_0", "after_warmup")
    np.testing.assert_array_equal(schedule_values(schedule, 120)[10:], schedule_values(after, 120)[10:])


# ---------------------------------------------------------------- build_schedule


def build(spec, **overrides):
    kwargs = dict(steps_per_epoch=10, base_lr=0.1, base_batch=256, global_batch=8192, total_epochs=20)
    kwargs.update(overrides)
    return build_schedule(spec, **kwargs)


def test_build_linear_warmup_starts_at_unscaled_lr_and_reaches_scaled_lr():
    schedule = build({"rule": "linear", "warmup_epochs": 2})
    assert isinstance(schedule, Warmup)
    assert float(schedule(0)) == pytest.approx(0.1 + 3.1 / 20, rel=1e-6)
    assert float(schedule(19)) == pytest.approx(3.2, rel=1e-6)
    assert float(schedule(20)) == pytest.approx(3.2, rel=1e-6)


def test_goyals_constant_warmup_holds_the_unscaled_lr_then_jumps_to_the_decay_clocked_from_step_0():
    # 10 steps an epoch, batch 32x the base: 2 epochs at 0.1, then the cosine of 3.2 over 20 epochs at step 20.
    schedule = build({"rule": "linear", "warmup_epochs": 2, "warmup_type": "constant", "decay": {"type": "cosine"}})
    values = schedule_values(schedule, 100)
    np.testing.assert_allclose(values[:20], 0.1, rtol=1e-6)
    assert values[20] == pytest.approx(3.2 * 0.5 * (1 + math.cos(math.pi * 20 / 200)), rel=1e-6)
    restored = Warmup.from_config(json.loads(json.dumps(schedule.get_config())))
    assert restored.warmup_type == "constant" and float(restored(19)) == pytest.approx(0.1, rel=1e-6)


def test_a_warmup_saved_before_warmup_type_existed_loads_as_gradual():
    config = Warmup(3.2, 20, start_lr=0.1).get_config()
    del config["warmup_type"]
    assert float(Warmup.from_config(config)(0)) == pytest.approx(0.1 + 3.1 / 20, rel=1e-6)


def test_build_without_warmup_or_decay_is_a_constant_scaled_lr():
    schedule = build({"rule": "sqrt"})
    assert isinstance(schedule, Constant)
    assert float(schedule(12345)) == pytest.approx(0.1 * math.sqrt(32), rel=1e-6)


def test_build_explicit_warmup_start():
    schedule = build({"rule": "linear", "warmup_epochs": 1, "warmup_start": 0.0})
    assert float(schedule(0)) == pytest.approx(3.2 / 10, rel=1e-6)


@pytest.mark.parametrize(
    "decay, reference, steps",
    [
        ({"type": "exponential", "rate": 0.5, "period_epochs": 2},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_exponential(3.2, 20, 0.5), offset=True), [0, 9, 10, 11, 30, 50]),
        ({"type": "exponential", "rate": 0.5, "period_epochs": 2, "staircase": True},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_exponential(3.2, 20, 0.5, True), offset=True), [10, 29, 30, 31, 49, 50]),
        ({"type": "step", "boundaries": [5, 10], "factor": 0.1},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_piecewise([49, 99], [3.2, 0.32, 0.032]), offset=True), [9, 10, 58, 59, 60, 109, 110]),
        ({"type": "step", "boundaries": [5], "multipliers": [1.0, 0.25]},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_piecewise([49], [3.2, 0.8]), offset=True), [59, 60]),
        ({"type": "cosine", "alpha": 0.01},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_cosine(3.2, 190, 0.01), offset=True), [0, 9, 10, 11, 104, 199, 200]),
        ({"type": "cosine", "decay_epochs": 5},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_cosine(3.2, 50), offset=True), [10, 35, 60, 61]),
        ({"type": "polynomial", "end_factor": 0.01, "power": 2.0},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_polynomial(3.2, 190, 0.032, 2.0), offset=True), [9, 10, 11, 100, 199, 200]),
    ],
    ids=["exponential", "exponential_staircase", "step_factor", "step_multipliers", "cosine_rest_of_training", "cosine_fixed", "polynomial"],
)
def test_build_every_decay_type_after_one_epoch_of_warmup_clocked_after_warmup(decay, reference, steps):
    schedule = build({"rule": "linear", "warmup_epochs": 1, "decay": decay, "decay_clock": "after_warmup"})
    assert_matches(schedule, reference, steps)


@pytest.mark.parametrize(
    "decay, reference, steps",
    [
        ({"type": "exponential", "rate": 0.5, "period_epochs": 2},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_exponential(3.2, 20, 0.5)), [0, 9, 10, 11, 30, 50]),
        ({"type": "exponential", "rate": 0.5, "period_epochs": 2, "staircase": True},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_exponential(3.2, 20, 0.5, True)), [10, 19, 20, 21, 39, 40]),
        ({"type": "step", "boundaries": [5, 10], "factor": 0.1},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_piecewise([49, 99], [3.2, 0.32, 0.032])), [9, 10, 48, 49, 50, 99, 100]),
        ({"type": "step", "boundaries": [5], "multipliers": [1.0, 0.25]},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_piecewise([49], [3.2, 0.8])), [49, 50]),
        ({"type": "cosine", "alpha": 0.01},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_cosine(3.2, 200, 0.01)), [0, 9, 10, 11, 100, 199, 200]),
        ({"type": "cosine", "decay_epochs": 5},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_cosine(3.2, 50)), [10, 25, 50, 51]),
        ({"type": "polynomial", "end_factor": 0.01, "power": 2.0},
         lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_polynomial(3.2, 200, 0.032, 2.0)), [9, 10, 11, 100, 199, 200]),
    ],
    ids=["exponential", "exponential_staircase", "step_factor", "step_multipliers", "cosine_rest_of_training", "cosine_fixed", "polynomial"],
)
def test_build_every_decay_type_after_one_epoch_of_warmup_clocked_from_step_0(decay, reference, steps):
    for spec in ({"rule": "linear", "warmup_epochs": 1, "decay": decay},
                 {"rule": "linear", "warmup_epochs": 1, "decay": decay, "decay_clock": "from_step_0"}):
        assert_matches(build(spec), reference, steps)


def test_build_step_boundary_applies_from_the_first_step_of_that_epoch():
    schedule = build({"rule": "none", "decay": {"type": "step", "boundaries": [3]}})
    assert float(schedule(29)) == pytest.approx(0.1) and float(schedule(30)) == pytest.approx(0.01)


def test_build_decay_clock_from_step_0_counts_from_step_zero():
    schedule = build({"rule": "linear", "warmup_epochs": 1, "decay_clock": "from_step_0", "decay": {"type": "cosine"}})
    assert_matches(schedule, lambda s: ref_warmup(s, 3.2, 10, 0.1, ref_cosine(3.2, 200), offset=False), [9, 10, 100, 200])


# ---------------------------------------------------------------- every registered decay

TOTAL_EPOCHS, STEPS_PER_EPOCH, WARMUP_EPOCHS = 20, 10, 2
HORIZON = TOTAL_EPOCHS * STEPS_PER_EPOCH + 15

# Values for the keys a decay requires; a decay registered with a new required key fails
# here with "lr.decay.<key> is required" until it gets an example.
REQUIRED_EXAMPLES = {"rate": 0.5, "boundaries": [2, 5, 12]}


def registered_decay(kind):
    _, defaults = DECAYS[kind]
    return {"type": kind, **{key: value for key, value in REQUIRED_EXAMPLES.items() if key in defaults}}


def key_steps(warmup_steps):
    """Steps around the end of warmup, every epoch boundary, and the end of training."""
    edges = {0, warmup_steps, *range(0, HORIZON, STEPS_PER_EPOCH)}
    return sorted({s + d for s in edges for d in (-1, 0, 1) if 0 <= s + d < HORIZON})


@pytest.mark.parametrize("clock", DECAY_CLOCKS)
@pytest.mark.parametrize("warmup_epochs", [0, WARMUP_EPOCHS])
@pytest.mark.parametrize("kind", DECAYS)
def test_every_registered_decay_builds_and_survives_a_round_trip(kind, warmup_epochs, clock):
    spec = {"rule": "linear", "warmup_epochs": warmup_epochs, "decay": registered_decay(kind), "decay_clock": clock}
    schedule = build(spec, steps_per_epoch=STEPS_PER_EPOCH, total_epochs=TOTAL_EPOCHS)
    warmup_steps = warmup_epochs * STEPS_PER_EPOCH
    assert isinstance(schedule, Warmup) == (warmup_epochs > 0)
    values = schedule_values(schedule, HORIZON)
    np.testing.assert_array_equal(schedule_values(round_trip(schedule), HORIZON), values)
    steps = key_steps(warmup_steps)
    for candidate in (schedule, round_trip(schedule)):
        got = [float(candidate(tf.constant(s, tf.int64))) for s in steps]
        # Eager and graph float32 differ in the last bits of cos near 0: atol covers values ~1e-7 x the peak.
        np.testing.assert_allclose(got, values[steps], rtol=1e-6, atol=1e-6, err_msg=type(candidate).__name__)
    if warmup_steps:
        np.testing.assert_allclose(values[:warmup_steps], warmup_lr(np.arange(warmup_steps), warmup_steps, 0.1, 3.2), rtol=1e-6)
    decayed = values[warmup_steps:]
    assert np.all(np.isfinite(values)) and np.all(values >= 0)
    assert np.all(np.diff(decayed) <= 1e-6 * decayed[:-1]), "a decay never raises the LR"
    if clock == "after_warmup" or warmup_epochs == 0:
        assert decayed[0] == pytest.approx(3.2, rel=1e-6)  # decays start from the scaled LR


@pytest.mark.parametrize("kind", DECAYS)
def test_decay_clock_from_step_0_makes_warmup_leave_the_decay_unchanged(kind):
    """Goyal et al. 2017: with and without warmup the LR is the same from the end of warmup on,
    so comparing the two measures warmup alone, not warmup plus steps at the peak LR."""
    spec = {"rule": "linear", "decay": registered_decay(kind)}
    without = schedule_values(build({**spec, "warmup_epochs": 0}), HORIZON)
    warmed = schedule_values(build({**spec, "warmup_epochs": WARMUP_EPOCHS}), HORIZON)
    warmup_steps = WARMUP_EPOCHS * STEPS_PER_EPOCH
    np.testing.assert_array_equal(warmed[warmup_steps:], without[warmup_steps:])
    np.testing.assert_allclose(warmed[:warmup_steps], warmup_lr(np.arange(warmup_steps), warmup_steps, 0.1, 3.2), rtol=1e-6)


@pytest.mark.parametrize("kind", DECAYS)
def test_decay_clock_after_warmup_shifts_the_whole_decay_by_the_warmup(kind):
    spec = {"rule": "linear", "decay": registered_decay(kind), "decay_clock": "after_warmup"}
    warmup_steps = WARMUP_EPOCHS * STEPS_PER_EPOCH
    # The decay of the remaining TOTAL - WARMUP epochs, started at the end of warmup.
    without = schedule_values(build({**spec, "warmup_epochs": 0}, total_epochs=TOTAL_EPOCHS - WARMUP_EPOCHS), HORIZON)
    warmed = schedule_values(build({**spec, "warmup_epochs": WARMUP_EPOCHS}), HORIZON + warmup_steps)
    np.testing.assert_array_equal(warmed[warmup_steps:], without)


# The two decays by hand, over 20 epochs of 10 steps: (decay, reference clocked from step 0,
# reference of the decay started after 2 epochs of warmup).
HAND_REFERENCES = {
    "cosine": ({"type": "cosine"}, ref_cosine(3.2, 200), ref_cosine(3.2, 180)),
    "step": ({"type": "step", "boundaries": [5, 10]}, ref_piecewise([49, 99], [3.2, 0.32, 0.032]),
             ref_piecewise([49, 99], [3.2, 0.32, 0.032])),
}


@pytest.mark.parametrize("name", HAND_REFERENCES)
def test_cosine_and_step_decay_with_and_without_warmup_against_numpy_at_every_step(name):
    decay, from_step_0, after_warmup = HAND_REFERENCES[name]
    warmup_steps = WARMUP_EPOCHS * STEPS_PER_EPOCH
    steps = np.arange(HORIZON)
    warmup = warmup_lr(steps[:warmup_steps], warmup_steps, 0.1, 3.2)
    without = schedule_values(build({"rule": "linear", "decay": decay}), HORIZON)
    warmed = schedule_values(build({"rule": "linear", "decay": decay, "warmup_epochs": WARMUP_EPOCHS}), HORIZON)
    # float32 against a float64 reference: atol covers the last bits near the end of a cosine.
    np.testing.assert_allclose(without, [from_step_0(s) for s in steps], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(warmed[warmup_steps:], without[warmup_steps:])
    np.testing.assert_allclose(warmed[:warmup_steps], warmup, rtol=1e-6)
    shifted = schedule_values(build({"rule": "linear", "decay": decay, "warmup_epochs": WARMUP_EPOCHS,
                                     "decay_clock": "after_warmup"}), HORIZON)
    np.testing.assert_allclose(shifted[:warmup_steps], warmup, rtol=1e-6)
    np.testing.assert_allclose(shifted[warmup_steps:], [after_warmup(s) for s in steps[: HORIZON - warmup_steps]], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "spec, overrides, message",
    [
        ({"rule": "cubic"}, {}, r"lr.rule must be one of 'linear', 'sqrt', 'none' or a float exponent, got 'cubic'"),
        ({"rul": "linear"}, {}, r"lr: unknown key 'rul' \(allowed: rule, warmup_epochs, warmup_start, warmup_type, decay, decay_clock\)"),
        ({"offset_decay": True}, {}, r"lr: unknown key 'offset_decay' \(allowed: rule, warmup_epochs, warmup_start, warmup_type, decay, decay_clock\)"),
        ({"decay_clock": "offset"}, {}, r"lr.decay_clock must be one of 'from_step_0', 'after_warmup', got 'offset'"),
        ({"decay_clock": True}, {}, r"lr.decay_clock must be one of 'from_step_0', 'after_warmup', got True"),
        ({"warmup_epochs": -1}, {}, r"lr.warmup_epochs must be a non-negative number, got -1"),
        ({"warmup_epochs": 1, "warmup_start": 5.0}, {}, r"lr.warmup_start must be a number in \[0, 3.2\]"),
        ({"decay": {"type": "cosin"}}, {}, r"lr.decay.type: unknown decay 'cosin' \(allowed: none, exponential, step, cosine, polynomial\)"),
        ({"decay": {"type": "exponential"}}, {}, r"lr.decay.rate is required"),
        ({"decay": {"type": "exponential", "rate": 0.5, "every": 2}}, {}, r"lr.decay: unknown key 'every' \(allowed: rate, period_epochs, staircase\)"),
        ({"decay": {"type": "step", "boundaries": [10, 5]}}, {}, r"lr.decay.boundaries must be strictly increasing"),
        ({"decay": {"type": "step", "boundaries": [5], "multipliers": [1.0]}}, {}, r"lr.decay.multipliers must be a list of len\(boundaries\) \+ 1 = 2"),
        ({"decay": {"type": "cosine"}}, {"total_epochs": None}, r"lr.decay.decay_epochs is required"),
        ({"warmup_epochs": 20, "decay": {"type": "cosine"}, "decay_clock": "after_warmup"}, {},
         r"lr.decay: no epochs are left to decay over after warmup \(0\)"),
        ({"decay": {"type": "cosine", "alpha": 2}}, {}, r"lr.decay.alpha must be a number in \[0, 1\], got 2"),
        ({"decay": {"type": "polynomial", "power": 0}}, {}, r"lr.decay.power must be a positive number, got 0"),
        ({"decay": "cosine"}, {}, r"lr.decay must be a mapping, got str"),
        ({}, {"base_lr": 0}, r"base_lr must be a positive number, got 0"),
        ({"warmup_epochs": 1, "warmup_type": "linear"}, {}, r"lr.warmup_type must be one of gradual, constant, got 'linear'"),
    ],
)
def test_bad_specs_name_the_field(spec, overrides, message):
    with pytest.raises(ValueError, match=message):
        build(spec, **overrides)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: Warmup(0.0, 10), r"target_lr must be a positive number, got 0.0"),
        (lambda: Warmup(1.0, -1), r"warmup_steps must be a non-negative integer, got -1"),
        (lambda: Warmup(1.0, 10, start_lr=0.1, scaling_factor=2), r"give start_lr or scaling_factor, not both"),
        (lambda: Warmup(1.0, 10, after=lambda s: 1.0), r"after must be a LearningRateSchedule or None, got function"),
        (lambda: Warmup(1.0, 10, start_lr=2.0), r"start_lr must be a number in \[0, target_lr=1.0\]"),
    ],
)
def test_bad_warmup_arguments(call, message):
    with pytest.raises(ScheduleError, match=message):
        call()


def test_numpy_scalars_are_numbers_and_configs_hold_plain_python_numbers():
    from_numpy = Warmup(np.float32(0.5), np.int64(4), start_lr=np.float32(0.25), after=ConstantLearningRate(np.float64(0.5)))
    from_float = Warmup(float(np.float32(0.5)), 4, start_lr=float(np.float32(0.25)), after=ConstantLearningRate(0.5))
    assert from_numpy.get_config() == from_float.get_config()
    assert json.loads(json.dumps(from_numpy.get_config())) == from_float.get_config()
    assert type(from_numpy.target_lr) is float and type(from_numpy.warmup_steps) is int
    assert Warmup(1.0, 4, scaling_factor=np.float32(4)).start_lr == 0.25
    np.testing.assert_array_equal(schedule_values(from_numpy, 6), schedule_values(from_float, 6))
    with pytest.raises(ScheduleError, match=r"target_lr must be a positive number, got "):
        Warmup(np.float32(-1), 4)


def test_constant_is_the_constant_learning_rate_schedule():
    """Renamed so its class name, which H5 files store, is not Keras's Constant initializer's."""
    assert Constant is ConstantLearningRate
    assert isinstance(build({}), ConstantLearningRate)


def test_warmup_reaches_the_peak_one_step_before_kerass_cosine_decay_warmup():
    """Keras's CosineDecay(initial, decay_steps, warmup_target=peak, warmup_steps=W) ramps
    ``initial + (peak - initial) * s / W`` and reaches the peak at step W, then decays for
    decay_steps more; lbtrain's Warmup adds Goyal et al.'s ``+ 1``, reaching the peak at step
    W - 1: equal to Keras's one step later during warmup, and the same from step W on."""
    keras = schedules.CosineDecay(0.1, 20, alpha=0.1, warmup_target=0.8, warmup_steps=5)
    ours = Warmup(0.8, 5, start_lr=0.1, after=schedules.CosineDecay(0.8, 20, alpha=0.1), offset_after=True)
    keras_values, our_values = schedule_values(keras, 31), schedule_values(ours, 31)
    np.testing.assert_allclose(our_values[:5], keras_values[1:6], rtol=1e-6)
    np.testing.assert_allclose(our_values[5:], keras_values[5:], rtol=1e-6)
    np.testing.assert_allclose([our_values[4], keras_values[4], keras_values[5]], [0.8, 0.1 + 0.7 * 4 / 5, 0.8], rtol=1e-6)


# ---------------------------------------------------------------- Horovod (saved models: tests/test_saving.py)


@pytest.mark.horovod
def test_horovod_distributed_optimizer_rebuild_keeps_the_schedule():
    """hvd.DistributedOptimizer rebuilds the optimizer with from_config(get_config()) (the
    failure of horovod issue 2386 with custom schedules)."""
    import horovod.tensorflow.keras as hvd

    hvd.init()
    schedule = build({"rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}})
    wrapped = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(schedule, momentum=0.9))
    rebuilt = wrapped._learning_rate
    assert isinstance(rebuilt, Warmup) and isinstance(rebuilt.after, schedules.CosineDecay)
    np.testing.assert_allclose(schedule_values(rebuilt, 200), schedule_values(schedule, 200), rtol=1e-7)
