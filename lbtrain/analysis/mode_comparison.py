"""``lbtrain compare FIRST SECOND``: two experiments that differ only in how their world runs
(``mode``), compared cell by cell; issue 19's synchronous vs asynchronous report.

A *cell* is a recipe (the grid label) at a world size; both folders must hold the same cells,
as the same YAML run in two modes does (``experiments/sync_vs_async_sync.yaml`` and its
``_async`` twin). Per cell and side:

- test accuracy over the seeds judged ok: mean, 95% bootstrap interval and n, with the runs
  that were not ok named; and the difference second - first with its interval (each side's
  seeds resampled on their own, ``bootstrap_difference``);
- updates to a target validation accuracy (``steps_to_target`` on each run's history, in the
  updates its mode applies: one per global batch when synchronous, one per worker batch under
  a parameter server, so W times as many an epoch) and epochs to it (the samples seen);
- the gradient staleness the side records (history ``staleness``, the delay tau of Lian et al.
  2015: the mean over the run's epochs, averaged over its ok seeds), when it records one.

Per world size and side, *the LR that works* (the question Dutta et al. 2018 and Zhang et al.
2016 ask of asynchronous SGD): the learning rate of the recipe with the best mean validation
accuracy among the recipes whose every seed was ok (chosen on validation, never on test; its
test accuracy reported), and the largest learning rate at which every seed was ok.

Writes ``compare.md``, ``compare.json`` (every record the sentences are rendered from) and
``figures/accuracy_vs_lr.png`` and ``figures/updates_to_target_vs_lr.png``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

import yaml

from lbtrain.analysis.plots import Line, Mark, plot_panels, recipe_colors
from lbtrain.analysis.report import ReportError, budgets_text
from lbtrain.analysis.scaling_laws import reachable_target, steps_to_target
from lbtrain.analysis.statistics import DEFAULT_LEVEL, Estimate, bootstrap_difference, bootstrap_mean
from lbtrain.analysis.tables import RunRecord, load_records, markdown_table
from lbtrain.files import write_atomic, write_json_atomic
from lbtrain.results import EXPERIMENT_FILE, STATUSES, SUMMARY_FILE, finite_or_none

COMPARE_FILE = "compare.md"
COMPARE_JSON = "compare.json"
FIGURES_FOLDER = "figures"
METRIC = "val_accuracy"


@dataclasses.dataclass(frozen=True)
class Side:
    """One experiment of the pair: its name, ``mode``, label in tables and figures, and runs."""

    name: str
    mode: str
    label: str
    records: tuple[RunRecord, ...]

    def cell(self, recipe: str, world_size: int) -> list[RunRecord]:
        return [r for r in self.records if r.recipe == recipe and int(r.row["world_size"]) == world_size]


def load_side(folder: str | Path) -> Side:
    """The experiment in ``folder`` (its ``experiment.yaml`` and finished runs)."""
    folder = Path(folder)
    if not (folder / SUMMARY_FILE).is_file():
        raise ReportError(f"{folder} has no {SUMMARY_FILE}: run its experiment first (lbtrain run EXPERIMENT.yaml)")
    experiment_file = folder / EXPERIMENT_FILE
    experiment = yaml.safe_load(experiment_file.read_text()) if experiment_file.is_file() else {}
    records = tuple(load_records(folder))
    if not records:
        raise ReportError(f"{folder} has no finished runs yet")
    name = str(experiment.get("name", folder.name))
    mode = str(experiment.get("mode", "simulated"))
    return Side(name, mode, mode, records)


def _cells(side: Side) -> list[tuple[str, int]]:
    """(recipe, world size) of the side's runs, recipes in first-seen order, then by world."""
    order = list(dict.fromkeys(r.recipe for r in side.records))
    cells = {(r.recipe, int(r.row["world_size"])) for r in side.records}
    return sorted(cells, key=lambda cell: (order.index(cell[0]), cell[1]))


def paired_cells(first: Side, second: Side) -> list[tuple[str, int]]:
    """The cells both sides hold; a cell only one side has is a ``ReportError`` naming it (the
    comparison is of one grid run twice)."""
    cells, other = _cells(first), set(_cells(second))
    only = [f"{recipe!r} at W={world} (only in {side.name})" for side, missing in ((first, set(cells) - other),
                                                                                   (second, other - set(cells)))
            for recipe, world in sorted(missing)]
    if only:
        raise ReportError(f"{first.name} and {second.name} do not hold the same grid: " + "; ".join(only))
    return cells


