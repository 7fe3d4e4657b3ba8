"""The steps-to-target sections of the results page and the two anchors judged on B_crit's
interval (Shallue et al. 2018, McCandlish et al. 2018), on small synthetic report.json files
written by the real fit, and on the committed studies."""

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO_ROOT
from lab.results_page.critical_batch import (
    anchor_mccandlish,
    anchor_shallue,
    best_rows,
    predicted_text,
    section_critical_batch,
    section_steps_to_target,
)
from lbtrain.reports.scaling_laws import critical_batch

WORDS = {"matches", "worse", "inconclusive", "not measured yet"}


def rows(batches=(128, 256, 512, 1024, 2048), b_crit=500.0, spread=(0.9, 1.0, 1.1), errors=None):
    """steps_rows-like rows of S = 100 (1 + b_crit / B), seeds at ``spread`` x that, each batch's
    steps times (1 + error)."""
    found = []
    for batch, error in zip(batches, errors or [0.0] * len(batches)):
        seeds = [100 * (1 + b_crit / batch) * (1 + error) * factor for factor in spread]
        estimate = float(np.mean(seeds))
        found.append({"recipe": "sqrt", "global_batch": batch, "steps_to_target": estimate, "low": 0.9 * estimate,
                      "high": 1.1 * estimate, "seed_steps": seeds, "reached": len(seeds), "runs": len(seeds), "upper_bound": False})
    return found


def study(tmp_path: Path, summary, noise_scale=None, fit=None, name="steps_to_target") -> Path:
    """A results folder with one study's report.json: the rows and their fit."""
    (tmp_path / name).mkdir(parents=True, exist_ok=True)
    fit = critical_batch(summary, noise_scale=noise_scale, resamples=1000) if fit is None else fit
    record = {"metric": "val_accuracy", "target": 0.95, "steps_to_target": summary,
              "critical_batch": fit if isinstance(fit, dict) else fit.to_dict()}
    (tmp_path / name / "report.json").write_text(json.dumps(record))
    return tmp_path


def test_shallue_matches_when_the_fit_holds_and_b_crits_interval_lies_inside_the_measured_batches(tmp_path):
    found, evidence = anchor_shallue(study(tmp_path, rows()))
    assert found == "matches"
    assert "relative rms error 0.0% (within 15%)" in evidence and "B_crit = 500 [" in evidence
    assert "inside the measured batches 128 to 2048" in evidence and "rule: matches: relative rms within 15%" in evidence


def test_shallue_is_worse_when_the_curve_misses_the_steps_by_more_than_the_tolerance(tmp_path):
    found, evidence = anchor_shallue(study(tmp_path, rows(errors=[0.4, -0.3, 0.4, -0.3, 0.4])))
    assert found == "worse" and "(above 15%)" in evidence


@pytest.mark.parametrize("summary, why", [
    (rows(b_crit=1800.0, spread=(0.6, 1.0, 1.4)), "reaching outside the measured batches 128 to 2048"),
    (rows(batches=(128, 256, 512)), "no fit (not enough points (n = 3 batch sizes < 4); a fit needs 4 batch sizes)"),
])
def test_shallue_is_inconclusive_on_too_few_points_or_an_interval_reaching_past_the_batches(tmp_path, summary, why):
    found, evidence = anchor_shallue(study(tmp_path, summary))
    assert found == "inconclusive" and why in evidence


def test_anchors_on_a_fit_without_an_interval_are_inconclusive(tmp_path):
    old = {"batches": 5, "s_min": 100.0, "b_crit": 500.0, "relative_rms": 0.05, "min_batches": 4, "note": None,
           "residuals": [{"global_batch": b, "steps": 1.0, "fitted_steps": 1.0, "relative_residual": 0.0} for b in (128, 2048)],
           "noise_scale": 500.0, "noise_scale_ratio": 1.0}
    results = study(tmp_path, rows(), fit=old)
    assert anchor_shallue(results)[0] == "inconclusive"
    found, evidence = anchor_mccandlish(results)
    assert found == "inconclusive" and "no interval (fitted before intervals over seeds were recorded)" in evidence


@pytest.mark.parametrize("noise_scale, spread, verdict", [
    (500.0, (0.9, 1.0, 1.1), "matches"),       # B_simple = B_crit: the ratio's interval around 1, inside [0.5, 2]
    (100.0, (0.9, 1.0, 1.1), "worse"),         # 0.2 x B_crit: wholly below 0.5
    (1500.0, (0.9, 1.0, 1.1), "worse"),        # 3 x B_crit: wholly above 2
    (250.0, (0.8, 1.0, 1.2), "inconclusive"),  # 0.5 x B_crit: the interval straddles 0.5
])
def test_mccandlish_judges_the_ratios_whole_interval_against_a_factor_of_two(tmp_path, noise_scale, spread, verdict):
    summary = rows(spread=spread)
    fit = critical_batch(summary, noise_scale=noise_scale, resamples=1000)
    low, high = fit.noise_scale_ratio_interval
    assert low < noise_scale / 500 < high
    found, evidence = anchor_mccandlish(study(tmp_path, summary, fit=fit))
    assert found == verdict
    assert evidence.startswith(f"steps_to_target: B_simple / B_crit = {noise_scale / 500:.2f} [{low:.2f}, {high:.2f}]")
    assert "matches when the whole interval lies within [0.5, 2]" in evidence


