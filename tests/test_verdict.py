import math
from pathlib import Path

import pytest

from lbtrain.config.run import TrainingConfig
from lbtrain.results import STATUSES, RunResult
from lbtrain.verdict import (
    CHANCE_PLATEAU_EPOCHS,
    CHANCE_TOLERANCE,
    DEFAULT_COLLAPSE_MARGIN,
    DEFAULT_DIVERGENCE_FACTOR,
    DEFAULT_INSTABILITY_FACTOR,
    Verdict,
    chance_accuracy,
    chance_plateau,
    collapse,
    first_divergence,
    is_ok,
    judge,
    judge_recorded,
    step_divergence,
)

# Recorded in results/goyal_scaling (run linear-w32-s1, mlp at global batch 4096, linear rule,
# no warmup): epoch-mean training losses. It blew up inside epoch 1 and settled at chance, and
# was once recorded "ok" because epoch 1 was its own reference.
GOYAL_W32_EPOCH_LOSSES = [3.98e23, 8.064, 4.465, 2.792, 2.461, 2.351, 2.317, 2.308, 2.304, 2.304]
LN10 = math.log(10)


def test_the_configs_judging_defaults_are_the_verdicts():
    fields = TrainingConfig.model_fields
    assert (fields["divergence_factor"].default, fields["collapse_margin"].default, fields["instability_factor"].default) == (
        DEFAULT_DIVERGENCE_FACTOR, DEFAULT_COLLAPSE_MARGIN, DEFAULT_INSTABILITY_FACTOR) == (10.0, 0.1, 2.0)


def test_only_ok_enters_a_mean():
    assert [status for status in STATUSES if is_ok(status)] == ["ok"]
    assert is_ok(judge(initial_loss=2.3, final_train_loss=0.4, final_train_accuracy=0.86, chance=0.1).status)


def test_chance_is_the_most_frequent_class():
    assert chance_accuracy([0, 1, 2, 3] * 25) == 0.25
    assert chance_accuracy([1, 1, 1, 0]) == 0.75


@pytest.mark.parametrize("loss, expected", [
    (2.3, None),
    (22.9, None),
    (23.1, "loss 23.1 exceeds 10 x the step-0 loss 2.3"),
    (math.inf, "loss became inf"),
    (math.nan, "loss became nan"),
])
def test_step_divergence_against_ten_times_the_step_zero_loss(loss, expected):
    assert step_divergence(loss, 2.3) == expected


def test_without_a_step_zero_loss_only_non_finite_losses_diverge():
    assert step_divergence(1e30, None) is None
    assert step_divergence(math.nan, None) == "loss became nan"


def test_first_divergence_finds_the_first_offending_step():
    assert first_divergence([2.3, 2.0, 30.0, math.nan], 2.3) == (2, "loss 30 exceeds 10 x the step-0 loss 2.3")
    assert first_divergence([2.3, 2.0, 1.5], 2.3) is None
    assert first_divergence([2.3, 5.0], 2.3, factor=2.0) == (1, "loss 5 exceeds 2 x the step-0 loss 2.3")


def test_the_recorded_goyal_blow_up_is_diverged_not_ok():
    verdict = judge(initial_loss=LN10, final_train_loss=2.3041, final_train_accuracy=0.0994, chance=0.1,
                    losses=GOYAL_W32_EPOCH_LOSSES)
    assert verdict == Verdict("diverged", "loss 3.98e+23 exceeds 10 x the step-0 loss 2.303 (step 0)")


def test_a_run_that_stays_at_chance_without_blowing_up_is_collapsed():
    verdict = judge(initial_loss=2.31, final_train_loss=2.302, final_train_accuracy=0.101, chance=0.1, losses=[2.31, 2.305, 2.302])
    assert verdict.status == "collapsed"
    assert verdict.reason == "final train accuracy 0.101 is within 0.1 of chance (0.1)"


