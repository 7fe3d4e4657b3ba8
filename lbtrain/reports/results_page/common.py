"""What every section of the results page shares: reading a committed study (its
``report.json``, ``protocol.json``, ``compare.json`` and ``summary.csv`` under the results
folder), a section's opening lines, and how estimates and accuracy cells are written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lbtrain.reports.report import machine_minutes as folder_minutes
from lbtrain.reports.statistics import Estimate
from lbtrain.reports.tables import markdown_table, read_summary
from lbtrain.results import COMPARE_JSON, EXPERIMENT_FILE, SUMMARY_FILE

# A difference whose interval lies within this many points of 0 counts as "matches".
MATCH_POINTS = 0.01
# Fewer points than this are shown, never fitted.
MIN_FIT_POINTS = 4
# Steps to target "follow" Shallue's curve when the fit's relative rms error is at most this.
FIT_RMS_TOLERANCE = 0.15


# Reading a committed study ------------------------------------------------------------------


def study_json(results: Path, study: str, name: str) -> dict[str, Any] | None:
    """The study's ``name`` (``report.json``, ...), or None when it is not committed."""
    path = results / study / name
    return json.loads(path.read_text()) if path.is_file() else None


def study_runs(results: Path, study: str) -> list[dict[str, Any]]:
    """The rows of the study's ``summary.csv`` (empty when it has none)."""
    path = results / study / SUMMARY_FILE
    return read_summary(path) if path.is_file() else []


def machine_minutes(results: Path, study: str) -> tuple[float, float | None]:
    """The study's machine time in minutes (``lbtrain.reports.report.machine_minutes``): its
    runs' wall times (for a comparison, both compared experiments') and its tuning trials'
    (None without a storage)."""
    compared = study_json(results, study, COMPARE_JSON)
    folders = [compared["first"]["name"], compared["second"]["name"]] if compared else [study]
    runs = sum(folder_minutes(results / folder)["runs"] or 0.0 for folder in folders)
    return runs, folder_minutes(results / study)["tuning_trials"]


def opening(results: Path, study: str, title: str, file: str, command: str) -> tuple[list[str], dict[str, Any] | None]:
    """A section's heading, the study's machine time, and the study's ``file`` (None, with a
    line naming ``command``, when the study is not committed)."""
    lines = [f"## {study}: {title}", ""]
    data = study_json(results, study, file)
    if data is None:
        lines += [f"*Not committed yet*: `{command}` makes it (resumable).", ""]
    else:
        runs, tuning = machine_minutes(results, study)
        lines += [f"Machine time on 2 cores: {runs:.0f} minutes of runs" +
                  ("" if tuning is None else f" and {tuning:.0f} minutes of tuning trials") + ".", ""]
        experiment = results / study / EXPERIMENT_FILE
        sizing = str(yaml.safe_load(experiment.read_text()).get("sizing") or "") if experiment.is_file() else ""
        lines += [f"Sized {sizing}", ""] if sizing else []
    return lines, data


def figure_lines(results: Path, study: str, name: str, caption: str) -> list[str]:
    """The study's figure ``figures/<name>`` embedded, when the study committed it."""
    return [f"![{caption}]({study}/figures/{name})", ""] if (results / study / "figures" / name).is_file() else []


def seed_accuracies(results: Path, study: str) -> dict[tuple[str, int], list[float]]:
    """Per (label, global batch): the test accuracies of the ok runs of ``summary.csv``."""
    groups: dict[tuple[str, int], list[float]] = {}
    for row in study_runs(results, study):
        if row["status"] == "ok" and row["test_accuracy"] is not None:
            groups.setdefault((row["label"], int(row["global_batch"])), []).append(float(row["test_accuracy"]))
    return groups


