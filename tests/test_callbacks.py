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
