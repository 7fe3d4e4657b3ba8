import json

import numpy as np
import pytest
import tensorflow as tf

from helpers import JOB_FOLDER, constant_output_problem, run_python, shared_horovod_job
from lbtrain._keras import applied_learning_rate, optimizer_step
from lbtrain.callbacks import GradientNoiseScale, LearningRateLogger, LearningRateWarmup
from lbtrain.models import build_model
from lbtrain.schedules import Warmup
from lbtrain.worlds.base import World
from lbtrain.worlds.simulated import SimulatedWorld


def fit_with(learning_rate, callbacks, *, epochs=2, samples=24, batch=8):
    model = build_model("mlp", (4,), 3, widths=[5], seed=0)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate, momentum=0.9),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    return model.fit(rng.standard_normal((samples, 4)), rng.integers(0, 3, samples), batch_size=batch,
                     epochs=epochs, verbose=0, callbacks=callbacks)


def test_logger_records_the_schedule_value_applied_at_every_step():
    schedule = Warmup(1.0, 4, start_lr=0.2)
    logger = LearningRateLogger()
    history = fit_with(schedule, [logger])
    assert logger.steps == [0, 1, 2, 3, 4, 5]
    np.testing.assert_allclose(logger.rates, [0.4, 0.6, 0.8, 1.0, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(history.history["lr"], [0.8, 1.0], rtol=1e-6)


class _RateAtEachStep(tf.keras.callbacks.Callback):
    """The optimizer's step and the rate it applied, read after every step (as the logger did
    before it deferred a schedule's rates)."""

    def __init__(self):
        super().__init__()
        self.steps, self.rates = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append(optimizer_step(self.model.optimizer) - 1)
        self.rates.append(applied_learning_rate(self.model.optimizer))


@pytest.mark.parametrize("steps_per_execution", [1, 3])
def test_a_schedules_rates_evaluated_at_the_epochs_end_equal_the_rates_read_after_each_step(steps_per_execution):
    """The logger counts the steps and evaluates the schedule after the epoch; the values are
    exactly those read from the optimizer after each step, also when Keras runs 3 steps a call."""
    schedule = tf.keras.optimizers.schedules.CosineDecay(0.5, 9, warmup_target=1.0, warmup_steps=3)
    logger, reference = LearningRateLogger(), _RateAtEachStep()
    model = build_model("mlp", (4,), 3, widths=[5], seed=0)
    model.compile(optimizer=tf.keras.optimizers.SGD(schedule), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution)
    rng = np.random.default_rng(0)
    history = model.fit(rng.standard_normal((24, 4)), rng.integers(0, 3, 24), batch_size=4, epochs=2, verbose=0,
                        callbacks=[logger, reference])
    assert logger.steps == reference.steps == list(range(steps_per_execution - 1, 12, steps_per_execution))
    assert logger.rates == reference.rates and len(set(logger.rates)) == len(logger.rates)
    assert history.history["lr"] == [logger.rates[len(logger.rates) // 2 - 1], logger.rates[-1]]


class _SetByTheStep(tf.keras.optimizers.schedules.LearningRateSchedule):
    """A rate a callback changes between steps (as an elastic world's reset does)."""

    changes_within_fit = True

    def __init__(self):
        self.value = tf.Variable(0.1)

    def __call__(self, step):
        return self.value * 1.0


class _Doubling(tf.keras.callbacks.Callback):
    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_train_batch_end(self, batch, logs=None):
        self.schedule.value.assign(self.schedule.value * 2)


def test_a_schedule_that_changes_within_fit_is_read_after_each_step():
    schedule = _SetByTheStep()
    logger = LearningRateLogger()
    fit_with(schedule, [logger, _Doubling(schedule)], epochs=1)
    np.testing.assert_allclose(logger.rates, [0.1, 0.2, 0.4], rtol=1e-6)


def test_warmup_callback_sets_the_horovod_formula_each_batch_then_stops():
    warmup = LearningRateWarmup(0.8, warmup_epochs=1, world_size=4)
    logger = LearningRateLogger()
    fit_with(0.8, [warmup, logger], epochs=2)
    # e = epoch + (batch + 1) / 3; lr = 0.8 / 4 * (e * 3 / 1 + 1)
    expected_warmup = [0.2 * ((b + 1) / 3 * 3 + 1) for b in range(3)]
    np.testing.assert_allclose(logger.rates, expected_warmup + [0.8] * 3, rtol=1e-6)
    assert warmup.steps_per_epoch == 3


def test_warmup_callback_reaches_the_target_with_steps_per_execution():
    """2 warmup epochs of 5 steps, Keras running 5 steps per call: the batch hooks come once an
    epoch, and the rate must still be the target after warmup (it stayed at 0.28)."""
    warmup = LearningRateWarmup(0.4, warmup_epochs=2, world_size=4)
    model = build_model("mlp", (4,), 3, widths=[5], seed=0)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.4), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=5)
    rng = np.random.default_rng(0)
    model.fit(rng.standard_normal((40, 4)), rng.integers(0, 3, 40), batch_size=8, epochs=4, verbose=0, callbacks=[warmup])
    assert float(tf.keras.backend.get_value(model.optimizer.learning_rate)) == pytest.approx(0.4)


def test_warmup_callback_with_a_fractional_warmup_stops_at_the_target():
    """1.5 warmup epochs of 3 steps are round(4.5) = 4 steps (as the schedules count them): the
    rate ramps from 0.1 to 0.4 in 4 steps and stays there (it climbed past 0.4 through the rest
    of the second epoch)."""
    warmup, rates = LearningRateWarmup(0.4, warmup_epochs=1.5, world_size=4), _RateAtEachStep()
    fit_with(0.4, [warmup, rates], epochs=3)
    assert warmup.warmup_steps == 4
    np.testing.assert_allclose(rates.rates, [0.175, 0.25, 0.325, 0.4] + [0.4] * 5, rtol=1e-6)


def test_warmup_callback_leaves_a_rate_set_after_warmup_alone():
    """A scheduler that sets the rate at each epoch's start keeps it once warmup is over (the
    last warmup step set the target itself, nothing is forced afterwards)."""
    warmup, rates = LearningRateWarmup(0.8, warmup_epochs=1, world_size=4), _RateAtEachStep()
    halve = tf.keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr if epoch == 0 else 0.8 / 2 ** epoch)
    fit_with(0.8, [halve, warmup, rates], epochs=3)
    np.testing.assert_allclose(rates.rates, [0.4, 0.6, 0.8, 0.4, 0.4, 0.4, 0.2, 0.2, 0.2], rtol=1e-6)


def test_warmup_callback_takes_horovods_signature_and_writes_lr_into_the_logs(capsys):
    """``LearningRateWarmup(initial_lr=..., warmup_epochs=3, verbose=1)`` as Horovod's callback is
    called; ``warmup_epochs`` defaults to Horovod's 5; each epoch's logs carry ``lr``; verbose=1
    prints Horovod's line once, after the last warmup epoch (tests/horovod_jobs/warmup_vs_horovod.py
    compares it with Horovod's own)."""
    assert LearningRateWarmup(0.4, world_size=2).warmup_epochs == 5
    warmup = LearningRateWarmup(initial_lr=0.8, warmup_epochs=1, world_size=4, verbose=1, momentum_correction=False)
    history = fit_with(0.8, [warmup], epochs=3)
    np.testing.assert_allclose(history.history["lr"], [0.8, 0.8, 0.8], rtol=1e-6)
    assert capsys.readouterr().out == "\nEpoch 1: finished gradual learning rate warmup to 0.8.\n"
    with pytest.raises(ValueError, match=r"applies no momentum correction .*pass momentum_correction=False"):
        LearningRateWarmup(0.4, 3, world_size=2, momentum_correction=True)
    with pytest.raises(ValueError, match=r"got True \(Horovod's third argument is momentum_correction: pass it by keyword\)"):
        LearningRateWarmup(0.4, 3, True)


@pytest.mark.parametrize(("warmup_epochs", "epochs", "verbose", "printed"), [
    (2, 2, 1, "\nEpoch 2: finished gradual learning rate warmup to 0.4.\n"),  # fit ends at the warmup's end
    (1.5, 3, 1, "\nEpoch 2: finished gradual learning rate warmup to 0.4.\n"),  # 4 steps, 3 an epoch: ends in the second
    (2, 1, 1, ""),  # fit ends before the warmup does
    (1, 2, 0, ""),
])
def test_warmup_callback_verbose_prints_at_the_end_of_the_epoch_warmup_ends_in(warmup_epochs, epochs, verbose, printed, capsys):
    fit_with(0.4, [LearningRateWarmup(0.4, warmup_epochs, world_size=4, verbose=verbose)], epochs=epochs)
    assert capsys.readouterr().out == printed


def test_warmup_callback_rejects_bad_arguments():
    with pytest.raises(ValueError, match="world_size must be a positive integer, got 0"):
        LearningRateWarmup(0.1, 1, world_size=0)
    with pytest.raises(ValueError, match="warmup_epochs must be positive"):
        LearningRateWarmup(0.1, 0, world_size=2)


@pytest.mark.parametrize("schedule", [Warmup(0.8, 3), tf.keras.optimizers.schedules.ExponentialDecay(0.8, 10, 0.5)],
                         ids=["lbtrain", "keras"])
def test_warmup_callback_refuses_a_schedule_before_the_first_step(schedule):
    """Keras re-evaluates a schedule every step: the callback's rate would be overwritten."""
    warmup = LearningRateWarmup(0.8, warmup_epochs=1, world_size=4)
    logger = LearningRateLogger()
    with pytest.raises(ValueError, match=r"the optimizer's is a LearningRateSchedule.*lbtrain\.schedules\.Warmup"):
        fit_with(schedule, [warmup, logger])
    assert logger.steps == []


@pytest.mark.horovod
def test_warmup_callback_world_size_is_hvd_size_once_horovod_is_initialized():
    """In a fresh process: without Horovod, and with Horovod imported but not initialized,
    world_size is required; after hvd.init() it is hvd.size() (1 here; 2 under horovodrun in
    tests/horovod_jobs/warmup_vs_horovod.py)."""
    code = (
        "import lbtrain\n"
        "def world_size():\n"
        "    try:\n"
        "        return lbtrain.LearningRateWarmup(0.4, 2).world_size\n"
        "    except ValueError as error:\n"
        "        return str(error)\n"
        "print(world_size())\n"
        "import horovod.tensorflow.keras as hvd\n"
        "print(world_size())\n"
        "hvd.init()\n"
        "print(world_size(), hvd.size())\n"
    )
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-2000:]
    required = ("LearningRateWarmup: pass world_size (the number of workers initial_lr was scaled for); "
                "it defaults to hvd.size() only once hvd.init() has been called")
    assert completed.stdout.splitlines() == [required, required, "1 1"]


