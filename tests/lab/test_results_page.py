"""results/README.md is what lab.results_page renders from the committed data, and
the goyal_bn section and its anchors are computed from a protocol.json and summary.csv."""

import csv
import dataclasses
import json
import re
import time
from pathlib import Path

import pytest

from helpers import REPO_ROOT, run_python
from lab.results_page import (
    QUICKSTART_BEGIN,
    QUICKSTART_END,
    readme_with_quickstart,
    render_quickstart,
    render_results_page,
    write_results_page,
)
from lab.results_page.asynchrony import anchor_staleness, anchor_staleness_damping, section_staleness
from lab.results_page.common import machine_minutes, points_text, study_runs
from lab.results_page.critical_batch import section_critical_batch, shallue_region
from lab.results_page.goyal import (
    anchor_goyal_linear_warmup,
    anchor_goyal_no_warmup,
    chosen_arms,
    goyal_figure,
    goyal_figure_items,
    section_goyal_bn,
    study_arms,
)
from lab.results_page.keskar import anchor_hoffer, anchor_keskar, anchor_keskar_v3, section_keskar_v2
from lab.results_page.lr_scaling import anchor_malladi
from lbtrain.reports.report import ReportError
from lbtrain.reports.statistics import difference_interval, mean_interval

RESULTS = Path(REPO_ROOT) / "results"


