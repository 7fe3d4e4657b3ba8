"""steps_to_target, the first edition's critical_batch and the third's critical_batch_v3 (steps
to a target against the batch, the critical batch fitted to them), and the anchors judged on
them: Shallue et al. 2018 and McCandlish et al. 2018.

Both anchors are judged on B_crit's interval over seeds (``CriticalBatchFit.b_crit_interval``:
the hull of a seed bootstrap and the leave-one-seed-out range, ``lbtrain.reports.scaling_laws``),
McCandlish's also on B_simple's range over the batch sizes where the report gives it, and say
only *matches*, *worse* or *inconclusive* (*not measured yet* when the study is absent):

- **Shallue et al.** (steps fall with the batch, then with diminishing returns, as
  ``S(B) = S_min (1 + B_crit / B)``): *matches* when the fit over at least ``MIN_FIT_POINTS``
  batch sizes misses the measured steps by at most ``FIT_RMS_TOLERANCE`` (relative rms) and
  B_crit's whole interval lies within the batches measured (the bend is seen, not
  extrapolated); *worse* when the relative rms exceeds the tolerance (the curve's shape does not
  fit the steps, whatever B_crit); *inconclusive* otherwise (fewer points, no interval, or an
  interval reaching outside the measured batches).
- **McCandlish et al.** (the gradient noise scale predicts the critical batch):
  ``B_simple / B_crit`` over B_crit's interval and B_simple's range over the batch sizes
  (``CriticalBatchFit.noise_scale_ratio_interval``; over B_crit's interval alone in a report.json
  written before the range); *matches* when the whole interval lies within
  ``[1 / RATIO_TOLERANCE, RATIO_TOLERANCE]``, *worse* when it lies wholly outside, *inconclusive*
  otherwise or without an interval.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Any

from lab.results_page.common import FIT_RMS_TOLERANCE, MIN_FIT_POINTS, figure_lines, opening, shown, study_json
from lbtrain.reports.scaling_laws import CriticalBatchFit, counts_in_fit
from lbtrain.reports.statistics import Estimate
from lbtrain.reports.tables import markdown_table, read_summary
from lbtrain.results import FIGURE_STEPS_TO_TARGET, HISTORY_FILE, REPORT_JSON, RUNS_FOLDER, SUMMARY_FILE

# McCandlish et al.'s prediction "matches" when B_simple / B_crit lies within this factor of 1.
RATIO_TOLERANCE = 2.0


def shallue_region(batch: int, b_crit: float) -> str:
    """Shallue et al.'s regions by the fitted S(B) = S_min (1 + B_crit / B): perfect scaling while
    the samples needed stay within 10% of their minimum (B <= B_crit / 10), no further gain once
    the steps are within 10% of theirs (B >= 10 B_crit), diminishing returns between."""
    if batch <= b_crit / 10:
        return "perfect scaling"
    return "no further gain" if batch >= 10 * b_crit else "diminishing returns"


def _interval(interval: tuple[float, float] | None, digits: int) -> str:
    """``[192, 271]``; an unbounded upper end as ``unbounded``."""
    if interval is None:
        return ""
    high = "unbounded" if not math.isfinite(interval[1]) else f"{interval[1]:.{digits}f}"
    return f"[{interval[0]:.{digits}f}, {high}]"


def b_crit_text(fit: CriticalBatchFit) -> str:
    """``B_crit = 237 [192, 271] (6 batch sizes, 3 seeds or more each)``, or the point and why it
    has no interval."""
    if fit.b_crit_interval is None:
        return f"B_crit = {fit.b_crit:.0f} (no interval: {fit.interval_note}; {fit.batches} batch sizes)"
    return f"B_crit = {fit.b_crit:.0f} {_interval(fit.b_crit_interval, 0)} ({fit.batches} batch sizes, {fit.seeds} seeds or more each)"


def _rule_text(data: dict[str, Any]) -> str:
    """The fit's rule for a seed that never reaches the target, and what it left out."""
    rule = data.get("rule")
    if rule is None:
        return "The rule for a seed that never reaches the target is not recorded in this report.json (fitted before it)."
    return f"The rule for a seed that never reaches the target: {rule}. Left out by it: {CriticalBatchFit.from_dict(data).excluded_text()}."