def test_a_run_whose_loss_ends_above_its_start_is_collapsed_even_above_chance():
    assert collapse(1.2, 0.65, 1.1, chance=0.5) == "final train loss 1.2 is not below the step-0 loss 1.1"
    assert collapse(1.0, 0.65, 1.1, chance=0.5) is None
    assert collapse(1.0, 0.54, 1.1, chance=0.5) == "final train accuracy 0.54 is within 0.1 of chance (0.5)"
    assert collapse(1.0, 0.54, 1.1, chance=0.5, margin=0.02) is None


def test_a_healthy_run_is_ok_and_precedence_is_failed_diverged_collapsed():
    healthy = dict(initial_loss=2.3, final_train_loss=0.3, final_train_accuracy=0.9, chance=0.1, losses=[2.3, 1.0, 0.5])
    assert judge(**healthy) == Verdict("ok")
    assert judge(**healthy, error="KeyError: x") == Verdict("failed", "KeyError: x")
    assert judge(**healthy, divergence="loss became nan at epoch 2, step 3") == Verdict("diverged", "loss became nan at epoch 2, step 3")
    assert judge(**{**healthy, "final_train_loss": math.nan}).status == "diverged"
    assert judge(**{**healthy, "final_train_accuracy": None}).status == "diverged"


def test_unknown_status_is_rejected():
    with pytest.raises(ValueError, match="status must be one of ok, ok-unstable, diverged, collapsed, failed"):
        Verdict("crashed")


def recorded(status, losses, train_accuracy, train_loss, reason=None, initial_loss=None):
    return RunResult(config={"training": {"divergence_factor": 10.0}}, status=status, reason=reason,
                     history=[{"epoch": i + 1, "loss": loss} for i, loss in enumerate(losses)],
                     metrics={"train_loss": train_loss, "train_accuracy": train_accuracy}, initial_loss=initial_loss)


def test_stored_runs_are_rejudged_from_their_epoch_losses_against_ln_classes():
    blown_up = recorded("ok", GOYAL_W32_EPOCH_LOSSES, 0.0994, 2.3041)
    assert judge_recorded(blown_up, chance=0.1, num_classes=10) == Verdict(
        "diverged", "epoch 1 mean loss 3.98e+23 exceeds 10 x the step-0 loss 2.303; ln 10 stands for the unrecorded step-0 loss")
    at_chance = recorded("ok", [2.31, 2.305, 2.303], 0.101, 2.303)
    assert judge_recorded(at_chance, chance=0.1, num_classes=10).status == "collapsed"
    healthy = recorded("ok", [0.9, 0.5, 0.4], 0.88, 0.35)
    assert judge_recorded(healthy, chance=0.1, num_classes=10) == Verdict("ok")
    # A live reason and a recorded step-0 loss win over the reconstruction; NaN (stored null) diverges.
    live = recorded("diverged", [2.0, None], 0.1, None, reason="loss became nan at epoch 2, step 6")
    assert judge_recorded(live, chance=0.1, num_classes=10) == Verdict("diverged", "loss became nan at epoch 2, step 6")
    assert judge_recorded(recorded("ok", [0.9, 5.0], 0.8, 0.5, initial_loss=0.4), chance=0.1, num_classes=10) == Verdict(
        "diverged", "epoch 2 mean loss 5 exceeds 10 x the step-0 loss 0.4")
    assert judge_recorded(recorded("failed", [], None, None, reason="KeyError: x"), chance=0.1, num_classes=10).status == "failed"


def committed_run(study: str, run: str):
    from lbtrain.results import read_run

    return read_run(Path(__file__).resolve().parents[1] / "results" / study / "runs" / run)


def test_a_committed_run_whose_loss_blew_up_and_came_back_is_ok_unstable():
    """goyal_scaling sqrt-warmup-w64-s2: epoch means 1.7 -> 12.6 -> back to 0.79, recorded ok
    when trained and ok-unstable since the committed runs were re-judged (lab/migrations/rejudge_results.py)."""
    run = committed_run("goyal_scaling", "sqrt-warmup-w64-s2-49515d1502")
    assert run.status == "ok-unstable"
    verdict = judge_recorded(run, chance=0.1, num_classes=10)
    assert verdict == Verdict("ok-unstable", "epoch 4 mean loss 12.61 is 7.4 x the lowest epoch mean before it (1.695)")
    healthy = committed_run("goyal_scaling", "sqrt-warmup-w64-s1-b802f94b7c")  # 1.75, 2.19, 1.36, 0.98, 1.27, ...: no spike
    assert judge_recorded(healthy, chance=0.1, num_classes=10).status == "ok"