def test_the_page_and_the_advisors_validation_load_no_tensorflow():
    code = ("import sys, lab.results_page, lab.advisor_validation; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    assert run_python(code).stdout.split() == ["False", "False"]


def test_the_committed_page_is_what_the_data_render():
    committed = (RESULTS / "README.md").read_text()
    assert committed == render_results_page(RESULTS), "results/README.md is stale: run python scripts/render_results_readme.py --write"


def estimate(values):
    return dataclasses.asdict(mean_interval(values))


def difference(a, b):
    return dataclasses.asdict(difference_interval(a, b))


def test_goyal_bn_renders_the_best_arm_per_world_size_and_the_goyal_anchors(tmp_path):
    """A synthetic goyal_bn: momentum+warmup carried by the linear rule holds at world 8 (-0.5
    points) and breaks at 64 (-9 points); without warmup it is 20 points worse at 64."""
    seeds = {("momentum+warmup tuned", 1): [0.90, 0.91, 0.92], ("momentum+warmup tuned", 8): [0.89, 0.90, 0.91],
             ("momentum+warmup linear rule", 8): [0.905, 0.905, 0.905], ("momentum+warmup tuned", 64): [0.85, 0.86, 0.87],
             ("momentum+warmup linear rule", 64): [0.82, 0.82, 0.82], ("momentum linear rule", 64): [0.62, 0.62, 0.62]}
    longer = [0.88, 0.89, 0.90]
    folder = tmp_path / "goyal_bn"
    folder.mkdir()
    with open(folder / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["run_id", "label", "status", "world_size", "global_batch", "seed", "test_accuracy",
                                         "validation_accuracy"])
        writer.writeheader()
        for (label, world), values in {**seeds, ("momentum+warmup tuned equal steps", 64): longer}.items():
            for seed, value in enumerate(values):
                writer.writerow({"run_id": f"{label}-{world}-{seed}", "label": label, "status": "ok", "world_size": world,
                                 "global_batch": 16 * world, "seed": seed, "test_accuracy": value, "validation_accuracy": value})
    reference = seeds[("momentum+warmup tuned", 1)]

    def row(world, rule):
        tuned, rule_values = seeds[("momentum+warmup tuned", world)], seeds.get((f"momentum+warmup {rule} rule", world), reference)
        at_reference = world == 1
        return {"recipe": "momentum+warmup", "rule_name": "reference" if at_reference else rule, "world_size": world,
                "global_batch": 16 * world, "tuned": estimate(tuned), "tuned_runs": 3, "tuned_trials": 5, "rule": estimate(rule_values),
                "rule_runs": 3, "rule_trials": 5, "cost_of_rule": None if at_reference else difference(tuned, rule_values),
                "rule_minus_reference": None if at_reference else difference(rule_values, reference),
                "tuned_minus_reference": None if at_reference else difference(tuned, reference)}

    without_warmup = seeds[("momentum linear rule", 64)]
    no_warmup_row = {**row(64, "linear"), "recipe": "momentum", "rule": estimate(without_warmup), "rule_runs": 3}
    protocol = {"rows": [row(1, "linear"), row(8, "linear"), row(64, "linear"), no_warmup_row], "trials": {"a": 5, "b": 5, "c": 5},
                # Chosen on validation: at 8 the rule arm, at 64 the tuned arm, re-run there at equal steps.
                "best_arms": {"1": "momentum+warmup tuned", "8": "momentum+warmup linear rule", "64": "momentum+warmup tuned"},
                "equal_steps": [{"arm": "momentum+warmup tuned", "recipe": "momentum+warmup", "world_size": 64, "global_batch": 1024,
                                 "steps": 3000, "equal_steps": estimate(longer), "equal_steps_runs": 3,
                                 "gain_of_steps": difference(longer, seeds[("momentum+warmup tuned", 64)]),
                                 "equal_steps_minus_reference": difference(longer, reference)}]}
    (folder / "protocol.json").write_text(json.dumps(protocol))

    verdict, evidence = anchor_goyal_linear_warmup(tmp_path)
    assert verdict == "inconclusive at batch 128; worse at batch 1024"  # -0.5 [-3.0, +2.0]: too wide to say
    assert "batch 128: -0.5" in evidence and "batch 1024: -9.0" in evidence
    verdict, evidence = anchor_goyal_no_warmup(tmp_path)
    assert verdict == "worse" and "at batch 1024: -20.0 [-20.0, -20.0] (n=3 vs 3) points" in evidence

    chosen = chosen_arms(protocol, study_arms(protocol))
    assert {size: arm["label"] for size, arm in chosen.items()} == {
        1: "momentum+warmup, tuned", 8: "momentum+warmup, linear rule", 64: "momentum+warmup, tuned"}
    text = "\n".join(section_goyal_bn(tmp_path))
    assert "| 1 | 16 | momentum+warmup, tuned; best | 0.910 [0.885, 0.935] (n=3, df=2) | the reference | - | - |" in text
    # At 8 the rule arm and the tuned arm are tied on validation (their Welch interval contains 0).
    assert ("| 8 | 128 | momentum+warmup, linear rule; tied with the best (1 other) | 0.905 [0.905, 0.905] (n=3, df=2) | "
            "-0.5 [-3.0, +2.0] (n=3 vs 3, df=2): inconclusive | not run | - |") in text
    at_epochs, at_steps = (points_text(difference(values, reference)) for values in (seeds[("momentum+warmup tuned", 64)], longer))
    assert at_epochs.startswith("-5.0 [") and at_steps.startswith("-2.0 [")
    assert (f"| 64 | 1024 | momentum+warmup, tuned; best | 0.860 [0.835, 0.885] (n=3, df=2) | {at_epochs}: worse | "
            f"0.890 [0.865, 0.915] (n=3, df=2), 3000 updates | {at_steps}: inconclusive |") in text
    assert "every recipe tuned with 5 trials per study" in text

    # The figure beside Goyal et al.'s Table 1: ours in points at 1x, 8x, 64x, theirs at 32x.
    lines = {item.label: item for item in goyal_figure_items(protocol, study_runs(tmp_path, "goyal_bn"))}
    warmup = lines["here: linear + gradual warmup"]
    assert warmup.x == [1, 8, 64] and warmup.y == pytest.approx([0.0, -0.5, -9.0])
    assert (lines["Goyal et al. 2017: linear + gradual warmup"].x, lines["Goyal et al. 2017: linear + gradual warmup"].y) == ([32], [pytest.approx(-0.14)])
    assert lines["Goyal et al. 2017: linear, no warmup"].y == [pytest.approx(-1.24)]
    assert lines["here: best arm, equal steps"].x == [64] and lines["here: best arm, equal steps"].y == pytest.approx([-2.0])
    assert goyal_figure(tmp_path).is_file()


def test_a_study_not_committed_is_named_with_the_command_that_makes_it(tmp_path):
    assert anchor_keskar(tmp_path) == ("not measured yet", "neither keskar_v2 nor keskar_gap is committed")
    assert "`lbtrain run experiments/critical_batch.yaml` makes it" in "\n".join(section_critical_batch(tmp_path))


def test_shallues_regions_follow_the_fitted_critical_batch():
    assert [shallue_region(batch, 100.0) for batch in (10, 11, 999, 1000)] == [
        "perfect scaling", "diminishing returns", "diminishing returns", "no further gain"]


@pytest.mark.parametrize("alpha, low, high, points, verdict", [
    (0.5, 0.40, 0.60, 7, "matches"),  # within 0.5 ± 0.15
    (0.5, 0.40, 0.60, 3, "inconclusive"),  # a fit needs 4 batch sizes
    (0.5, 0.30, 0.70, 7, "inconclusive"),  # wider than the band: it could be 0.5, or not
    (0.35, 0.14, 0.63, 7, "inconclusive"),  # the committed adam_scaling: once "supported", now too wide to say
    (1.0, 0.80, 1.20, 7, "worse"),  # wholly outside the band: the sqrt rule misses the tuned LR's growth
    (0.1, -0.1, 0.30, 7, "worse"),
    (None, None, None, 7, "inconclusive"),
])
def test_malladis_sqrt_rule_is_judged_by_the_interval_of_adams_exponent_within_a_tolerance(tmp_path, alpha, low, high, points, verdict):
    (tmp_path / "adam_scaling").mkdir()
    fit = {"alpha": alpha, "alpha_95_low": low, "alpha_95_high": high, "points": points, "note": None if alpha else "not enough points",
           "batches": [{"global_batch": 32 * 2 ** k, "learning_rate": 0.001} for k in range(7)]}
    (tmp_path / "adam_scaling" / "protocol.json").write_text(json.dumps({"rows": [], "trials": {}, "lr_fits": {"adam": fit}}))
    found, evidence = anchor_malladi(tmp_path)
    assert found == verdict
    if alpha is not None and points >= 4:
        # The tolerance is stated with what it means over the batches fitted: 64^0.15 = 1.87.
        assert "band 0.35 to 0.65 (0.5 ± 0.15); an exponent off by 0.15 moves the LR at 64x the smallest batch by 1.9x" in evidence


def accuracy_row(recipe, batch, values):
    summary = estimate(values)
    return {"recipe": recipe, "global_batch": batch, "test_accuracy": summary["mean"], "low": summary["low"], "high": summary["high"],
            "ok_runs": len(values), "total": len(values), "excluded": {}, "train_accuracy": estimate([v + 0.05 for v in values]),
            "gap_accuracy": estimate([0.05] * len(values))}


def test_keskar_v2_calls_a_gap_that_equal_steps_closes_under_training(tmp_path):
    # Seeds 0.1 point apart: Welch intervals of about ±0.2 to ±0.3 points, narrow enough for a claim.
    arms = {"SB": (32, [0.900, 0.901, 0.899]), "LB equal epochs": (256, [0.850, 0.851, 0.849]),
            "LB equal steps": (256, [0.900, 0.9005, 0.8995]), "Hoffer": (256, [0.9050, 0.9055, 0.9045]),
            "LB equal loss": (256, [0.899, 0.900, 0.898])}
    folder = tmp_path / "keskar_v2"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"accuracy": [accuracy_row(label, batch, values) for label, (batch, values) in arms.items()]}))
    with open(folder / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["run_id", "label", "status", "world_size", "global_batch", "seed", "test_accuracy",
                                         "train_loss", "total_steps"])
        writer.writeheader()
        for label, (batch, values) in arms.items():
            for seed, value in enumerate(values):
                writer.writerow({"run_id": f"{label}-{seed}", "label": label, "status": "ok", "world_size": 1, "global_batch": batch,
                                 "seed": seed, "test_accuracy": value, "train_loss": 0.3, "total_steps": 1500})
    text = "\n".join(section_keskar_v2(tmp_path))
    assert "reads as under-training" in text and "| LB equal epochs | 256 | 1500 | 0.300 |" in text
    assert "| -5.0 [-5.2, -4.8] (n=3 vs 3, df=4): worse |" in text  # the claim beside each difference from the one reference
    verdict, evidence = anchor_hoffer(tmp_path)
    assert verdict == "matches" and "equal epochs -5.0 [" in evidence and "(worse)" in evidence

    # goyal_bn's equal-steps re-runs: at 8x the small batch too wide to say, at 64x worse.
    reference = [0.90, 0.91, 0.92]
    def longer(world, at_epochs, at_steps):
        return {"world_size": world, "global_batch": 16 * world, "steps": 3000, "equal_steps": estimate(at_steps),
                "gain_of_steps": difference(at_steps, at_epochs), "equal_steps_minus_reference": difference(at_steps, reference)}
    (tmp_path / "goyal_bn").mkdir()
    (tmp_path / "goyal_bn" / "protocol.json").write_text(json.dumps({"rows": [], "equal_steps": [
        longer(64, [0.70, 0.71, 0.72], [0.80, 0.81, 0.82]), longer(8, [0.88, 0.89, 0.90], [0.91, 0.91, 0.91])]}))
    verdict, evidence = anchor_hoffer(tmp_path)
    assert verdict == "matches (keskar_v2); inconclusive (goyal_bn, batch 128); worse (goyal_bn, batch 1024)"
    assert "batch 128: +0.0 [" in evidence and "batch 1024: -10.0 [" in evidence and "(+10.0 [" in evidence


