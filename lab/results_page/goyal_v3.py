"""goyal_v3, the third edition's study 1 (Goyal et al. 2017 in regime), on the results page: the
page's lead (at world size N which recipe, what it costs in accuracy and in updates, and where
linear scaling stops, set against critical_batch_v3's measured critical batch) and the study's own
section (every arm against one reference, the LR each arm trained with, the convergence control).

Everything is read from the committed ``protocol.json``, ``summary.csv`` and the runs' metrics
(``lbtrain.reports.regime``); what is chosen is chosen on validation (``protocol.json``'s
``best_arms``), test accuracy is only reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from lab.results_page.common import (
    MARGIN,
    as_estimate,
    figure_lines,
    judge,
    judged_points,
    opening,
    points_text,
    regime_slot,
    shown,
    standing_text,
    study_json,
    study_runs,
    validation_choice,
)
from lab.results_page.critical_batch import b_crit_text
from lab.results_page.goyal import (
    arm_accuracies,
    arm_cell,
    chosen_arms,
    excluded_text,
    final_runs,
    goyal_bn_reference,
    not_ok_text,
    study_arms,
)
from lbtrain.reports.decisions import BETTER, MATCHES
from lbtrain.reports.regime import Regime, study_regimes
from lbtrain.reports.scaling_laws import CriticalBatchFit
from lbtrain.reports.statistics import difference_interval, mean_interval
from lbtrain.reports.tables import markdown_table
from lbtrain.results import FIGURE_ACCURACY_VS_BATCH, PROTOCOL_FILE, REPORT_JSON, run_set

STUDY = "goyal_v3"
CRITICAL_BATCH_STUDY = "critical_batch_v3"
# Goyal et al. 2017's recipe as goyal_v3 names it: momentum SGD with gradual warmup; its rule arm
# at a world size is the recipe tuned at world size 1 and carried by the linear rule.
GOYAL_RECIPE = "momentum+warmup"
COMMAND = "make study-v3"


def linear_rule_rows(protocol: dict[str, Any]) -> list[dict[str, Any]]:
    """Goyal's recipe carried by the linear rule, one protocol row per world size beyond the
    reference, smallest first."""
    return sorted((row for row in protocol["rows"] if row["recipe"] == GOYAL_RECIPE and row["rule_name"] == "linear"),
                  key=lambda row: row["world_size"])


def where_linear_scaling_stops(protocol: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(held, stopped)``: the protocol row of the largest batch up to which the linear rule
    with warmup matches (or beats) world size 1 at every batch, and the row of the first batch
    where it does not (``matches`` needs the whole Welch interval above -1 point: an
    ``inconclusive`` batch stops it too, as not shown to hold); None for either when there is none."""
    held = None
    for row in linear_rule_rows(protocol):
        if judge(row["rule_minus_reference"]) not in (MATCHES, BETTER):
            return held, row
        held = row
    return held, None


def critical_batch_fit(results: Path) -> CriticalBatchFit | None:
    """critical_batch_v3's fit of steps-to-target against the batch, or None when not committed."""
    report = study_json(results, CRITICAL_BATCH_STUDY, REPORT_JSON)
    return None if report is None else CriticalBatchFit.from_dict(report["critical_batch"])


def study_batch_regimes(results: Path, study: str = STUDY) -> dict[int, Regime]:
    """The study's regime at each of its global batches (``lbtrain.reports.regime.study_regimes``)."""
    return {regime.global_batch: regime for regime in study_regimes(results, study)}


def _regime_text(regimes: dict[int, Regime], batch: int) -> str:
    regime = regimes.get(batch)
    return f"batch {batch:,}" if regime is None else regime.describe()


def _points_claim(record: dict[str, Any] | Any) -> str:
    """``-5.0 [-5.2, -4.8] (n=5 vs 5, df=8) points: worse``: a difference in points, then its claim."""
    return f"{points_text(record)} points: {judge(record)}"


def _stopped_text(row: dict[str, Any]) -> str:
    """The linear rule's difference where it stopped, or that it had no ok seed to differ."""
    if row["rule"]["n"]:
        return _points_claim(row["rule_minus_reference"]) + not_ok_text(row, "rule")
    return f"without an ok seed (0 of {row['rule_runs']} final runs ok)"


