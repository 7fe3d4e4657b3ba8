"""What every section of the results page shares: reading a committed study (its
``report.json``, ``protocol.json``, ``compare.json`` and ``summary.csv`` under the results
folder), a section's opening lines, and how estimates, the claims drawn from them
(``lbtrain.reports.decisions``) and accuracy cells are written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lbtrain.reports.decisions import BEST, DEFAULT_MARGIN, TIED_WITH_THE_BEST, claim, standing
from lbtrain.reports.report import machine_minutes as folder_minutes
from lbtrain.reports.statistics import Estimate
from lbtrain.reports.tables import markdown_table, read_summary
from lbtrain.results import COMPARE_JSON, EXPERIMENT_FILE, SUMMARY_FILE

# The margin of every claim on the page (``lbtrain.reports.decisions``): 1 point of accuracy.
MARGIN = DEFAULT_MARGIN
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
    """A difference of accuracies in points, ``-1.2 [-2.0, -0.4] (n=3 vs 3, df=3.9)``."""
    estimate = record if isinstance(record, Estimate) or record is None else Estimate(**record)
    if estimate is None or estimate.mean is None:
        return "-"
    if estimate.low is None or estimate.high is None:
        return f"{100 * estimate.mean:+.1f} ({estimate.count_text()})"
    return f"{100 * estimate.mean:+.1f} [{100 * estimate.low:+.1f}, {100 * estimate.high:+.1f}] ({estimate.count_text()})"


def judge(record: dict[str, Any] | Estimate | None) -> str:
    """The claim on a difference arm − reference (``lbtrain.reports.decisions.claim`` with the
    page's ``MARGIN``): ``matches``, ``better``, ``worse`` or ``inconclusive``."""
    estimate = record if isinstance(record, Estimate) or record is None else Estimate(**record)
    return claim(estimate, MARGIN)


def claims_at(claims: list[str], places: list[str]) -> str:
    """One verdict from a claim per place: the claim when they all agree, else each claim with
    its place (``inconclusive at batch 128; worse at batch 1024``).

    >>> claims_at(["worse", "worse"], ["at 8", "at 64"]), claims_at(["matches", "worse"], ["at 8", "at 64"])
    ('worse', 'matches at 8; worse at 64')
    """
    if len(set(claims)) == 1:
        return claims[0]
    return "; ".join(f"{claim} {place}" for claim, place in zip(claims, places))


def judged_points(record: dict[str, Any] | Estimate | None) -> str:
    """``points_text`` and its claim: ``-1.2 [-2.5, -0.4] (n=3 vs 3, df=3.9): inconclusive``; ``-``
    for no difference."""
    text = points_text(record)
    return text if text == "-" else f"{text}: {judge(record)}"


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
    estimate = Estimate(row["test_accuracy"], row["low"], row["high"], row["ok_runs"], df=row.get("df"))
    return estimate.describe() + (f"; {failures}" if failures else "")


ACCURACY_TABLE_NOTE = ("Bold: at each batch the highest mean and every recipe tied with it (the Welch interval of its "
                       "difference from the highest contains 0); a single bold cell is the best, separable from every other.")


def accuracy_table(report: dict[str, Any], seeds: dict[tuple[str, int], list[float]]) -> str:
    """Global batch x recipe of a ``report.json``, each cell ``accuracy_cell``; in bold at each
    batch the recipes ``best`` or ``tied with the best`` by ``lbtrain.reports.decisions.standing``
    over their ok seeds (``seeds``: ``seed_accuracies`` of the study), ``ACCURACY_TABLE_NOTE``."""
    rows = report["accuracy"]
    recipes = list(dict.fromkeys(row["recipe"] for row in rows))
    batches = sorted({row["global_batch"] for row in rows})
    table = []
    for batch in batches:
        cells = {row["recipe"]: row for row in rows if row["global_batch"] == batch}
        ranks = standing({recipe: seeds.get((recipe, batch), []) for recipe in cells})
        bold = {recipe for recipe, rank in ranks.items() if rank in (BEST, TIED_WITH_THE_BEST)}
        table.append([batch, *[(f"**{accuracy_cell(cells.get(r))}**" if r in bold else accuracy_cell(cells.get(r))) for r in recipes]])
    return markdown_table(["global batch", *recipes], table)