def write_keskar_v3(tmp_path, arms, sharpness, reached, per_run=None):
    """A synthetic keskar_v3: report.json (accuracy and sharpness rows) and summary.csv; the first
    ``reached`` seeds of LB equal loss reached their loss target. ``per_run``: label -> each seed's
    (sharpness, top Hessian eigenvalue), the first in summary.csv, the second in the run's
    metrics.json (as lbtrain run writes them); without it no run has either."""
    folder = tmp_path / "keskar_v3"
    folder.mkdir(parents=True)
    sharp = [{"recipe": label, "global_batch": arms[label][0], "sharpness": value, "low": low, "high": high, "n": 0 if value is None else 5}
             for label, (value, low, high) in sharpness.items()]
    rows = [accuracy_row(label, batch, values) for label, (batch, values) in arms.items()]
    (folder / "report.json").write_text(json.dumps({"accuracy": rows, "sharpness": sharp}))
    with open(folder / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["run_id", "label", "status", "world_size", "global_batch", "seed", "test_accuracy",
                                         "sharpness", "target_reached_step", "total_steps", "train_loss"])
        writer.writeheader()
        for label, (batch, values) in arms.items():
            for seed, value in enumerate(values):
                step = 900 if label == "LB equal loss" and seed < reached else ""
                flatness = (per_run or {}).get(label, [("", None)] * len(values))[seed]
                run_id = f"{label.replace(' ', '-')}-{seed}"
                writer.writerow({"run_id": run_id, "label": label, "status": "ok", "world_size": batch // 32, "global_batch": batch,
                                 "seed": seed, "test_accuracy": value, "sharpness": flatness[0], "target_reached_step": step,
                                 "total_steps": 900, "train_loss": 0.15})
                if flatness[1] is not None:
                    (folder / "runs" / run_id).mkdir(parents=True)
                    (folder / "runs" / run_id / "metrics.json").write_text(json.dumps({"metrics": {"hessian_top_eigenvalue": flatness[1]}}))