# Run in the session's shared horovodrun job (conftest: horovod_jobs).
WARMUP_VS_HOROVOD = shared_horovod_job("test_callbacks:warmup", "warmup_vs_horovod.py", f"{JOB_FOLDER}/rates.json")


@pytest.mark.slow
@pytest.mark.horovod
def test_warmup_equals_horovods_callback_step_by_step_under_horovodrun(horovod_jobs):
    rates = json.loads((horovod_jobs(WARMUP_VS_HOROVOD) / "rates.json").read_text())
    assert rates["size"] == 2
    horovod, ours = rates["horovod"], rates["lbtrain"]
    assert ours["steps"] == horovod["steps"] == list(range(12))
    np.testing.assert_allclose(ours["rates"], horovod["rates"], rtol=1e-7)
    np.testing.assert_allclose(ours["epoch_lr"], horovod["epoch_lr"], rtol=1e-7)
    # Starts just above the unscaled LR and reaches the scaled one at the end of warmup.
    assert ours["rates"][0] == pytest.approx(0.2 * (0.25 / 2 + 1), rel=1e-6)
    assert ours["rates"][7] == pytest.approx(0.4, rel=1e-6)
    # verbose=1: Horovod's line, at the same epoch, on rank 0 only; also when fit ends at the warmup's end.
    line = "\nEpoch 2: finished gradual learning rate warmup to 0.4.\n"
    assert ours["printed"] == horovod["printed"] == [line, ""]
    assert rates["ends_at_warmup"]["lbtrain"] == rates["ends_at_warmup"]["horovod"] == [line, ""]