def _ok_values(records: Sequence[RunRecord], value_of) -> list[float]:
    values = [value_of(r) for r in records if r.ok]
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _not_ok(records: Sequence[RunRecord]) -> dict[str, int]:
    statuses = [str(r.row["status"]) for r in records]
    return {status: statuses.count(status) for status in STATUSES if status != "ok" and status in statuses}


def _estimate(estimate: Estimate) -> dict[str, Any]:
    return {"mean": estimate.mean, "low": estimate.low, "high": estimate.high, "n": estimate.n}


def _mean_staleness(record: RunRecord) -> float | None:
    values = [float(row["staleness"]) for row in record.result.history if row.get("staleness") is not None]
    return statistics.fmean(values) if values else None


def _epochs_to_target(record: RunRecord, target: float) -> float | None:
    return steps_to_target(record.result.history, 1, target, METRIC)


def _updates_to_target(record: RunRecord, target: float) -> float | None:
    return steps_to_target(record.result.history, record.result.steps_per_epoch, target, METRIC)


def side_cell(records: Sequence[RunRecord], target: float) -> dict[str, Any]:
    """One side of a cell: test and validation accuracy, updates and epochs to ``target``
    (over the ok seeds that reached it; ``reached`` counts them), mean staleness, the learning
    rate, and the runs by status."""
    staleness = _ok_values(records, _mean_staleness)
    return {
        "learning_rate": float(records[0].row["learning_rate"]),
        "global_batch": records[0].global_batch,
        "runs": len(records), "ok_runs": sum(r.ok for r in records), "not_ok": _not_ok(records),
        "test_accuracy": _estimate(bootstrap_mean(_ok_values(records, lambda r: r.row.get("test_accuracy")))),
        "validation_accuracy": _estimate(bootstrap_mean(_ok_values(records, lambda r: r.row.get("validation_accuracy")))),
        "updates_to_target": _estimate(bootstrap_mean(_ok_values(records, lambda r: _updates_to_target(r, target)))),
        "epochs_to_target": _estimate(bootstrap_mean(_ok_values(records, lambda r: _epochs_to_target(r, target)))),
        "reached": len(_ok_values(records, lambda r: _updates_to_target(r, target))),
        "updates_per_epoch": records[0].result.steps_per_epoch,
        "staleness": statistics.fmean(staleness) if staleness else None,
    }


def default_target(first: Side, second: Side) -> float:
    """The highest validation accuracy (a multiple of 0.005) that every world size reaches on
    both sides with its best ok run: so every row has a count to compare."""
    peaks: dict[tuple[str, int], float] = {}
    for side in (first, second):
        for r in (r for r in side.records if r.ok):
            values = [row[METRIC] for row in r.result.history if row.get(METRIC) is not None]
            if values:
                key = (side.name, int(r.row["world_size"]))
                peaks[key] = max(peaks.get(key, -math.inf), max(values))
    if not peaks:
        raise ReportError(f"no ok run of {first.name} or {second.name} records {METRIC}: nothing to count steps to")
    return reachable_target(peaks.values())