def test_keskars_third_edition_anchor_is_judged_at_equal_training_loss_and_counts_the_runs_that_reached_it(tmp_path):
    arms = {"SB": (32, [0.920, 0.921, 0.919, 0.9205, 0.9195]), "LB equal epochs": (512, [0.900, 0.901, 0.899, 0.9005, 0.8995]),
            "LB equal loss": (512, [0.890, 0.891, 0.889, 0.8905, 0.8895])}
    sharp = {"SB": (40.0, 38.0, 42.0), "LB equal epochs": (60.0, 55.0, 65.0), "LB equal loss": (80.0, 75.0, 85.0)}
    write_keskar_v3(tmp_path, arms, sharp, reached=4)
    verdict, evidence = anchor_keskar_v3(tmp_path)
    expected = difference_interval(arms["LB equal loss"][1], arms["SB"][1])
    assert verdict == "worse"
    # Without per-run sharpness, the intervals of the two means decide: 80 [75, 85] lies above 40 [38, 42].
    assert evidence.startswith(f"the claim holds here: the large batch tests worse and sits in a sharper minimum. keskar_v3 at "
                               f"equal training loss (4 of 5 ok large-batch runs reached the small batch's loss), "
                               f"batch 512 minus 32: test {points_text(expected)} points; sharpness 80 against 40 (sharper)")
    assert evidence.endswith("(worse)") and "at equal epochs -2.0 [" in evidence
    # An arm whose sharpness was not measured (no ok run to measure): inconclusive, not a crash.
    write_keskar_v3(tmp_path / "unmeasured", arms, {**sharp, "LB equal loss": (None, None, None)}, reached=0)
    verdict, evidence = anchor_keskar_v3(tmp_path / "unmeasured")
    assert verdict == "inconclusive" and "LB equal loss: 5 of 5 runs ok" in evidence


