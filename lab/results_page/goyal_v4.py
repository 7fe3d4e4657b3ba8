"""goyal_v4, the fourth edition's study 1 (where linear scaling with warmup breaks), on the results
page: its section and the anchor of Goyal et al. 2017 judged on it.

goyal_v4 is made by ``lbtrain scale`` (what a user runs on their own model), so the page reads the
files that command writes: ``answer.json`` (per world size the arm chosen on validation, each LR
rule's decision against world size 1, where the linear rule holds and first is worse, the tuned
LR's exponent in the batch, the convergence controls) and ``protocol.json`` (the arms, their
searches, the controls' rows), and renders them with goyal_v3's section code (``arm_table_lines``,
``control_sentence``). lbtrain has no reader of ``answer.json`` beyond ``json``: the page reads it
as it reads every study's JSON (``common.study_json``). A rule arm with no ok seed carries the
decision the answer took on how many of its runs ended ok (``decided_by``: Fisher's exact test,
``lbtrain.reports.decisions.trained_share_claim``).

The warmup (half an epoch at every batch) is read from the runs' ``metrics.json``: its updates are
``warmup_updates``, set beside the update at which each run of the linear rule diverged; the
question it leaves (the batch or the warmup?) is tested by goyal_v4_warmup (``lbtrain run`` and
``lbtrain report``: the linear rule's arm with world size 1's warmup share beside the half-epoch
warmup), read once it has finished (its ``report.json``) and judged by how many runs ended ok
(``trained_share_claim``): the page says only what that test gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

from lab.results_page.common import (
    as_estimate,
    figure_lines,
    listed,
    ok_accuracies,
    opening,
    points_text,
    shown,
    study_experiment,
    study_json,
    study_runs,
)
from lab.results_page.goyal import arm_cell
from lab.results_page.goyal_v3 import GOYAL_RECIPE, arm_table_lines, control_sentence, study_batch_regimes
from lbtrain.reports.answer import arm_decision
from lbtrain.reports.decisions import BETTER, WORSE, trained_share_claim
from lbtrain.reports.regime import Regime
from lbtrain.reports.report import machine_minutes as folder_minutes
from lbtrain.reports.scaling_laws import LrExponentFit
from lbtrain.reports.statistics import difference_interval
from lbtrain.reports.tables import markdown_table
from lbtrain.results import (
    ANSWER_FIGURES,
    ANSWER_FILE,
    ANSWER_REPORT,
    METRICS_FILE,
    PROTOCOL_FILE,
    REPORT_JSON,
    RUNS_FOLDER,
)
from lbtrain.scaling import scale_learning_rate
from lbtrain.studies.plan import label_slug
from lbtrain.studies.scale.design import GRID_POINTS
from lbtrain.verdict import is_ok

STUDY = "goyal_v4"
COMMAND = "make study-v4"
# The rules lbtrain scale carries world size 1's tuning by, in the answer's words.
LINEAR, SQRT, NONE = "linear", "sqrt", "none"
# Each rule as the page's prose and tables name it.
RULE_NAMES = {LINEAR: "the linear rule", SQRT: "the sqrt rule", NONE: "no scaling"}


def study_answer(results: Path) -> dict[str, Any] | None:
    """goyal_v4's ``answer.json`` (``lbtrain scale``), or None when it is not committed."""
    return study_json(results, STUDY, ANSWER_FILE)


def _batch(batch: int) -> str:
    return f"batch {batch:,}"


def rule_decisions(answer: dict[str, Any], rule: str) -> list[tuple[int, dict[str, Any]]]:
    """``(global batch, the answer's entry)`` of ``rule`` at every world size beyond the reference,
    smallest first."""
    return [(row["global_batch"], row["rules"][rule]) for row in answer["per_world_size"] if rule in row["rules"]]


def decisions_by_batch(decisions: list[tuple[int, dict[str, Any]]]) -> str:
    """The decisions over the batches, runs of one word joined: ``matches at batch 128 to 256;
    inconclusive at batch 512; worse at batch 1,024 to 2,048`` (one word alone when every batch
    gives it, as ``common.claims_at``).

    >>> decisions_by_batch([(128, {"decision": "matches"}), (256, {"decision": "matches"}), (512, {"decision": "worse"})])
    'matches at batch 128 to 256; worse at batch 512'
    """
    groups: list[tuple[str, list[int]]] = []
    for batch, entry in decisions:
        if groups and groups[-1][0] == entry["decision"]:
            groups[-1][1].append(batch)
        else:
            groups.append((entry["decision"], [batch]))
    if len(groups) == 1:
        return groups[0][0]
    return "; ".join(f"{word} at {_batch(batches[0])}" + ("" if len(batches) == 1 else f" to {batches[-1]:,}")
                     for word, batches in groups)


