"""``lbtrain report results/<name>``: an experiment's runs (and sweep, if any) as ``report.md``
plus ``figures/*.png``.

Sections: accuracy and generalization gap per recipe and global batch (mean ± std over seeds)
with the large-batch gap against a small-batch reference; learning curves per world size;
the learning-rate schedules the runs applied; steps to a target validation accuracy per batch
size with the perfect-scaling line (Shallue et al. 2018) and the critical batch fitted to them
(McCandlish et al. 2018) beside the measured gradient noise scale; sharpness (Keskar et al.
2017) when measured; the sweep's tuned learning rate per batch with linear and sqrt reference
lines; and a plain list of where a recipe failed.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import yaml

from lbtrain.analysis.plots import Line, plot_lines
from lbtrain.analysis.scaling_laws import critical_batch, reachable_target, steps_to_target
from lbtrain.analysis.tables import (
    Aggregate, RunRecord, aggregate, column, large_batch_gap, load_records, markdown_table, mean_std, read_summary, recipes,
)
from lbtrain.files import write_atomic
from lbtrain.results import EXPERIMENT_FILE, SUMMARY_FILE

REPORT_FILE = "report.md"
FIGURES_FOLDER = "figures"
SWEEP_SUMMARY_FILE = "sweep_summary.csv"
SWEEP_FIT_FILE = "sweep_fit.json"
# A recipe "fails" at a batch when it loses this much test accuracy against its small-batch reference.
FAILURE_DROP = 0.01


class ReportError(ValueError):
    """A results folder a report cannot be made of; the message is one line."""


def _series(items: Sequence[Aggregate], recipe: str) -> Line:
    mine = [item for item in items if item.recipe == recipe and item.mean is not None]
    return Line(recipe, [i.global_batch for i in mine], [i.mean for i in mine], error=[i.std for i in mine])


def curve_metric(records: Sequence[RunRecord]) -> str:
    """``val_accuracy`` when every run has a validation split, else the training ``accuracy``."""
    return "val_accuracy" if all(r.result.history and "val_accuracy" in r.result.history[0] for r in records) else "accuracy"


def learning_curves(records: Sequence[RunRecord], metric: str) -> dict[str, list[Line]]:
    """One panel per world size, one line per recipe: ``metric`` per epoch, mean over seeds."""
    panels: dict[str, list[Line]] = {}
    for batch in sorted({r.global_batch for r in records}):
        at_batch = [r for r in records if r.global_batch == batch]
        title = f"world {at_batch[0].row['world_size']} (batch {batch})"
        for recipe in recipes(at_batch):
            histories = [r.result.history for r in at_batch if r.recipe == recipe]
            epochs = max(len(h) for h in histories)
            values = [statistics.fmean(h[e][metric] for h in histories if e < len(h) and h[e].get(metric) is not None)
                      if any(e < len(h) and h[e].get(metric) is not None for h in histories) else math.nan
                      for e in range(epochs)]
            panels.setdefault(title, []).append(Line(recipe, list(range(1, epochs + 1)), values))
    return panels


def applied_schedules(records: Sequence[RunRecord]) -> dict[str, list[Line]]:
    """One panel per recipe, one line per world size: the learning rate of every step the run
    took (its schedule rebuilt from the resolved config, as ``RunConfig.schedule`` made it), over
    epochs. Seeds share a schedule, so the first seed's run stands for all."""
    from lbtrain.config import run_config_from_dict
    from lbtrain.schedules import schedule_values

    panels: dict[str, list[Line]] = {}
    for recipe in recipes(records):
        shown = set()
        for record in sorted((r for r in records if r.recipe == recipe), key=lambda r: r.global_batch):
            result = record.result
            if record.global_batch in shown or not result.steps_per_epoch or not result.total_steps:
                continue
            shown.add(record.global_batch)
            schedule = run_config_from_dict(result.config).schedule(result.steps_per_epoch)
            steps = result.total_steps
            panels.setdefault(recipe, []).append(Line(
                f"world {record.row['world_size']}", list(np.arange(steps) / result.steps_per_epoch), list(schedule_values(schedule, steps))))
    return panels