def test_keskars_third_edition_anchor_takes_welch_differences_of_each_runs_flatness_and_says_what_gap_remains(tmp_path):
    """Per-run sharpness (summary.csv) and top Hessian eigenvalue (metrics.json): the large batch
    half a point below the small at equal loss, an interval below 0 yet above -1 point (matches,
    a gap remains), not sharper (sharpness straddles 0) and flatter (the eigenvalue's interval
    lies below 0): the claim does not hold."""
    small = [0.920, 0.921, 0.919, 0.9205, 0.9195]
    arms = {"SB": (32, small), "LB equal epochs": (512, [0.900, 0.901, 0.899, 0.9005, 0.8995]),
            "LB equal loss": (512, [value - 0.005 for value in small])}
    sharp = {"SB": (6.0, 5.0, 7.0), "LB equal epochs": (5.0, 4.0, 6.0), "LB equal loss": (5.5, 4.0, 7.0)}
    per_run = {"SB": [(5.0, 9.0), (6.0, 8.0), (7.0, 10.0), (6.5, 9.5), (5.5, 8.5)],
               "LB equal epochs": [(5.0, None)] * 5,
               "LB equal loss": [(4.0, 4.0), (7.0, 5.0), (6.0, 4.5), (5.0, 3.5), (5.5, 5.5)]}
    write_keskar_v3(tmp_path, arms, sharp, reached=5, per_run=per_run)
    verdict, evidence = anchor_keskar_v3(tmp_path)
    loss = difference_interval(arms["LB equal loss"][1], small)
    sharpness = difference_interval([4.0, 7.0, 6.0, 5.0, 5.5], [5.0, 6.0, 7.0, 6.5, 5.5])
    hessian = difference_interval([4.0, 5.0, 4.5, 3.5, 5.5], [9.0, 8.0, 10.0, 9.5, 8.5])
    assert loss.high < 0 and sharpness.low < 0 < sharpness.high and hessian.high < 0
    assert verdict == "matches"
    assert evidence.startswith("the claim does not hold here: the large batch tests within the 1-point margin of the small batch "
                               "and is not sharper. keskar_v3 at equal training loss (5 of 5 ok large-batch runs reached")
    assert (f"test {points_text(loss)} points, a gap of 0.5 points remains (its interval lies below 0), within the 1-point "
            f"margin; large minus small batch (Welch), sharpness {sharpness.describe(2, signed=True)} (neither sharper nor "
            f"flatter), top Hessian eigenvalue {hessian.describe(2, signed=True)} (flatter); at equal epochs") in evidence
    text = "\n".join(section_keskar_v2(tmp_path, study="keskar_v3"))
    assert "so most of the equal-epoch difference reads as under-training (too few updates), but not all: given the small " \
           "batch's training loss, a gap of 0.5 points remains" in text
    assert (f"At equal training loss, the large batch minus the small (Welch): sharpness {sharpness.describe(2, signed=True)} "
            f"(neither sharper nor flatter), top Hessian eigenvalue {hessian.describe(2, signed=True)} (flatter).") in text


def test_the_staleness_table_sets_each_damping_against_synchronous_sgd(tmp_path):
    cells = {"tau0": [0.98, 0.98, 0.98], "tau15 none": [0.90, 0.91, 0.92], "tau15 sqrt": [0.96, 0.96, 0.96],
             "tau15 linear": [0.95, 0.95, 0.95]}
    folder = tmp_path / "staleness"
    folder.mkdir()
    (folder / "report.json").write_text("{}")
    with open(folder / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["run_id", "label", "status", "world_size", "global_batch", "seed", "test_accuracy"])
        writer.writeheader()
        for label, values in cells.items():
            for seed, value in enumerate(values):
                writer.writerow({"run_id": f"{label}-{seed}", "label": label, "status": "ok", "world_size": 1, "global_batch": 32,
                                 "seed": seed, "test_accuracy": value})
        writer.writerow({"run_id": "x", "label": "tau15 none", "status": "diverged", "world_size": 1, "global_batch": 32, "seed": 3,
                         "test_accuracy": 0.1})
    text = "\n".join(section_staleness(tmp_path))
    # 0.91 ± t(0.975, 2) * 0.01 / sqrt(3) = ± 0.025; tau 0 has no spread, so Welch's df is tau 15's n − 1.
    assert ("| 15 | 0.910 [0.885, 0.935] (n=3, df=2); -7.0 [-9.5, -4.5] (n=3 vs 3, df=2): worse; 1 diverged | "
            "0.960 [0.960, 0.960] (n=3, df=2); -2.0 [-2.0, -2.0] (n=3 vs 3): worse") in text
    assert "| 0 | 0.980 [0.980, 0.980] (n=3, df=2); the reference |" in text
    verdict, evidence = anchor_staleness(tmp_path)
    assert verdict == "worse" and "staleness 15: -7.0 [-9.5, -4.5] (n=3 vs 3, df=2) points, worse (1 diverged)" in evidence
    verdict, evidence = anchor_staleness_damping(tmp_path)
    # LR / (tau + 1) minus undamped: 0.95 against 0.91 [0.885, 0.935], +4.0 [+1.5, +6.5]: better.
    assert verdict == "better" and evidence.startswith("at staleness 15, LR / (tau + 1) minus the undamped LR: +4.0 [+1.5, +6.5]")
    assert "against synchronous SGD, LR / (tau + 1) -3.0 [-3.0, -3.0] (n=3 vs 3) points, worse, undamped -7.0 [" in evidence