def test_absent_studies_are_not_measured_yet(tmp_path):
    assert anchor_shallue(tmp_path) == ("not measured yet", "steps_to_target is not committed")
    assert anchor_mccandlish(tmp_path)[0] == "not measured yet"
    assert anchor_mccandlish(study(tmp_path, rows()))[0] == "not measured yet"  # no noise scale measured


def test_the_committed_studies_are_judged_in_decision_words_only():
    results = Path(REPO_ROOT) / "results"
    for judge in (anchor_shallue, anchor_mccandlish):
        found, evidence = judge(results)
        assert found in WORDS and "reproduced" not in evidence


def test_the_sections_show_b_crit_with_its_interval_n_and_the_rule_and_choose_on_validation_under_it(tmp_path):
    summary = rows()
    # At 1024 a recipe whose fast seeds reached the target while its third never did: not the best recipe.
    summary.append({"recipe": "lucky", "global_batch": 1024, "steps_to_target": 60.0, "low": None, "high": None,
                    "seed_steps": [60.0], "reached": 1, "runs": 3, "upper_bound": False})
    assert {batch: row["recipe"] for batch, row in best_rows(summary).items()} == dict.fromkeys((128, 256, 512, 1024, 2048), "sqrt")
    results = study(tmp_path, summary, noise_scale=450.0)
    study(results, summary, noise_scale=450.0, name="critical_batch")
    for text in ("\n".join(section_steps_to_target(results)), "\n".join(section_critical_batch(results))):
        assert "Measured critical batch B_crit = 500 [" in text and "(5 batch sizes, 3 seeds or more each)" in text
        assert "The rule for a seed that never reaches the target: every seed must reach it" in text
        assert "Left out by it: lucky at 1024 (1 of 3 seeds reached)." in text
    table = "\n".join(section_steps_to_target(results))
    assert "| best recipe (validation) |" in table and "| 1024 | sqrt |" in table and "lucky |" not in table
    assert "chosen on validation, never on test" in table


