"""``lbtrain compare FIRST SECOND``: two experiments that differ only in how their world runs
(``mode``), compared cell by cell; issue 19's synchronous vs asynchronous report.

A *cell* is a recipe (the grid label) at a world size; both folders must hold the same cells at
the same learning rate, per-worker batch and budget, as the same YAML run in two modes does
(``experiments/sync_vs_async_sync.yaml`` and its ``_async`` twin). Per cell and side:

- test accuracy over the seeds judged ok: mean, 95% Student-t interval, n and df, with the runs
  that were not ok named; and the difference second - first with its Welch interval and df
  (``lbtrain.reports.statistics.difference_interval``): the first side is the one reference of
  every difference, and each difference carries its claim (``lbtrain.reports.decisions.claim``:
  matches / better / worse / inconclusive at a 1-point margin);
- updates to a target validation accuracy (``steps_to_target`` on each run's history, in the
  updates its mode applies: one per global batch when synchronous, one per worker batch under
  a parameter server, so W times as many an epoch) and epochs to it (the samples seen), each
  with its interval over the ok seeds that reached it;
- the gradient staleness the side records (history ``staleness``, the delay tau of Lian et al.
  2015: the mean over the run's epochs, averaged over its ok seeds), when it records one.

Per world size and side, *the LR that works* (the question Dutta et al. 2018 and Zhang et al.
2016 ask of asynchronous SGD): among the recipes whose every seed was ok, the one with the
highest mean validation accuracy (chosen on validation, never on test; its test accuracy
reported), named the best only when separable from every other by the decision rule
(``lbtrain.reports.decisions.standing``: the Welch interval of each other's difference from it
excludes 0), else reported with the learning rates *tied with the best*; whether it is the
grid's smallest or largest learning rate (the best may then lie beyond it); and the largest
learning rate at which every seed was ok.

The same learning rate is not the same step per sample in both modes: a synchronous update
averages W worker batches, an asynchronous one applies each, so at one nominal LR the
asynchronous side moves about W times as far an epoch (Goyal et al. 2017's linear rule read
backwards). ``compare.json`` records W with every cell so a reader can set the two on one scale.

Writes ``compare.md``, ``compare.json`` (every record the sentences are rendered from) and
``figures/accuracy_vs_lr.png`` and ``figures/updates_to_target_vs_lr.png``.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

from lbtrain.config import ConfigError, read_yaml_mapping
from lbtrain.files import write_atomic, write_json_atomic
from lbtrain.measures.steps_to_target import steps_to_target
from lbtrain.reports.decisions import BEST, DEFAULT_CLAIM_MARGIN, MIN_CLAIM_SEEDS, TIED_WITH_THE_BEST, claim, standing
from lbtrain.reports.plots import Line, Mark, plot_panels, recipe_colors
from lbtrain.reports.report import ReportError, budgets_text
from lbtrain.reports.scaling_laws import reachable_target
from lbtrain.reports.statistics import DEFAULT_LEVEL, Estimate, difference_interval
from lbtrain.reports.tables import Aggregate, RunRecord, aggregate, column, load_records, markdown_table, peak_values
from lbtrain.results import (
    COMPARE_FILE,
    COMPARE_JSON,
    EXPERIMENT_FILE,
    FIGURE_ACCURACY_VS_LR,
    FIGURE_UPDATES_TO_TARGET_VS_LR,
    FIGURES_FOLDER,
    SUMMARY_FILE,
    finite_or_none,
)

METRIC = "val_accuracy"
SIDES = ("first", "second")


@dataclasses.dataclass(frozen=True)
class Side:
    """One experiment of the pair: its name, ``mode``, label in tables and figures, and runs."""

    name: str
    mode: str
    label: str
    records: tuple[RunRecord, ...]

    def cell(self, recipe: str, world_size: int) -> list[RunRecord]:
        return [r for r in self.records if r.recipe == recipe and int(r.row["world_size"]) == world_size]


def load_side(folder: str | Path, on_damaged: Callable[[str], None] | None = None) -> Side:
    """The experiment in ``folder``: its ``experiment.yaml`` (name and mode) and finished runs;
    damaged summary rows and run files are left out and told to ``on_damaged``."""
    folder = Path(folder)
    if not (folder / SUMMARY_FILE).is_file():
        raise ReportError(f"{folder} has no {SUMMARY_FILE}: run its experiment first (lbtrain run EXPERIMENT.yaml)")
    try:
        experiment = read_yaml_mapping(folder / EXPERIMENT_FILE)  # bounded, as every config lbtrain reads
    except ConfigError as error:
        raise ReportError(f"{error}: a rerun of the experiment rewrites it") from None
    if not isinstance(experiment, dict) or "mode" not in experiment or "name" not in experiment:
        raise ReportError(f"{folder / EXPERIMENT_FILE} names no experiment and mode: a rerun of the experiment rewrites it")
    records = tuple(load_records(folder, on_damaged=on_damaged))
    if not records:
        raise ReportError(f"{folder} has no finished runs yet")
    return Side(str(experiment["name"]), str(experiment["mode"]), str(experiment["mode"]), records)


def _cells(side: Side) -> list[tuple[str, int]]:
    """(recipe, world size) of the side's runs, recipes in first-seen order, then by world."""
    order = list(dict.fromkeys(r.recipe for r in side.records))
    cells = {(r.recipe, int(r.row["world_size"])) for r in side.records}
    return sorted(cells, key=lambda cell: (order.index(cell[0]), cell[1]))


