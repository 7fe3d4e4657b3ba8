"""What every section of the results page shares: reading a committed study (its
``report.json``, ``protocol.json``, ``compare.json`` and ``summary.csv`` under the results
folder), a section's opening lines, how estimates, the claims drawn from them
(``lbtrain.reports.decisions``) and accuracy cells are written, and how an arm is chosen.

Choosing (``validation_choice``): among the arms whose every run was ok and has a validation
accuracy, the one with the highest mean validation accuracy, with each arm's standing on
validation (``lbtrain.reports.decisions.standing``: ``best`` only when separable). Test accuracy
is never used to choose, bold or rank: it is only reported, for the arm chosen on validation.

Claims that are not a difference of accuracies (``departure_claim``): a value with an interval
against the value a paper claims, within a stated tolerance, in the same words.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from lbtrain.reports.decisions import (
    BEST,
    DEFAULT_CLAIM_MARGIN,
    INCONCLUSIVE,
    TIED_WITH_THE_BEST,
    claim,
    claim_from_interval,
    few_seeds,
    standing,
)
from lbtrain.reports.report import machine_minutes as folder_minutes
from lbtrain.reports.statistics import Estimate
from lbtrain.reports.tables import markdown_table, read_summary
from lbtrain.results import COMPARE_JSON, EXPERIMENT_FILE, SUMMARY_FILE
from lbtrain.verdict import is_ok

# The margin of every claim on the page (``lbtrain.reports.decisions``): 1 point of accuracy.
MARGIN = DEFAULT_CLAIM_MARGIN
# Fewer points than this are shown, never fitted.
MIN_FIT_POINTS = 4
# Steps to target "follow" Shallue's curve when the fit's relative rms error is at most this.
FIT_RMS_TOLERANCE = 0.15


# Reading a committed study ------------------------------------------------------------------


def study_json(results: Path, study: str, name: str) -> dict[str, Any] | None:
    """The study's ``name`` (``report.json``, ...), or None when it is not committed."""
    path = results / study / name
    return json.loads(path.read_text()) if path.is_file() else None


def study_experiment(results: Path, study: str) -> dict[str, Any]:
    """The study's ``experiment.yaml`` as committed in its results folder ({} when it has none)."""
    path = results / study / EXPERIMENT_FILE
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


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
        sizing = str(study_experiment(results, study).get("sizing") or "")
        # "for 2 CPU cores, ..." reads after "Sized"; a price the command composed ("priced by ...") on its own.
        lines += [] if not sizing else [f"Sizing: {sizing[0].upper()}{sizing[1:]}" if sizing.startswith("priced") else f"Sized {sizing}", ""]
        lines += regime_slot(study)
    return lines, data


# Where a section's regime label goes (``regime_slot``): the page (``lab.results_page.page``) puts
# ``lab.results_page.anchors.regime_line`` there, which reads the anchors (they import every
# section's module, so a section cannot ask them itself).
REGIME_SLOT = "<!-- the regime of {study} -->"


def regime_slot(study: str) -> list[str]:
    """The line that stands for ``study``'s regime label until the page writes it
    (``lab.results_page.page.render_results_page``); a section rendered alone keeps it, an HTML
    comment that Markdown does not show."""
    return [REGIME_SLOT.format(study=study)]


def figure_lines(results: Path, study: str, name: str, caption: str) -> list[str]:
    """The study's figure ``figures/<name>`` embedded, when the study committed it."""
    return [f"![{caption}]({study}/figures/{name})", ""] if (results / study / "figures" / name).is_file() else []


def seed_accuracies(results: Path, study: str, metric: str = "test_accuracy") -> dict[tuple[str, int], list[float]]:
    """Per (label, global batch): ``metric`` (test accuracy unless said) of the ok runs of ``summary.csv``."""
    groups: dict[tuple[str, int], list[float]] = {}
    for row in study_runs(results, study):
        if is_ok(row["status"]) and row.get(metric) is not None:
            groups.setdefault((row["label"], int(row["global_batch"])), []).append(float(row[metric]))
    return groups


def ok_accuracies(runs: list[dict[str, Any]], label: str, world_size: int) -> list[float]:
    """The test accuracies of the ok summary rows ``runs`` labelled ``label`` at ``world_size``."""
    return [float(r["test_accuracy"]) for r in runs
            if r["label"] == label and int(r["world_size"]) == world_size and is_ok(r["status"]) and r["test_accuracy"] is not None]