def stops_sentence(results: Path, protocol: dict[str, Any]) -> str:
    """Where linear scaling with warmup stops in goyal_v3 (``where_linear_scaling_stops``), set
    against critical_batch_v3's measured B_crit of the same model and data."""
    regimes = study_batch_regimes(results)
    held, stopped = where_linear_scaling_stops(protocol)
    if held is None and stopped is None:
        return "goyal_v3 has no linear-rule arm beyond world size 1."
    if held is None:
        text = (f"Linear scaling with warmup is not shown to match {GOYAL_RECIPE} tuned at world size 1 at any larger batch: "
                f"at {_regime_text(regimes, stopped['global_batch'])} it is {_stopped_text(stopped)}.")
    else:
        text = (f"Linear scaling with warmup matches {GOYAL_RECIPE} tuned at world size 1 (the whole 95% interval above "
                f"-1 point) up to {_regime_text(regimes, held['global_batch'])}: {points_text(held['rule_minus_reference'])} points"
                f"{not_ok_text(held, 'rule')}")
        text += (". That is the largest batch goyal_v3 measured: it was not seen to stop." if stopped is None else
                 f"; at {_regime_text(regimes, stopped['global_batch'])} it is {_stopped_text(stopped)}.")
    fit = critical_batch_fit(results)
    if fit is None:
        return text + (f" {CRITICAL_BATCH_STUDY}, the measured critical batch of the same model and data, is not committed yet "
                       f"(`{COMMAND}` makes it).")
    if not fit.fitted or not fit.b_crit:
        return text + f" {CRITICAL_BATCH_STUDY} has no critical batch to set it against ({fit.note or 'no fit'})."
    places = [f"batch {row['global_batch']:,} ({word}) is {row['global_batch'] / fit.b_crit:.2g} x B_crit"
              for row, word in ((held, "held"), (stopped, "stopped")) if row is not None]
    return text + f" {CRITICAL_BATCH_STUDY} measured {b_crit_text(fit)} on the same model and data: {' and '.join(places)}."


