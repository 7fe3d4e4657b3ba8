"""``lbtrain report results/<name>``: an experiment's runs (and sweep, if any) as ``report.md``,
``report.json`` and ``figures/*.png``.

Sections: accuracy and generalization gap per recipe and global batch (mean, 95% Student-t
interval, n and df over seeds; ``lbtrain.reports.statistics``), each arm's difference from the
table's one stated reference (``lbtrain.reports.tables.reference_group``) with its claim
(``lbtrain.reports.decisions``) and its standing among the arms at its batch on validation
accuracy (never test); learning curves per world size; the learning-rate schedules the runs applied; steps to a target
validation accuracy per batch size with the perfect-scaling line (Shallue et al. 2018) and the
critical batch fitted to them (McCandlish et al. 2018) beside the measured gradient noise
scale; sharpness (Keskar et al. 2017), the top Hessian eigenvalue (Yao et al. 2020) and the
magnitude-aware PAC-Bayes flatness (Jiang et al. 2020) when measured; the sweep's tuned
learning rate per batch with linear and sqrt reference lines; and a plain list of where a
recipe failed.

Numbers in prose come from the data: every sentence that states a number is a template filled
from a record that ``report.json`` holds (``lbtrain.reports.prose`` checks it). Figures are
drawn from records built here (``Line``, ``Mark``), one colour per recipe in every figure.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

from lbtrain.files import write_atomic, write_json_atomic
from lbtrain.measures.noise_scale import simple_noise_scale
from lbtrain.measures.steps_to_target import measured_points, steps_to_target
from lbtrain.reports.decisions import DEFAULT_CLAIM_MARGIN, MIN_CLAIM_SEEDS, WORSE, claim, trained_share_claim
from lbtrain.reports.plots import Line, Mark, plot_panels, recipe_colors
from lbtrain.reports.scaling_laws import (
    PROFILE_METHOD,
    SEED_RULE,
    CriticalBatchFit,
    counts_in_fit,
    critical_batch,
    reachable_target,
)
from lbtrain.reports.statistics import DEFAULT_LEVEL, Estimate
from lbtrain.reports.tables import (
    Aggregate,
    RunRecord,
    aggregate,
    column,
    differences_from_reference,
    experiment_record,
    final_metric,
    load_records,
    markdown_table,
    peak_values,
    read_summary,
    recipes,
    standings_by_batch,
    trained_seconds,
)
from lbtrain.results import (
    FIGURE_ACCURACY_VS_BATCH,
    FIGURE_GAP_VS_BATCH,
    FIGURE_LEARNING_CURVES,
    FIGURE_LR_SCHEDULES,
    FIGURE_SHARPNESS_VS_BATCH,
    FIGURE_STEPS_TO_TARGET,
    FIGURE_SWEEP_LR_VS_BATCH,
    FIGURES_FOLDER,
    REPORT_FILE,
    REPORT_JSON,
    STATUSES,
    SUMMARY_FILE,
    SWEEP_FIT_FILE,
    SWEEP_SUMMARY_FILE,
    accuracy_name,
    check_output_folder,
    finite_or_none,
    folder_experiment,
)

BATCH_AXIS = {"xlabel": "global batch", "log2_x": True}
# The claim of an arm none of whose runs ended ok: no accuracy to take a difference of, so its
# claim counts how many runs of it and of the reference ended ok (as lbtrain scale's answer does).
SHARE_CLAIMS_SENTENCE = ("Arms with no ok run have no difference of accuracies: their *claim* compares how many of their runs "
                         "ended ok with the reference's (Fisher's exact test, one-sided at 2.5%, the level of each bound of a "
                         "95% interval):")


class ReportError(ValueError):
    """A results folder a report cannot be made of; the message is one line."""


def _estimate_record(estimate: Estimate | None) -> dict[str, Any] | None:
    return None if estimate is None else dataclasses.asdict(estimate)


# Figure records -------------------------------------------------------------------------------


def status_marks(records: Sequence[RunRecord]) -> list[Mark]:
    """One mark per (recipe, global batch, status) of the runs that were not ok, counting them,
    on the bottom edge at their batch: a diverged recipe never vanishes from a figure."""
    counts: dict[tuple[str, int, str], int] = {}
    for record in records:
        if not record.ok:
            key = (record.recipe, record.global_batch, str(record.row["status"]))
            counts[key] = counts.get(key, 0) + 1
    return [Mark(status, recipe, batch, count=count) for (recipe, batch, status), count in counts.items()]


def arm_positions(records: Sequence[RunRecord]) -> dict[tuple[str, int], int] | None:
    """Positions on a categorical x axis, one per (recipe, global batch) in recipe order, when
    every recipe ran at one batch and some batch holds several recipes (arms compared at one
    batch, as keskar_v2's): on a batch axis they would sit on top of each other. None when a
    batch axis can show them apart."""
    batches: dict[str, set[int]] = {}
    for record in records:
        batches.setdefault(record.recipe, set()).add(record.global_batch)
    singles = [next(iter(sizes)) for sizes in batches.values() if len(sizes) == 1]
    if len(singles) < len(batches) or len(set(singles)) == len(singles):
        return None
    return {(recipe, next(iter(sizes))): index for index, (recipe, sizes) in enumerate(batches.items(), start=1)}


def on_arm_axis(items: Sequence[Line | Mark], positions: dict[tuple[str, int], int]) -> list[Line | Mark]:
    """Lines and marks with each batch replaced by its arm's position (``arm_positions``)."""
    return [dataclasses.replace(item, x=[positions[(item.label, batch)] for batch in item.x]) if isinstance(item, Line)
            else dataclasses.replace(item, x=positions[(item.recipe, item.x)]) for item in items]


def comparison_axis(records: Sequence[RunRecord], panels: dict[str, list[Line | Mark]]) -> tuple[dict[str, list[Line | Mark]], dict[str, Any]]:
    """The panels of a figure of values per (recipe, batch) and its axis options: a log2 batch
    axis, or one position per arm (``arm_positions``) labelled with the recipe and its batch."""
    positions = arm_positions(records)
    if positions is None:
        return panels, BATCH_AXIS
    labels = {position: f"{recipe} ({batch})" for (recipe, batch), position in positions.items()}
    return ({title: on_arm_axis(items, positions) for title, items in panels.items()},
            {"xlabel": "arm (global batch)", "log2_x": False, "x_labels": labels})


def batch_lines(items: Sequence[Aggregate], names: Sequence[str]) -> list[Line]:
    """Per recipe, its mean at each global batch with ok runs, and the 95% Student-t band
    where two or more seeds gave a value; each point carries its seeds (``Line.n``: a point on
    fewer than the line's most is drawn open and labelled)."""
    lines = []
    for recipe in names:
        mine = [item for item in items if item.recipe == recipe and item.mean is not None]
        estimates = [item.estimate() for item in mine]
        if mine:
            lines.append(Line(recipe, [item.global_batch for item in mine], [e.mean for e in estimates],
                              low=[e.low if e.n > 1 else None for e in estimates],
                              high=[e.high if e.n > 1 else None for e in estimates], n=[e.n for e in estimates]))
    return lines


def curve_metric(records: Sequence[RunRecord]) -> str:
    """``val_accuracy`` when every run has a validation split, else the training ``accuracy``."""
    return "val_accuracy" if all(r.result.history and "val_accuracy" in r.result.history[0] for r in records) else "accuracy"


def _curve(record: RunRecord, metric: str) -> list[float]:
    return [math.nan if row.get(metric) is None else float(row[metric]) for row in record.result.history]


def _mean_curve(curves: Sequence[list[float]]) -> list[float]:
    """Per epoch, the mean of the finite values of the curves that reached it (NaN if none)."""
    means = []
    for epoch in range(max(len(curve) for curve in curves)):
        values = [curve[epoch] for curve in curves if epoch < len(curve) and math.isfinite(curve[epoch])]
        means.append(statistics.fmean(values) if values else math.nan)
    return means


def _end_mark(record: RunRecord, curve: list[float]) -> Mark:
    """Where a run that was not ok ended: its last finite value, or the bottom edge at epoch 1."""
    finite = [(epoch, value) for epoch, value in enumerate(curve, 1) if math.isfinite(value)]
    epoch, value = finite[-1] if finite else (1, None)
    return Mark(str(record.row["status"]), record.recipe, epoch, value)


def learning_curves(records: Sequence[RunRecord], metric: str) -> dict[str, list[Line | Mark]]:
    """One panel per world size: a thin line per run (seed) in its recipe's colour, a thick
    line for the mean over a recipe's ok seeds where there are two or more, and a mark where
    each run that was not ok ended."""
    panels: dict[str, list[Line | Mark]] = {}
    for batch in sorted({r.global_batch for r in records}):
        at_batch = [r for r in records if r.global_batch == batch]
        panel = panels.setdefault(f"world {at_batch[0].row['world_size']} (batch {batch})", [])
        for recipe in recipes(at_batch):
            mine = [r for r in at_batch if r.recipe == recipe and r.result.history]
            curves = {id(r): _curve(r, metric) for r in mine}
            panel += [Line(recipe, list(range(1, len(curves[id(r)]) + 1)), curves[id(r)], thin=True) for r in mine]
            ok = [curves[id(r)] for r in mine if r.ok]
            if len(ok) > 1:
                mean = _mean_curve(ok)
                panel.append(Line(recipe, list(range(1, len(mean) + 1)), mean))
            panel += [_end_mark(r, curves[id(r)]) for r in mine if not r.ok]
    return panels


def applied_schedules(records: Sequence[RunRecord]) -> dict[str, list[Line]]:
    """One panel per world size, one line per recipe: the learning rate of every step the run
    took (its schedule rebuilt from the resolved config, as ``RunConfig.schedule`` made it), over
    epochs. Seeds share a schedule, so the seed that trained longest stands for all. Runs of an
    elastic world (``training.elastic``) are left out: their LR depends on the world changes they
    met (``lbtrain.elastic``), which a config alone does not give; their ``world_changes`` say it."""
    from lbtrain.config import run_config_from_dict
    from lbtrain.schedules import schedule_values

    panels: dict[str, list[Line]] = {}
    for batch in sorted({r.global_batch for r in records}):
        at_batch = [r for r in records if r.global_batch == batch]
        for recipe in recipes(at_batch):
            result = max((r.result for r in at_batch if r.recipe == recipe), key=lambda result: result.total_steps or 0)
            if not result.steps_per_epoch or not result.total_steps or result.config["training"].get("elastic"):
                continue
            # Its data and model as lbtrain's own: the schedule needs neither, and a report imports no code of the user's.
            # Its validation split stays: a stop_at on validation accuracy needs one to validate.
            split = (result.config.get("data") or {}).get("validation_split")
            neutral = {**result.config, "data": {"dataset": "synthetic", **({"validation_split": split} if split else {})},
                       "model": {"name": "mlp"}}
            schedule = run_config_from_dict(neutral).schedule(result.steps_per_epoch)
            steps = result.total_steps
            panels.setdefault(f"world {at_batch[0].row['world_size']} (batch {batch})", []).append(
                Line(recipe, [step / result.steps_per_epoch for step in range(steps)], list(schedule_values(schedule, steps))))
    return panels


# Steps to target, critical batch, noise scale ---------------------------------------------


def _reached_at_first_measurement(record: RunRecord, target: float, metric: str) -> bool:
    """Whether ``metric`` met ``target`` at its first measurement (the first validation point, or
    the first epoch's end): the count is then an upper bound."""
    measured = measured_points(record.result.history, record.result.steps_per_epoch, metric, record.result.validation_points)
    return bool(measured) and measured[0][1] >= target


def _record_steps(record: RunRecord, target: float, metric: str) -> float | None:
    result = record.result
    return steps_to_target(result.history, result.steps_per_epoch, target, metric, points=result.validation_points)


def validation_every(records: Sequence[RunRecord]) -> list[int]:
    """The distinct ``training.validation_every_steps`` of the runs that measured validation
    points (empty when every count comes from epoch ends)."""
    return sorted({int(r.result.config.get("training", {}).get("validation_every_steps"))
                   for r in records if r.result.validation_points and r.result.config.get("training", {}).get("validation_every_steps")})


def resolution_text(records: Sequence[RunRecord]) -> str:
    """How the counts were read: between validation points every N steps, or between epoch ends."""
    every = validation_every(records)
    if not every:
        return "interpolated between epoch ends"
    steps = " or ".join(f"{n:,}" for n in every)
    mixed = "" if all(r.result.validation_points for r in records if r.ok) else "; between epoch ends for runs without points"
    return f"interpolated between validation points measured every {steps} steps{mixed}"


def steps_rows(records: Sequence[RunRecord], target: float, metric: str) -> list[dict[str, Any]]:
    """Per (recipe, global batch): mean steps to ``target`` over the seeds that reached it, with
    its 95% Student-t interval (``low``, ``high``, ``df``); ``reached`` of ``ok_runs`` ok runs (of
    ``runs``); ``seed_steps``, each of those seeds' steps (what ``critical_batch`` resamples);
    ``upper_bound`` when a seed reached it at its first measurement (its first validation point,
    or the end of its first epoch), so the true count may be lower. Counts are read from a run's
    validation points every N steps when it has them (``training.validation_every_steps``), from
    its epoch ends otherwise (``lbtrain.measures.steps_to_target``)."""
    rows = []
    for item in aggregate(records, lambda r: _record_steps(r, target, metric)):
        group = [r for r in records if r.recipe == item.recipe and r.global_batch == item.global_batch]
        estimate = item.estimate()
        rows.append({"recipe": item.recipe, "global_batch": item.global_batch, "world_size": item.world_size,
                     "steps_to_target": item.mean, "low": estimate.low, "high": estimate.high, "df": estimate.df, "reached": item.runs,
                     "ok_runs": item.ok_runs, "runs": len(group), "seed_steps": list(item.values),
                     "upper_bound": any(r.ok and _reached_at_first_measurement(r, target, metric) for r in group)})
    return rows


def best_steps(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per global batch, the recipe that reached the target in the fewest mean steps among those
    whose every seed reached it (``counts_in_fit``, not an upper bound): the point that stands for
    the batch in the critical-batch fit (Shallue et al. tune per batch size; the best recipe,
    chosen on the validation target, stands in for the tuned one)."""
    best: dict[int, dict[str, Any]] = {}
    for row in rows:
        if not counts_in_fit(row):
            continue
        current = best.get(row["global_batch"])
        if current is None or row["steps_to_target"] < current["steps_to_target"]:
            best[row["global_batch"]] = row
    return [best[batch] for batch in sorted(best)]


def _steps_text(row: dict[str, Any]) -> str:
    if row["steps_to_target"] is None:
        return "-"
    return ("≤" if row["upper_bound"] else "") + f"{row['steps_to_target']:.0f}"


def steps_panel(rows: Sequence[dict[str, Any]], records: Sequence[RunRecord], fit: CriticalBatchFit) -> list[Line | Mark]:
    """Per recipe, measured steps (with bands) as a line, each point with the seeds that reached
    the target (``Line.n``: survivors are drawn open and labelled); upper bounds as down-pointing marks;
    ok runs that never reached the target as marks on the top edge; runs that were not ok on
    the bottom edge; the perfect-scaling line through the smallest batch of the best recipes
    (``best_steps``: every seed reached, not a bound), and the critical-batch fit when there is one."""
    items: list[Line | Mark] = []
    for recipe in recipes(records):
        measured = [r for r in rows if r["recipe"] == recipe and r["steps_to_target"] is not None and not r["upper_bound"]]
        if measured:
            items.append(Line(recipe, [r["global_batch"] for r in measured], [r["steps_to_target"] for r in measured],
                              low=[r["low"] if r["reached"] > 1 else None for r in measured],
                              high=[r["high"] if r["reached"] > 1 else None for r in measured], n=[r["reached"] for r in measured]))
        mine = [r for r in rows if r["recipe"] == recipe]
        items += [Mark("upper bound", recipe, r["global_batch"], r["steps_to_target"]) for r in mine
                  if r["upper_bound"] and r["steps_to_target"] is not None]
        items += [Mark("not reached", recipe, r["global_batch"], count=r["ok_runs"] - r["reached"]) for r in mine
                  if r["ok_runs"] > r["reached"]]
    items += status_marks(records)
    best = best_steps(rows)
    if best:
        batches, anchor = [row["global_batch"] for row in best], best[0]
        items.append(Line("perfect scaling", batches, [anchor["steps_to_target"] * anchor["global_batch"] / b for b in batches],
                          reference=True))
    if fit.fitted:
        batches = [point["global_batch"] for point in fit.residuals]
        low, high = min(batches), max(batches)
        grid = [low * (high / low) ** (i / 49) for i in range(50)]
        items.append(Line(f"fit, B_crit = {fit.b_crit:.0f}", grid, [fit.steps(b) for b in grid], reference=True))
    return items


def critical_batch_interval_sentence(fit: CriticalBatchFit) -> str:
    """How B_crit's interval was made and the interval claims use (``CriticalBatchFit.b_crit_interval``),
    or nothing when there is no fit or no interval."""
    interval = fit.b_crit_interval
    if not fit.fitted or interval is None:
        return ""
    high = "unbounded" if not math.isfinite(interval[1]) else f"{interval[1]:.0f}"
    if fit.interval_method == "profile":
        widened = (" The curve misses the points by more than the seeds scatter (lack of fit), so the variance was estimated "
                   "from the fit's residuals, which widens the interval.") if fit.profile_lack_of_fit else ""
        return (f"B_crit's interval, the one claims use: {PROFILE_METHOD}, on each batch's chosen recipe's seeds, weighted by "
                f"their standard errors from a coefficient of variation pooled over the batches: [{interval[0]:.0f}, {high}]."
                f"{widened} Beside it, a seed bootstrap ({fit.resamples} resamples, percentile) and the range of the refits with "
                f"one seed left out, too narrow on their own with {fit.seeds} seeds a batch.")
    return (f"B_crit's uncertainty over seeds: a seed bootstrap ({fit.resamples} resamples; each recipe's seeds at each "
            f"batch drawn with replacement, the fewest mean steps per batch chosen again, refitted; percentile interval) and "
            f"the range of the refits with one seed left out. With as few as {fit.seeds} seeds at a batch the bootstrap alone is too "
            f"narrow, so claims on B_crit use the hull of the two: [{interval[0]:.0f}, {high}].")


def noise_scale_at_target(records: Sequence[RunRecord], target: float, metric: str) -> list[dict[str, Any]]:
    """Per ok run that reached ``target``: the gradient noise scale it logged at the end of the
    epoch in which ``metric`` first reached it (McCandlish et al. predict the critical batch for
    a target from B_simple measured where training reaches it; it grows as the loss falls).

    Each record has ``recipe``, ``global_batch``, ``seed``, ``epoch``, ``noise_scale`` (None when
    undetermined) and ``undetermined`` (the reason, or None), both from the logged ``noise_trace``
    and ``gradient_norm_sq`` by ``simple_noise_scale``. Runs that did not measure it are left out."""
    found = []
    for record in (r for r in records if r.ok):
        row = next((row for row in record.result.history if (row.get(metric) or -math.inf) >= target), None)
        if row is None or row.get("noise_trace") is None or row.get("gradient_norm_sq") is None:
            continue
        scale, reason = simple_noise_scale(float(row["noise_trace"]), float(row["gradient_norm_sq"]))
        found.append({"recipe": record.recipe, "global_batch": record.global_batch, "seed": record.row.get("seed"),
                      "epoch": row.get("epoch"), "noise_scale": None if reason else scale, "undetermined": reason,
                      "second_half": _second_half(record.result.history, int(row.get("epoch") or 1))})
    return found


def _second_half(history: Sequence[dict[str, Any]], target_epoch: int) -> list[float]:
    """The determined B_simple logged at the ends of the epochs of the second half of the way to
    the target (epochs ``ceil(e / 2)`` to ``e``, the target's epoch ``e``): B_simple grows as the
    loss falls, so one reading at the target hides how far it moved on the way."""
    values = []
    for row in history:
        epoch = int(row.get("epoch") or 0)
        if math.ceil(target_epoch / 2) <= epoch <= target_epoch and row.get("noise_trace") is not None \
                and row.get("gradient_norm_sq") is not None:
            scale, reason = simple_noise_scale(float(row["noise_trace"]), float(row["gradient_norm_sq"]))
            if reason is None and math.isfinite(scale):
                values.append(float(scale))
    return values


def noise_scale_summary(found: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """B_simple at the target, batch by batch: ``per_batch`` (global batch -> the median of its
    runs' determined noise scales), ``median`` (the median of those), ``range`` (their smallest
    and largest; None with fewer than two batch sizes), ``batches``, ``runs`` (the determined
    values) and how many runs were undetermined for each reason.

    ``training_median`` and ``training_range``: over every run's B_simple logged in the second half
    of its way to the target (``_second_half``), how far it moves through training; the ratio's
    interval takes the hull of both ranges (``CriticalBatchFit.noise_scale_ratio_interval``).

    McCandlish et al. predict B_crit from B_simple where training reaches the target. Runs at
    one batch are seeds of one measurement; across batch sizes the values need not agree (the
    same validation accuracy may be reached at a different training loss, and B_simple grows as
    the loss falls), so each batch counts once, and claims use the range over batches, a spread
    of measurements rather than an interval with a confidence level. Runs that logged the very
    same value at one batch and seed (one configuration trained under two labels, as every
    scaling rule gives the base batch the same LR) count once."""
    values: dict[int, dict[tuple[Any, float], float]] = {}
    for item in found:
        if item["noise_scale"] is not None and math.isfinite(item["noise_scale"]):
            scale = float(item["noise_scale"])
            values.setdefault(int(item["global_batch"]), {})[(item["seed"], round(scale, 9))] = scale
    reasons = [item["undetermined"] for item in found if item["undetermined"]]
    per_batch = {batch: statistics.median(scales.values()) for batch, scales in sorted(values.items())}
    medians = list(per_batch.values())
    training = [value for item in found for value in item.get("second_half") or ()]
    return {"median": statistics.median(medians) if medians else None,
            "range": [min(medians), max(medians)] if len(medians) > 1 else None,
            "training_median": statistics.median(training) if training else None,
            "training_range": [min(training), max(training)] if len(training) > 1 else None,
            "per_batch": {str(batch): value for batch, value in per_batch.items()}, "batches": len(medians),
            "runs": sum(len(scales) for scales in values.values()),
            "undetermined": {reason: reasons.count(reason) for reason in dict.fromkeys(reasons)}}


def noise_scale_sentence(summary: dict[str, Any]) -> str:
    """Where the noise scale came from, its range over the batch sizes, and the runs where it
    was undetermined, with the reason."""
    undetermined = "; ".join(f"{count} run{'s' if count > 1 else ''} undetermined ({reason})"
                             for reason, count in summary["undetermined"].items())
    if summary["median"] is None:
        return f"Gradient noise scale at the target: {undetermined}." if undetermined else ""
    spread = ("" if not summary.get("range") else
              f"; it ranges from {summary['range'][0]:.0f} to {summary['range'][1]:.0f} over the batch sizes, the range claims "
              "use (a spread of measurements, not a confidence interval)")
    text = (f"B_simple at the target is {summary['median']:.0f}, the median over {summary['batches']} batch "
            f"size{'s' if summary['batches'] > 1 else ''} of each batch's median over its runs ({summary['runs']} runs, each read "
            f"at the end of the epoch it reached the target){spread}")
    if summary.get("training_range"):
        low, high = summary["training_range"]
        text += (f". Over the second half of each run's way to the target it moves from {low:.0f} to {high:.0f} (median "
                 f"{summary['training_median']:.0f}); the ratio B_simple / B_crit's interval takes B_simple's lowest over both "
                 "ranges against B_crit's highest and its highest against B_crit's lowest (a hull: no confidence level)")
    return text + (f"; {undetermined}, left out." if undetermined else ".")


# Failures ------------------------------------------------------------------------------------


def failures(records: Sequence[RunRecord], test_accuracy: Sequence[Aggregate]) -> list[dict[str, Any]]:
    """Records: every run that was not ok (``kind`` "status", with its reason), then every recipe
    and batch whose test accuracy is ``worse`` than the table's reference by the decision rule
    (``kind`` "worse": the whole Welch interval of arm − reference lies below −``DEFAULT_CLAIM_MARGIN``,
    ``MIN_CLAIM_SEEDS`` or more seeds on each side;
    the ``differences_from_reference`` estimate, and the reference's recipe and batch)."""
    found = [{"kind": "status", "recipe": r.recipe, "global_batch": r.global_batch, "world_size": r.row["world_size"],
              "seed": r.row["seed"], "learning_rate": float(r.row["learning_rate"]), "status": r.row["status"],
              "reason": r.row.get("reason") or "no reason recorded"} for r in records if not r.ok]
    reference, differences = differences_from_reference(test_accuracy)
    for item, difference in differences:
        if reference is not None and difference is not None and claim(difference) == WORSE:
            found.append({"kind": WORSE, "recipe": item.recipe, "global_batch": item.global_batch,
                          "reference": {"recipe": reference.recipe, "global_batch": reference.global_batch},
                          "difference": _estimate_record(difference)})
    return found


def failure_sentence(failure: dict[str, Any]) -> str:
    """One failure record as a sentence."""
    if failure["kind"] == "status":
        return (f"`{failure['recipe']}` at global batch {failure['global_batch']} (world {failure['world_size']}, seed "
                f"{failure['seed']}, lr {failure['learning_rate']:.4g}) {failure['status']}: {failure['reason']}")
    difference, reference = failure["difference"], failure["reference"]
    estimate = Estimate(**difference)
    return (f"`{failure['recipe']}` at global batch {failure['global_batch']} is worse than the reference (`{reference['recipe']}` "
            f"at global batch {reference['global_batch']}): {100 * difference['mean']:+.1f} points of test accuracy "
            f"({100 * difference['level']:.0f}% CI {100 * difference['low']:+.1f} to {100 * difference['high']:+.1f}, "
            f"{estimate.count_text()})")


def budgets_text(records: Sequence[RunRecord]) -> str:
    """The budgets the runs were given, as the summary states them ("10 epochs"; several joined
    by "; "), so every comparison says whether it was at equal epochs, steps or samples."""
    return "; ".join(dict.fromkeys(_budget(r) for r in records))


def _budget(record: RunRecord) -> str:
    """The run's budget as the summary states it ("10 epochs")."""
    return str(record.row.get("budget") or f"{record.row.get('epochs')} epochs")


def machine_minutes(results_dir: Path) -> dict[str, float | None]:
    """What a results folder cost in machine minutes: ``runs``, its runs' wall times
    (``summary.csv``), and ``tuning_trials``, its tuning trials' (start to completion, every
    study of its storage: ``lbtrain.reports.tuning``; None without a storage). A run copied from
    another label's run of the same configuration cost nothing (``tables.trained_seconds``)."""
    from lbtrain.reports.tuning import StorageReadError, results_storage, trial_seconds

    summary = results_dir / SUMMARY_FILE
    runs = trained_seconds(read_summary(summary)) / 60 if summary.is_file() else 0.0
    storage = results_storage(results_dir)
    try:
        return {"runs": runs, "tuning_trials": None if storage is None else trial_seconds(storage) / 60}
    except StorageReadError as error:
        raise ReportError(str(error)) from error


def machine_time_sentence(minutes: dict[str, float | None]) -> str:
    """``Machine time: 132 minutes of runs and 65 minutes of tuning trials (...)`` (``machine_minutes``)."""
    trials = minutes.get("tuning_trials")
    if trials is None:
        return f"Machine time: {minutes['runs']:.0f} minutes of runs (their wall times)."
    return (f"Machine time: {minutes['runs']:.0f} minutes of runs and {trials:.0f} minutes of tuning trials "
            "(the runs' wall times, and the trials' from optuna.db).")


# The report ---------------------------------------------------------------------------------


class _Report:
    """Collects Markdown sections, figures and the JSON record for one results folder."""

    def __init__(self, results_dir: Path, colors: dict[str, str]):
        self.results_dir = results_dir
        self.figures = results_dir / FIGURES_FOLDER
        self.colors = colors
        self.sections: list[str] = []
        self.summary: dict[str, Any] = {"confidence_level": DEFAULT_LEVEL, "margin": DEFAULT_CLAIM_MARGIN}

    def figure(self, name: str, panels: dict[str, list[Line | Mark]], caption: str, **options) -> None:
        if any(panels.values()):
            plot_panels(panels, self.figures / name, colors=self.colors, **options)
            self.sections.append(f"![{caption}]({FIGURES_FOLDER}/{name})")

    def add(self, *parts: str) -> None:
        self.sections.extend(part for part in parts if part)


def reference_sentence(reference: dict[str, Any] | None, margin: float, score: str = "accuracy") -> str:
    """The caption sentence that states the table's one reference (``reference_group``) and the
    rule of its *claim* column, or that there is none (no ok run measured test accuracy);
    ``score`` names what the runs measured (R² for regression)."""
    if reference is None:
        return "No run was ok: no reference, no difference."
    return (f"One reference for the whole table: `{reference['recipe']}` at global batch {reference['global_batch']} (world "
            f"{reference['world_size']}), the first recipe at the smallest global batch. *test − reference*: this arm's test "
            f"{score} minus the reference's, Welch's interval (n of this arm vs the reference, Welch–Satterthwaite df); "
            f"*claim* by the decision rule at a margin of {100 * margin:.0f} point: matches when the whole interval lies "
            f"above −margin, better above +margin, worse below −margin, inconclusive otherwise and on fewer than {MIN_CLAIM_SEEDS} seeds a side "
            "(an interval is shown there, no claim rests on it).")


def _accuracy_section(report: _Report, records: Sequence[RunRecord]) -> list[Aggregate]:
    """The accuracy table: per recipe and batch, train, validation and test accuracy and the gap
    over ok seeds; test accuracy − the table's one reference with its claim; the standing among
    the recipes at its batch on validation accuracy (test accuracy is reported, never ranked).
    Regression runs' accuracy is R², and named so (``lbtrain.results.accuracy_name``)."""
    score = accuracy_name(record.result.task for record in records)
    short = "acc" if score == "accuracy" else score
    test = aggregate(records, column("test_accuracy"))
    train = {(a.recipe, a.global_batch): a for a in aggregate(records, column("train_accuracy"))}
    gap = {(a.recipe, a.global_batch): a for a in aggregate(records, column("gap_accuracy"))}
    validation = {(a.recipe, a.global_batch): a for a in aggregate(records, column("validation_accuracy"))}
    ranked: dict[tuple[str, int], str] = {}
    for budget in dict.fromkeys(_budget(r) for r in records):  # arms given another budget (equal steps) are ranked apart
        ranked.update(standings_by_batch(aggregate([r for r in records if _budget(r) == budget], column("validation_accuracy"))))
    has_validation = any(a.mean is not None for a in validation.values())
    rates = {(r.recipe, r.global_batch): float(r.row["learning_rate"]) for r in records}
    reference, differences = differences_from_reference(test)
    report.summary["reference"] = None if reference is None else {
        "recipe": reference.recipe, "global_batch": reference.global_batch, "world_size": reference.world_size}
    entries, rows, shares = [], [], []
    for item, difference in differences:
        key = (item.recipe, item.global_batch)
        estimate = item.estimate()
        word = None if difference is None or difference.mean is None else claim(difference)
        decided_by = None
        if reference is not None and item is not reference and not item.ok_runs and item.total:
            word, decided_by = trained_share_claim(item.ok_runs, item.total, reference.ok_runs, reference.total)
            shares.append(f"- `{item.recipe}` at global batch {item.global_batch}: {word}, {decided_by}")
        entries.append({"recipe": item.recipe, "world_size": item.world_size, "global_batch": item.global_batch,
                        "learning_rate": rates[key], "test_accuracy": item.mean, "low": estimate.low, "high": estimate.high, "df": estimate.df,
                        "std": item.std, "runs": item.runs, "ok_runs": item.ok_runs, "total": item.total, "excluded": item.excluded,
                        "train_accuracy": _estimate_record(train[key].estimate()), "gap_accuracy": _estimate_record(gap[key].estimate()),
                        "validation_accuracy": _estimate_record(validation[key].estimate()),
                        "standing_on_validation": ranked.get(key),
                        "difference_from_reference": _estimate_record(difference), "claim": word,
                        **({"decided_by": decided_by} if decided_by else {})})
        is_reference = reference is not None and item is reference
        rows.append([item.recipe, item.world_size, item.global_batch, f"{rates[key]:.4g}", train[key].describe(),
                     *([validation[key].describe()] if has_validation else []), item.describe(), gap[key].describe(),
                     "reference" if is_reference else "-" if difference is None else difference.describe(4, signed=True),
                     "reference" if is_reference else word or "-",
                     *([ranked.get(key, "-")] if has_validation else []), item.count_text()])
    report.summary["accuracy"] = entries
    standing_text = (
        f" *standing at its batch*: among the recipes at the same global batch and budget, by validation {score} (never test): best "
        "only when separable from every other, tied with the best when the Welch interval of its difference from the "
        "highest mean contains 0, below the best otherwise." if has_validation else
        f" The runs held out no validation split: no arm is ranked (test {score} is reported, never used to choose).")
    report.add(f"## {score[0].upper() + score[1:]} and generalization gap",
               f"Budget: {budgets_text(records)}. Final {score} on the full train and test sets"
               f"{' and on the held-out validation split' if has_validation else ''}: mean [{100 * DEFAULT_LEVEL:.0f}% Student-t "
               "confidence interval] (n, df) over the seeds whose run was "
               f"judged ok (runs that were not ok are counted in *runs*, never averaged in). *gap* = train − test {score}. "
               + reference_sentence(report.summary["reference"], DEFAULT_CLAIM_MARGIN, score) + standing_text,
               markdown_table(["recipe", "world", "global batch", "lr", f"train {short}",
                               *([f"validation {short}"] if has_validation else []), f"test {short}", "gap", "test − reference", "claim",
                               *(["standing at its batch (validation)"] if has_validation else []), "runs"], rows),
               *([SHARE_CLAIMS_SENTENCE, "\n".join(shares)] if shares else []))
    names, marks = recipes(records), status_marks(records)
    panels, axis = comparison_axis(records, {f"test {score}": [*batch_lines(test, names), *marks]})
    report.figure(FIGURE_ACCURACY_VS_BATCH, panels, f"test {score} vs global batch", ylabel=f"test {score}", **axis)
    panels, axis = comparison_axis(records, {f"generalization gap (train - test {score})": [*batch_lines(list(gap.values()), names), *marks]})
    report.figure(FIGURE_GAP_VS_BATCH, panels, "generalization gap vs global batch", ylabel=f"train - test {score}", **axis)
    return test


def _default_target(records: Sequence[RunRecord], metric: str) -> float:
    return reachable_target(peak_values(records, metric, lambda record: record.global_batch).values())


def _steps_section(report: _Report, records: Sequence[RunRecord], target: float | None, metric: str) -> None:
    if not any(r.ok for r in records):
        return
    target = _default_target(records, metric) if target is None else target
    rows = steps_rows(records, target, metric)
    noise = noise_scale_at_target(records, target, metric)
    noise_summary = noise_scale_summary(noise)
    fit = critical_batch(rows, noise_scale=noise_summary["median"],
                         noise_scale_range=None if noise_summary["range"] is None else tuple(noise_summary["range"]),
                         noise_scale_training_range=None if noise_summary["training_range"] is None
                         else tuple(noise_summary["training_range"]))
    report.summary.update({"target": target, "metric": metric, "steps_to_target": rows, "critical_batch": fit.to_dict(),
                           "validation_every_steps": validation_every(records)})
    if noise:
        report.summary["noise_scale"] = {**noise_summary, "runs_at_target": noise}
    report.add(
        "## Steps to target",
        f"Optimizer steps until `{metric}` first reaches **{target:.3f}** ({resolution_text(records)}; mean over the seeds "
        f"that reached it). Perfect scaling halves the steps when the batch doubles (Shallue et al. 2018). "
        f"≤ marks a count reached at the first point measured: an upper bound.",
        markdown_table(["recipe", "global batch", "steps to target", "reached"],
                       [[row["recipe"], row["global_batch"], _steps_text(row), f"{row['reached']}/{row['runs']}"] for row in rows]),
        "### Critical batch (McCandlish et al. 2018)",
        f"`S(B) = S_min (1 + B_crit / B)` fitted to the fewest mean steps at each batch (the best recipe there, chosen on "
        f"`{metric}`; upper bounds left out; a fit needs {fit.min_batches} batch sizes or more). The rule for a seed that "
        f"never reaches the target: {SEED_RULE}. Left out by this rule: {fit.excluded_text()}.",
        f"Result: {fit.describe()}.",
        critical_batch_interval_sentence(fit),
        noise_scale_sentence(noise_summary) if noise else "",
    )
    if fit.fitted:
        report.add(markdown_table(
            ["global batch", "best recipe", "seeds", "measured steps", "fitted steps", "residual"],
            [[point["global_batch"], point.get("recipe", "-"), point.get("seeds", "-"), f"{point['steps']:.0f}",
              f"{point['fitted_steps']:.0f}", f"{100 * point['relative_residual']:+.1f}%"] for point in fit.residuals]))
    report.figure(FIGURE_STEPS_TO_TARGET, {f"steps to {metric} >= {target:.3f}": steps_panel(rows, records, fit)},
                  "steps to target vs global batch", ylabel="steps", log_y=True, **BATCH_AXIS)


@dataclasses.dataclass(frozen=True)
class FlatnessMeasure:
    """A flatness measure the report shows when runs measured it: its key in the run's metrics
    and in ``report.json``, its column header, its heading (with citation), the sentence that
    defines it and the decimals of its cells."""

    key: str
    header: str
    heading: str
    definition: str
    value_of: Callable[[RunRecord], Any]
    digits: int


FLATNESS_MEASURES = (
    FlatnessMeasure("sharpness", "sharpness", "Sharpness (Keskar et al. 2017)",
                    "Sharpness of the final weights: `100 (max f(x + y) − f(x)) / (1 + f(x))` over the box "
                    "`|y_i| ≤ ε (|x_i| + 1)`, maximised by L-BFGS-B as in the paper.", column("sharpness"), 2),
    FlatnessMeasure("hessian_top_eigenvalue", "top Hessian eigenvalue", "top Hessian eigenvalue (Yao et al. 2020)",
                    "Top Hessian eigenvalue of the final weights: `λ_max(∇²f)` by power iteration on Hessian-vector "
                    "products over a fixed subset of the training set.", final_metric("hessian_top_eigenvalue"), 3),
    FlatnessMeasure("pac_bayes_flatness", "PAC-Bayes flatness", "magnitude-aware PAC-Bayes flatness (Jiang et al. 2020)",
                    "Magnitude-aware PAC-Bayes flatness of the final weights: `1 / σ'²`, `σ'` the largest `σ` for which "
                    "the noise `u_i ~ N(0, σ² w_i² + ε²)` moves the training accuracy by at most `0.1`.",
                    final_metric("pac_bayes_flatness"), 3),
)


def _measured(records: Sequence[RunRecord], measure: FlatnessMeasure) -> bool:
    return any(r.ok and measure.value_of(r) is not None and math.isfinite(float(measure.value_of(r))) for r in records)


def _flatness_section(report: _Report, records: Sequence[RunRecord]) -> None:
    """One table of the flatness measures the runs took (a column each) beside train and test
    accuracy, per recipe and global batch, and a figure with a panel each."""
    measures = [measure for measure in FLATNESS_MEASURES if _measured(records, measure)]
    if not measures:
        return
    values = {measure.key: aggregate(records, measure.value_of) for measure in measures}
    test = {(a.recipe, a.global_batch): a for a in aggregate(records, column("test_accuracy"))}
    train = {(a.recipe, a.global_batch): a for a in aggregate(records, column("train_accuracy"))}
    for measure in measures:
        report.summary[measure.key] = [
            {"recipe": a.recipe, "global_batch": a.global_batch, measure.key: a.mean, "std": a.std,
             **{key: value for key, value in dataclasses.asdict(a.estimate()).items() if key != "mean"}}
            for a in values[measure.key]]
    heading = ", ".join(measure.heading for measure in measures)
    groups = values[measures[0].key]
    report.add(
        f"## {heading[0].upper()}{heading[1:]}",
        " ".join(measure.definition for measure in measures) + " Mean [95% Student-t interval] (n, df) over ok seeds.",
        markdown_table(["recipe", "global batch", "train acc", "test acc", *(measure.header for measure in measures)],
                       [[a.recipe, a.global_batch, train[(a.recipe, a.global_batch)].describe(),
                         test[(a.recipe, a.global_batch)].describe(),
                         *(values[measure.key][index].describe(measure.digits) for measure in measures)]
                        for index, a in enumerate(groups)]),
    )
    panels, axis = comparison_axis(records, {measure.header: [*batch_lines(values[measure.key], recipes(records)), *status_marks(records)]
                                             for measure in measures})
    report.figure(FIGURE_SHARPNESS_VS_BATCH, panels, f"{', '.join(panels)} vs global batch",
                  ylabel=measures[0].header if len(measures) == 1 else "value", share_y=len(measures) == 1, **axis)


def _cell(value: Any, digits: str = ".4g") -> str:
    if value is None:
        return "-"
    return f"{value:{digits}}" if isinstance(value, float) else str(value)


def lr_exponent_sentence(fit: dict[str, Any]) -> str:
    """The sweep's fitted exponent with its interval, or why there is none (``note``)."""
    if fit.get("alpha") is None:
        return f"Tuned lr vs global batch: {fit.get('note') or 'not fitted'}."
    if fit.get("alpha_95_low") is not None:
        interval = f" (95% CI {fit['alpha_95_low']:.2f} to {fit['alpha_95_high']:.2f})"
    else:
        interval = f" ({fit.get('note') or 'no interval'})"
    return f"Tuned lr ~ global_batch^{fit['alpha']:.2f}{interval}: `alpha = 1` is the linear rule, `alpha = 0.5` the sqrt rule."


def sweep_panel(rows: Sequence[dict[str, Any]]) -> list[Line | Mark]:
    """The learning rate of the best trial on validation per global batch (the sweep's objective;
    never test), linear and sqrt lines from the smallest batch, and the trials that diverged or
    collapsed as marks at their batch."""
    tuned = [row for row in rows if row.get("best_learning_rate") is not None]
    if not tuned:
        return []
    label, batches, first = "tuned (best trial on validation)", [row["global_batch"] for row in tuned], tuned[0]
    items: list[Line | Mark] = [Line(label, batches, [row["best_learning_rate"] for row in tuned])]
    for name, alpha in (("linear", 1.0), ("sqrt", 0.5)):
        items.append(Line(f"{name} from the smallest batch", batches,
                          [first["best_learning_rate"] * (b / first["global_batch"]) ** alpha for b in batches], reference=True))
    items += [Mark(status, label, row["global_batch"], count=int(row[status])) for row in tuned
              for status in ("diverged", "collapsed") if row.get(status)]
    return items


def _sweep_section(report: _Report) -> None:
    path = report.results_dir / SWEEP_SUMMARY_FILE
    if not path.is_file():
        return
    rows = read_summary(path, required=("world_size", "study"))
    fit_path = report.results_dir / SWEEP_FIT_FILE
    fit = json.loads(fit_path.read_text()) if fit_path.is_file() else None
    params = [key for key in (rows[0] if rows else {}) if key.startswith("param:")]
    report.summary["sweep"] = {"rows": rows, "fit": fit}
    report.add(
        "## Sweep: tuned learning rate per world size",
        "The best trial on validation of each world size's Optuna study (the trials are scored on validation accuracy, "
        "never test; the chosen trial's test accuracy is reported, not used to choose). One seed a trial: trials are "
        "not separated from one another by an interval.",
        markdown_table(["world", "global batch", "trials (pruned)", "lr of the best on validation", "validation acc (chosen on)",
                        "test acc (reported)", *[p[6:] for p in params]],
                       [[row["world_size"], _cell(row.get("global_batch")), f"{row['complete']} ({row['pruned']})",
                         _cell(row.get("best_learning_rate")), _cell(row.get("best_validation_accuracy"), ".4f"),
                         _cell(row.get("best_test_accuracy"), ".4f"), *[_cell(row[p]) for p in params]] for row in rows]),
        lr_exponent_sentence(fit) if fit else "",
    )
    report.figure(FIGURE_SWEEP_LR_VS_BATCH, {"tuned learning rate": sweep_panel(rows)}, "tuned learning rate vs global batch",
                  ylabel="learning rate", log_y=True, **BATCH_AXIS)


def _runs_section(report: _Report, records: Sequence[RunRecord], metric: str, target: float | None) -> None:
    statuses = [str(r.row["status"]) for r in records]
    counts = {status: statuses.count(status) for status in (*STATUSES, *statuses) if status in statuses}
    report.summary.update({"runs": {"total": len(records), **counts}, "budget": budgets_text(records)})
    report.add(f"{len(records)} runs: " + ", ".join(f"{count} {status}" for status, count in counts.items()) + ".")
    test = _accuracy_section(report, records)
    report.add("## Learning curves", "One panel per world size: thin lines are single seeds, thick lines the mean over a "
               "recipe's ok seeds, marks where a run that was not ok ended.")
    report.figure(FIGURE_LEARNING_CURVES, learning_curves(records, metric), f"{metric} per epoch", xlabel="epoch", ylabel=metric)
    report.add("## Learning-rate schedules applied")
    report.figure(FIGURE_LR_SCHEDULES, applied_schedules(records), "learning rate per step", xlabel="epoch",
                  ylabel="learning rate", share_y=False)
    _steps_section(report, records, target, metric)
    _flatness_section(report, records)
    broken = failures(records, test)
    report.summary["failures"] = broken
    report.add("## Where a recipe fails", "\n".join(f"- {failure_sentence(f)}" for f in broken) if broken else
               f"Every run was ok and no recipe is worse than the table's reference (by the decision rule at a margin of "
               f"{100 * DEFAULT_CLAIM_MARGIN:.0f} point).")


def _model_and_data_sentence(report: _Report, records: list) -> str:
    """``Model `x` on data `y`.``: the names the runs' configs give (a zoo name, a reference
    ``package.module:function``, a dataset file), each once, as the report's summary records them."""
    models = list(dict.fromkeys(str(r.result.config.get("model", {}).get("name")) for r in records))
    datasets = list(dict.fromkeys(str(r.result.config.get("data", {}).get("dataset")) for r in records))
    report.summary["models"], report.summary["datasets"] = models, datasets

    def listed(names: list[str]) -> str:
        return ", ".join(f"`{name}`" for name in names)

    return f"Model{'s' if len(models) > 1 else ''} {listed(models)} on data {listed(datasets)}."


def _no_history(records: Sequence[RunRecord]) -> str:
    """Why a report has nothing to draw: no run trained an epoch (every one failed before)."""
    statuses = Counter(r.result.status for r in records)
    first = next((r for r in records if r.result.reason), None)
    counts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    reason = f"; the first says: {' '.join(first.result.reason.split())[:200]}" if first is not None else ""
    return (f"no run trained an epoch ({len(records)} run{'' if len(records) == 1 else 's'}: {counts}){reason}; "
            "fix that and rerun the experiment, then report")


def _own_records(results_dir: Path, records: list[RunRecord], left_out: list[str]) -> list[RunRecord]:
    """``records`` but runs another experiment wrote (copied into this folder: their
    ``RunResult.experiment`` names another than the folder's owner), each named in ``left_out``:
    a report of one experiment never pools another's runs into its recipes."""
    owner = folder_experiment(results_dir)
    if owner is None:
        return records
    own = []
    for record in records:
        if record.result.experiment not in (None, owner):
            left_out.append(f"run {record.row['run_id']} is of experiment {record.result.experiment!r}, not {owner!r}: "
                            "run left out")
        else:
            own.append(record)
    return own


def write_report(results_dir: str | Path, *, target: float | None = None, metric: str | None = None,
                 on_damaged: Callable[[str], None] | None = None) -> Path:
    """Writes ``report.md``, ``report.json`` (every record the report's sentences and tables are
    rendered from) and ``figures/*.png`` into ``results_dir``; returns the report's path.

    Args:
      results_dir: an experiment's folder (``summary.csv`` and ``runs/``) or a sweep's
        (``sweep_summary.csv``), or both.
      target: the validation accuracy steps are counted to; default the highest target every
        global batch reaches (``reachable_target``).
      metric: the per-epoch metric of the learning curves and steps to target; default
        ``val_accuracy`` when every run holds out a validation split, else ``accuracy``.
      on_damaged: told each damaged summary row or run file left out (the report lists them too).
    """
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ReportError(f"{results_dir} is not a folder of results (run an experiment first: lbtrain run EXPERIMENT.yaml)")
    if target is not None and not 0 < target <= 1:
        raise ReportError(f"--target must be an accuracy in (0, 1], got {target!r}")
    has_runs = (results_dir / SUMMARY_FILE).is_file()
    if not has_runs and not (results_dir / SWEEP_SUMMARY_FILE).is_file():
        raise ReportError(f"{results_dir} has neither {SUMMARY_FILE} nor {SWEEP_SUMMARY_FILE}: nothing to report")
    check_output_folder(results_dir, "the results folder")  # figures/ or report.md linked elsewhere would be written through
    damaged: list[str] = []
    records = load_records(results_dir, on_damaged=damaged.append) if has_runs else []
    records = _own_records(results_dir, records, damaged)
    if records:
        metric = metric or curve_metric(records)
        known = {key for r in records for row in r.result.history for key in row}
        if not known:
            raise ReportError(_no_history(records))
        if metric not in known:
            raise ReportError(f"--metric {metric!r} is not in the runs' history (have: {', '.join(sorted(known))})")
    experiment = experiment_record(results_dir)
    report = _Report(results_dir, recipe_colors(recipes(records)))
    name = str(experiment.get("name", results_dir.name))
    report.summary["experiment"] = name
    description = str(experiment.get("description") or "").strip()
    report.add(f"# {name}", "\n".join(f"> {line}" for line in description.splitlines()))
    sizing = str(experiment.get("sizing") or "").strip()
    if sizing:
        report.add("\n".join(f"> {line}" for line in f"Sizing: {sizing}".splitlines()))
    if records:
        report.add(_model_and_data_sentence(report, records))
    minutes = machine_minutes(results_dir)
    report.summary["machine_minutes"] = minutes
    report.add(machine_time_sentence(minutes))
    if damaged:
        report.summary["damaged"] = damaged
        report.add("Left out (a rerun of the experiment retrains or rebuilds the damaged ones; runs of another experiment "
                   "belong in its own folder):",
                   "\n".join(f"- {problem}" for problem in damaged))
        for problem in damaged:
            if on_damaged is not None:
                on_damaged(problem)
    if records:
        _runs_section(report, records, metric, target)
    _sweep_section(report)
    write_json_atomic(results_dir / REPORT_JSON, finite_or_none(report.summary))
    return write_atomic(results_dir / REPORT_FILE, "\n\n".join(report.sections) + "\n")