def _setting(records: Sequence[RunRecord], key: str) -> Any:
    """A setting every run of a cell shares: the learning rate a run applied (a run that failed
    before training records 0, so the largest), or a summary column."""
    if key == "learning_rate":
        return max(float(r.row["learning_rate"] or 0.0) for r in records)
    return records[0].row.get(key)


def paired_cells(first: Side, second: Side) -> list[tuple[str, int]]:
    """The cells both sides hold. A cell only one side has, or one whose learning rate,
    per-worker batch or budget differ between the sides, is a ``ReportError`` naming it (the
    comparison is of one grid run twice)."""
    cells, other = _cells(first), set(_cells(second))
    only = [f"{recipe!r} at W={world} (only in {side.name})" for side, missing in ((first, set(cells) - other),
                                                                                   (second, other - set(cells)))
            for recipe, world in sorted(missing)]
    if only:
        raise ReportError(f"{first.name} and {second.name} do not hold the same grid: " + "; ".join(only))
    for recipe, world in cells:
        for key in ("learning_rate", "per_worker_batch", "budget"):
            a, b = _setting(first.cell(recipe, world), key), _setting(second.cell(recipe, world), key)
            if a != b:
                raise ReportError(f"{recipe!r} at W={world} differs in {key}: {a} in {first.name}, {b} in {second.name} "
                                  "(compare one grid run in two modes)")
    return cells


def _group(records: Sequence[RunRecord], value_of: Callable[[RunRecord], Any]) -> Aggregate:
    """``value_of`` over one side's cell (one recipe at one batch: a single ``aggregate`` group):
    the ok runs' finite values, and the runs that were not ok by status."""
    (group,) = aggregate(records, value_of)
    return group


def _estimate(estimate: Estimate) -> dict[str, Any]:
    record = {"mean": estimate.mean, "low": estimate.low, "high": estimate.high, "n": estimate.n, "df": estimate.df}
    return record if estimate.n_second is None else {**record, "n_second": estimate.n_second}


def _mean_staleness(record: RunRecord) -> float | None:
    values = [float(row["staleness"]) for row in record.result.history if row.get("staleness") is not None]
    return statistics.fmean(values) if values else None


def _epochs_to_target(record: RunRecord, target: float) -> float | None:
    return steps_to_target(record.result.history, 1, target, METRIC)


def _updates_to_target(record: RunRecord, target: float) -> float | None:
    return steps_to_target(record.result.history, record.result.steps_per_epoch, target, METRIC)


def side_cell(records: Sequence[RunRecord], target: float) -> dict[str, Any]:
    """One side of a cell: test and validation accuracy (and the ok seeds' validation values, for
    ``lr_that_works``), updates and epochs to ``target`` (over the ok seeds that reached it;
    ``reached`` counts them), mean staleness, the learning rate, the updates an epoch, and the
    runs by status (``runs_text``: ``Aggregate.count_text``)."""
    test = _group(records, column("test_accuracy"))
    validation = _group(records, column("validation_accuracy"))
    updates = _group(records, lambda r: _updates_to_target(r, target))
    return {
        "learning_rate": _setting(records, "learning_rate"),
        "global_batch": records[0].global_batch,
        "per_worker_batch": _setting(records, "per_worker_batch"),
        "runs": test.total, "ok_runs": test.ok_runs, "not_ok": test.excluded, "runs_text": test.count_text(),
        "test_accuracy": _estimate(test.estimate()),
        "validation_accuracy": _estimate(validation.estimate()),
        "validation_values": list(validation.values),
        "updates_to_target": _estimate(updates.estimate()),
        "epochs_to_target": _estimate(_group(records, lambda r: _epochs_to_target(r, target)).estimate()),
        "reached": updates.runs,
        "updates_per_epoch": max(r.result.steps_per_epoch for r in records),
        "staleness": _group(records, _mean_staleness).mean,
    }