def test_a_committed_near_chance_run_is_collapsed_under_the_stated_margin():
    """goyal_scaling linear-w16-s0 ended at train accuracy 0.185 on ten classes: ok under the old
    margin of 0.05 (as trained), collapsed under 0.1 (as re-judged and committed)."""
    run = committed_run("goyal_scaling", "linear-w16-s0-bd30872e74")
    assert run.status == "collapsed" and run.config["training"]["collapse_margin"] == 0.1
    assert judge_recorded(run, chance=0.1, num_classes=10) == Verdict(
        "collapsed", "final train accuracy 0.185 is within 0.1 of chance (0.1)")
    run.config["training"]["collapse_margin"] = 0.05
    assert judge_recorded(run, chance=0.1, num_classes=10).status == "ok"


def test_collapse_outranks_instability_and_divergence_outranks_both():
    spiky = [2.3, 2.2, 9.0, 2.25]
    assert judge(initial_loss=2.3, final_train_loss=2.25, final_train_accuracy=0.12, chance=0.1, epoch_losses=spiky).status == "collapsed"
    assert judge(initial_loss=2.3, final_train_loss=0.5, final_train_accuracy=0.8, chance=0.1, epoch_losses=spiky,
                 instability_factor=5.0).status == "ok"
    assert judge(initial_loss=2.3, final_train_loss=0.5, final_train_accuracy=0.8, chance=0.1, losses=[2.3, 30.0, 0.5],
                 epoch_losses=spiky).status == "diverged"


def test_the_margin_that_judges_a_run_does_not_change_its_id():
    from lbtrain.config import run_config_from_dict
    from lbtrain.studies.plan import run_id

    base = run_config_from_dict({"data": {"dataset": "synthetic"}})
    strict = run_config_from_dict({"data": {"dataset": "synthetic"}, "training": {"collapse_margin": 0.2, "instability_factor": 3.0}})
    assert run_id(base, "x") == run_id(strict, "x")
    assert base.identity()["training"]["collapse_margin"] == 0.05 and "instability_factor" not in base.identity()["training"]


def test_a_run_at_chance_for_three_epochs_in_a_row_is_collapsed_even_if_it_then_learns():
    """Issue 56: a run whose epoch-mean train accuracy sat within 0.02 of 1 / classes for 3 epochs
    in a row is not ok, however it ends; 2 epochs at chance (a slow first epoch or two) are."""
    assert (CHANCE_PLATEAU_EPOCHS, CHANCE_TOLERANCE) == (3, 0.02)
    learns_late = [0.10, 0.118, 0.082, 0.45, 0.80, 0.86]
    verdict = judge(initial_loss=2.3, final_train_loss=0.4, final_train_accuracy=0.86, chance=0.1, epoch_accuracies=learns_late, num_classes=10)
    assert verdict == Verdict("collapsed", "train accuracy sat at chance (0.1 ± 0.02) for 3 epochs in a row (epochs 1-3 of 6)")
    assert judge(initial_loss=2.3, final_train_loss=0.4, final_train_accuracy=0.86, chance=0.1, epoch_accuracies=[0.10, 0.11, 0.45, 0.80, 0.86, 0.87],
                 num_classes=10) == Verdict("ok")
    # Just outside the tolerance breaks the stretch: 0.121 is 0.021 above chance.
    assert chance_plateau([0.10, 0.121, 0.10, 0.10, 0.5], 0.1) is None
    # Four classes: chance is 0.25; without classes (regression) or accuracies nothing is judged.
    assert chance_plateau([0.26, 0.24, 0.25, 0.6], 0.25) == "train accuracy sat at chance (0.25 ± 0.02) for 3 epochs in a row (epochs 1-3 of 4)"
    assert chance_plateau([0.1, 0.1, 0.1], None) is None and chance_plateau([], 0.1) is None
    # A missing epoch accuracy ends a stretch.
    assert chance_plateau([0.1, 0.1, None, 0.1, 0.1, 0.7, 0.8], 0.1) is None