def test_b_simple_is_read_from_the_histories_at_three_points_of_each_best_recipes_runs():
    """On the committed steps_to_target: the table's cells are medians of the ``noise_scale``
    column of the runs' history.csv at epoch 1, halfway to the target epoch and at it."""
    import csv
    import statistics

    results = Path(REPO_ROOT) / "results"
    report = json.loads((results / "steps_to_target" / "report.json").read_text())
    text = "\n".join(section_steps_to_target(results))
    summary = list(csv.DictReader((results / "steps_to_target" / "summary.csv").read_text().splitlines()))
    best = best_rows(report["steps_to_target"])
    batch = min(best)
    recipe = best[batch]["recipe"]
    at_target = [run for run in report["noise_scale"]["runs_at_target"] if run["global_batch"] == batch and run["recipe"] == recipe]
    values = []
    for run in at_target:
        run_id = next(row["run_id"] for row in summary
                      if row["label"] == recipe and int(row["global_batch"]) == batch and int(row["seed"]) == run["seed"])
        history = {int(row["epoch"]): float(row["noise_scale"])
                   for row in csv.DictReader((results / "steps_to_target" / "runs" / run_id / "history.csv").read_text().splitlines())}
        values.append((history[1], history[max(1, -(-run["epoch"] // 2))], history[run["epoch"]]))
    medians = [f"{statistics.median(column):.0f}" for column in zip(*values)]
    assert f"| {batch} | {recipe} | {' | '.join(medians)} | {len(at_target)} |" in text
    # The ratio's interval over B_crit's is stated beside the point.
    assert "x the measured B_crit [" in text and "over B_crit's interval" in text


def test_the_third_editions_steps_study_is_judged_only_on_itself(tmp_path):
    """Shallue's and McCandlish's third-edition rows read critical_batch_v3 alone: an earlier
    edition's study in the folder does not stand in for it."""
    results = study(tmp_path, rows(), noise_scale=450.0)
    assert anchor_shallue(results)[0] != "not measured yet"
    assert anchor_shallue(results, studies=("critical_batch_v3",)) == ("not measured yet", "critical_batch_v3 is not committed")
    study(results, rows(), noise_scale=450.0, name="critical_batch_v3")
    verdict, evidence = anchor_mccandlish(results, studies=("critical_batch_v3",))
    assert evidence.startswith("critical_batch_v3: B_simple / B_crit = 0.90")


def test_the_prediction_is_set_against_the_measurement_over_b_crits_interval_and_b_simples_range():
    """B_simple 150, from 100 to 240 over the batch sizes, against B_crit 500 over its interval
    [lo, hi]: the ratio 0.30 and [100 / hi, 240 / lo]."""
    fit = critical_batch(rows(), noise_scale=150.0, noise_scale_range=(100.0, 240.0), resamples=1000)
    low, high = fit.b_crit_interval
    assert fit.noise_scale_ratio_interval == pytest.approx((100 / high, 240 / low))
    assert predicted_text(fit.to_dict()) == (
        f"Predicted from the gradient noise scale: B_simple = 150 (at the target, the median over batch sizes; from 100 to 240 "
        f"over them), {150 / fit.b_crit:.2f}x the measured B_crit [{100 / high:.2f}, {240 / low:.2f}] over B_crit's interval "
        f"and B_simple's range.")
    # Thousands are separated alike in every number of the sentence.
    wide = {**fit.to_dict(), "noise_scale": 1500.0, "noise_scale_range": [1000.0, 2400.0]}
    assert "B_simple = 1,500 (at the target, the median over batch sizes; from 1,000 to 2,400 over them)" in predicted_text(wide)
    # A report.json written before B_simple had a range (the committed first and second editions): B_simple held fixed.
    older = {key: value for key, value in fit.to_dict().items() if key != "noise_scale_range"}
    assert predicted_text(older) == (
        f"Predicted from the gradient noise scale: B_simple = 150 (median over runs at the target), {150 / fit.b_crit:.2f}x "
        f"the measured B_crit [{150 / high:.2f}, {150 / low:.2f}] over B_crit's interval.")


def test_a_batch_no_recipe_fully_reached_is_shown_with_each_recipes_count_not_left_out(tmp_path):
    summary = rows() + [
        {"recipe": "sqrt", "global_batch": 4096, "steps_to_target": None, "low": None, "high": None, "seed_steps": [],
         "reached": 0, "runs": 3, "upper_bound": False},
        {"recipe": "half", "global_batch": 4096, "steps_to_target": 80.0, "low": None, "high": None, "seed_steps": [80.0],
         "reached": 1, "runs": 3, "upper_bound": False}]
    results = study(tmp_path, summary, noise_scale=450.0)
    lines = section_steps_to_target(results)
    table = [line for line in "\n".join(lines).splitlines() if line.startswith(("| 2048 |", "| 4096 |"))]
    assert table[0].startswith("| 2048 | sqrt |")
    assert table[1] == "| 4096 | none: no recipe's every seed reached it | - | sqrt 0 of 3, half 1 of 3 | - | - |"


def test_a_batch_reached_only_within_the_first_epoch_says_so_not_that_no_seed_reached_it(tmp_path):
    summary = rows() + [{"recipe": "sqrt", "global_batch": 16, "steps_to_target": 25.0, "low": None, "high": None,
                         "seed_steps": [25.0] * 3, "reached": 3, "runs": 3, "upper_bound": True}]
    lines = section_steps_to_target(study(tmp_path, summary, noise_scale=450.0))
    assert "| 16 | none: reached by the end of the first epoch, an upper bound only | - | sqrt 3 of 3 | - | - |" in "\n".join(lines)


def test_mccandlish_is_judged_over_b_simples_range_when_the_report_has_one(tmp_path):
    """B_crit's interval alone puts 450 / 500 well within [0.5, 2]; B_simple's range over the
    batch sizes [200, 900] stretches the ratio past 0.5 at the low end: inconclusive, with the
    range named. A range wholly above 2 x B_crit's interval is worse."""
    results = study(tmp_path, rows(), noise_scale=450.0, name="critical_batch_v3")
    fit = critical_batch(rows(), noise_scale=450.0, resamples=1000)
    low, high = fit.b_crit_interval
    assert 0.5 <= 450 / high and 450 / low <= 2
    assert anchor_mccandlish(results, ("critical_batch_v3",))[0] == "matches"
    study(results, rows(), fit=critical_batch(rows(), noise_scale=450.0, noise_scale_range=(200.0, 900.0), resamples=1000),
          name="critical_batch_v3")
    verdict, evidence = anchor_mccandlish(results, ("critical_batch_v3",))
    assert verdict == "inconclusive" and 200 / high < 0.5
    assert evidence.startswith(f"critical_batch_v3: B_simple / B_crit = {450 / fit.b_crit:.2f} [{200 / high:.2f}, {900 / low:.2f}], "
                               "B_simple = 450 (at the target, the median over batch sizes of each batch's median; its range "
                               "over them [200, 900] included)")
    study(results, rows(), fit=critical_batch(rows(), noise_scale=3000.0, noise_scale_range=(2.5 * high, 4000.0), resamples=1000),
          name="critical_batch_v3")
    assert anchor_mccandlish(results, ("critical_batch_v3",))[0] == "worse"