def entry_text(entry: dict[str, Any]) -> str:
    """A rule's difference from world size 1 in points and the answer's decision, or, with no ok
    seed, the decision on how many runs ended ok (``decided_by``)."""
    if entry.get("decided_by"):
        return f"{entry['decision']} ({entry['decided_by']})"
    left_out = f"; {entry['excluded']} of its runs not ok, left out" if entry.get("excluded") else ""
    return f"{points_text(entry['difference'])} points{left_out}: {entry['decision']}"


def _regime_text(regimes: dict[int, Regime], batch: int) -> str:
    regime = regimes.get(batch)
    return _batch(batch) if regime is None else regime.describe()


def break_text(answer: dict[str, Any], regimes: dict[int, Regime]) -> str:
    """Where linear scaling with warmup breaks: the largest batch where it matches world size 1
    (every smaller one matching too, ``linear_rule_holds_up_to``), the first batch where it is
    worse (``first_worse``), and between them the interval the break lies in, with the decision
    at each batch inside it."""
    batches = {row["world_size"]: row["global_batch"] for row in answer["per_world_size"]}
    decisions = rule_decisions(answer, LINEAR)
    held = batches.get(answer["linear_rule_holds_up_to"])
    worse = batches.get(answer["first_worse"])
    if worse is None:
        text = "no batch where linear + warmup is worse was reached" + (
            f" (it matches up to {_regime_text(regimes, held)})" if held else "")
        return text[0].upper() + text[1:] + "."
    first = next(entry for batch, entry in decisions if batch == worse)
    text = f"First batch where linear + warmup is worse: **{worse:,}** ({_regime_text(regimes, worse)}): {entry_text(first)}."
    if held is None:
        return text + f" It matches world size {answer['reference_world_size']} at no smaller batch."
    between = [(batch, entry) for batch, entry in decisions if held < batch < worse]
    return text + (f" It matches up to {_regime_text(regimes, held)}, so the break lies above batch {held:,} and at most "
                   f"{worse:,}" + ("" if not between else ": " + "; ".join(f"at {_batch(batch)} {entry_text(entry)}"
                                                                                 for batch, entry in between)) + ".")


def exponent_text(answer: dict[str, Any], recipe: str = GOYAL_RECIPE) -> str:
    """The tuned LR's exponent in the batch (``LrExponentFit.describe``) and where the sqrt
    rule's 0.5 and the linear rule's 1 lie against its interval."""
    record = (answer.get("lr_exponent") or {}).get(recipe)
    if record is None:
        return f"{recipe}: no fit of the tuned LR against the batch"
    fit = LrExponentFit.from_dict(record)
    text = f"{recipe}: {fit.describe()}"
    if fit.low is None or fit.high is None:
        return text

    def where(value: float) -> str:
        return "inside it" if fit.low <= value <= fit.high else ("above it" if value > fit.high else "below it")

    return text + f": the sqrt rule's 0.5 lies {where(0.5)}, the linear rule's 1 {where(1.0)}"


def warmup_updates(warmup_epochs: float | None, steps_per_epoch: int) -> int:
    """A warmup's updates: ``round(warmup_epochs * steps_per_epoch)`` (``lbtrain.schedules.epochs_to_steps``,
    not imported: it loads Keras); 0 for no warmup.

    >>> warmup_updates(0.5, 105), warmup_updates(None, 105)
    (52, 0)
    """
    return round(float(warmup_epochs or 0) * steps_per_epoch)


def _run_metrics(results: Path, study: str, run_id: str) -> dict[str, Any] | None:
    """A run's ``metrics.json``, or None when the study has not kept it."""
    path = results / study / RUNS_FOLDER / run_id / METRICS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _run_warmup(run: dict[str, Any]) -> int:
    """A run's warmup in updates, from its ``metrics.json``."""
    return warmup_updates(run["config"]["lr"].get("warmup_epochs"), run["steps_per_epoch"])


def warmup_runs(results: Path, labels: tuple[str, ...] = (f"{GOYAL_RECIPE} linear rule",)) -> dict[int, tuple[int, list[int]]]:
    """Per global batch, for the runs labelled one of ``labels``: the warmup's updates
    (``warmup_updates``) and the update at which each run that was not ok stopped (its
    ``total_steps``), smallest first (``failed_statuses`` names how they ended). A run without
    its ``metrics.json`` is left out."""
    found: dict[int, tuple[int, list[int]]] = {}
    for row in study_runs(results, STUDY):
        if row["label"] not in labels:
            continue
        run = _run_metrics(results, STUDY, row["run_id"])
        if run is None:
            continue
        _, stopped = found.setdefault(int(row["global_batch"]), (_run_warmup(run), []))
        if not is_ok(row["status"]) and row.get("total_steps") not in (None, ""):
            stopped.append(int(float(row["total_steps"])))
    return {batch: (warmup, sorted(stopped)) for batch, (warmup, stopped) in sorted(found.items())}


