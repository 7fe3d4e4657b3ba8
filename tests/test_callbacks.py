import json

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_horovod
from lbtrain.callbacks import LearningRateLogger, LearningRateWarmup
from lbtrain.models import build_model
from lbtrain.schedules import Warmup


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


def test_warmup_callback_sets_the_horovod_formula_each_batch_then_stops():
    warmup = LearningRateWarmup(0.8, warmup_epochs=1, world_size=4)
    logger = LearningRateLogger()
    fit_with(0.8, [warmup, logger], epochs=2)
    # e = epoch + (batch + 1) / 3; lr = 0.8 / 4 * (e * 3 / 1 + 1)
    expected_warmup = [0.2 * ((b + 1) / 3 * 3 + 1) for b in range(3)]
    np.testing.assert_allclose(logger.rates, expected_warmup + [0.8] * 3, rtol=1e-6)
    assert warmup.steps_per_epoch == 3


def test_warmup_callback_rejects_bad_arguments():
    with pytest.raises(ValueError, match="world_size must be a positive integer, got 0"):
        LearningRateWarmup(0.1, 1, world_size=0)
    with pytest.raises(ValueError, match="warmup_epochs must be positive"):
        LearningRateWarmup(0.1, 0, world_size=2)


@pytest.mark.slow
def test_warmup_equals_horovods_callback_step_by_step_under_horovodrun(tmp_path):
    out = tmp_path / "rates.json"
    result = run_horovod("warmup_vs_horovod.py", str(out))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    rates = json.loads(out.read_text())
    assert rates["size"] == 2
    horovod, ours = rates["horovod"], rates["lbtrain"]
    assert ours["steps"] == horovod["steps"] == list(range(12))
    np.testing.assert_allclose(ours["rates"], horovod["rates"], rtol=1e-7)
    np.testing.assert_allclose(ours["epoch_lr"], horovod["epoch_lr"], rtol=1e-7)
    # Starts just above the unscaled LR and reaches the scaled one at the end of warmup.
    assert ours["rates"][0] == pytest.approx(0.2 * (0.25 / 2 + 1), rel=1e-6)
    assert ours["rates"][7] == pytest.approx(0.4, rel=1e-6)


# ---------------------------------------------------------------- trainer callbacks

from lbtrain.callbacks import DivergenceGuard, GeneralizationGap, Throughput  # noqa: E402




def drive(guard, epochs):
    """Calls ``guard`` as fit would for ``epochs`` = [[step losses], ...]; returns the model."""
    model = tf.keras.Sequential()
    model.stop_training = False
    guard.set_model(model)
    for epoch, losses in enumerate(epochs):
        guard.on_epoch_begin(epoch)
        for step, loss in enumerate(losses):
            guard.on_train_batch_end(step, {"loss": loss})
            if model.stop_training:
                return model
        guard.on_epoch_end(epoch, {"loss": losses[-1]})
        if model.stop_training:
            return model
    return model


def test_divergence_guard_stops_at_the_first_nan_step():
    guard = DivergenceGuard(factor=10)
    model = drive(guard, [[1.0, 0.9], [0.8, float("nan"), 0.5]])
    assert model.stop_training and guard.reason == "loss became nan at epoch 2, step 2"


def test_divergence_guard_stops_when_an_epoch_loss_exceeds_factor_times_the_first():
    guard = DivergenceGuard(factor=3)
    model = drive(guard, [[2.0], [5.9], [6.1], [1.0]])
    assert model.stop_training
    assert guard.reason == "loss 6.1 at epoch 3 exceeds 3 x the first epoch's 2"


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


def test_divergence_guard_across_processes_decides_at_epoch_end_only():
    guard = DivergenceGuard(factor=10, every_step=False)
    model = drive(guard, [[1.0, float("nan"), 2.0], [float("inf")]])
    assert model.stop_training and guard.reason == "loss became inf in epoch 2"
