"""steps_to_target and the first edition's critical_batch (steps to a target against the batch,
the critical batch fitted to them), and the anchors judged on them: Shallue et al. 2018 and
McCandlish et al. 2018."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lbtrain.reports.results_page.common import FIT_RMS_TOLERANCE, MIN_FIT_POINTS, figure_lines, opening, study_json
from lbtrain.reports.statistics import Estimate
from lbtrain.reports.tables import markdown_table
from lbtrain.results import FIGURE_STEPS_TO_TARGET, REPORT_JSON


def shallue_region(batch: int, b_crit: float) -> str:
    """Shallue et al.'s regions by the fitted S(B) = S_min (1 + B_crit / B): perfect scaling while
    the samples needed stay within 10% of their minimum (B <= B_crit / 10), no further gain once
    the steps are within 10% of theirs (B >= 10 B_crit), diminishing returns between."""
    if batch <= b_crit / 10:
        return "perfect scaling"
    return "no further gain" if batch >= 10 * b_crit else "diminishing returns"


def section_steps_to_target(results: Path) -> list[str]:
    lines, report = opening(results, "steps_to_target", "steps to a target against the batch, with the LR chosen per batch", REPORT_JSON, "lbtrain run experiments/steps_to_target.yaml")
    if report is None:
        return lines
    rows = [row for row in report["steps_to_target"] if row["steps_to_target"] is not None]
    best = {}
    for row in rows:
        if row["global_batch"] not in best or row["steps_to_target"] < best[row["global_batch"]]["steps_to_target"]:
            best[row["global_batch"]] = row
    fit = report["critical_batch"]
    fitted = {r["global_batch"]: r["fitted_steps"] for r in fit.get("residuals") or []}
    b_crit = fit.get("b_crit")
    table = [[batch, row["recipe"], ("≤" if row["upper_bound"] else "") + Estimate(row["steps_to_target"], row["low"], row["high"], row["reached"]).describe(0),
              f"{row['reached']} of {row['runs']}", "-" if batch not in fitted else f"{fitted[batch]:.0f}",
              "-" if b_crit is None else shallue_region(batch, b_crit)] for batch, row in sorted(best.items())]
    if b_crit is None:
        text = f"Not enough batch sizes reach the target to fit ({fit['batches']}; a fit needs at least {fit['min_batches']})."
    else:
        text = (f"Measured critical batch B_crit = {b_crit:.0f}, S_min = {fit['s_min']:.1f} steps, on {fit['batches']} batch sizes "
                f"(relative rms error {100 * fit['relative_rms']:.1f}%).")
        if fit.get("noise_scale") is not None:
            text += (f" Predicted from the gradient noise scale: B_simple = {fit['noise_scale']:.0f} (median over runs at the "
                     f"target), {fit['noise_scale_ratio']:.2f}x the measured B_crit.")
    return lines + [f"Steps to {report['metric']} {report['target']} (experiments/steps_to_target.yaml): per batch the recipe "
                    "with the fewest mean steps (selected on validation), with its interval over the seeds that reached the "
                    "target. [report](steps_to_target/report.md)", "",
                    markdown_table(["global batch", "best recipe", "steps [95% CI] (n)", "seeds reaching", "fit", "region"], table),
                    "", text, "", *figure_lines(results, "steps_to_target", FIGURE_STEPS_TO_TARGET, "steps to the target against the global batch")]


def section_critical_batch(results: Path) -> list[str]:
    lines, report = opening(results, "critical_batch", "measured vs predicted critical batch", REPORT_JSON, "lbtrain run experiments/critical_batch.yaml")
    if report is None:
        return lines
    fit = report["critical_batch"]
    if fit.get("b_crit") is None:
        return lines + [f"Not enough batch sizes reach the target to fit ({fit['batches']} of the {fit['min_batches']} needed).", ""]
    table = markdown_table(["global batch", *[str(r["global_batch"]) for r in fit["residuals"]]],
                           [["fewest steps to target (best recipe)", *[f"{r['steps']:.0f}" for r in fit["residuals"]]],
                            ["fit S_min (1 + B_crit / B)", *[f"{r['fitted_steps']:.0f}" for r in fit["residuals"]]]])
    noise = ("" if fit.get("noise_scale") is None else
             f" The gradient noise scale logged when each run reached the target, median B_simple = {fit['noise_scale']:.0f}, is "
             f"{fit['noise_scale_ratio']:.2f}x the measured B_crit (results/advisor_validation for why it runs low).")
    return lines + [f"Steps to {report['metric']} {report['target']}. [report](critical_batch/report.md)", "", table, "",
                    f"Measured critical batch B_crit = {fit['b_crit']:.0f}, S_min = {fit['s_min']:.1f} steps, fitted on "
                    f"{fit['batches']} batch sizes (relative rms error {100 * fit['relative_rms']:.1f}%)." + noise, "",
                    *figure_lines(results, "critical_batch", FIGURE_STEPS_TO_TARGET, "steps to the target against the global batch")]


def _steps_study(results: Path) -> tuple[str, dict[str, Any] | None]:
    """The steps-to-target study to judge by: the second edition where committed, else the first."""
    for study in ("steps_to_target", "critical_batch"):
        report = study_json(results, study, REPORT_JSON)
        if report is not None:
            return study, report
    return "steps_to_target", None


def anchor_shallue(results: Path) -> tuple[str, str]:
    study, report = _steps_study(results)
    if report is None:
        return "not measured yet", f"{study} is not committed"
    fit = report["critical_batch"]
    if fit.get("b_crit") is None or fit["batches"] < MIN_FIT_POINTS:
        return "not measurable", f"{fit['batches']} batch sizes reach the target (a fit needs {MIN_FIT_POINTS})"
    follows = fit["relative_rms"] <= FIT_RMS_TOLERANCE
    return ("reproduced" if follows else "not reproduced"), (
        f"{study}: S(B) = S_min (1 + B_crit / B) fitted over {fit['batches']} batch sizes with relative rms error "
        f"{100 * fit['relative_rms']:.1f}% ({'within' if follows else 'above'} {100 * FIT_RMS_TOLERANCE:.0f}%): "
        f"near-perfect scaling below B_crit = {fit['b_crit']:.0f}, diminishing returns above")


def anchor_mccandlish(results: Path) -> tuple[str, str]:
    study, report = _steps_study(results)
    if report is None or report["critical_batch"].get("noise_scale_ratio") is None:
        return "not measured yet", f"{study} with a noise scale is not committed"
    ratio = report["critical_batch"]["noise_scale_ratio"]
    verdict = "reproduced" if 0.5 <= ratio <= 2 else "not reproduced"
    return verdict, (f"{study}: B_simple, read when each run reached the target, is {ratio:.2f}x the measured B_crit (B_simple "
                     "equals the noise scale B_noise only when the Hessian is a multiple of the identity)")