def ok_accuracies(runs: list[dict[str, Any]], label: str, world_size: int) -> list[float]:
    """The test accuracies of the ok summary rows ``runs`` labelled ``label`` at ``world_size``."""
    return [float(r["test_accuracy"]) for r in runs
            if r["label"] == label and int(r["world_size"]) == world_size and r["status"] == "ok" and r["test_accuracy"] is not None]


def status_counts(runs: list[dict[str, Any]], labels: tuple[str, ...]) -> dict[tuple[int, str], int]:
    """Per (world size, status): how many of the summary rows ``runs`` labelled one of ``labels``."""
    counts: dict[tuple[int, str], int] = {}
    for row in runs:
        if row["label"] in labels:
            key = (int(row["world_size"]), row["status"])
            counts[key] = counts.get(key, 0) + 1
    return counts


# Writing estimates ----------------------------------------------------------------------------


def as_estimate(record: dict[str, Any] | None) -> Estimate | None:
    """An ``Estimate`` from its JSON record (None stays None)."""
    return None if record is None else Estimate(**record)


def points_text(record: dict[str, Any] | Estimate | None) -> str:
    """A difference of accuracies in points, ``-1.2 [-2.0, -0.4] (n=3)``."""
    estimate = record if isinstance(record, Estimate) or record is None else Estimate(**record)
    if estimate is None or estimate.mean is None:
        return "-"
    if estimate.n == 1 or estimate.low is None:
        return f"{100 * estimate.mean:+.1f} (n={estimate.n})"
    return f"{100 * estimate.mean:+.1f} [{100 * estimate.low:+.1f}, {100 * estimate.high:+.1f}] (n={estimate.n})"


def matches(estimate: Estimate) -> bool:
    """Within ``MATCH_POINTS`` of no difference: the interval reaches above ``-MATCH_POINTS``."""
    return estimate.mean is not None and (estimate.high if estimate.high is not None else estimate.mean) >= -MATCH_POINTS


def direction(difference: Estimate) -> str:
    """``better`` or ``worse`` when the 95% interval of a difference excludes 0, else ``no different``."""
    if difference.mean is None:
        return "not measured"
    if difference.low is not None and difference.low > 0:
        return "better"
    if difference.high is not None and difference.high < 0:
        return "worse"
    return "no different"


def failed_text(counts: dict[str, int]) -> str:
    """Runs by status, those that were not ok: ``1 collapsed, 2 diverged``."""
    return ", ".join(f"{count} {status}" for status, count in sorted(counts.items()) if status != "ok")


def _failures(row: dict[str, Any]) -> str:
    excluded = row.get("excluded") or {}
    return ", ".join(f"{count} {status}" for status, count in sorted(excluded.items()))


def accuracy_cell(row: dict[str, Any] | None) -> str:
    """One accuracy cell: the mean over ok seeds with its interval and n, and the runs that were
    not ok; only the failures when no seed was ok."""
    if row is None:
        return ""
    failures = _failures(row)
    if not row.get("ok_runs"):
        return f"{failures} (of {row['total']})" if failures else "-"
    estimate = Estimate(row["test_accuracy"], row["low"], row["high"], row["ok_runs"])
    return estimate.describe() + (f"; {failures}" if failures else "")


def accuracy_table(report: dict[str, Any]) -> str:
    """Global batch x recipe of a ``report.json``, each cell ``accuracy_cell``; the best mean of
    each batch in bold."""
    rows = report["accuracy"]
    recipes = list(dict.fromkeys(row["recipe"] for row in rows))
    batches = sorted({row["global_batch"] for row in rows})
    table = []
    for batch in batches:
        cells = {row["recipe"]: row for row in rows if row["global_batch"] == batch}
        ok = [row for row in cells.values() if row.get("ok_runs")]
        top = max(ok, key=lambda row: row["test_accuracy"])["recipe"] if ok else None
        table.append([batch, *[(f"**{accuracy_cell(cells.get(r))}**" if r == top else accuracy_cell(cells.get(r))) for r in recipes]])
    return markdown_table(["global batch", *recipes], table)
