import pytest

from lbtrain.analysis.scaling_laws import critical_batch, reachable_target, steps_to_target

HISTORY = [{"epoch": 1, "val_accuracy": 0.70}, {"epoch": 2, "val_accuracy": 0.80}, {"epoch": 3, "val_accuracy": 0.85}]


def test_steps_to_target_interpolates_between_epoch_ends():
    assert steps_to_target(HISTORY, 100, 0.75) == pytest.approx(150)
    assert steps_to_target(HISTORY, 100, 0.85) == pytest.approx(300)
    assert steps_to_target(HISTORY, 100, 0.60) == 100  # reached by the first epoch's end
    assert steps_to_target(HISTORY, 100, 0.90) is None
    assert steps_to_target(HISTORY, 100, 0.75, metric="accuracy") is None


def test_steps_to_target_skips_missing_and_nan_epochs():
    history = [{"epoch": 1, "val_accuracy": float("nan")}, {"epoch": 2, "val_accuracy": 0.5}, {"epoch": 3}, {"epoch": 4, "val_accuracy": 0.9}]
    assert steps_to_target(history, 10, 0.7) == pytest.approx(30)


def test_reachable_target_is_the_lowest_best_rounded_down():
    assert reachable_target([0.912, 0.874, 0.899]) == pytest.approx(0.870)
    assert reachable_target([0.875]) == pytest.approx(0.875)
    with pytest.raises(ValueError, match="no runs"):
        reachable_target([])


def test_critical_batch_recovers_the_model_it_was_generated_from():
    s_min, b_crit = 200.0, 1000.0
    rows = [{"global_batch": b, "steps_to_target": s_min * (1 + b_crit / b)} for b in (128, 256, 512, 1024, 2048, 4096, 8192)]
    rows.append({"global_batch": 16384, "steps_to_target": None})
    fit = critical_batch(rows, noise_scale=800.0)
    assert fit.s_min == pytest.approx(s_min, rel=1e-6) and fit.b_crit == pytest.approx(b_crit, rel=1e-6)
    assert fit.points == 7 and fit.relative_rms < 1e-9 and fit.e_min == pytest.approx(200_000, rel=1e-6)
    assert fit.steps(1000) == pytest.approx(400)
    assert "critical batch 1000" in fit.describe() and "0.80 x B_crit" in fit.describe()


def test_steps_that_do_not_fall_with_the_batch_give_a_zero_critical_batch():
    fit = critical_batch([{"global_batch": b, "steps_to_target": 50.0} for b in (1024, 2048, 4096)], noise_scale=300.0)
    assert fit.s_min == pytest.approx(50.0) and fit.b_crit == 0.0
    assert fit.describe().endswith("measured noise scale B_simple 300")


def test_critical_batch_needs_two_batches_and_a_floor():
    with pytest.raises(ValueError, match="two or more global batch sizes"):
        critical_batch([{"global_batch": 128, "steps_to_target": 10.0}, {"global_batch": 256, "steps_to_target": None}])
    perfect = [{"global_batch": b, "steps_to_target": 12800 / b} for b in (128, 256, 512)]
    with pytest.raises(ValueError, match="no critical batch within the measured range"):
        critical_batch(perfect)
