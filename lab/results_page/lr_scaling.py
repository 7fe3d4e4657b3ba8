"""The tuned LR against the batch: adam_scaling (Adam, tuned with equal budgets) and the first
edition's goyal_sweep (momentum SGD, one sweep per world size), and the anchor judged on
adam_scaling: Malladi et al. 2022 (Adam's LR should grow as the square root of the batch), whose
rule on a fit (``sqrt_rule_claim``) judges the fourth edition's adam_vit_v4 too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.results_page.arms import no_ok_seed, run_labels
from lab.results_page.common import (
    MIN_FIT_POINTS,
    as_estimate,
    departure_claim,
    figure_lines,
    judged_points,
    opening,
    shown,
    study_json,
    study_runs,
)
from lbtrain.reports.decisions import INCONCLUSIVE, MATCHES, WORSE
from lbtrain.reports.tables import markdown_table
from lbtrain.results import FIGURE_ACCURACY_VS_BATCH, FIGURE_SWEEP_LR_VS_BATCH, PROTOCOL_FILE, REPORT_JSON


def section_adam_scaling(results: Path) -> list[str]:
    lines, protocol = opening(results, "adam_scaling", "Adam's tuned LR against the batch", PROTOCOL_FILE, "lbtrain sweep experiments/adam_scaling.yaml")
    if protocol is None:
        return lines
    fit, runs = protocol["lr_fits"]["adam"], study_runs(results, "adam_scaling")
    reference = next(row for row in protocol["rows"] if row["rule_name"] == "reference")

    def rule_cell(row: dict[str, Any]) -> str:
        if row["rule"]["mean"] is not None or row["rule_name"] == "reference":
            return shown(as_estimate(row["rule"]))
        return no_ok_seed({"run_labels": run_labels(row, "rule"), "world_size": row["world_size"]}, runs)

    table = [[row["world_size"], row["global_batch"], row["rule_name"], rule_cell(row),
              judged_points(row["rule_minus_reference"]) if row["rule_minus_reference"] else "-", shown(as_estimate(row["tuned"])),
              judged_points(row["tuned_minus_reference"]) if row["tuned_minus_reference"] else "-"]
             for row in protocol["rows"]]
    tuned = markdown_table(["global batch", "ok trials", "tuned LR (geometric mean of the top 3)"],
                           [[b["global_batch"], b["ok_trials"], "-" if b["learning_rate"] is None else f"{b['learning_rate']:.3g}"]
                            for b in fit["batches"]])
    verdict, evidence = anchor_malladi(results)
    return lines + [f"The MNIST-1D cnn with Adam (experiments/adam_scaling.yaml): each rule carries the LR tuned at batch "
                    f"{reference['global_batch']}. One reference: Adam tuned at batch {reference['global_batch']} "
                    f"({shown(as_estimate(reference['tuned']))}); *− reference*: test accuracy minus the reference's, in points, "
                    "with its 95% Welch interval and the claim on it. [protocol](adam_scaling/protocol.md)", "",
                    markdown_table(["world", "global batch", "rule", "rule: test acc", "rule − reference", "tuned: test acc",
                                    "tuned − reference"], table), "", tuned, "", f"{evidence[0].upper()}{evidence[1:]}: **{verdict}**.", "",
                    *figure_lines(results, "adam_scaling", FIGURE_ACCURACY_VS_BATCH, "test accuracy against the global batch")]


# Malladi et al. 2022's square-root rule: the exponent of the batch it claims, and how far the
# fitted exponent may lie from it (module doc of ``anchor_malladi``).
SQRT_EXPONENT = 0.5
EXPONENT_TOLERANCE = 0.15


def anchor_malladi(results: Path) -> tuple[str, str]:
    """Malladi et al. 2022 judged on adam_scaling: its ``lr_fits`` of Adam (protocol.json) by
    ``sqrt_rule_claim``."""
    protocol = study_json(results, "adam_scaling", PROTOCOL_FILE)
    if protocol is None:
        return "not measured yet", "adam_scaling is not committed"
    return sqrt_rule_claim(protocol["lr_fits"]["adam"])


def sqrt_rule_claim(fit: dict[str, Any]) -> tuple[str, str]:
    """Malladi et al. 2022: Adam's tuned LR grows as batch^0.5. Judged on a fit of the tuned LR
    against the batch (a record of ``lr_fits`` in protocol.json, or of ``lr_exponent`` in
    ``lbtrain scale``'s answer.json: ``alpha``, its 95% interval, ``points``, ``batches``) by the
    interval of the fitted exponent against 0.5 with the tolerance ``EXPONENT_TOLERANCE`` = 0.15
    (``departure_claim``): ``matches`` when the whole interval lies within [0.35, 0.65], ``worse``
    when it lies wholly outside, ``inconclusive`` otherwise and when the fit has fewer than
    ``MIN_FIT_POINTS`` batch sizes. Why 0.15: the band keeps 0.35 away from both competing rules
    (no scaling, 0, and the linear rule, 1), and over the batches fitted (a ratio R between the
    largest and the smallest) an exponent off by 0.15 moves the rule's LR at the largest batch by
    R^0.15 (1.9x for adam_scaling's 64x), under one step of a log2 LR grid; the evidence renders
    that factor from the data."""
    if fit["alpha"] is None:
        return INCONCLUSIVE, f"Adam's tuned LR: {fit['note']}"
    low, high = fit["alpha_95_low"], fit["alpha_95_high"]
    interval = "no interval" if low is None or high is None else f"95% interval {low:.2f} to {high:.2f}"
    band = f"{SQRT_EXPONENT - EXPONENT_TOLERANCE:.2f} to {SQRT_EXPONENT + EXPONENT_TOLERANCE:.2f}"
    batches = [b["global_batch"] for b in fit.get("batches", []) if b.get("learning_rate") is not None]
    factor = (f"; an exponent off by {EXPONENT_TOLERANCE} moves the LR at {max(batches) // min(batches)}x the smallest batch "
              f"by {(max(batches) / min(batches)) ** EXPONENT_TOLERANCE:.1f}x") if len(batches) >= 2 else ""
    if fit["points"] < MIN_FIT_POINTS:
        return INCONCLUSIVE, f"Adam's tuned LR fitted over {fit['points']} batch sizes (a fit needs {MIN_FIT_POINTS})"
    verdict = departure_claim(low, high, SQRT_EXPONENT, EXPONENT_TOLERANCE)
    where = ("no interval to set against" if low is None or high is None else
             {MATCHES: "the interval lies within", WORSE: "the interval lies wholly outside"}.get(verdict, "the interval overlaps an edge of"))
    return verdict, (f"Adam's tuned LR grows as batch^{fit['alpha']:.2f} ({interval}) over {fit['points']} batch sizes: {where} "
                     f"the sqrt rule's band {band} ({SQRT_EXPONENT} ± {EXPONENT_TOLERANCE}){factor}")


def section_goyal_sweep(results: Path) -> list[str]:
    lines, report = opening(results, "goyal_sweep", "the LR tuned per world size (one sweep per world size)", REPORT_JSON, "lbtrain sweep experiments/goyal_sweep.yaml")
    if report is None:
        return lines
    sweep = report["sweep"]
    table = [[row["world_size"], row["global_batch"], row["complete"] + row["pruned"], row["diverged"] + row["collapsed"],
              f"{row['best_learning_rate']:.3g}", f"{row['best_validation_accuracy']:.3f}", f"{row['best_test_accuracy']:.3f}"]
             for row in sweep["rows"]]
    fit = sweep["fit"]
    text = (f"Not enough batch sizes to fit the tuned LR against the batch ({len(sweep['rows'])}; a fit needs at least "
            f"{MIN_FIT_POINTS})." if fit is None or fit.get("alpha") is None or fit["points"] < MIN_FIT_POINTS else
            f"The tuned LR grows as batch^alpha with alpha = {fit['alpha']:.2f} (95% bootstrap interval {fit['alpha_95_low']:.2f} "
            f"to {fit['alpha_95_high']:.2f} over the top {fit['top_k']} ok trials of each of {fit['points']} batch sizes). "
            "One seed per trial: the protocol mode (goyal_bn) re-runs each arm's best with 3 seeds.")
    return lines + ["[report](goyal_sweep/report.md)", "",
                    markdown_table(["world", "global batch", "trials", "diverged or collapsed", "best LR", "best validation",
                                    "its test accuracy (one seed)"], table), "", text, "",
                    *figure_lines(results, "goyal_sweep", FIGURE_SWEEP_LR_VS_BATCH, "tuned LR against the global batch")]