def failed_statuses(results: Path, labels: tuple[str, ...] = (f"{GOYAL_RECIPE} linear rule",)) -> list[str]:
    """How the runs labelled one of ``labels`` that were not ok ended (``diverged``, ...)."""
    return sorted({row["status"] for row in study_runs(results, STUDY) if row["label"] in labels and not is_ok(row["status"])})


def _batches(batches: list[int]) -> str:
    """``batch 1,024`` or ``batch 1,024 and 2,048``."""
    return "batch " + listed([f"{batch:,}" for batch in batches])


def _span(values: list[int]) -> str:
    return f"{values[0]:,}" if values[0] == values[-1] else f"{values[0]:,} to {values[-1]:,}"


def warmup_text(results: Path, answer: dict[str, Any]) -> str:
    """The batch or the warmup? The warmup is half an epoch at every batch, so its updates shrink
    as the batch grows: where the linear rule's runs that were not ok stopped, inside or after
    it; then, once goyal_v4_warmup has finished (``warmup_comparison``), a pointer to its answer
    (the next bullet), else the question left open. "" when every run of the rule was ok."""
    runs = warmup_runs(results)
    failed = {batch: (warmup, stopped) for batch, (warmup, stopped) in runs.items() if stopped}
    if not failed:
        return ""
    worse = next((row["global_batch"] for row in answer["per_world_size"] if row["world_size"] == answer["first_worse"]), None)
    ended = " or ".join(failed_statuses(results))
    places = "; ".join(f"at {_batch(batch)} its warmup is {warmup:,} updates and {len(stopped)} run{'s' if len(stopped) > 1 else ''} "
                       f"{ended} at update {_span(stopped)} ({'inside' if stopped[-1] <= warmup else 'after' if stopped[0] > warmup else 'inside and after'} it)"
                       for batch, (warmup, stopped) in failed.items())
    lengths = ", ".join(f"{warmup:,} at {_batch(batch) if index == 0 else f'{batch:,}'}" for index, (batch, (warmup, _)) in enumerate(runs.items()))
    lead = (f"**The batch or the warmup?** The warmup is half an epoch at every batch, so it shrinks with the batch (its updates: "
            f"{lengths}). Of the linear rule's runs that were not ok, {places}.")
    if warmup_comparison(results) is not None:
        return f"{lead} This study cannot tell the two apart; {WARMUP_STUDY} tests a longer warmup (next point)."
    focus = (f" At {_batch(worse)}, linear + warmup's failure may be the warmup's, not the batch's" if worse in runs else
             " Linear + warmup's failures may be the warmup's, not the batch's")
    return (f"{lead.replace('**The batch', '**Open question: the batch', 1)}{focus}: this study cannot tell them apart. A warmup "
            "of a fixed share of the updates (or of a fixed number) at the same batches would.")


WARMUP_STUDY = "goyal_v4_warmup"


def _planned_updates(run: dict[str, Any]) -> int:
    """A run's planned updates from its ``metrics.json``: its epochs' steps or its update floor."""
    training = run["config"]["training"]
    return max(int(training.get("min_steps") or 0), int(training.get("epochs") or 0) * int(run["steps_per_epoch"]))