# ---------------------------------------------------------------- trainer callbacks

from lbtrain.callbacks import DivergenceGuard, GeneralizationGap, Throughput  # noqa: E402


def drive(guard, epochs):
    """Calls ``guard`` as fit would for ``epochs`` = [[step losses], ...]: Keras logs the running
    mean of the epoch's step losses after each batch. Returns the model."""
    model = tf.keras.Sequential()
    model.stop_training = False
    guard.set_model(model)
    for epoch, losses in enumerate(epochs):
        guard.on_epoch_begin(epoch)
        means = np.cumsum(losses) / np.arange(1, len(losses) + 1)
        for step, mean in enumerate(means):
            guard.on_train_batch_end(step, {"loss": float(mean)})
            if model.stop_training:
                return model
        guard.on_epoch_end(epoch, {"loss": float(means[-1])})
        if model.stop_training:
            return model
    return model


class OtherRank(World):
    """This process as rank 0 of two, the other rank's contribution to every mean given:
    enough of a world for the guard's collectives, without launching a second process."""

    def __init__(self, other_rank_value):
        self.size, self.rank, self.local_rank = 2, 0, 0
        self.other = other_rank_value

    def input_shard(self):
        return 0, 2

    def process_batch(self, per_worker_batch):
        return per_worker_batch

    def allreduce_mean(self, value):
        value = np.asarray(value, dtype=np.float64)
        return (value + np.asarray(self.other(value), dtype=np.float64)) / 2