def distinct_arms(groups: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """``groups`` (label -> its summary rows) with every arm whose runs are another arm's (the
    same configuration hashes ending their run ids: the runner trained them once and copied them,
    as goyal_v3's tuned arm and linear-rule arm where tuning found the linear rule's LR) left out,
    and label -> the label whose runs it shares. Ranked as two arms, one run set would only ever
    tie with itself."""
    kept: dict[str, list[dict[str, Any]]] = {}
    owner: dict[frozenset[str], str] = {}
    same: dict[str, str] = {}
    for label, rows in groups.items():
        key = run_set(rows)
        if key is not None and key in owner:
            same[label] = owner[key]
            continue
        kept[label] = rows
        if key is not None:
            owner[key] = label
    return kept, same


def lead_rows(results: Path, protocol: dict[str, Any]) -> list[list[Any]]:
    """Per world size: global batch with its share of the training set and its updates, the arm
    chosen on validation with its standing, its test accuracy and its difference from world size
    1's chosen arm, and Goyal's recipe by the linear rule against the same reference."""
    runs, arms = study_runs(results, STUDY), study_arms(protocol)
    regimes = study_batch_regimes(results)
    reference_arm, reference = goyal_bn_reference(protocol, runs)
    linear = {arm["world_size"]: arm for arm in arms if arm["label"] == f"{GOYAL_RECIPE}, linear rule"}
    base_updates = regimes.get(reference_arm["global_batch"])
    rows = []
    for size, arm in sorted(chosen_arms(protocol, arms).items()):
        regime = regimes.get(arm["global_batch"])
        updates = "-" if regime is None else f"{regime.updates:,}"
        if regime is not None and base_updates is not None and size != reference_arm["world_size"]:
            updates += f" ({regime.updates / base_updates.updates:.2g} x world size {reference_arm['world_size']}'s)"
        share = "-" if regime is None else f"{100 * regime.fraction:.2g}%"
        distinct, same = distinct_arms(final_runs(runs, size))
        _, ranks = validation_choice(distinct)
        ranked = same.get(arm["run_label"], arm["run_label"])
        name = f"{arm['label']}; {standing_text(ranked, ranks)}" if ranked in ranks else arm["label"]
        twins = [label for label in (ranked, *same) if label != arm["run_label"] and same.get(label, label) == ranked]
        if twins:
            name += f" (the same runs as {', '.join(twins)})"
        seeds = arm_accuracies(runs, (arm["run_label"],), size)
        accuracy = shown(mean_interval(seeds)) + excluded_text(runs, (arm["run_label"],), size)
        if size == reference_arm["world_size"]:
            against, goyal = "the reference", "the reference"
        else:
            against = judged_points(difference_interval(seeds, reference))
            goyal = arm_cell(linear.get(size), runs, reference)
        rows.append([size, arm["global_batch"], share, updates, name, accuracy, against, goyal])
    return rows


def converged_text(gain: dict[str, Any]) -> str:
    """Whether a budget had converged, from the gain of training longer (longer − shorter):
    *converged* when the gain's whole 95% interval lies below +1 point (the page's margin), *not
    converged* when it lies above +1 point, else not shown either way. (*matches* on the gain
    would not do: it bounds the gain from below only.)"""
    low, high = gain.get("low"), gain.get("high")
    if low is None or high is None:
        return "convergence not shown either way (no interval)"
    if high < MARGIN:
        return "converged: the extra updates gained under 1 point"
    if low > MARGIN:
        return "not converged: the extra updates gained over 1 point"
    return "convergence not shown either way (the gain's interval straddles +1 point)"


CONTROL_LEAD = "Convergence control (is the largest batch's budget enough to converge?): "


def control_sentence(protocol: dict[str, Any], lead: str = CONTROL_LEAD) -> str:
    """The convergence controls (``protocol.train_longer``) after ``lead``: each arm re-run for
    ``factor`` times its updates, its gain over its own budget (``converged_text``) and its
    difference from the recipe at world size 1, with the runs left out."""
    parts = []
    for row in protocol.get("train_longer", []):
        longer = as_estimate(row["longer"])
        left_out = row["longer_runs"] - (longer.n or 0)
        parts.append(f"{row['arm']} at world size {row['world_size']} (batch {row['global_batch']:,}) trained {row['factor']:g}x longer "
                     f"({row['longer_steps']:,} updates against {row['steps']:,}): test {shown(longer)}"
                     + (f" ({left_out} of {row['longer_runs']} runs not ok, left out)" if left_out else "")
                     + f", {_points_claim(row['gain'])} over its own budget ({converged_text(row['gain'])}) and "
                     f"{_points_claim(row['longer_minus_reference'])} against {row['recipe']} tuned at world size 1")
    if not parts:
        return "No convergence control was run (protocol.train_longer)."
    return lead + "; ".join(parts) + "."


def section_lead(results: Path) -> list[str]:
    """The page's lead: the third edition's answer for a user moving a model from 1 to N workers."""
    lines = ["## Third edition: which recipe at world size N, what it costs, where linear scaling stops", ""]
    protocol = study_json(results, STUDY, PROTOCOL_FILE)
    if protocol is None:
        return lines + [f"*Not committed yet*: `{COMMAND}` makes it (resumable).", ""]
    if not protocol.get("best_arms"):
        return lines + [f"{STUDY}: no arm had every seed ok at any world size, so none is chosen.", ""]
    reference_arm, reference = goyal_bn_reference(protocol, study_runs(results, STUDY))
    return lines + regime_slot(STUDY) + [
        f"From {STUDY} (study 1 of the third edition: Goyal et al. 2017's question in its regime, below): the resnet with ghost "
        "batch norm on full Fashion-MNIST, every recipe's LR searched on a log2 grid on validation, each arm's best re-run with "
        f"{len(protocol['seeds']['finals'])} fresh seeds ({', '.join(map(str, protocol['seeds']['finals']))}; the tuning "
        f"trials used {', '.join(map(str, protocol['seeds']['tuning']))}) and tested. The reference of every difference: the arm "
        f"chosen on validation at world size {reference_arm['world_size']}, {reference_arm['label']} "
        f"({shown(mean_interval(reference))}). *Updates*: the equal-epoch budget's, the cost in updates beside world size "
        f"{reference_arm['world_size']}'s. Differences in points with Welch's 95% interval and the decision rule's word (margin "
        "1 point).",
        "",
        markdown_table(["world size", "global batch", "share of the training set", "updates", "use (chosen on validation)",
                        "its test accuracy", "− reference (points)", "Goyal: linear rule + warmup − reference (points)"],
                       lead_rows(results, protocol)),
        "",
        stops_sentence(results, protocol),
        "",
        control_sentence(protocol),
        "",
    ]


def _learning_rates(runs: list[dict[str, Any]], arm: dict[str, Any]) -> str:
    rates = sorted({float(row["learning_rate"]) for row in runs
                    if row["label"] in arm["run_labels"] and int(row["world_size"]) == arm["world_size"]})
    return "/".join(f"{rate:g}" for rate in rates) or "-"


def arm_table_lines(results: Path, study: str, protocol: dict[str, Any],
                    cell: Callable[[dict[str, Any] | None, list[dict[str, Any]], list[float]], str] = arm_cell) -> list[str]:
    """A protocol study's arms against its one reference (the arm chosen on validation at the
    smallest world size, ``goyal_bn_reference``): each recipe tuned there, then a row per arm
    with its ``cell`` (test accuracy minus the reference, ``goyal.arm_cell`` unless said) and the
    LR it trained with at each larger world size."""
    arms, runs = study_arms(protocol), study_runs(results, study)
    reference_arm, reference = goyal_bn_reference(protocol, runs)
    sizes = sorted({arm["world_size"] for arm in arms})
    references = [row for row in protocol["rows"] if row["rule_name"] == "reference"]
    table = [[label, *[value for size in sizes for value in _cells(arms, label, size, runs, reference, cell)]]
             for label in dict.fromkeys(arm["label"] for arm in arms)]
    batches = {arm["world_size"]: arm["global_batch"] for arm in arms}
    return [
        f"Each recipe tuned at world size {reference_arm['world_size']}, test accuracy: " +
        "; ".join(f"{row['recipe']} {shown(as_estimate(row['tuned']))}" for row in references) + ".",
        "",
        markdown_table(["arm", *[column for size in sizes for column in (f"world {size} (batch {batches[size]:,}) − reference", "LR")]],
                       table),
        "",
    ]


def section_goyal_v3(results: Path) -> list[str]:
    """goyal_v3's own section: every arm against the one reference at every world size, with the
    LR each trained with."""
    lines, protocol = opening(results, STUDY, "Goyal et al. 2017 in regime (third edition, study 1)", PROTOCOL_FILE, COMMAND)
    if protocol is None or not protocol.get("best_arms"):
        return lines + ([] if protocol is None else ["No arm had every seed ok at any world size, so none is chosen.", ""])
    reference_arm, reference = goyal_bn_reference(protocol, study_runs(results, STUDY))
    return lines + [
        "Arms (experiments/goyal_v3.yaml): momentum SGD with half an epoch of warmup and cosine decay, tuned at every world "
        "size and carried from world size 1 by the linear and the sqrt rule; momentum SGD without warmup, tuned at world size "
        "1 and carried by the linear rule only; LARS with warmup and polynomial decay, on its own grid at every world size "
        f"(You et al. 2017). *− reference*: test accuracy minus {reference_arm['label']} at world size "
        f"{reference_arm['world_size']} ({shown(mean_interval(reference))}), in points, with Welch's 95% interval, n (ok "
        "seeds of the arm vs the reference), df and the claim; *LR*: the learning rate the arm trained with at that batch. "
        f"[protocol]({STUDY}/protocol.md) (the grid each study searched, and where its best sits)",
        "",
        *arm_table_lines(results, STUDY, protocol),
        *figure_lines(results, STUDY, FIGURE_ACCURACY_VS_BATCH, "test accuracy against the global batch, every arm"),
    ]


def _cells(arms: list[dict[str, Any]], label: str, size: int, runs: list[dict[str, Any]], reference: list[float],
           cell: Callable[[dict[str, Any] | None, list[dict[str, Any]], list[float]], str] = arm_cell) -> list[str]:
    arm = next((arm for arm in arms if arm["label"] == label and arm["world_size"] == size), None)
    return [cell(arm, runs, reference), "-" if arm is None else _learning_rates(runs, arm)]


def anchor_goyal_v3_longer(results: Path) -> tuple[str, str]:
    """Hoffer et al. 2017 on goyal_v3: the convergence control at the largest batch (the arm
    trained longer) minus the recipe tuned at world size 1, beside the same arm at equal epochs."""
    protocol = study_json(results, STUDY, PROTOCOL_FILE)
    if protocol is None:
        return "not measured yet", f"{STUDY} is not committed"
    rows = protocol.get("train_longer", [])
    if not rows:
        return "not measured yet", f"{STUDY} ran no convergence control"
    row = max(rows, key=lambda row: row["world_size"])
    runs = study_runs(results, STUDY)
    shorter = difference_interval(arm_accuracies(runs, (row["arm"],), row["world_size"]),
                                  arm_accuracies(runs, (f"{row['recipe']} tuned",), min(r["world_size"] for r in protocol["rows"])))
    return judge(row["longer_minus_reference"]), (
        f"{STUDY}, {row['arm']} at batch {row['global_batch']:,} trained {row['factor']:g}x longer minus {row['recipe']} tuned at "
        f"world size 1: {points_text(row['longer_minus_reference'])} points; at equal epochs {_points_claim(shorter)}")