def default_target(sides: Sequence[Side]) -> float:
    """The highest validation accuracy (a multiple of 0.005) that the best ok run of every world
    size reaches on every side, so each world size has a count on both sides (not every LR
    need reach it). A world size with no ok run on a side bounds nothing."""
    peaks = [peak for side in sides for peak in peak_values(side.records, METRIC, lambda record: int(record.row["world_size"])).values()]
    if not peaks:
        raise ReportError(f"no ok run of {' or '.join(side.name for side in sides)} records {METRIC}: nothing to count updates to")
    return reachable_target(peaks)


def lr_that_works(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of one side's cells at one world size, among those whose every seed was ok and that have a
    validation accuracy: ``best``, the cell with the highest mean validation accuracy (None when
    none qualifies); ``standing``, ``"best"`` when it is separable from every other such cell by
    ``decisions.standing`` on the seeds' validation values, else ``"tied with the best"``;
    ``tied``, the learning rates of the other cells tied with it, in grid order; ``edge``,
    ``"smallest"`` or ``"largest"`` when its learning rate is the grid's smallest or largest (the
    best may lie beyond), else None; and ``largest_ok_lr``, the largest learning rate at which
    every seed was ok."""
    stable = [cell for cell in cells if cell["ok_runs"] == cell["runs"] and cell["validation_accuracy"]["mean"] is not None]
    best = max(stable, key=lambda cell: cell["validation_accuracy"]["mean"]) if stable else None
    words = standing({str(index): cell["validation_values"] for index, cell in enumerate(stable)})
    tied = [cell["learning_rate"] for index, cell in enumerate(stable)
            if cell is not best and words.get(str(index)) == TIED_WITH_THE_BEST]
    rates = [cell["learning_rate"] for cell in cells]
    edge = None
    if best is not None and len(rates) > 1:
        edge = "smallest" if best["learning_rate"] == min(rates) else "largest" if best["learning_rate"] == max(rates) else None
    return {"best": best, "standing": None if best is None else TIED_WITH_THE_BEST if tied else BEST, "tied": tied, "edge": edge,
            "largest_ok_lr": max((cell["learning_rate"] for cell in stable), default=None)}


def compare(first: Side, second: Side, target: float | None = None) -> dict[str, Any]:
    """The comparison's record (module doc): ``first`` and ``second`` (name, mode, label,
    budget), ``rows`` per cell (each side's ``side_cell`` under ``first``/``second``),
    ``lr_that_works`` per world size and side, the decision rule's ``margin`` and the ``target``."""
    if target is not None and not 0 < target <= 1:
        raise ReportError(f"--target must be an accuracy in (0, 1], got {target!r}")
    if first.label == second.label:
        raise ReportError(f"both sides are labelled {first.label!r}: compare two experiments (or one grid in two modes)")
    cells = paired_cells(first, second)
    target = default_target((first, second)) if target is None else target
    rows = []
    for recipe, world in cells:
        a, b = first.cell(recipe, world), second.cell(recipe, world)
        difference = difference_interval(_group(b, column("test_accuracy")).values, _group(a, column("test_accuracy")).values)
        rows.append({"recipe": recipe, "world_size": world, "first": side_cell(a, target), "second": side_cell(b, target),
                     "test_difference": _estimate(difference),
                     "claim": None if difference.mean is None else claim(difference)})
    works = {str(world): {key: lr_that_works([row[key] for row in rows if row["world_size"] == world]) for key in SIDES}
             for world in sorted({world for _, world in cells})}
    return {
        **{key: {"name": side.name, "mode": side.mode, "label": side.label, "budget": budgets_text(side.records)}
           for key, side in zip(SIDES, (first, second))},
        "confidence_level": DEFAULT_LEVEL, "margin": DEFAULT_CLAIM_MARGIN, "min_claim_seeds": MIN_CLAIM_SEEDS, "metric": METRIC, "target": target, "rows": rows, "lr_that_works": works,
    }


def describe(estimate: dict[str, Any], digits: int = 3, signed: bool = False) -> str:
    """``Estimate.describe`` of a stored estimate; ``signed`` for a difference (``+0.012 [...]``)."""
    return Estimate(**estimate).describe(digits, signed=signed)


def count_text(cell: dict[str, Any], key: str = "updates_to_target", digits: int = 0) -> str:
    """Updates (or epochs) to the target with its interval, then reached/ok seeds: ``1250 [1200,
    1300] (n=3, df=2), 3/3``; ``- (0/3)`` when no ok seed reached it, ``-`` when no seed was ok."""
    if not cell["ok_runs"]:
        return "-"
    if cell[key]["mean"] is None:
        return f"- (0/{cell['ok_runs']})"
    return f"{describe(cell[key], digits)}, {cell['reached']}/{cell['ok_runs']}"


def works_sentence(world: str, label: str, works: dict[str, Any]) -> str:
    """``At W=4, parameter_server: best on validation: lr 0.025 (validation ..., test ...); largest
    lr with every seed ok: 0.05.``, or ``tied with the best on validation: lr 0.025 (the highest
    mean: validation ..., test ...), 0.05 and 0.0125; ...`` when the highest is not separable; a
    record without ``tied`` (written before separability was judged) names no best."""
    best = works["best"]
    if best is None:
        return f"At W={world}, {label}: no learning rate had every seed ok."
    edge = f", the grid's {works['edge']}: the best may lie beyond it" if works["edge"] else ""
    measured = f"validation {describe(best['validation_accuracy'])}, test {describe(best['test_accuracy'])}"
    if "tied" not in works:  # a compare.json written before separability was judged: no "best" claimed
        chosen = f"the highest mean validation accuracy: lr {best['learning_rate']:.4g}{edge} ({measured})"
    elif works["tied"]:
        others = [f"{rate:.4g}" for rate in works["tied"]]
        listed = others[0] if len(others) == 1 else f"{', '.join(others[:-1])} and {others[-1]}"
        chosen = f"tied with the best on validation: lr {best['learning_rate']:.4g}{edge} (the highest mean: {measured}), {listed}"
    else:
        chosen = f"best on validation: lr {best['learning_rate']:.4g}{edge} ({measured})"
    return f"At W={world}, {label}: {chosen}; largest lr with every seed ok: {works['largest_ok_lr']:.4g}."


def _title(side: dict[str, Any]) -> str:
    return side["name"] if side["label"] == side["name"] else f"{side['name']} ({side['label']})"


def _staleness(cell: dict[str, Any]) -> str:
    return "-" if cell["staleness"] is None else f"{cell['staleness']:.2f}"


def _markdown(record: dict[str, Any]) -> str:
    first, second = record["first"], record["second"]
    a, b, target = first["label"], second["label"], record["target"]
    rows = [[row["recipe"], row["world_size"], f"{row['first']['learning_rate']:.4g}", describe(row["first"]["test_accuracy"]),
             row["first"]["runs_text"], describe(row["second"]["test_accuracy"]), row["second"]["runs_text"],
             describe(row["test_difference"], signed=True), row["claim"] or "-", _staleness(row["first"]), _staleness(row["second"])]
            for row in record["rows"]]
    counts = [[row["recipe"], row["world_size"], count_text(row["first"]), count_text(row["second"]),
               count_text(row["first"], "epochs_to_target", 2), count_text(row["second"], "epochs_to_target", 2),
               f"{row['first']['updates_per_epoch']} / {row['second']['updates_per_epoch']}"] for row in record["rows"]]
    level = f"{100 * record['confidence_level']:.0f}%"
    budgets = (f"{first['budget']} on both sides" if first["budget"] == second["budget"]
               else f"{a}: {first['budget']}; {b}: {second['budget']}")
    return "\n\n".join([
        f"# {_title(first)} vs {_title(second)}",
        f"Budget: {budgets}. Test accuracy over the seeds judged ok: mean [{level} Student-t interval] (n, df); runs that "
        f"were not ok are counted, never averaged in. One reference for every difference: {a}. *{b} − {a}*: Welch's "
        f"interval of the difference (n of each side, Welch–Satterthwaite df); *claim* by the decision rule at a margin of "
        f"{100 * record['margin']:.0f} point: matches when the whole interval lies above −margin, better above +margin, worse "
        f"below −margin, inconclusive otherwise and on fewer than {record['min_claim_seeds']} seeds a side. Staleness: the mean "
        "delay of a gradient in updates (tau of Lian et al. 2015), where the side records one. One nominal learning rate is "
        "not one step per sample: a synchronous update averages the W worker batches, an asynchronous one applies each.",
        markdown_table(["recipe", "world", "lr", f"{a} test acc", f"{a} runs", f"{b} test acc", f"{b} runs", f"{b} − {a}",
                        "claim", f"{a} staleness", f"{b} staleness"], rows),
        "## Updates and epochs to target",
        f"Until `{record['metric']}` first reaches **{target:.3f}** (interpolated between epoch ends): mean [{level} interval] "
        "(n, df) over the ok seeds that reached it, then reached/ok. Updates are the optimizer updates each mode applied "
        f"({a} / {b} an epoch in the last column); epochs are the samples seen.",
        markdown_table(["recipe", "world", f"{a} updates", f"{b} updates", f"{a} epochs", f"{b} epochs", "updates an epoch"], counts),
        "## The learning rate that works",
        "Per world size and mode, among the recipes whose every seed was ok: the one with the highest mean validation "
        "accuracy (chosen on validation, never on test; its test accuracy reported), named the best only when the Welch "
        "interval of every other's difference from it excludes 0, else listed with the learning rates tied with the best; "
        "and the largest learning rate at which every seed was ok.",
        "\n".join(f"- {works_sentence(world, record[key]['label'], works)}" for world, by_side in record["lr_that_works"].items()
                  for key, works in by_side.items()),
        f"![test accuracy vs learning rate]({FIGURES_FOLDER}/accuracy_vs_lr.png)",
        f"![updates to target vs learning rate]({FIGURES_FOLDER}/updates_to_target_vs_lr.png)",
    ]) + "\n"


def _panels(record: dict[str, Any], title: str, value_key: str) -> dict[str, list[Line | Mark]]:
    """Per world size, each side's ``value_key`` mean against the learning rate (with its
    band), the side's runs that were not ok as marks at their learning rate, and (for counts to
    the target) ok runs that never reached it on the top edge."""
    panels: dict[str, list[Line | Mark]] = {}
    for world in sorted({row["world_size"] for row in record["rows"]}):
        items: list[Line | Mark] = []
        rows = sorted((row for row in record["rows"] if row["world_size"] == world), key=lambda row: row["first"]["learning_rate"])
        for key in SIDES:
            label, cells = record[key]["label"], [row[key] for row in rows]
            measured = [cell for cell in cells if cell[value_key]["mean"] is not None]
            if measured:
                items.append(Line(label, [c["learning_rate"] for c in measured], [c[value_key]["mean"] for c in measured],
                                  low=[c[value_key]["low"] for c in measured], high=[c[value_key]["high"] for c in measured],
                                  n=[c[value_key]["n"] for c in measured]))
            for cell in cells:
                items += [Mark(status, label, cell["learning_rate"], count=count) for status, count in cell["not_ok"].items()]
                if value_key == "updates_to_target" and cell["ok_runs"] > cell["reached"]:
                    items.append(Mark("not reached", label, cell["learning_rate"], count=cell["ok_runs"] - cell["reached"]))
        panels[f"W = {world} ({title})"] = items
    return panels


def write_comparison(first_dir: str | Path, second_dir: str | Path, output: str | Path, *, target: float | None = None,
                     on_damaged: Callable[[str], None] | None = None) -> Path:
    """Compares the experiments in ``first_dir`` and ``second_dir`` (module doc) and writes
    ``compare.md``, ``compare.json`` and the figures into ``output``; returns the Markdown's
    path. Sides are labelled by their mode, or by their name when both share one mode."""
    first, second = load_side(first_dir, on_damaged), load_side(second_dir, on_damaged)
    if first.mode == second.mode:
        first, second = (dataclasses.replace(side, label=side.name) for side in (first, second))
    record = compare(first, second, target)
    output = Path(output)
    colors = recipe_colors([first.label, second.label])
    plot_panels(_panels(record, "test accuracy", "test_accuracy"), output / FIGURES_FOLDER / FIGURE_ACCURACY_VS_LR,
                xlabel="learning rate", ylabel="test accuracy", log2_x=True, colors=colors)
    plot_panels(_panels(record, f"updates to {METRIC} >= {record['target']:.3f}", "updates_to_target"),
                output / FIGURES_FOLDER / FIGURE_UPDATES_TO_TARGET_VS_LR, xlabel="learning rate", ylabel="updates",
                log2_x=True, log_y=True, colors=colors)
    write_json_atomic(output / COMPARE_JSON, finite_or_none(record))
    return write_atomic(output / COMPARE_FILE, _markdown(record))


__all__ = ["Side", "compare", "count_text", "default_target", "describe", "load_side", "lr_that_works", "paired_cells",
           "side_cell", "works_sentence", "write_comparison"]