def _reached_in_first_epoch(record: RunRecord, target: float, metric: str) -> bool:
    first = record.result.history[0].get(metric) if record.result.history else None
    return first is not None and first >= target


def steps_rows(records: Sequence[RunRecord], target: float, metric: str) -> list[dict[str, Any]]:
    """Per (recipe, global batch): mean steps to ``target`` over the seeds that reached it;
    ``upper_bound`` when a seed reached it by the end of its first epoch (the first point
    measured), so the true count may be lower."""
    rows = []
    for item in aggregate(records, lambda r: steps_to_target(r.result.history, r.result.steps_per_epoch, target, metric)):
        group = [r for r in records if r.recipe == item.recipe and r.global_batch == item.global_batch]
        rows.append({"recipe": item.recipe, "global_batch": item.global_batch, "world_size": item.world_size,
                     "steps_to_target": item.mean, "reached": item.runs, "runs": len(group),
                     "upper_bound": any(r.ok and _reached_in_first_epoch(r, target, metric) for r in group)})
    return rows


def best_steps(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per global batch, the recipe that reached the target in the fewest steps (Shallue et al.
    tune per batch size; the best recipe stands in for the tuned one)."""
    best: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row["steps_to_target"] is None:
            continue
        current = best.get(row["global_batch"])
        if current is None or row["steps_to_target"] < current["steps_to_target"]:
            best[row["global_batch"]] = row
    return [best[batch] for batch in sorted(best)]


def _steps_text(row: dict[str, Any]) -> str:
    if row["steps_to_target"] is None:
        return "-"
    return ("≤" if row["upper_bound"] else "") + f"{row['steps_to_target']:.0f}"


def _measured(records: Sequence[RunRecord], name: str) -> list[float]:
    return [float(r.row[name]) for r in records if r.ok and r.row.get(name) is not None and math.isfinite(float(r.row[name]))]


def noise_scale_at_target(records: Sequence[RunRecord], target: float, metric: str) -> list[float]:
    """The gradient noise scale each ok run logged at the end of the epoch in which ``metric``
    first reached ``target``: McCandlish et al. predict the critical batch for a target from
    B_simple measured where training reaches it (it grows as the loss falls)."""
    values = []
    for record in records:
        reached = next((row for row in record.result.history if record.ok and (row.get(metric) or -math.inf) >= target), None)
        value = None if reached is None else reached.get("noise_scale")
        if value is not None and math.isfinite(value) and value > 0:
            values.append(float(value))
    return values


def budgets_text(records: Sequence[RunRecord]) -> str:
    """The budgets the runs were given, as the summary states them ("10 epochs"; several joined
    by "; "), so every comparison says whether it was at equal epochs, steps or samples."""
    return "; ".join(dict.fromkeys(str(r.row.get("budget") or f"{r.row.get('epochs')} epochs") for r in records))


def failures(records: Sequence[RunRecord], test_accuracy: Sequence[Aggregate]) -> list[str]:
    """Plain sentences: every diverged or failed run, and every recipe and batch whose test
    accuracy is ``FAILURE_DROP`` or more below its small-batch reference (``large_batch_gap``)."""
    lines = [f"`{r.recipe}` at global batch {r.global_batch} (world {r.row['world_size']}, seed {r.row['seed']}, "
             f"lr {float(r.row['learning_rate']):.4g}) {r.row['status']}: {r.row.get('reason') or 'no reason recorded'}"
             for r in records if not r.ok]
    for item, drop in large_batch_gap(test_accuracy):
        if drop is not None and drop >= FAILURE_DROP:
            lines.append(f"`{item.recipe}` at global batch {item.global_batch} loses {100 * drop:.1f} points of test accuracy "
                         f"against the small-batch reference")
    return lines


class _Report:
    """Collects Markdown sections and figures for one results folder."""

    def __init__(self, results_dir: Path):
        self.results_dir = results_dir
        self.figures = results_dir / FIGURES_FOLDER
        self.sections: list[str] = []
        self.summary: dict[str, Any] = {}

    def figure(self, name: str, panels: dict[str, list[Line]], caption: str, **options) -> None:
        if any(panels.values()):
            plot_lines(panels, self.figures / name, **options)
            self.sections.append(f"![{caption}]({FIGURES_FOLDER}/{name})")

    def add(self, *parts: str) -> None:
        self.sections.extend(part for part in parts if part)


def _accuracy_section(report: _Report, records: Sequence[RunRecord]) -> list[Aggregate]:
    test = aggregate(records, column("test_accuracy"))
    train = {(a.recipe, a.global_batch): a for a in aggregate(records, column("train_accuracy"))}
    gap = {(a.recipe, a.global_batch): a for a in aggregate(records, column("gap_accuracy"))}
    rates = {(r.recipe, r.global_batch): float(r.row["learning_rate"]) for r in records}
    rows = [
        [item.recipe, item.world_size, item.global_batch, f"{rates[(item.recipe, item.global_batch)]:.4g}",
         train[(item.recipe, item.global_batch)].describe(), item.describe(), gap[(item.recipe, item.global_batch)].describe(),
         "-" if drop is None else f"{drop:+.4f}", item.count_text()]
        for item, drop in large_batch_gap(test)
    ]
    report.add("## Accuracy and generalization gap",
               f"Budget: {budgets_text(records)}. "
               "Final accuracy on the full train and test sets, mean ± sample std over the seeds whose run was judged ok "
               "(diverged, collapsed and failed runs are counted in *runs*, never averaged in). "
               "*gap* = train − test accuracy; *large-batch gap* = test accuracy at the recipe's smallest batch (for a "
               "recipe run at one batch only: at the experiment's smallest batch) − test accuracy here.",
               markdown_table(["recipe", "world", "global batch", "lr", "train acc", "test acc", "gap", "large-batch gap", "runs"], rows))
    names = recipes(records)
    report.figure("accuracy_vs_batch.png", {"test accuracy": [_series(test, r) for r in names]}, "test accuracy vs global batch",
                  xlabel="global batch", ylabel="test accuracy", log_x=True)
    report.figure("gap_vs_batch.png", {"generalization gap (train - test accuracy)": [_series(list(gap.values()), r) for r in names]},
                  "generalization gap vs global batch", xlabel="global batch", ylabel="train - test accuracy", log_x=True)
    return test


def _steps_section(report: _Report, records: Sequence[RunRecord], target: float | None, metric: str) -> None:
    ok = [r for r in records if r.ok]
    if not ok:
        return
    if target is None:
        peaks: dict[int, float] = {}
        for r in ok:
            values = [row[metric] for row in r.result.history if row.get(metric) is not None]
            if values:
                peaks[r.global_batch] = max(peaks.get(r.global_batch, -math.inf), max(values))
        target = reachable_target(peaks.values())
    rows = steps_rows(records, target, metric)
    best = best_steps(rows)
    report.summary.update({"target": target, "metric": metric, "steps_to_target": rows})
    report.add(
        "## Steps to target",
        f"Optimizer steps until `{metric}` first reaches **{target:.3f}** (interpolated between epoch ends; mean over the seeds "
        f"that reached it). Perfect scaling halves the steps when the batch doubles (Shallue et al. 2018). "
        f"≤ marks a count reached by the end of the first epoch, the first point measured: an upper bound.",
        markdown_table(["recipe", "global batch", "steps to target", "reached"],
                       [[row["recipe"], row["global_batch"], _steps_text(row), f"{row['reached']}/{row['runs']}"] for row in rows]),
    )
    lines = [Line(recipe, [r["global_batch"] for r in rows if r["recipe"] == recipe and r["steps_to_target"] is not None],
                  [r["steps_to_target"] for r in rows if r["recipe"] == recipe and r["steps_to_target"] is not None])
             for recipe in recipes(records)]
    lines = [line for line in lines if line.x]
    if best:
        batches = [row["global_batch"] for row in best]
        anchor = best[0]
        lines.append(Line("perfect scaling", batches, [anchor["steps_to_target"] * anchor["global_batch"] / b for b in batches], dashed=True))
    noise = noise_scale_at_target(records, target, metric)
    try:
        fit = critical_batch([row for row in best if not row["upper_bound"]], noise_scale=statistics.median(noise) if noise else None)
    except ValueError as error:
        report.add(f"Critical batch: not fitted ({error}).")
    else:
        report.summary["critical_batch"] = fit.to_dict()
        grid = np.geomspace(min(row["global_batch"] for row in best), max(row["global_batch"] for row in best), 50)
        lines.append(Line(f"fit, B_crit = {fit.b_crit:.0f}", list(grid), [fit.steps(b) for b in grid], dashed=True))
        report.add(
            "### Critical batch (McCandlish et al. 2018)",
            f"Fitted to the best recipe per batch (upper bounds left out): {fit.describe()}."
            + (f" B_simple is the median over {len(noise)} runs of the noise scale logged in the epoch each reached the target."
               if noise else ""),
            markdown_table(["global batch", "best recipe", "measured steps", "fitted steps"],
                           [[row["global_batch"], row["recipe"], _steps_text(row), f"{fit.steps(row['global_batch']):.0f}"]
                            for row in best]),
        )
    report.figure("steps_to_target.png", {f"steps to {metric} >= {target:.3f}": lines}, "steps to target vs global batch",
                  xlabel="global batch", ylabel="steps", log_x=True, log_y=True)


def _sharpness_section(report: _Report, records: Sequence[RunRecord]) -> None:
    if not _measured(records, "sharpness"):
        return
    sharp = aggregate(records, column("sharpness"))
    report.summary["sharpness"] = [{"recipe": a.recipe, "global_batch": a.global_batch, "sharpness": a.mean, "std": a.std} for a in sharp]
    test = {(a.recipe, a.global_batch): a for a in aggregate(records, column("test_accuracy"))}
    train = {(a.recipe, a.global_batch): a for a in aggregate(records, column("train_accuracy"))}
    report.add(
        "## Sharpness (Keskar et al. 2017)",
        "Sharpness of the final weights: 100 (max f(x + y) − f(x)) / (1 + f(x)) over the box |y_i| ≤ ε(|x_i| + 1), "
        "maximised by L-BFGS-B (10 iterations).",
        markdown_table(["recipe", "global batch", "train acc", "test acc", "sharpness"],
                       [[a.recipe, a.global_batch, train[(a.recipe, a.global_batch)].describe(),
                         test[(a.recipe, a.global_batch)].describe(), a.describe(2)] for a in sharp]),
    )
    report.figure("sharpness_vs_batch.png", {"sharpness": [_series(sharp, r) for r in recipes(records)]},
                  "sharpness vs global batch", xlabel="global batch", ylabel="sharpness", log_x=True)


def _sweep_section(report: _Report) -> None:
    path = report.results_dir / SWEEP_SUMMARY_FILE
    if not path.is_file():
        return
    rows = [row for row in read_summary(path, required=("world_size", "study")) if row.get("best_learning_rate") is not None]
    fit_path = report.results_dir / SWEEP_FIT_FILE
    fit = json.loads(fit_path.read_text()) if fit_path.is_file() else None
    params = [key for key in (rows[0] if rows else {}) if key.startswith("param:")]
    report.add(
        "## Sweep: tuned learning rate per world size",
        "Best trial of each world size's Optuna study (scored on validation; its test accuracy reported).",
        markdown_table(["world", "global batch", "trials (pruned)", "best lr", "validation acc", "test acc", *[p[6:] for p in params]],
                       [[row["world_size"], row["global_batch"], f"{row['complete']} ({row['pruned']})", f"{row['best_learning_rate']:.4g}",
                         f"{row['best_validation_accuracy']:.4f}", f"{row['best_test_accuracy']:.4f}",
                         *[row[p] if not isinstance(row[p], float) else f"{row[p]:.4g}" for p in params]] for row in rows]),
    )
    if fit and fit.get("alpha") is not None:
        interval = "" if fit.get("alpha_95_low") is None else f" (95% CI {fit['alpha_95_low']:.2f} to {fit['alpha_95_high']:.2f})"
        report.add(f"Tuned lr ~ global_batch^{fit['alpha']:.2f}{interval}: 1 is the linear rule, 0.5 the sqrt rule.")
    if rows:
        batches = [row["global_batch"] for row in rows]
        first = rows[0]
        lines = [Line("tuned (best trial)", batches, [row["best_learning_rate"] for row in rows])]
        for name, alpha in (("linear", 1.0), ("sqrt", 0.5)):
            lines.append(Line(f"{name} from the smallest batch", batches,
                              [first["best_learning_rate"] * (b / first["global_batch"]) ** alpha for b in batches], dashed=True))
        report.figure("sweep_lr_vs_batch.png", {"tuned learning rate": lines}, "tuned learning rate vs global batch",
                      xlabel="global batch", ylabel="learning rate", log_x=True, log_y=True)


def write_report(results_dir: str | Path, *, target: float | None = None, metric: str | None = None,
                 on_damaged: Callable[[str], None] | None = None) -> Path:
    """Writes ``report.md``, ``report.json`` (the headline numbers) and ``figures/*.png`` into
    ``results_dir``; returns the report's path.

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
    damaged: list[str] = []
    records = load_records(results_dir, on_damaged=damaged.append) if has_runs else []
    experiment_file = results_dir / EXPERIMENT_FILE
    experiment = yaml.safe_load(experiment_file.read_text()) if experiment_file.is_file() else {}
    report = _Report(results_dir)
    report.add(f"# {experiment.get('name', results_dir.name)}", experiment.get("description", ""))
    if damaged:
        report.add("Left out, damaged (a rerun of the experiment retrains or rebuilds them):",
                   "\n".join(f"- {problem}" for problem in damaged))
        for problem in damaged:
            if on_damaged is not None:
                on_damaged(problem)
    if records:
        metric = metric or curve_metric(records)
        known = {key for r in records for row in r.result.history for key in row}
        if metric not in known:
            raise ReportError(f"--metric {metric!r} is not in the runs' history (have: {', '.join(sorted(known))})")
        statuses = [r.row["status"] for r in records]
        report.add(f"{len(records)} runs: " + ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses)) + ".")
        test = _accuracy_section(report, records)
        report.add("## Learning curves")
        report.figure("learning_curves.png", learning_curves(records, metric), f"{metric} per epoch",
                      xlabel="epoch", ylabel=metric)
        report.add("## Learning-rate schedules applied")
        report.figure("lr_schedules.png", applied_schedules(records), "learning rate per step", xlabel="epoch",
                      ylabel="learning rate", share_y=False)
        _steps_section(report, records, target, metric)
        _sharpness_section(report, records)
        broken = failures(records, test)
        report.add("## Where a recipe fails", "\n".join(f"- {line}" for line in broken) if broken else "No run diverged and no recipe "
                   f"lost {100 * FAILURE_DROP:.0f} point of test accuracy against the small-batch reference.")
        report.summary["accuracy"] = [
            {"recipe": a.recipe, "global_batch": a.global_batch, "test_accuracy": a.mean, "std": a.std, "runs": a.runs} for a in test]
    _sweep_section(report)
    write_atomic(results_dir / "report.json", json.dumps(report.summary, indent=2))
    return write_atomic(results_dir / REPORT_FILE, "\n\n".join(report.sections) + "\n")
