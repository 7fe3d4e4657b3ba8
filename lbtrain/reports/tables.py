"""Gap tables: an experiment's runs read back, grouped by recipe and global batch, averaged over
seeds, and written as Markdown.

The *generalization gap* of a run is train accuracy - test accuracy. A table has one
*reference* (``reference_group``): the first recipe, in the experiment's order, measured at the
smallest global batch; every arm's difference is taken against it (``differences_from_reference``:
arm − reference, same epoch budget, so a negative difference is the large-batch gap of Keskar et
al. 2017 when the reference is the small-batch recipe). Arms at one global batch are ranked on
validation accuracy, never test (``standings_by_batch``, by ``lbtrain.reports.decisions.standing``).
Only runs with status ``ok`` enter the means; runs that were not ok are counted beside them ("2 of
3 ok, 1 diverged"), never averaged in. Every mean comes with its 95% Student-t interval, n and df,
and every difference with its Welch interval (``lbtrain.reports.statistics``).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from lbtrain.reports.decisions import standing
from lbtrain.reports.statistics import Estimate, difference_interval, mean_interval
from lbtrain.results import (
    EXPERIMENT_FILE,
    RUNS_FOLDER,
    STATUSES,
    SUMMARY_FILE,
    ResultsError,
    RunResult,
    is_finished,
    read_run,
    run_hash,
)
from lbtrain.verdict import is_ok


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run of an experiment: its ``summary.csv`` row (numbers parsed) and its full result."""

    row: dict[str, Any]
    result: RunResult

    @property
    def recipe(self) -> str:
        return str(self.row["label"])

    @property
    def global_batch(self) -> int:
        return int(self.row["global_batch"])

    @property
    def ok(self) -> bool:
        return is_ok(self.row["status"])


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """A metric of one recipe at one global batch over its seeds: the ``values`` of the ``runs``
    ok runs that have it, their mean and sample std, and ``excluded``, how many of the group's
    runs were not ok, by status."""

    recipe: str
    global_batch: int
    world_size: int
    mean: float | None
    std: float
    runs: int
    excluded: dict[str, int] = dataclasses.field(default_factory=dict)
    ok_runs: int = 0
    values: tuple[float, ...] = ()

    @property
    def total(self) -> int:
        """Runs in the group, ok or not (ok runs missing the metric included)."""
        return self.ok_runs + sum(self.excluded.values())

    def estimate(self) -> Estimate:
        """The mean of ``values`` with its 95% Student-t interval (``mean_interval``)."""
        return mean_interval(self.values)

    def describe(self, digits: int = 4) -> str:
        """``mean [low, high] (n=k, df=k-1)``, the 95% t interval (``Estimate.describe``)."""
        return self.estimate().describe(digits)

    def count_text(self) -> str:
        """``"3"`` when every run was ok, else ``"2 of 3 ok (1 diverged)"``."""
        if not self.excluded:
            return str(self.ok_runs)
        others = ", ".join(f"{count} {status}" for status, count in self.excluded.items())
        return f"{self.ok_runs} of {self.total} ok ({others})"


def _parse(value: str) -> Any:
    if value == "":
        return None
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


SUMMARY_KEYS = ("run_id", "label", "status", "world_size", "global_batch")


def read_summary(path: str | Path, on_damaged: Callable[[str], None] | None = None,
                 required: Sequence[str] = SUMMARY_KEYS) -> list[dict[str, Any]]:
    """The rows of a summary CSV with numbers parsed and empty cells as None. A file that is no
    summary (not CSV text, or without the ``required`` columns) is a ``ResultsError``; a row cut
    short (a half-written file) is left out and reported to ``on_damaged``."""
    path = Path(path)
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            missing = [key for key in required if key not in header]
            if missing:
                raise ResultsError(f"{path} is damaged: no column {', '.join(missing)} (a rerun of the experiment rebuilds it)")
            rows = []
            for row in reader:
                if None in row.values() or None in row or not row[required[0]]:
                    if on_damaged is not None:
                        on_damaged(f"{path}, line {reader.line_num}: a damaged row, left out")
                    continue
                rows.append({key: _parse(value) for key, value in row.items()})
    except (UnicodeDecodeError, csv.Error) as error:
        raise ResultsError(f"{path} is damaged ({error}; a rerun of the experiment rebuilds it)") from None
    return rows


def experiment_record(folder: Path) -> dict[str, Any]:
    """The experiment a results folder records (its ``experiment.yaml``), read as an experiment
    file is (``lbtrain.config.read_yaml_mapping``: a regular file within the size and YAML
    limits, else a one-line ``ConfigError``); empty when there is none."""
    from lbtrain.config.loading import read_yaml_mapping

    path = folder / EXPERIMENT_FILE
    return read_yaml_mapping(path) if path.exists() or path.is_symlink() else {}