def test_divergence_guard_stops_at_the_first_nan_step():
    guard = DivergenceGuard(factor=10)
    model = drive(guard, [[1.0, 0.9], [0.8, float("nan"), 0.5]])
    assert model.stop_training and guard.reason == "loss became nan at epoch 2, step 2"


def test_divergence_guard_compares_each_step_with_the_step_0_loss():
    # Epoch 2's mean (5.0) stays under 3 x 2.0; its second step (7.0) does not.
    guard = DivergenceGuard(factor=3)
    model = drive(guard, [[2.0, 1.0], [3.0, 7.0], [1.0]])
    assert model.stop_training and guard.initial_loss == pytest.approx(2.0)
    assert guard.reason == "loss 7 exceeds 3 x the step-0 loss 2 at epoch 2, step 2"


def test_divergence_guard_catches_a_blow_up_inside_the_first_epoch_that_settles():
    # goyal_scaling's linear w32 seed 1: 4e23 in epoch 1, back to chance (2.30) by its end.
    guard = DivergenceGuard(factor=10)
    model = drive(guard, [[2.31, 4e23, 2.30, 2.30]])
    assert model.stop_training and guard.reason.startswith("loss 4e+23 exceeds 10 x the step-0 loss 2.31 at epoch 1, step 2")


def test_a_resumed_guard_keeps_the_recorded_step_0_loss():
    guard = DivergenceGuard(factor=3, initial_loss=2.0)
    assert drive(guard, [[6.5]]).stop_training and guard.reason.startswith("loss 6.5 exceeds 3 x the step-0 loss 2")


def test_divergence_guard_keeps_healthy_runs_going():
    guard = DivergenceGuard(factor=3)
    assert not drive(guard, [[2.0, 1.5], [1.2], [1.0]]).stop_training and guard.reason is None


def test_generalization_gap_and_throughput_in_a_real_fit():
    history = fit_with(0.1, [Throughput(global_batch=8), GeneralizationGap()], epochs=2).history
    assert "gap_accuracy" not in history  # no validation data: nothing to compare with
    model = build_model("mlp", (4,), 3, widths=[5], seed=0)
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((24, 4)), rng.integers(0, 3, 24)
    logs = model.fit(x, y, batch_size=8, epochs=2, verbose=0, validation_data=(x[:8], y[:8]),
                     callbacks=[Throughput(global_batch=8), GeneralizationGap()]).history
    np.testing.assert_allclose(logs["gap_accuracy"], np.subtract(logs["accuracy"], logs["val_accuracy"]), atol=1e-7)
    np.testing.assert_allclose(logs["gap_loss"], np.subtract(logs["val_loss"], logs["loss"]), atol=1e-7)
    assert all(value > 0 and np.isfinite(value) for value in logs["samples_per_second"])


def test_across_processes_the_step_0_loss_is_rank_averaged_and_every_rank_stops_at_epoch_end():
    # The other rank's step-0 loss is 3.0: the reference is (2.0 + 3.0) / 2.
    guard = DivergenceGuard(factor=10, world=OtherRank(lambda value: np.full_like(value, 3.0)))
    guard.set_model(tf.keras.Sequential())
    guard.model.stop_training = False
    guard.on_epoch_begin(0)
    guard.on_train_batch_end(0, {"loss": 2.0})
    assert guard.initial_loss == pytest.approx(2.5)
    # A local blow-up mid-epoch does not stop this rank alone (the other would wait in an allreduce) ...
    guard.on_train_batch_end(1, {"loss": (2.0 + 40.0) / 2})
    assert not guard.model.stop_training and guard.reason is None
    # ... the collective at the epoch's end does, with the local reason.
    guard.on_epoch_end(0, {"loss": 21.0})
    assert guard.model.stop_training and guard.reason == "loss 40 exceeds 10 x the step-0 loss 2.5 at epoch 1, step 2"