def lr_that_works(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of one side's cells at one world size: ``best``, the cell with the highest mean
    validation accuracy among those whose every seed was ok (None when none was), and
    ``largest_ok_lr``, the largest learning rate at which every seed was ok."""
    stable = [cell for cell in cells if cell["ok_runs"] == cell["runs"] and cell["validation_accuracy"]["mean"] is not None]
    best = max(stable, key=lambda cell: cell["validation_accuracy"]["mean"]) if stable else None
    return {"best": best, "largest_ok_lr": max((cell["learning_rate"] for cell in stable), default=None)}


def compare(first: Side, second: Side, target: float | None = None) -> dict[str, Any]:
    """The comparison's record (module doc): ``rows`` per cell, ``lr_that_works`` per world size
    and side, the ``target`` and the budgets."""
    if target is not None and not 0 < target <= 1:
        raise ReportError(f"--target must be an accuracy in (0, 1], got {target!r}")
    cells = paired_cells(first, second)
    target = default_target(first, second) if target is None else target
    rows = []
    for recipe, world in cells:
        a, b = first.cell(recipe, world), second.cell(recipe, world)
        difference = bootstrap_difference(_ok_values(b, lambda r: r.row.get("test_accuracy")),
                                          _ok_values(a, lambda r: r.row.get("test_accuracy")))
        rows.append({"recipe": recipe, "world_size": world, first.label: side_cell(a, target),
                     second.label: side_cell(b, target), "test_difference": _estimate(difference)})
    worlds = sorted({world for _, world in cells})
    works = {str(world): {side.label: lr_that_works([row[side.label] for row in rows if row["world_size"] == world])
                          for side in (first, second)} for world in worlds}
    return {
        "first": {"name": first.name, "mode": first.mode, "label": first.label, "budget": budgets_text(first.records)},
        "second": {"name": second.name, "mode": second.mode, "label": second.label, "budget": budgets_text(second.records)},
        "confidence_level": DEFAULT_LEVEL, "metric": METRIC, "target": target, "rows": rows, "lr_that_works": works,
    }


def _status_text(cell: dict[str, Any]) -> str:
    if not cell["not_ok"]:
        return str(cell["ok_runs"])
    return f"{cell['ok_runs']} of {cell['runs']} ok (" + ", ".join(f"{n} {s}" for s, n in cell["not_ok"].items()) + ")"


def _describe(estimate: dict[str, Any], digits: int = 3, signed: bool = False) -> str:
    """``Estimate.describe`` of a stored estimate; ``signed`` for a difference (``+0.012 [...]``)."""
    if estimate["mean"] is None or not signed:
        return Estimate(estimate["mean"], estimate["low"], estimate["high"], estimate["n"]).describe(digits)
    return f"{estimate['mean']:+.{digits}f} [{estimate['low']:+.{digits}f}, {estimate['high']:+.{digits}f}] (n={estimate['n']})"


def _count(estimate: dict[str, Any], reached: int, ok_runs: int) -> str:
    if estimate["mean"] is None:
        return f"- (0/{ok_runs})"
    return f"{estimate['mean']:.0f} ({reached}/{ok_runs})"


def works_sentence(world: str, label: str, works: dict[str, Any]) -> str:
    """"At W=4, parameter_server: lr 0.025 (validation 0.951 ...); every seed ok up to lr 0.05."""
    best = works["best"]
    if best is None:
        return f"At W={world}, {label}: no learning rate had every seed ok."
    return (f"At W={world}, {label}: lr {best['learning_rate']:.4g} (validation {_describe(best['validation_accuracy'])}, "
            f"test {_describe(best['test_accuracy'])}); every seed ok up to lr {works['largest_ok_lr']:.4g}.")


def _title(side: dict[str, Any]) -> str:
    return side["name"] if side["label"] == side["name"] else f"{side['name']} ({side['label']})"


def _markdown(record: dict[str, Any]) -> str:
    first, second = record["first"], record["second"]
    a, b, target = first["label"], second["label"], record["target"]
    rows = [[row["recipe"], row["world_size"], f"{row[a]['learning_rate']:.4g}", _describe(row[a]["test_accuracy"]),
             _status_text(row[a]), _describe(row[b]["test_accuracy"]), _status_text(row[b]), _describe(row["test_difference"], signed=True),
             _count(row[a]["updates_to_target"], row[a]["reached"], row[a]["ok_runs"]),
             _count(row[b]["updates_to_target"], row[b]["reached"], row[b]["ok_runs"]),
             "-" if row[b]["staleness"] is None else f"{row[b]['staleness']:.2f}"] for row in record["rows"]]
    epochs = [[row["recipe"], row["world_size"], _describe(row[a]["epochs_to_target"], 2), _describe(row[b]["epochs_to_target"], 2),
               f"{row[a]['updates_per_epoch']} / {row[b]['updates_per_epoch']}"] for row in record["rows"]]
    level = f"{100 * record['confidence_level']:.0f}%"
    return "\n\n".join([
        f"# {_title(first)} vs {_title(second)}",
        f"Budgets: {a}: {first['budget']}; {b}: {second['budget']} (equal samples: the same epochs over the same data). "
        f"Test accuracy over the seeds judged ok: mean [{level} bootstrap interval] (n); runs that were not ok are counted, "
        f"never averaged in. *{b} − {a}* resamples each side's seeds on its own. Updates to target: the optimizer updates "
        f"until `{record['metric']}` first reaches **{target:.3f}** (interpolated between epoch ends; mean over the ok seeds that "
        f"reached it, reached/ok). Staleness: the {b} gradients' mean delay in updates (tau of Lian et al. 2015), where recorded.",
        markdown_table(["recipe", "world", "lr", f"{a} test acc", f"{a} runs", f"{b} test acc", f"{b} runs", f"{b} − {a}",
                        f"{a} updates to target", f"{b} updates to target", f"{b} staleness"], rows),
        "## Epochs to target (samples seen)",
        f"The same counts in epochs: the samples each mode needed, whatever its updates ({a} / {b} updates an epoch in the last column).",
        markdown_table(["recipe", "world", f"{a} epochs", f"{b} epochs", "updates an epoch"], epochs),
        "## The learning rate that works",
        "Per world size and mode: the recipe with the best mean validation accuracy among those whose every seed was ok "
        "(chosen on validation, never on test), and the largest learning rate at which every seed was ok.",
        "\n".join(f"- {works_sentence(world, label, works)}" for world, by_side in record["lr_that_works"].items()
                  for label, works in by_side.items()),
        f"![test accuracy vs learning rate]({FIGURES_FOLDER}/accuracy_vs_lr.png)",
        f"![updates to target vs learning rate]({FIGURES_FOLDER}/updates_to_target_vs_lr.png)",
    ]) + "\n"


def _panels(record: dict[str, Any], sides: Sequence[Side], metric: str, value_key: str) -> dict[str, list[Line | Mark]]:
    """Per world size, each side's ``value_key`` mean against the learning rate (with its
    band), the side's runs that were not ok as marks at their learning rate, and (for counts to
    the target) ok runs that never reached it on the top edge."""
    panels: dict[str, list[Line | Mark]] = {}
    for world in sorted({row["world_size"] for row in record["rows"]}):
        items: list[Line | Mark] = []
        rows = sorted((row for row in record["rows"] if row["world_size"] == world), key=lambda row: row[sides[0].label]["learning_rate"])
        for side in sides:
            cells = [row[side.label] for row in rows]
            measured = [cell for cell in cells if cell[value_key]["mean"] is not None]
            if measured:
                items.append(Line(side.label, [c["learning_rate"] for c in measured], [c[value_key]["mean"] for c in measured],
                                  low=[c[value_key]["low"] for c in measured], high=[c[value_key]["high"] for c in measured]))
            for cell in cells:
                items += [Mark(status, side.label, cell["learning_rate"], count=count) for status, count in cell["not_ok"].items()]
                if value_key == "updates_to_target" and cell["ok_runs"] > cell["reached"]:
                    items.append(Mark("not reached", side.label, cell["learning_rate"], count=cell["ok_runs"] - cell["reached"]))
        panels[f"W = {world} ({metric})"] = items
    return panels


def write_comparison(first_dir: str | Path, second_dir: str | Path, output: str | Path, *, target: float | None = None) -> Path:
    """Compares the experiments in ``first_dir`` and ``second_dir`` (module doc) and writes
    ``compare.md``, ``compare.json`` and the figures into ``output``; returns the Markdown's path."""
    first, second = load_side(first_dir), load_side(second_dir)
    if first.mode == second.mode:
        if first.name == second.name:
            raise ReportError(f"both folders hold experiment {first.name} in mode {first.mode}: compare two experiments")
        first, second = (dataclasses.replace(side, label=side.name) for side in (first, second))
    record = compare(first, second, target)
    output = Path(output)
    colors = recipe_colors([first.label, second.label])
    plot_panels(_panels(record, (first, second), "test accuracy", "test_accuracy"), output / FIGURES_FOLDER / "accuracy_vs_lr.png",
                xlabel="learning rate", ylabel="test accuracy", log2_x=True, colors=colors)
    plot_panels(_panels(record, (first, second), f"updates to {METRIC} >= {record['target']:.3f}", "updates_to_target"),
                output / FIGURES_FOLDER / "updates_to_target_vs_lr.png", xlabel="learning rate", ylabel="updates",
                log2_x=True, log_y=True, colors=colors)
    write_json_atomic(output / COMPARE_JSON, finite_or_none(record))
    return write_atomic(output / COMPARE_FILE, _markdown(record))


__all__ = ["Side", "compare", "default_target", "load_side", "lr_that_works", "paired_cells", "side_cell", "write_comparison"]