def load_records(results_dir: str | Path, on_damaged: Callable[[str], None] | None = None) -> list[RunRecord]:
    """Every finished run listed in ``results_dir/summary.csv``, in its order. Damaged rows and
    runs whose ``metrics.json`` is damaged are left out, each reported to ``on_damaged``."""
    results_dir = Path(results_dir)
    summary = results_dir / SUMMARY_FILE
    if not summary.is_file():
        raise FileNotFoundError(f"{summary} does not exist: run the experiment first (lbtrain run EXPERIMENT.yaml)")
    records = []
    for row in read_summary(summary, on_damaged):
        run_dir = results_dir / RUNS_FOLDER / str(row["run_id"])
        if not is_finished(run_dir):
            continue
        try:
            records.append(RunRecord(row, read_run(run_dir)))
        except ResultsError as error:
            if on_damaged is not None:
                on_damaged(f"{error}: run left out")
    return records


def recipes(records: Iterable[RunRecord]) -> list[str]:
    """Recipe labels in first-seen order."""
    return list(dict.fromkeys(record.recipe for record in records))


def aggregate(records: Sequence[RunRecord], value_of) -> list[Aggregate]:
    """``value_of(record)`` (None when missing) averaged per (recipe, global batch) over the
    runs with status ok; groups in recipe order, then by batch."""
    groups: dict[tuple[str, int], list[RunRecord]] = {}
    for record in records:
        groups.setdefault((record.recipe, record.global_batch), []).append(record)
    order = {recipe: index for index, recipe in enumerate(recipes(records))}
    aggregates = []
    for (recipe, batch), members in sorted(groups.items(), key=lambda item: (order[item[0][0]], item[0][1])):
        values = [float(v) for v in (value_of(r) for r in members if r.ok) if v is not None and math.isfinite(float(v))]
        statuses = [r.row["status"] for r in members]
        aggregates.append(Aggregate(
            recipe=recipe, global_batch=batch, world_size=int(members[0].row["world_size"]),
            mean=statistics.fmean(values) if values else None,
            std=statistics.stdev(values) if len(values) > 1 else 0.0,
            runs=len(values),
            excluded={status: statuses.count(status) for status in STATUSES if not is_ok(status) and status in statuses},
            ok_runs=statuses.count("ok"),
            values=tuple(values),
        ))
    return aggregates


def column(name: str):
    """A ``value_of`` reading one summary column."""
    return lambda record: record.row.get(name)


def final_metric(name: str):
    """A ``value_of`` reading one of the run's final metrics (``RunResult.metrics``): for
    measurements the summary has no column for, such as the top Hessian eigenvalue."""
    return lambda record: record.result.metrics.get(name)


def peak_values(records: Iterable[RunRecord], metric: str, group: Callable[[RunRecord], Any]) -> dict[Any, float]:
    """Per ``group(record)``: the highest value of history ``metric`` that any of its ok runs
    reached (groups whose ok runs never logged it are left out)."""
    peaks: dict[Any, float] = {}
    for record in (record for record in records if record.ok):
        values = [row[metric] for row in record.result.history if row.get(metric) is not None]
        if values:
            key = group(record)
            peaks[key] = max(peaks.get(key, -math.inf), max(values))
    return peaks


def reference_group(items: Sequence[Aggregate]) -> Aggregate | None:
    """A table's one reference: of the groups with a value (an ok run that measured it), those at
    the smallest global batch, the first in the experiment's recipe order (``aggregate``'s order);
    None when no group has a value."""
    measured = [item for item in items if item.mean is not None]
    if not measured:
        return None
    smallest = min(item.global_batch for item in measured)
    return next(item for item in measured if item.global_batch == smallest)


def differences_from_reference(items: Sequence[Aggregate]) -> tuple[Aggregate | None, list[tuple[Aggregate, Estimate | None]]]:
    """The table's reference (``reference_group``) and, for each aggregate, its mean minus the
    reference's with a 95% Welch interval over both groups' seeds (``difference_interval``: n of
    the arm, then of the reference); None for the reference itself, and for every aggregate when
    there is no reference."""
    reference = reference_group(items)
    return reference, [(item, None if reference is None or item is reference else difference_interval(item.values, reference.values))
                       for item in items]


def standings_by_batch(items: Sequence[Aggregate]) -> dict[tuple[str, int], str]:
    """Per (recipe, global batch), its standing among the recipes measured at the same global batch
    (``decisions.standing`` on the groups' values: ``best`` only when separable from every other,
    else ``tied with the best`` or ``below the best``). Pass validation accuracy: an arm is never
    ranked on test. Batches where fewer than two recipes have a value rank nothing."""
    result: dict[tuple[str, int], str] = {}
    for batch in dict.fromkeys(item.global_batch for item in items):
        groups = {item.recipe: item.values for item in items if item.global_batch == batch and item.values}
        if len(groups) > 1:
            result.update({(recipe, batch): word for recipe, word in standing(groups).items()})
    return result


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub Markdown table."""
    rows = [[str(cell) for cell in row] for row in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def trained_seconds(rows: list[dict[str, Any]]) -> float:
    """The wall time summary rows ``rows`` cost (``wall_time_seconds``), a run copied from
    another label's run of the same configuration counted once: the same hash ends both ids
    (``lbtrain.studies.plan.run_id``) and the copy carries the same wall time."""
    trained = {(run_hash(row["run_id"]), float(row.get("wall_time_seconds") or 0)) for row in rows}
    return sum(seconds for _, seconds in trained)