def warmup_arms(results: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """goyal_v4_warmup's arms other than its reference (world size 1), per global batch: the
    warmup's updates and the planned updates (from the first of its runs that kept its
    ``metrics.json``; None when none did), the runs and how many ended ok (its summary). Empty
    until the study has finished (its ``report.json``, which ``lbtrain report`` writes last)."""
    if study_json(results, WARMUP_STUDY, REPORT_JSON) is None:
        return {}
    arms: dict[str, dict[int, dict[str, Any]]] = {}
    for row in study_runs(results, WARMUP_STUDY):
        if int(row["world_size"]) == 1:
            continue
        arm = row["label"].rsplit(" b", 1)[0]
        cell = arms.setdefault(arm, {}).setdefault(int(row["global_batch"]), {"warmup": None, "updates": None, "runs": 0, "ok": 0})
        if cell["warmup"] is None and (run := _run_metrics(results, WARMUP_STUDY, row["run_id"])) is not None:
            cell.update(warmup=_run_warmup(run), updates=_planned_updates(run))
        cell["runs"] += 1
        cell["ok"] += is_ok(row["status"])
    return {arm: dict(sorted(cells.items())) for arm, cells in arms.items()}


class WarmupComparison(NamedTuple):
    """goyal_v4_warmup's two warmups at the batches both ran (``warmup_arms``' cells): the shorter
    (goyal_v4's half epoch) and the longer, per batch the longer against the shorter by how many
    runs ended ok (``trained_share_claim``: its word and text), world size 1's runs (ok, all) and
    the longer warmup's share of the updates in percent (world size 1's, as the study sets it)."""

    short: dict[int, dict[str, Any]]
    long: dict[int, dict[str, Any]]
    claims: dict[int, tuple[str, str]]
    reference: tuple[int, int]
    share: float

    @property
    def batches(self) -> list[int]:
        return list(self.claims)


def warmup_comparison(results: Path) -> WarmupComparison | None:
    """``WarmupComparison`` of goyal_v4_warmup, or None until it has finished (``warmup_arms``),
    when it has not two arms, or when they share no batch with both warmups known."""
    arms = warmup_arms(results)
    if len(arms) != 2:
        return None
    first, second = arms.values()
    batches = [batch for batch in first if batch in second and first[batch]["warmup"] is not None and second[batch]["warmup"] is not None]
    if not batches:
        return None
    short, long = sorted((first, second), key=lambda cells: sum(cells[batch]["warmup"] for batch in batches))
    claims = {batch: trained_share_claim(long[batch]["ok"], long[batch]["runs"], short[batch]["ok"], short[batch]["runs"])
              for batch in batches}
    reference = [row for row in study_runs(results, WARMUP_STUDY) if int(row["world_size"]) == 1]
    run = next((run for row in reference if (run := _run_metrics(results, WARMUP_STUDY, row["run_id"])) is not None), None)
    share = (100 * long[batches[0]]["warmup"] / long[batches[0]]["updates"] if run is None else
             100 * _run_warmup(run) / _planned_updates(run))
    return WarmupComparison({batch: short[batch] for batch in batches}, {batch: long[batch] for batch in batches}, claims,
                            (sum(is_ok(row["status"]) for row in reference), len(reference)), share)


def _runs_each(cells: list[dict[str, Any]]) -> str:
    """``5 runs each`` (or ``3 to 5 runs each``) over ``cells``."""
    counts = sorted({cell["runs"] for cell in cells})
    return f"{_span(counts)} run{'s' if counts[-1] > 1 else ''} each"


def warmup_study_text(results: Path) -> str:
    """What goyal_v4_warmup answered (``warmup_comparison``), or "" before it has finished: the
    linear rule's arm with a longer warmup (world size 1's share of its updates) against goyal_v4's
    half-epoch warmup at the same batches, by how many runs ended ok (Fisher's exact test,
    ``trained_share_claim``); which batches the longer warmup measurably rescues, and where, with
    it, the runs still end ok measurably less often than world size 1's (the break not removed)."""
    comparison = warmup_comparison(results)
    if comparison is None:
        return ""
    short, long, share = comparison.short, comparison.long, comparison.share
    counts = "; ".join(f"{_batch(batch)} ({short[batch]['warmup']:,} against {long[batch]['warmup']:,} warmup updates of "
                       f"{long[batch]['updates']:,}): {short[batch]['ok']} of {short[batch]['runs']} against "
                       f"{long[batch]['ok']} of {long[batch]['runs']}, {verdict}" for batch, (verdict, _) in comparison.claims.items())
    each = _runs_each([*short.values(), *long.values()])
    rescued = [batch for batch, (verdict, _) in comparison.claims.items() if verdict == BETTER]
    hurt = [batch for batch, (verdict, _) in comparison.claims.items() if verdict == WORSE]
    reference_ok, reference_runs = comparison.reference
    still = ([batch for batch in comparison.batches
              if trained_share_claim(long[batch]["ok"], long[batch]["runs"], reference_ok, reference_runs)[0] == WORSE]
             if reference_runs else [])
    text = (f"The longer warmup measurably rescues {_batches(rescued)}" if rescued else
            "With world size 1's warmup share no batch is measurably rescued") + f" (Fisher's exact test, {each})"
    if hurt:
        text += f"; at {_batches(hurt)} the longer warmup ends ok measurably less often"
    if still:
        behind = (f"its runs at {_batches(still)} still end ok measurably less often than world size 1's ("
                  + listed([f"{long[batch]['ok']} of {long[batch]['runs']} at {batch:,}" for batch in still])
                  + f" against {reference_ok} of {reference_runs}: worse, Fisher's exact test)")
        text += (f": a longer warmup of this size does not remove the break, {behind}" if not rescued else f"; {behind}")
    return (f"**The batch or the warmup? Answered by {WARMUP_STUDY}**: goyal_v4's linear-rule arm re-run with world size 1's "
            f"warmup share ({share:.1f}% of the updates) beside its half-epoch warmup, {each}, nothing tuned; runs ended ok "
            f"(half-epoch against {share:.1f}% warmup; Fisher's exact test on the longer warmup): {counts}. {text}. "
            f"[report]({WARMUP_STUDY}/report.md)")


def not_run_controls(results: Path, answer: dict[str, Any], study: str = STUDY) -> str:
    """The convergence controls ``study``'s experiment asks for (``protocol.train_longer``) that
    have no row in its answer: an arm with no ok run has no budget of its own to multiply."""
    experiment = study_experiment(results, study)
    if not experiment:
        return ""
    asked = (experiment.get("protocol") or {}).get("train_longer") or []
    ran = {row["world_size"] for row in answer["controls"]}
    missing = [entry for entry in asked if entry["world_size"] not in ran]
    runs = study_runs(results, study)
    parts = []
    for entry in missing:
        label = entry.get("arm") or "the best arm"
        rows = [row for row in runs if row["label"] == entry.get("arm") and int(row["world_size"]) == entry["world_size"]]
        ok = sum(1 for row in rows if is_ok(row["status"]))
        parts.append(f"{label} at world size {entry['world_size']} ({entry['factor']:g}x) was not run: "
                     + (f"{ok} of its {len(rows)} runs ended ok, so it has no budget of its own to multiply" if rows and not ok
                        else "no row in the answer"))
    return "; ".join(parts)


def recipe_search_studies(protocol: dict[str, Any], study: str, recipe: str) -> dict[int, dict[str, Any]]:
    """Per world size, ``recipe``'s search in ``protocol.json`` (its studies are named
    ``<study>-<recipe as in run ids>-w<world size>``, ``lbtrain.studies.protocol`` with
    ``lbtrain.studies.plan.label_slug``); a name of another shape is skipped."""
    prefix = f"{study}-{label_slug(recipe)}-w"
    return {int(size): entry for name, entry in protocol.get("search", {}).items()
            if name.startswith(prefix) and (size := name[len(prefix):]).isdigit()}


def recipe_name(recipe: str) -> str:
    """``LARS with warmup`` for ``lars+warmup``: a recipe as a sentence names it."""
    optimizer, _, rest = recipe.partition("+")
    return optimizer.upper() + (f" with {rest}" if rest else "")


def _tuned_lrs(results: Path, study: str, recipe: str) -> dict[int, float]:
    """Per world size, the LR ``recipe``'s tuned runs trained with (``summary.csv``), where its
    runs there agree on one."""
    found: dict[int, set[float]] = {}
    for row in study_runs(results, study):
        if row["label"] == f"{recipe} tuned" and row.get("learning_rate") not in (None, ""):
            found.setdefault(int(row["world_size"]), set()).add(float(row["learning_rate"]))
    return {size: values.pop() for size, values in found.items() if len(values) == 1}


def _scaled_best(results: Path, study: str, recipe: str, best: float, batch: int) -> float | None:
    """A search's best base LR as the runs train it at ``batch``: scaled by the recipe's rule from
    ``lr.base_batch`` (``experiment.yaml``; None without it)."""
    experiment = study_experiment(results, study)
    lr = experiment.get("lr") or {}
    if lr.get("base_batch") is None:
        return None
    variant = next((entry for entry in (experiment.get("grid") or {}).get("variants") or [] if entry.get("label") == recipe), {})
    return scale_learning_rate(best, lr["base_batch"], batch, variant.get("lr.rule", lr.get("rule", "linear")))


def layerwise_text(results: Path, protocol: dict[str, Any], answer: dict[str, Any], recipe: str = "lars+warmup", study: str = STUDY,
                   decisions: list[tuple[int, dict[str, Any]]] | None = None) -> str:
    """A layer-wise recipe (LARS, LAMB: ``recipe``) tuned on its own grid at every world size of
    ``study``: where its grid was extended past an edge (more values tried than the design's
    ``GRID_POINTS``), its best LR at each batch (the LR its tuned runs trained with, from
    ``summary.csv``; without them, the search's best base LR scaled by the recipe's rule from
    ``lr.base_batch``), where that best sits on the grid's edge, its exponent in the batch, where
    its search found no ok trial (no final runs there, no verdict), and, given its ``decisions``
    (``tuned_decisions``), its decision against world size 1's chosen arm at each batch (or that it
    has no final run beyond world size 1); without them, a pointer to the table of every arm."""
    studies = recipe_search_studies(protocol, study, recipe)
    if not studies:
        return ""
    rows = sorted((row for row in protocol["rows"] if row["recipe"] == recipe and row["rule_name"] != "reference"),
                  key=lambda row: row["world_size"])
    batches = {row["world_size"]: row["global_batch"] for row in answer["per_world_size"]}
    trained = _tuned_lrs(results, study, recipe)
    empty = [row for row in rows if not row["tuned_runs"]]
    bests, extended = [], []
    for size, entry in sorted(studies.items()):
        field = next(iter(entry.get("fields", {}).values()), None)
        if field is None or field.get("best") is None or size not in batches:
            continue
        tried = len(field.get("values") or [])
        if tried > GRID_POINTS:
            extended.append((batches[size], tried))
        best = trained[size] if size in trained else _scaled_best(results, study, recipe, field["best"], batches[size])
        if best is None:
            continue
        edge = "" if field.get("interior") else f" (on the edge of the {tried} tried: the best may lie beyond)"
        bests.append(f"{batches[size]:,}: {best:.4g}{edge}")
    reference_size = answer["reference_world_size"]
    if decisions is None:
        against = f"Its test accuracy against world size {reference_size} is in the table of every arm below."
    elif not decisions:
        against = f"It has no final run beyond world size {reference_size}: no decision against world size {reference_size}."
    else:
        reference = next(row["use"] for row in answer["per_world_size"] if row["world_size"] == reference_size)
        chosen = f"world size {reference_size}'s chosen arm ({reference})" if reference else (
            f"world size {reference_size} (no arm whose every seed was ok there)")
        against = (f"Against {chosen}: **{decisions_by_batch(decisions)}** ("
                   + "; ".join(f"{_batch(batch)}: {entry_text(entry)}" for batch, entry in decisions) + ").")
    grid = "" if not extended else (
        f" (its grid extended past an edge at batch {listed([f'{batch:,}' for batch, _ in extended])}: "
        f"{listed([str(tried) for _, tried in extended])} values tried against the design's {GRID_POINTS})")
    best_text = f"; its best LR at batch {', '.join(bests)}" if bests else ""
    text = (f"{recipe_name(recipe)}, tuned on its own grid at every world size{grid}{best_text}. Tuned LR, "
            f"{exponent_text(answer, recipe)}. {against}")
    if empty:
        text += (" Its search found no ok trial at batch " + listed([f"{row['global_batch']:,}" for row in empty])
                 + ": no best, so no final runs there and no verdict.")
    return text


def tuned_decisions(results: Path, answer: dict[str, Any], recipe: str, study: str = STUDY) -> list[tuple[int, dict[str, Any]]]:
    """``(global batch, entry)`` of ``recipe`` tuned at every world size beyond the reference that
    has final runs, against the answer's reference (world size 1's chosen arm), in the shape of the
    answer's rule entries (``rule_decisions``): the difference of test accuracies with Welch's
    interval (``difference_interval``), the runs not ok, and the decision taken as the answer
    takes a rule's (``lbtrain.reports.answer.arm_decision``: its margin, ``answer["margin"]``; with no ok run on a
    side, how many runs ended ok, ``decided_by``). The answer decides only the arm it chose and the
    rules; a tuned recipe's decision is taken here by the same rule."""
    runs = study_runs(results, study)
    reference_size = answer["reference_world_size"]
    use = next(row["use"] for row in answer["per_world_size"] if row["world_size"] == reference_size)
    reference = ok_accuracies(runs, use, reference_size)
    reference_runs = sum(1 for row in runs if row["label"] == use and int(row["world_size"]) == reference_size)
    label = f"{recipe} tuned"
    decisions = []
    for row in answer["per_world_size"]:
        if row["world_size"] == reference_size:
            continue
        mine = [run for run in runs if run["label"] == label and int(run["world_size"]) == row["world_size"]]
        if not mine:
            continue
        tests = ok_accuracies(runs, label, row["world_size"])
        difference = difference_interval(tests, reference)
        entry: dict[str, Any] = {"label": label, "excluded": len(mine) - len(tests)}
        decision = arm_decision(difference, answer["margin"], len(tests), len(mine), len(reference), reference_runs)
        if "decided_by" not in decision:
            entry["difference"] = difference
        entry.update(decision)
        decisions.append((row["global_batch"], entry))
    return decisions


def world_rows(answer: dict[str, Any], regimes: dict[int, Regime]) -> list[list[Any]]:
    """Per world size, from the answer: batch, share of the data, updates, the arm chosen on
    validation with the arms tied with it, its LR and test accuracy, its difference from world
    size 1 and each rule's decision against world size 1."""
    rows = []
    for row in answer["per_world_size"]:
        regime = regimes.get(row["global_batch"])
        chosen = row["use"] or "no arm ok"
        if row["tied_with_the_best"]:
            chosen += f"; tied with the best: {', '.join(row['tied_with_the_best'])}"
        reference = row["world_size"] == answer["reference_world_size"]
        rules = [("reference" if reference else "-") if rule not in row["rules"] else row["rules"][rule]["decision"]
                 for rule in (LINEAR, SQRT, NONE)]
        rows.append([row["world_size"], f"{row['global_batch']:,}", f"{100 * row['share']:.2g}%",
                     f"{row['updates']:,}" if regime is None else f"{regime.updates:,}", chosen,
                     "-" if row["learning_rate"] is None else f"{row['learning_rate']:.4g}", shown(as_estimate(row["test_accuracy"])),
                     "the reference" if reference else f"{points_text(row['difference'])}: {row['decision']}", *rules])
    return rows


def _counts_cell(answer: dict[str, Any]) -> Callable[[dict[str, Any] | None, list[dict[str, Any]], list[float]], str]:
    """``goyal.arm_cell``, and for a rule arm with no ok seed the answer's decision on how many of
    its runs ended ok (``decided_by``)."""
    decided = {(entry["label"], row["world_size"]): entry for row in answer["per_world_size"] for entry in row["rules"].values()
               if entry.get("decided_by")}

    def cell(arm: dict[str, Any] | None, runs: list[dict[str, Any]], reference: list[float]) -> str:
        text = arm_cell(arm, runs, reference)
        entry = None if arm is None else next((decided[(label, arm["world_size"])] for label in arm["run_labels"]
                                               if (label, arm["world_size"]) in decided), None)
        return text if entry is None else f"{text}: {entry['decision']} ({entry['decided_by']})"
    return cell


def machine_text(results: Path, answer: dict[str, Any], study: str = STUDY) -> str:
    """The study's machine time in hours from its folder (``lbtrain.reports.report.machine_minutes``)
    beside the hours ``lbtrain scale``'s answer states."""
    minutes = folder_minutes(results / study)
    total = (minutes["runs"] or 0.0) + (minutes["tuning_trials"] or 0.0)
    return (f"In all {total / 60:.2f} machine hours, one run after another (the runs' and the trials' times above); "
            f"`lbtrain scale`'s answer states {answer['machine_hours']:.2f}, from every summary row's wall time (a run the "
            "runner copied for a second label included) and its own count of the tuning time.")


def made_by_text(answer: dict[str, Any], protocol: dict[str, Any], study: str, made_by: str, arms: str = "") -> str:
    """The design of a study made by ``lbtrain scale`` (``made_by``: the command, as the page names
    it), rendered from its answer and protocol: model, data, world sizes and batches, the arms
    (``arms``, a sentence, or nothing), the search, the seeds and what every difference is against."""
    sizes = [row["world_size"] for row in answer["per_world_size"]]
    batches = [row["global_batch"] for row in answer["per_world_size"]]
    seeds = protocol["seeds"]
    return (f"Made by {made_by}, as a user's own study would be: {answer['model']} on {answer['data']} "
            f"({answer['train_size']:,} training samples), world sizes {', '.join(map(str, sizes))} (batch {batches[0]:,} to "
            f"{batches[-1]:,}). {arms}Every arm's LR searched on a log2 grid on validation (each trial the mean of seeds "
            f"{', '.join(map(str, seeds['tuning']))}), each arm's best re-run with seeds {', '.join(map(str, seeds['finals']))} "
            f"and tested; every difference is against world size {answer['reference_world_size']}'s arm chosen on validation, in "
            f"points with Welch's 95% interval and the decision rule's word (margin {100 * answer['margin']:g} point). "
            f"[answer]({study}/{ANSWER_REPORT}), [protocol]({study}/protocol.md)")


def answer_tables(results: Path, study: str, answer: dict[str, Any], protocol: dict[str, Any], regimes: dict[int, Regime]) -> list[str]:
    """The tables of a study made by ``lbtrain scale``: what to use at each world size with each
    rule's decision (``world_rows``), every arm against the same reference (``arm_table_lines``),
    and the answer's figures."""
    return [
        "What to use at each world size (chosen on validation among arms whose every seed was ok; test accuracy reported) and "
        f"each rule's decision against world size {answer['reference_world_size']}:",
        "",
        markdown_table(["world size", "global batch", "share of the data", "updates", "use (chosen on validation)", "LR",
                        "its test accuracy", "− world 1 (points)", "linear + warmup", "sqrt rule", "no scaling"],
                       world_rows(answer, regimes)),
        "",
        "Every arm against the same reference, with the LR it trained with (an arm with no ok seed: the decision on how many of "
        "its runs ended ok):",
        "",
        *arm_table_lines(results, study, protocol, cell=_counts_cell(answer)),
        *figure_lines(results, study, ANSWER_FIGURES["accuracy"],
                      "test accuracy against the global batch, the chosen arm and each rule (runs not ok marked)"),
        *figure_lines(results, study, ANSWER_FIGURES["learning_rate"], "the chosen LR against the global batch, beside the rules"),
    ]


def section_goyal_v4(results: Path) -> list[str]:
    """goyal_v4's section: what ``lbtrain scale`` answered (module doc), the break point with its
    interval, the tuned LR's exponent with its interval, the warmup question (``warmup_text``) and
    goyal_v4_warmup's answer once it has finished (``warmup_study_text``), the convergence control,
    LARS, the answer per world size and every arm against world size 1."""
    lines, protocol = opening(results, STUDY, "where linear scaling with warmup breaks (fourth edition, study 1)", PROTOCOL_FILE,
                              COMMAND)
    answer = study_answer(results)
    if protocol is None or answer is None:
        return lines if protocol is None else lines + [f"{STUDY} has no {ANSWER_FILE}: `{COMMAND}` writes it.", ""]
    regimes = study_batch_regimes(results, STUDY)
    sqrt = rule_decisions(answer, SQRT)
    none = rule_decisions(answer, NONE)
    controls = control_sentence(protocol, lead="Convergence control (is the equal-epoch budget enough to converge?): ")
    missing = not_run_controls(results, answer)
    bullets = [
        f"- {break_text(answer, regimes)}",
        f"- The sqrt rule against world size {answer['reference_world_size']}: **{decisions_by_batch(sqrt)}**; no scaling: "
        f"{decisions_by_batch(none)}.",
        f"- The tuned LR against the batch, {exponent_text(answer)}.",
        f"- {warmup_text(results, answer)}",
        *([f"- {text}"] if (text := warmup_study_text(results)) else []),
        f"- {controls}" + (f" The control of {missing}." if missing else ""),
        *([f"- {text}"] if (text := layerwise_text(results, protocol, answer)) else []),
    ]
    return lines + [
        machine_text(results, answer), "",
        made_by_text(answer, protocol, STUDY, f"`lbtrain scale` (`{COMMAND}`)"),
        "",
        *bullets,
        "",
        *answer_tables(results, STUDY, answer, protocol, regimes),
    ]


def warmup_answer(comparison: WarmupComparison, batch: int) -> str:
    """What goyal_v4_warmup's test says at ``batch``, in the words of its decision: ``a longer
    warmup (67 updates against 26 at batch 1,024; goyal_v4_warmup) does not measurably rescue it:
    1 of 5 runs ok against 0 of 5 (Fisher's exact test, ...): inconclusive``."""
    verdict, text = comparison.claims[batch]
    says = {BETTER: "rescues it", WORSE: "ends ok less often"}.get(verdict, "does not measurably rescue it")
    return (f"a longer warmup ({comparison.long[batch]['warmup']:,} updates against {comparison.short[batch]['warmup']:,} at "
            f"{_batch(batch)}; {WARMUP_STUDY}) {says}: {text}: {verdict}")


def anchor_goyal_v4_linear(results: Path) -> tuple[str, str]:
    """Goyal et al. 2017's linear scaling with gradual warmup judged on goyal_v4: the answer's
    decision at each batch (world size 1's tuning carried by the linear rule, against world size
    1's chosen arm; a batch with no ok seed decided on how many runs ended ok), the break point
    with its interval, the tuned LR's exponent with its interval, and at the first batch where it
    is worse the warmup question: goyal_v4_warmup's decision there (``warmup_answer``), or open
    before that study has finished."""
    answer = study_answer(results)
    if answer is None or study_json(results, STUDY, PROTOCOL_FILE) is None:
        return "not measured yet", f"{STUDY} is not committed"
    decisions = rule_decisions(answer, LINEAR)
    if not decisions:
        return "not measured yet", f"{STUDY} has no linear-rule arm"
    regimes = study_batch_regimes(results, STUDY)
    runs = warmup_runs(results)
    worse = next((row["global_batch"] for row in answer["per_world_size"] if row["world_size"] == answer["first_worse"]), None)
    comparison = warmup_comparison(results)
    if worse not in runs:
        warmup = ""
    elif comparison is not None:
        warmup = "" if worse not in comparison.claims else "; " + warmup_answer(comparison, worse)
    else:
        warmup = (f"; open: its warmup is half an epoch at every batch, {runs[worse][0]:,} updates at {_batch(worse)}, so the "
                  "failure there may be the warmup's, not the batch's")
    evidence = (f"{STUDY} (`lbtrain scale`), linear + gradual warmup carried from world size {answer['reference_world_size']} minus "
                f"its chosen arm: " + "; ".join(f"{_batch(batch)}: {entry_text(entry)}" for batch, entry in decisions)
                + f". {break_text(answer, regimes).replace('**', '')} Tuned LR, {exponent_text(answer)}{warmup}")
    return decisions_by_batch(decisions), evidence


__all__ = ["RULE_NAMES", "STUDY", "WARMUP_STUDY", "WarmupComparison", "anchor_goyal_v4_linear", "answer_tables", "break_text",
           "decisions_by_batch", "entry_text", "exponent_text", "layerwise_text", "machine_text", "made_by_text", "not_run_controls",
           "recipe_name", "recipe_search_studies", "rule_decisions", "section_goyal_v4", "tuned_decisions", "warmup_answer", "warmup_arms",
           "warmup_comparison", "warmup_runs", "warmup_study_text", "warmup_text", "warmup_updates"]