def test_machine_time_adds_the_runs_and_the_tuning_trials_of_a_real_optuna_study(tmp_path):
    import optuna

    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "summary.csv").write_text("run_id,label,status,world_size,global_batch,wall_time_seconds\n"
                                        "x-w1-s1-aaa,x,ok,1,32,90\nx-w2-s1-bbb,x,diverged,2,64,30\n"
                                        "x-w2-s2-ccc,x,failed,2,64,\n"
                                        # A copy of the first run under another label (the runner's twin: same hash, same time).
                                        "y-w1-s1-aaa,y,ok,1,32,90\n")
    study = optuna.create_study(storage=f"sqlite:///{folder / 'optuna.db'}")
    study.optimize(lambda trial: time.sleep(0.2) or trial.suggest_float("x", 0, 1), n_trials=3)
    runs, tuning = machine_minutes(tmp_path, "study")
    assert runs == pytest.approx(2.0)
    expected = sum((trial.datetime_complete - trial.datetime_start).total_seconds() for trial in study.trials) / 60
    assert expected > 0.01 and tuning == pytest.approx(expected)  # the trials' own times, through Optuna's API
    (folder / "optuna.db").unlink()
    assert machine_minutes(tmp_path, "study") == (pytest.approx(2.0), None)


def test_the_readmes_quickstart_table_is_what_the_committed_run_renders():
    readme = (RESULTS.parent / "README.md").read_text()
    assert readme_with_quickstart(readme, RESULTS) == readme, "run python scripts/render_results_readme.py --write"
    assert "| 32 | 4096 |" in readme.split(QUICKSTART_BEGIN)[1]


def test_writing_puts_the_page_in_the_results_folder_and_the_table_in_the_readme(tmp_path):
    results = tmp_path / "results"
    (results / "quickstart_reference").mkdir(parents=True)
    (results / "quickstart_reference" / "summary.csv").write_bytes((RESULTS / "quickstart_reference" / "summary.csv").read_bytes())
    readme = tmp_path / "README.md"
    readme.write_text(f"# lbtrain\n\n{QUICKSTART_BEGIN}\nan old table\n{QUICKSTART_END}\n\nthe rest\n")

    assert write_results_page(results, readme) == [results / "README.md", readme]  # no study: no figure of its own
    assert (results / "README.md").read_text() == render_results_page(results)
    assert "*Not committed yet*: `lbtrain sweep experiments/goyal_bn.yaml` makes it" in render_results_page(results)
    written = readme.read_text()
    assert written.startswith(f"# lbtrain\n\n{render_quickstart(results)}\n\nthe rest") and "an old table" not in written

    readme.write_text("a README without the table")
    (results / "README.md").unlink()
    with pytest.raises(ReportError, match="no quickstart table"):
        write_results_page(results, readme)
    assert not (results / "README.md").exists() and readme.read_text() == "a README without the table"


def test_every_committed_study_shows_a_figure_that_exists():
    page = (RESULTS / "README.md").read_text()
    shown = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert shown and all((RESULTS / path).is_file() for path in shown)
    committed = [path.parent.name for path in RESULTS.glob("*/report.json")
                 if f"## {path.parent.name}:" in page]
    assert committed and all(any(path.startswith(f"{study}/") for path in shown) for study in committed)