def status_counts(runs: list[dict[str, Any]], labels: tuple[str, ...]) -> dict[tuple[int, str], int]:
    """Per (world size, status): how many of the summary rows ``runs`` labelled one of ``labels``."""
    counts: dict[tuple[int, str], int] = {}
    for row in runs:
        if row["label"] in labels:
            key = (int(row["world_size"]), row["status"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def runs_by_cell(runs: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The summary rows ``runs`` per (label, global batch)."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in runs:
        cells.setdefault((row["label"], int(row["global_batch"])), []).append(row)
    return cells


# Choosing on validation ---------------------------------------------------------------------


def validation_choice(groups: Mapping[str, Sequence[dict[str, Any]]]) -> tuple[str | None, dict[str, str]]:
    """The arm chosen among ``groups`` (arm -> its summary rows) and each arm's standing, on
    validation only (module doc): the arms whose every run was ok and has a validation accuracy
    are eligible; the chosen one has the highest mean validation accuracy (the first on a tie),
    and ``standing`` over the eligible arms' seeds says ``best`` (separable from every other),
    ``tied with the best`` or ``below the best``. ``(None, {})`` when no arm is eligible.

    >>> rows = lambda status, *values: [{"status": status, "validation_accuracy": v} for v in values]
    >>> validation_choice({"a": rows("ok", 0.80, 0.81, 0.82), "b": rows("ok", 0.70, 0.71, 0.72), "c": rows("diverged", 0.9)})
    ('a', {'a': 'best', 'b': 'below the best'})
    """
    eligible = {name: [float(row["validation_accuracy"]) for row in rows] for name, rows in groups.items()
                if rows and all(is_ok(row["status"]) and row.get("validation_accuracy") is not None for row in rows)}
    if not eligible:
        return None, {}
    chosen = max(eligible, key=lambda name: math.fsum(eligible[name]) / len(eligible[name]))
    return chosen, standing(eligible)


def standing_text(chosen: str, ranks: dict[str, str]) -> str:
    """``best`` or ``tied with the best (2 others)``: the chosen arm's standing on validation.

    >>> standing_text("a", {"a": "tied with the best", "b": "tied with the best", "c": "below the best"})
    'tied with the best (1 other)'
    """
    if ranks[chosen] == BEST:
        return BEST
    others = sum(1 for name, rank in ranks.items() if rank == TIED_WITH_THE_BEST and name != chosen)
    return f"{TIED_WITH_THE_BEST} ({others} other{'s' if others != 1 else ''})"


# Claims that are not a difference of accuracies ---------------------------------------------


def departure_claim(low: float | None, high: float | None, claimed: float, tolerance: float) -> str:
    """A measured value's interval ``[low, high]`` against the value a paper claims, by the page's
    decision rule applied to the departure ``-|value − claimed|`` with the margin ``tolerance``:
    ``matches`` when the whole interval lies within ``claimed ± tolerance`` (both bounds strictly
    inside: two one-sided tests, an equivalence), ``worse`` when it lies wholly outside that band
    (the value departs from the claim by more than the tolerance), ``inconclusive`` otherwise (an
    interval that overlaps an edge of the band, or none). Never ``better``: nothing beats the
    claimed value itself.

    >>> departure_claim(0.40, 0.60, 0.5, 0.15), departure_claim(0.14, 0.63, 0.5, 0.15), departure_claim(0.8, 1.1, 0.5, 0.15)
    ('matches', 'inconclusive', 'worse')
    """
    if low is None or high is None:
        return INCONCLUSIVE
    near, far = (0.0 if low <= claimed <= high else min(abs(low - claimed), abs(high - claimed))), max(abs(low - claimed), abs(high - claimed))
    return claim_from_interval(-far, -near, tolerance)


# What a decision says of a paper's claim ------------------------------------------------------

# The words beside each anchor's decision word (``anchors.claim_text``, and the readings of a
# claim with parts: ``keskar.keskar_v4_claim``).
HOLDS = "the claim holds"
DOES_NOT_HOLD = "the claim does not hold"
HOLDS_IN_PART = "the claim holds in part"
UNDECIDED = "the claim is inconclusive"


def parts_claim(supports: Sequence[str]) -> str:
    """What a claim made of parts (Keskar et al.'s: sharper minima *and* worse tests) is, from
    what the data say of each part (``HOLDS``, ``DOES_NOT_HOLD`` or ``UNDECIDED``): it holds when
    every part does, holds in part when some do, does not hold when none does and one fails,
    inconclusive otherwise.

    >>> parts_claim([HOLDS, HOLDS]), parts_claim([HOLDS, UNDECIDED]), parts_claim([DOES_NOT_HOLD, UNDECIDED])
    ('the claim holds', 'the claim holds in part', 'the claim does not hold')
    >>> parts_claim([UNDECIDED, UNDECIDED])
    'the claim is inconclusive'

    Raises:
      ValueError: no part (a claim of no parts says nothing, it does not hold vacuously).
    """
    if not supports:
        raise ValueError("a claim made of parts needs at least one part")
    if all(support == HOLDS for support in supports):
        return HOLDS
    if HOLDS in supports:
        return HOLDS_IN_PART
    return DOES_NOT_HOLD if DOES_NOT_HOLD in supports else UNDECIDED


# Writing estimates ----------------------------------------------------------------------------


def as_estimate(record: dict[str, Any] | None) -> Estimate | None:
    """An ``Estimate`` from its JSON record (None stays None)."""
    return None if record is None else Estimate(**record)


# The words beside an estimate with fewer than 3 values on a side (``few_seeds``: its interval not shown).
FEW_SEEDS = "1 or 2 seeds: no interval"


def listed(words: Sequence[str]) -> str:
    """Words in prose: ``a``, ``a and b``, ``a, b and c``; nothing for no words.

    >>> listed(["512", "1,024", "2,048"]), listed(["sqrt"]), listed([])
    ('512, 1,024 and 2,048', 'sqrt', '')
    """
    if not words:
        return ""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def shown(estimate: Estimate | None, digits: int = 3, signed: bool = False) -> str:
    """``Estimate.describe`` as the page shows it: with fewer than 3 seeds on a side, the mean and
    n marked ``FEW_SEEDS`` instead of an interval (``lbtrain.reports.answer.estimate_text``);
    ``-`` for no value.

    >>> shown(Estimate(0.523, -0.436, 1.481, 2, df=1)), shown(Estimate(0.884, 0.879, 0.889, 3, df=2))
    ('0.523 (n=2; 1 or 2 seeds: no interval)', '0.884 [0.879, 0.889] (n=3, df=2)')
    """
    if estimate is None or estimate.mean is None:
        return "-"
    if not few_seeds(estimate):
        return estimate.describe(digits, signed=signed)
    text = dataclasses.replace(estimate, low=None, high=None, df=None).describe(digits, signed=signed)
    return f"{text[:-1]}; {FEW_SEEDS})"


def points_text(record: dict[str, Any] | Estimate | None) -> str:
    """A difference of accuracies in points, ``-1.2 [-2.0, -0.4] (n=3 vs 3, df=3.9)``."""
    estimate = record if isinstance(record, Estimate) or record is None else Estimate(**record)
    if estimate is None or estimate.mean is None:
        return "-"
    if few_seeds(estimate):
        return f"{100 * estimate.mean:+.1f} ({dataclasses.replace(estimate, df=None).count_text()}; {FEW_SEEDS})"
    if estimate.low is None or estimate.high is None:
        return f"{100 * estimate.mean:+.1f} ({estimate.count_text()})"
    return f"{100 * estimate.mean:+.1f} [{100 * estimate.low:+.1f}, {100 * estimate.high:+.1f}] ({estimate.count_text()})"


def judge(record: dict[str, Any] | Estimate | None) -> str:
    """The claim on a difference arm − reference (``lbtrain.reports.decisions.claim`` with the
    page's ``MARGIN``): ``matches``, ``better``, ``worse`` or ``inconclusive`` (also with fewer
    than 3 seeds on a side, ``few_seeds``: no interval is shown, so none decides)."""
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
    return ", ".join(f"{count} {status}" for status, count in sorted(counts.items()) if not is_ok(status))


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
    return shown(estimate) + (f"; {failures}" if failures else "")


ACCURACY_TABLE_NOTE = ("Bold, chosen on validation (test accuracy is only reported): at each batch the recipe with the "
                       "highest mean validation accuracy among those whose every seed was ok, and every recipe tied with it "
                       "on validation (the Welch interval of its difference from the highest contains 0); a single bold cell "
                       "is the best, separable from every other.")


def accuracy_table(report: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """Global batch x recipe of a ``report.json``, each cell ``accuracy_cell`` (test accuracy);
    in bold at each batch the recipes ``best`` or ``tied with the best`` on validation
    (``validation_choice`` over the study's summary rows ``runs``), ``ACCURACY_TABLE_NOTE``."""
    rows = report["accuracy"]
    recipes = list(dict.fromkeys(row["recipe"] for row in rows))
    batches = sorted({row["global_batch"] for row in rows})
    by_cell = runs_by_cell(runs)
    table = []
    for batch in batches:
        cells = {row["recipe"]: row for row in rows if row["global_batch"] == batch}
        _, ranks = validation_choice({recipe: by_cell.get((recipe, batch), []) for recipe in cells})
        bold = {recipe for recipe, rank in ranks.items() if rank in (BEST, TIED_WITH_THE_BEST)}
        table.append([batch, *[(f"**{accuracy_cell(cells.get(r))}**" if r in bold else accuracy_cell(cells.get(r))) for r in recipes]])
    return markdown_table(["global batch", *recipes], table)