def test_across_processes_a_rank_stops_when_another_rank_diverged():
    # Every mean of the other rank: its step-0 loss 2.0, then its divergence flag 1.
    other = iter([2.0, 1.0])
    guard = DivergenceGuard(factor=10, world=OtherRank(lambda value: np.full_like(value, next(other))))
    model = drive(guard, [[2.0, 1.5, 1.2], [1.0]])
    assert model.stop_training and guard.reason == "another rank diverged in epoch 1"


@pytest.mark.parametrize("world_size, per_worker_batch", [(4, 16), (1, 32)])
def test_noise_scale_matches_a_known_gradient_covariance(world_size, per_worker_batch):
    world = SimulatedWorld(world_size)
    model, inputs, targets, true_scale = constant_output_problem()
    noise = GradientNoiseScale(inputs, targets, world, per_worker_batch, every=1, decay=0.99)
    history = model.fit(inputs, targets, batch_size=world_size * per_worker_batch, epochs=1, steps_per_epoch=300,
                        verbose=0, callbacks=[noise])
    assert len(noise.measurements) == 300
    assert true_scale == pytest.approx(32, rel=0.05)  # tr(Cov t) ~ 128, |w - mean t|^2 = 4
    assert history.history["noise_scale"][0] == pytest.approx(true_scale, rel=0.10)
    assert (noise.small_batch, noise.big_batch) == ((16, 64) if world_size == 4 else (4, 32))


def test_noise_scale_leaves_batch_norm_statistics_and_weights_untouched():
    world = SimulatedWorld(2)
    model = build_model("mlp", (4,), 3, widths=[8], batch_norm=True, seed=0)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.0), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((64, 4)).astype(np.float32), rng.integers(0, 3, 64)
    before = [w.copy() for w in model.get_weights()]
    noise = GradientNoiseScale(x, y, world, 8, every=1)
    noise.set_model(model)
    trace, norm_sq = noise.measure(0)
    assert np.isfinite(trace) and norm_sq != 0
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_noise_scale_rejects_bad_arguments():
    with pytest.raises(ValueError, match="every must be a positive integer"):
        GradientNoiseScale(np.zeros((8, 1)), np.zeros(8), SimulatedWorld(2), 4, every=0)
    with pytest.raises(ValueError, match="decay must be in"):
        GradientNoiseScale(np.zeros((8, 1)), np.zeros(8), SimulatedWorld(2), 4, decay=1.0)


def test_noise_scale_logs_nan_in_epochs_before_its_first_measurement():
    world = SimulatedWorld(2)
    model, inputs, targets, _ = constant_output_problem(dimension=4, samples=64)
    noise = GradientNoiseScale(inputs, targets, world, 8, every=6)
    history = model.fit(inputs, targets, batch_size=16, epochs=2, verbose=0, callbacks=[noise])
    assert np.isnan(history.history["noise_scale"][0]) and np.isfinite(history.history["noise_scale"][1])
    assert np.isnan(history.history["noise_scale_undetermined"][0]) and history.history["noise_scale_undetermined"][1] == 0.0
    assert [step for step, _, _ in noise.measurements] == [6]


def test_noise_scale_is_undetermined_not_negative_where_the_gradient_norm_estimate_is_not_positive():
    """At w = mean of the targets the true |G|^2 is 0: its unbiased two-batch estimate is noise
    around 0 (with seed 2, negative in both epochs) while tr(Sigma) stays 128 * 4 / 128^2."""
    world = SimulatedWorld(4)
    model, inputs, targets, _ = constant_output_problem(samples=2000, distance_sq=0.0)
    noise = GradientNoiseScale(inputs, targets, world, 16, every=1, seed=2)
    history = model.fit(inputs, targets, batch_size=64, epochs=2, steps_per_epoch=5, verbose=0, callbacks=[noise]).history
    assert history["noise_trace"] == pytest.approx([0.03125, 0.03125], rel=0.05)
    assert all(-2e-3 * trace < norm_sq <= 0 for trace, norm_sq in zip(history["noise_trace"], history["gradient_norm_sq"]))
    assert np.isnan(history["noise_scale"]).all() and history["noise_scale_undetermined"] == [1.0, 1.0]