def test_a_short_run_at_chance_through_its_last_third_is_collapsed():
    """Fewer than 9 epochs: the last third of them (rounded up) at chance is enough."""
    assert chance_plateau([0.5, 0.6, 0.7, 0.10], 0.1) is None  # the last ceil(4/3) = 2 epochs: one at chance
    assert chance_plateau([0.5, 0.6, 0.11, 0.10], 0.1) == (
        "train accuracy sat at chance (0.1 ± 0.02) through the last third of its epochs (epochs 3-4 of 4)")
    assert chance_plateau([0.6, 0.7, 0.10], 0.1).endswith("(epochs 3-3 of 3)")
    # One or two epochs are judged by their final numbers only: an epoch near chance is a slow start.
    assert chance_plateau([0.10], 0.1) is None and chance_plateau([0.5, 0.10], 0.1) is None


def test_the_committed_runs_that_sat_at_chance_for_14_and_19_epochs_are_collapsed():
    """critical_batch_v3's linear rule at batch 2048 and 4096 (seed 2): at chance for epochs 1-14 of
    36 and 1-19 of 48, then trained to 0.82 and 0.74; recorded ok, collapsed as re-judged and
    committed (lab/migrations/rejudge_results.py)."""
    for run_id, epochs in (("linear-capped-w64-s2-552af90bee", "14 epochs in a row (epochs 1-14 of 36)"),
                           ("linear-capped-w128-s2-a007a4a537", "19 epochs in a row (epochs 1-19 of 48)")):
        run = committed_run("critical_batch_v3", run_id)
        expected = Verdict("collapsed", f"train accuracy sat at chance (0.1 ± 0.02) for {epochs}")
        assert (run.status, run.reason) == (expected.status, expected.reason)
        assert run.metrics["train_accuracy"] > 0.7
        assert judge_recorded(run, chance=0.1, num_classes=10) == expected
    healthy = committed_run("critical_batch_v3", "linear-capped-w64-s1-ce7c345bb6")  # 0.11 at epoch 1, then 0.145, 0.239, ...
    assert judge_recorded(healthy, chance=0.1, num_classes=10) == Verdict("ok")


def test_a_short_stretch_at_chance_in_a_long_run_is_a_slow_start():
    """The stretch must also span a quarter of the run's epochs: 4 of 43 (a floored run whose
    epochs are 7 updates, own_model_shapes' LARS at world 8) is not a collapse; 11 of 43 is."""
    assert chance_plateau([0.25] * 4 + [0.8] * 39, 0.25) is None
    assert chance_plateau([0.25] * 10 + [0.8] * 33, 0.25) is None  # ceil(43 / 4) = 11 epochs needed
    assert chance_plateau([0.25] * 11 + [0.8] * 32, 0.25) == (
        "train accuracy sat at chance (0.25 ± 0.02) for 11 epochs in a row (epochs 1-11 of 43)")


def test_the_plateau_is_read_at_the_datas_chance_the_majority_class_share():
    """On unbalanced labels a run that learned nothing predicts the majority class: 0.6 of two
    classes, not 1/2. judge reads the plateau there, as its final-number rule does."""
    history = [0.60, 0.61, 0.60, 0.59, 0.60, 0.9]
    verdict = judge(initial_loss=0.7, final_train_loss=0.3, final_train_accuracy=0.9, chance=0.6, epoch_accuracies=history,
                    num_classes=2)
    assert verdict == Verdict("collapsed", "train accuracy sat at chance (0.6 ± 0.02) for 5 epochs in a row (epochs 1-5 of 6)")
    assert judge(initial_loss=0.7, final_train_loss=0.3, final_train_accuracy=0.9, chance=0.6, epoch_accuracies=history,
                 num_classes=None).status == "ok"  # regression: no plateau