def fit_text(data: dict[str, Any]) -> str:
    """The fit's sentence for a section: B_crit with its interval and n, S_min, the error, how the
    interval was made and the rule; or why there is no fit."""
    fit = CriticalBatchFit.from_dict(data)
    if not fit.fitted:
        return f"No critical-batch fit: {fit.note}. {_rule_text(data)}"
    s_min = "" if fit.s_min_interval is None else f" {_interval(fit.s_min_interval, 1)}"
    if fit.b_crit_interval is None:
        how = ""
    elif fit.interval_method == "profile":
        how = f" B_crit and its interval by profile likelihood (the F-profile of the weighted fit): {fit.interval_text()}."
    else:
        how = (f" Interval: the hull of a {100 * fit.level:.0f}% seed bootstrap and the leave-one-seed-out range "
               f"({fit.interval_text()}).")
    return (f"Measured critical batch {b_crit_text(fit)}, S_min = {fit.s_min:.1f}{s_min} steps, relative rms error "
            f"{100 * fit.relative_rms:.1f}%.{how} {_rule_text(data)}")


def best_rows(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per global batch, the row standing for it in the fit: the fewest mean steps among the rows
    whose every seed reached the target (``counts_in_fit``). Chosen on the steps to the
    *validation* target (the report's metric), never on test accuracy."""
    best: dict[int, dict[str, Any]] = {}
    for row in rows:
        if counts_in_fit(row) and (row["global_batch"] not in best or row["steps_to_target"] < best[row["global_batch"]]["steps_to_target"]):
            best[row["global_batch"]] = row
    return best


def section_steps_to_target(results: Path, study: str = "steps_to_target",
                            title: str = "steps to a target against the batch, with the LR chosen per batch",
                            command: str = "lbtrain run experiments/steps_to_target.yaml") -> list[str]:
    """A steps-to-target study: per batch the recipe with the fewest steps to the target, the fit
    of S(B), B_simple against the measured B_crit, and B_simple over training (``noise_table``)."""
    lines, report = opening(results, study, title, REPORT_JSON, command)
    if report is None:
        return lines
    fit = report["critical_batch"]
    fitted = {r["global_batch"]: r["fitted_steps"] for r in fit.get("residuals") or []}
    b_crit = fit.get("b_crit")
    best = best_rows(report["steps_to_target"])
    table = [[batch, row["recipe"], shown(Estimate(row["steps_to_target"], row["low"], row["high"], row["reached"]), 0),
              f"{row['reached']} of {row['runs']}", "-" if batch not in fitted else f"{fitted[batch]:.0f}",
              "-" if b_crit is None else shallue_region(batch, b_crit)] for batch, row in sorted(best.items())]
    table = sorted(table + unreached_rows(report["steps_to_target"], best), key=lambda cells: cells[0])
    text = fit_text(fit)
    if fit.get("noise_scale_ratio") is not None:
        text += " " + predicted_text(fit)
    noise = noise_table(results, study, report, best)
    return lines + [f"Steps to {report['metric']} {report['target']} (experiments/{study}.yaml): per batch the recipe "
                    f"with the fewest mean steps to the `{report['metric']}` target (chosen on validation, never on test), among "
                    "the recipes whose every seed reached it, with its interval over those seeds. "
                    f"[report]({study}/report.md)", "",
                    markdown_table(["global batch", "best recipe (validation)", "steps [95% CI] (n)", "seeds reaching", "fit", "region"], table),
                    "", text, "", *noise, *figure_lines(results, study, FIGURE_STEPS_TO_TARGET, "steps to the target against the global batch")]


def unreached_rows(rows: list[dict[str, Any]], best: dict[int, dict[str, Any]]) -> list[list[Any]]:
    """Table rows for the batches with no point in the fit, each recipe's seeds that reached the
    target beside it: where no recipe's every seed reached it (scaling stopped reaching the
    target within its budget), or where those that did reached it by the end of the first
    epoch (a count that is only an upper bound)."""
    missing: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        if row["global_batch"] not in best:
            missing.setdefault(row["global_batch"], []).append(row)
    found = []
    for batch, held in sorted(missing.items()):
        why = ("none: reached by the end of the first epoch, an upper bound only"
               if any(row["reached"] == row["runs"] and row.get("upper_bound") for row in held)
               else "none: no recipe's every seed reached it")
        found.append([batch, why, "-", ", ".join(f"{row['recipe']} {row['reached']} of {row['runs']}" for row in held), "-", "-"])
    return found


def predicted_text(fit: dict[str, Any]) -> str:
    """McCandlish et al.'s prediction against the measurement, in numbers: B_simple at the
    target (with its range over the batch sizes, and over the second half of training to the
    target, when the report has them) and B_simple / B_crit over B_crit's interval and those
    ranges (``CriticalBatchFit.noise_scale_ratio_interval``)."""
    measured_fit = CriticalBatchFit.from_dict(fit)
    ratio, spread = measured_fit.noise_scale_ratio_interval, measured_fit.noise_scale_range
    training = measured_fit.noise_scale_training_range
    if spread is None:
        measured = f"B_simple = {fit['noise_scale']:,.0f} (median over runs at the target)"
        over = "over B_crit's interval"
    else:
        measured = (f"B_simple = {fit['noise_scale']:,.0f} (at the target, the median over batch sizes; from {spread[0]:,.0f} to "
                    f"{spread[1]:,.0f} over them" + ("" if training is None else
                                                     f"; from {training[0]:,.0f} to {training[1]:,.0f} over the second half of "
                                                    "each run's way to the target") + ")")
        over = "over B_crit's interval and B_simple's range" + ("" if training is None else "s (their hull)")
    return (f"Predicted from the gradient noise scale: {measured}, {fit['noise_scale_ratio']:.2f}x the measured B_crit"
            + ("" if ratio is None else f" {_interval(ratio, 2)} {over}") + ".")


def noise_table(results: Path, study: str, report: dict[str, Any], best: dict[int, dict[str, Any]]) -> list[str]:
    """B_simple measured during training (the ``noise_scale`` column of each run's
    ``history.csv``, at each epoch end the ratio of the moving averages of the in-step estimates)
    at three points of the
    runs of each batch's best recipe: the first epoch's end, the epoch halfway to the target and
    the epoch reaching it (``noise_scale.runs_at_target`` of report.json); the median over those
    seeds, with their count, and a cell's own n where some seeds logged no value there
    (undetermined). Empty when the report has no runs at the target."""
    at_target = (report.get("noise_scale") or {}).get("runs_at_target") or []
    if not at_target:
        return []
    histories = _noise_histories(results / study)
    rows = []
    for batch, row in sorted(best.items()):
        runs = [run for run in at_target if run["global_batch"] == batch and run["recipe"] == row["recipe"] and run["epoch"]]
        points: list[list[float]] = [[], [], []]
        for run in runs:
            history = histories.get((run["recipe"], batch, run["seed"]), {})
            for index, epoch in enumerate((1, max(1, math.ceil(run["epoch"] / 2)), run["epoch"])):
                if history.get(epoch) is not None:
                    points[index].append(history[epoch])
        cells = [("-" if not values else f"{statistics.median(values):.0f}") +
                 (f" (n={len(values)})" if len(values) < len(runs) else "") for values in points]
        rows.append([batch, row["recipe"], *cells, len(runs)])
    if not rows:
        return []
    return ["B_simple measured during training, median over the seeds of each batch's best recipe (each run's epoch-end "
            "ratio of the moving averages of the in-step estimates of tr(Sigma) and |G|^2; n in a cell where some seeds logged "
            "none there, undetermined; B_simple grows as the loss falls, so it is read at three points):", "",
            markdown_table(["global batch", "recipe", "after epoch 1", "halfway to the target", "at the target", "seeds"], rows), ""]


def _noise_histories(folder: Path) -> dict[tuple[str, int, int], dict[int, float]]:
    """Per (label, global batch, seed): the epoch-end ``noise_scale`` of the run's history."""
    summary = folder / SUMMARY_FILE
    if not summary.is_file():
        return {}
    histories = {}
    for row in read_summary(summary):
        path = folder / RUNS_FOLDER / str(row["run_id"]) / HISTORY_FILE
        if not path.is_file():
            continue
        with path.open(newline="") as handle:
            epochs = {int(line["epoch"]): float(line["noise_scale"]) for line in csv.DictReader(handle)
                      if line.get("noise_scale") not in (None, "")}
        histories[(str(row["label"]), int(row["global_batch"]), int(row["seed"]))] = epochs
    return histories


def section_critical_batch(results: Path) -> list[str]:
    lines, report = opening(results, "critical_batch", "measured vs predicted critical batch", REPORT_JSON, "lbtrain run experiments/critical_batch.yaml")
    if report is None:
        return lines
    fit = report["critical_batch"]
    if fit.get("b_crit") is None:
        return lines + [fit_text(fit), ""]
    table = markdown_table(["global batch", *[str(r["global_batch"]) for r in fit["residuals"]]],
                           [["fewest steps to target (best recipe)", *[f"{r['steps']:.0f}" for r in fit["residuals"]]],
                            ["fit S_min (1 + B_crit / B)", *[f"{r['fitted_steps']:.0f}" for r in fit["residuals"]]]])
    noise = ("" if fit.get("noise_scale_ratio") is None else
             f" The gradient noise scale logged when each run reached the target, median B_simple = {fit['noise_scale']:.0f}, is "
             f"{fit['noise_scale_ratio']:.2f}x the measured B_crit (results/advisor_validation for why it runs low).")
    return lines + [f"Steps to {report['metric']} {report['target']}. [report](critical_batch/report.md)", "", table, "",
                    fit_text(fit) + noise, "",
                    *figure_lines(results, "critical_batch", FIGURE_STEPS_TO_TARGET, "steps to the target against the global batch")]


# The steps-to-target studies of the second and the first edition: the judges read the first committed.
EARLIER_STEPS_STUDIES = ("steps_to_target", "critical_batch")


def _steps_study(results: Path, studies: tuple[str, ...]) -> tuple[str, dict[str, Any] | None]:
    """The steps-to-target study to judge by: the first of ``studies`` committed."""
    for study in studies:
        report = study_json(results, study, REPORT_JSON)
        if report is not None:
            return study, report
    return studies[0], None


SHALLUE_RULE = (f"matches: relative rms within {100 * FIT_RMS_TOLERANCE:.0f}% and B_crit's interval inside the measured "
                f"batches; worse: rms above {100 * FIT_RMS_TOLERANCE:.0f}%; inconclusive otherwise")


def anchor_shallue(results: Path, studies: tuple[str, ...] = EARLIER_STEPS_STUDIES) -> tuple[str, str]:
    """Shallue et al.'s curve, judged as the module doc says on the first of ``studies`` committed."""
    study, report = _steps_study(results, studies)
    if report is None:
        return "not measured yet", f"{study} is not committed"
    fit = CriticalBatchFit.from_dict(report["critical_batch"])
    if not fit.fitted or fit.batches < MIN_FIT_POINTS:
        return "inconclusive", f"{study}: no fit ({fit.note}; a fit needs {MIN_FIT_POINTS} batch sizes) — rule: {SHALLUE_RULE}"
    measured = [point["global_batch"] for point in fit.residuals]
    low, high = min(measured), max(measured)
    interval = fit.b_crit_interval
    inside = interval is not None and low <= interval[0] and interval[1] <= high
    follows = fit.relative_rms <= FIT_RMS_TOLERANCE
    verdict = "worse" if not follows else "matches" if inside else "inconclusive"
    where = ("" if interval is None else
             f", {'inside' if inside else 'reaching outside'} the measured batches {low} to {high}")
    return verdict, (f"{study}: S(B) = S_min (1 + B_crit / B) over {fit.batches} batch sizes, relative rms error "
                     f"{100 * fit.relative_rms:.1f}% ({'within' if follows else 'above'} {100 * FIT_RMS_TOLERANCE:.0f}%); "
                     f"{b_crit_text(fit)}{where} — rule: {SHALLUE_RULE}")


def anchor_mccandlish(results: Path, studies: tuple[str, ...] = EARLIER_STEPS_STUDIES) -> tuple[str, str]:
    """McCandlish et al.'s prediction, judged as the module doc says on the first of ``studies`` committed."""
    study, report = _steps_study(results, studies)
    if report is None or report["critical_batch"].get("noise_scale") is None:
        return "not measured yet", f"{study} with a noise scale is not committed"
    fit = CriticalBatchFit.from_dict(report["critical_batch"])
    ratio, interval = fit.noise_scale_ratio, fit.noise_scale_ratio_interval
    bounds = f"[{1 / RATIO_TOLERANCE:.1f}, {RATIO_TOLERANCE:.0f}]"
    rule = f"matches when the whole interval lies within {bounds}, worse when wholly outside, inconclusive otherwise"
    if ratio is None:
        return "inconclusive", f"{study}: no positive B_crit to compare B_simple with ({fit.note or 'B_crit = 0'}) — rule: {rule}"
    if interval is None:
        return "inconclusive", (f"{study}: B_simple / B_crit = {ratio:.2f} with no interval ({fit.interval_note}) — rule: {rule}")
    low, high = interval
    within = 1 / RATIO_TOLERANCE <= low and high <= RATIO_TOLERANCE
    outside = high < 1 / RATIO_TOLERANCE or low > RATIO_TOLERANCE
    verdict = "matches" if within else "worse" if outside else "inconclusive"
    training = fit.noise_scale_training_range
    measured = ("median over runs, read when each reached the target; its own spread not included"
                if fit.noise_scale_range is None else
                "at the target, the median over batch sizes of each batch's median; its range over them "
                f"{_interval(fit.noise_scale_range, 0)}" + ("" if training is None else
                                                           f" and over the second half of each run's way to the target "
                                                           f"{_interval(training, 0)}") + " included")
    return verdict, (f"{study}: B_simple / B_crit = {ratio:.2f} {_interval(interval, 2)}, B_simple = {fit.noise_scale:.0f} "
                     f"({measured}) over {b_crit_text(fit)} — "
                     f"rule: {rule}. B_simple equals the noise scale B_noise only when the Hessian is a multiple of the identity")
