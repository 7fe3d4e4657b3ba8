"""keskar_v2 (generalization gap or under-training?), keskar_v3 (equal training loss), keskar_v4 (both
regimes, every run annealed) and the first edition's keskar_gap, and the anchors judged on them:
Keskar et al. 2017 (large batches reach sharper minima and test worse) and Hoffer et al. 2017
(training longer with ghost batch norm closes the gap).

A top Hessian eigenvalue is read beside the LR its run ended at: momentum SGD (heavy ball,
momentum m) at LR eta is stable on a quadratic only while every eigenvalue is below
``2 (1 + m) / eta`` (Cohen et al. 2021, "Gradient Descent on Neural Networks Typically Occurs at
the Edge of Stability", ICLR, their appendix on momentum), and training drives the top eigenvalue
up to that limit: a run stopped at a large LR has a small eigenvalue because its LR is large, not
because of its batch. So the page prints each run's LR at its end and that limit
(``flatness_runs_table``), and compares two arms' flatness only when both ended annealed
(``ANNEALED_FRACTION``)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from lab.results_page.common import (
    DOES_NOT_HOLD,
    FEW_SEEDS,
    HOLDS,
    MARGIN,
    UNDECIDED,
    accuracy_cell,
    as_estimate,
    claims_at,
    few_seeds,
    figure_lines,
    judge,
    judged_points,
    opening,
    parts_claim,
    points_text,
    seed_accuracies,
    shown,
    study_json,
    study_runs,
)
from lbtrain.reports.decisions import BETTER, INCONCLUSIVE, MATCHES, WORSE
from lbtrain.reports.statistics import Estimate, difference_interval, mean_interval
from lbtrain.reports.tables import markdown_table
from lbtrain.results import FIGURE_SHARPNESS_VS_BATCH, METRICS_FILE, PROTOCOL_FILE, REPORT_JSON, RUNS_FOLDER
from lbtrain.verdict import is_ok


def keskar_v2_differences(results: Path, study: str = "keskar_v2") -> dict[str, Estimate]:
    """keskar_v2 (or keskar_v3, labelled alike): each large-batch arm's test accuracy minus the
    small batch's (label ``SB``; Welch intervals)."""
    runs = study_runs(results, study)
    small = [float(r["test_accuracy"]) for r in runs if r["label"] == "SB" and is_ok(r["status"])]
    labels = dict.fromkeys(r["label"] for r in runs if r["label"] != "SB")
    return {label: difference_interval([float(r["test_accuracy"]) for r in runs if r["label"] == label and is_ok(r["status"])], small)
            for label in labels}


# The flatness measures of a run: sharpness (summary.csv, Keskar et al. 2017) and the top Hessian
# eigenvalue (the run's metrics.json, Yao et al. 2020), with the name each goes by in prose.
FLATNESS = {"sharpness": "sharpness", "hessian_top_eigenvalue": "top Hessian eigenvalue"}


def _run_flatness(results: Path, study: str, run: dict[str, Any], key: str) -> float | None:
    """One ok run's flatness measure ``key`` (``FLATNESS``); None where it was not measured."""
    if key == "sharpness":
        value = run.get("sharpness")
    else:
        path = results / study / RUNS_FOLDER / run["run_id"] / METRICS_FILE
        value = json.loads(path.read_text())["metrics"].get(key) if path.is_file() else None
    return None if value in (None, "") else float(value)


# A run ended annealed when the LR of its last epoch is at most this fraction of its peak LR: a
# cosine run to its end finishes near 0 (1e-6 of its peak at 421 steps an epoch), keskar_v3's
# large-batch runs stopped at a loss target ended at 8% to 60% of theirs.
ANNEALED_FRACTION = 0.01


def momentum_of(config: dict[str, Any]) -> float | None:
    """The heavy-ball momentum of a run's optimizer (``momentum``: 0.9 unless its params say;
    ``sgd``: 0 unless they say); None for an optimizer whose stability limit is not
    ``2 (1 + m) / LR`` (Adam's is on the preconditioned Hessian, Cohen et al. 2022; LARS and LAMB
    scale each layer's step)."""
    optimizer = config.get("optimizer") or {}
    params = optimizer.get("params") or {}
    default = {"momentum": 0.9, "sgd": 0.0}.get(optimizer.get("name"))
    return None if default is None else float(params.get("momentum", default))


def stability_limit(learning_rate: float | None, momentum: float | None) -> float | None:
    """``2 (1 + m) / LR``: the largest top Hessian eigenvalue at which heavy-ball momentum SGD is
    stable at that LR; None without an LR above 0 or a momentum.

    >>> stability_limit(0.95, 0.9), stability_limit(0.0, 0.9), stability_limit(0.1, None)
    (4.0, None, None)
    """
    if learning_rate is None or momentum is None or learning_rate <= 0:
        return None
    return 2 * (1 + momentum) / learning_rate


@dataclasses.dataclass(frozen=True)
class RunFlatness:
    """One ok run's flatness beside the LR it ended at (``run_flatness``)."""

    label: str
    world_size: int
    global_batch: int
    seed: int
    steps: int | None
    train_loss: float | None
    test_accuracy: float | None
    peak_lr: float | None
    end_lr: float | None
    momentum: float | None
    eigenvalue: float | None
    sharpness: float | None

    @property
    def limit(self) -> float | None:
        """``stability_limit`` at the LR the run ended at."""
        return stability_limit(self.end_lr, self.momentum)

    @property
    def edge(self) -> float | None:
        """The top Hessian eigenvalue over its stability limit: near 1 at the edge of stability."""
        if self.eigenvalue is None or self.momentum is None or self.end_lr is None:
            return None
        return 0.0 if self.end_lr == 0 else self.eigenvalue / self.limit

    @property
    def annealed(self) -> bool | None:
        """Whether the run ended at most ``ANNEALED_FRACTION`` of its peak LR (None: not recorded)."""
        if self.end_lr is None or not self.peak_lr:
            return None
        return self.end_lr <= ANNEALED_FRACTION * self.peak_lr


def _number(value: Any) -> float | None:
    return None if value in (None, "") else float(value)


def run_flatness(results: Path, study: str) -> list[RunFlatness]:
    """Every ok run of ``study`` (``summary.csv``) with its sharpness (the summary's), top Hessian
    eigenvalue, peak LR, LR at its last epoch and optimizer (its ``metrics.json``: None where the
    run folder or a value is missing)."""
    rows = []
    for run in study_runs(results, study):
        if not is_ok(run["status"]):
            continue
        path = results / study / RUNS_FOLDER / run["run_id"] / METRICS_FILE
        record = json.loads(path.read_text()) if path.is_file() else {}
        history = record.get("history") or [{}]
        rows.append(RunFlatness(
            label=run["label"], world_size=int(run["world_size"]), global_batch=int(run["global_batch"]), seed=int(run["seed"]),
            steps=None if run.get("total_steps") in (None, "") else int(float(run["total_steps"])),
            train_loss=_number(run.get("train_loss")), test_accuracy=_number(run.get("test_accuracy")),
            peak_lr=_number(record.get("learning_rate", run.get("learning_rate"))), end_lr=_number(history[-1].get("lr")),
            momentum=momentum_of(record.get("config") or {}), eigenvalue=_number((record.get("metrics") or {}).get("hessian_top_eigenvalue")),
            sharpness=_number(run.get("sharpness"))))
    return rows


def _general(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _limit_text(run: RunFlatness) -> str:
    """The run's stability limit; ``∞`` at an LR of exactly 0 (no limit), ``-`` without one."""
    if run.end_lr == 0 and run.momentum is not None:
        return "∞"
    return _general(run.limit)


def flatness_runs_table(runs: list[RunFlatness]) -> list[str]:
    """A row per run that measured its flatness: the LR it ended at (and its share of the peak),
    its top Hessian eigenvalue beside the stability limit ``2 (1 + m) / LR`` at that LR and their
    ratio (near 1: at the edge of stability, the eigenvalue set by the LR), and its sharpness;
    nothing when no run measured one."""
    measured = [run for run in runs if run.eigenvalue is not None or run.sharpness is not None]
    if not measured:
        return []
    table = [[run.label, run.global_batch, run.seed, "-" if run.steps is None else run.steps,
              "-" if run.end_lr is None else _general(run.end_lr) + ("" if not run.peak_lr else f" ({100 * run.end_lr / run.peak_lr:.0f}% of {run.peak_lr:.3g})"),
              _general(run.eigenvalue), _limit_text(run), "-" if run.edge is None else f"{run.edge:.2f}",
              "-" if run.sharpness is None else f"{run.sharpness:.2f}"]
             for run in sorted(measured, key=lambda run: (run.global_batch, run.label, run.seed))]
    return ["Each run's flatness beside the LR it ended at: momentum SGD at LR η with momentum m is stable only while the top "
            "Hessian eigenvalue λ is below 2 (1 + m) / η, and training pushes λ up to that limit (the edge of stability, Cohen et "
            "al. 2021), so a run stopped at a large LR has a small λ because of its LR. λ / limit near 1: the eigenvalue is the "
            "LR's; near 0: the run annealed and λ is its minimum's. `-`: an optimizer without that limit (Adam) or no value.", "",
            markdown_table(["arm", "global batch", "seed", "steps", "LR at end (of peak)", "top Hessian eigenvalue λ",
                            "limit 2 (1 + m) / LR", "λ / limit", "sharpness"], table), ""]


def matched_lr_text(large: list[RunFlatness], small: list[RunFlatness], large_name: str, small_name: str = "SB") -> str:
    """'' when every run of the two arms ended annealed (or an arm is empty, or an LR was not
    recorded); else why their flatness is not compared at equal LR: the LRs each arm ended at and
    how close its eigenvalues sit to their stability limit."""
    states = [run.annealed for run in large + small]
    if not large or not small or None in states or all(states):
        return ""

    def ended(group: list[RunFlatness]) -> str:
        low, high = min(run.end_lr for run in group), max(run.end_lr for run in group)
        edges = [run.edge for run in group if run.edge is not None]
        text = f"LR {low:.3g}" if low == high else f"LR {low:.3g} to {high:.3g}"
        return text + (f" (λ / limit {min(edges):.2f} to {max(edges):.2f})" if edges else "")

    return (f"flatness not compared at equal LR: {large_name}'s runs ended at {ended(large)}, {small_name}'s at {ended(small)}; "
            "an eigenvalue at its stability limit reads the LR at the stop, not the batch")


def _labelled(runs: list[RunFlatness], label: str) -> list[RunFlatness]:
    return [run for run in runs if run.label == label]


def flatness_differences(results: Path, study: str, large: str) -> dict[str, Estimate]:
    """Each ``FLATNESS`` measure of arm ``large`` minus the small batch's (``SB``), over their ok
    runs, with Welch's interval (``difference_interval``); a measure no run has is left out."""
    runs = [run for run in study_runs(results, study) if is_ok(run["status"])]
    differences = {}
    for key in FLATNESS:
        values = {label: [value for run in runs if run["label"] == label
                          if (value := _run_flatness(results, study, run, key)) is not None] for label in (large, "SB")}
        if values[large] and values["SB"]:
            differences[key] = difference_interval(values[large], values["SB"])
    return differences


# How a flatness difference large − small reads (``flatness_reading``).
SHARPER, FLATTER, NEITHER, NOT_READ = "sharper", "flatter", "neither sharper nor flatter", "not read"


def flatness_reading(difference: Estimate) -> str:
    """A flatness difference large − small read by where its Welch interval lies against 0:
    ``sharper`` wholly above, ``flatter`` wholly below, ``neither sharper nor flatter`` else;
    ``not read`` with fewer than 3 seeds on a side (``lbtrain.reports.decisions.few_seeds``: no interval is shown,
    so none is read).

    >>> flatness_reading(Estimate(2.0, 1.0, 3.0, 5, n_second=5)), flatness_reading(Estimate(2.0, 1.0, 3.0, 2, n_second=5))
    ('sharper', 'not read')
    """
    if few_seeds(difference):
        return NOT_READ
    if difference.low is not None and difference.low > 0:
        return SHARPER
    if difference.high is not None and difference.high < 0:
        return FLATTER
    return NEITHER


def flatness_text(differences: dict[str, Estimate]) -> str:
    """``sharpness -1.1 [-2.6, +0.4] (n=5 vs 5, df=7.1) (neither sharper nor flatter), top
    Hessian eigenvalue ...``, each with its ``flatness_reading``."""
    return ", ".join(f"{FLATNESS[key]} {shown(difference, 2, signed=True)} ({flatness_reading(difference)})"
                     for key, difference in differences.items())


def remaining_gap(difference: Estimate | None) -> str:
    """What remains of the gap when a large batch matches the small one by the rule but its
    difference's interval lies wholly below 0; '' otherwise."""
    if difference is None or difference.high is None or difference.high >= 0 or judge(difference) != MATCHES:
        return ""
    return f"a gap of {-100 * difference.mean:.1f} points remains (its interval lies below 0), within the {100 * MARGIN:g}-point margin"


def _mean_of(runs: list[dict[str, Any]], label: str, key: str, digits: int) -> str:
    values = [float(r[key]) for r in runs if r["label"] == label and is_ok(r["status"]) and r[key] is not None]
    return "-" if not values else f"{sum(values) / len(values):.{digits}f}"


def section_keskar_v2(results: Path, study: str = "keskar_v2", title: str = "generalization gap or under-training?",
                      command: str = "lbtrain run experiments/keskar_v2.yaml") -> list[str]:
    """A small batch (``SB``) against large-batch arms at equal epochs, steps or training loss:
    steps, train loss, accuracies, the difference from SB with its claim, flatness, and whether
    the difference reads as under-training or as a generalization gap."""
    lines, report = opening(results, study, title, REPORT_JSON, command)
    if report is None:
        return lines
    runs, differences = study_runs(results, study), keskar_v2_differences(results, study)
    sharp = {row["recipe"]: row for row in report.get("sharpness", [])}
    hessian = {row["recipe"]: row for row in report.get("hessian_top_eigenvalue", [])}

    def measure(table: dict[str, Any], recipe: str, key: str, digits: int) -> str:
        row = table.get(recipe)
        return "-" if row is None or row[key] is None else shown(Estimate(row[key], row["low"], row["high"], row["n"], df=row.get("df")), digits)

    table = [[row["recipe"], row["global_batch"], _mean_of(runs, row["recipe"], "total_steps", 0), _mean_of(runs, row["recipe"], "train_loss", 3),
              shown(as_estimate(row["train_accuracy"])), accuracy_cell(row), judged_points(differences.get(row["recipe"])),
              shown(as_estimate(row["gap_accuracy"])), measure(sharp, row["recipe"], "sharpness", 1),
              measure(hessian, row["recipe"], "hessian_top_eigenvalue", 2)] for row in report["accuracy"]]
    epochs, steps, loss = (differences.get(label) for label in ("LB equal epochs", "LB equal steps", "LB equal loss"))
    measured = "; ".join(f"at equal {budget} {points_text(difference)} points, {judge(difference)}" for budget, difference in
                         (("epochs", epochs), ("steps", steps), ("training loss", loss)) if difference is not None)
    if epochs is None or epochs.mean is None:
        verdict = "Without an ok large-batch run at equal epochs there is nothing to explain."
    elif judge(epochs) in (MATCHES, BETTER):
        verdict = (f"The large batch against the small: {measured}. At equal epochs it is already **{judge(epochs)}**: no gap "
                   "to explain here.")
    elif judge(steps) in (MATCHES, BETTER) or judge(loss) in (MATCHES, BETTER):
        remains = [f"given the small batch's {budget}, {text}" for budget, difference in (("steps", steps), ("training loss", loss))
                   if (text := remaining_gap(difference))]
        verdict = (f"The large batch against the small: {measured}. At equal epochs it is **{judge(epochs)}**; given the small "
                   "batch's steps or its training loss it matches or is better (the whole interval above −1 point), so "
                   + ("most of the equal-epoch difference reads as under-training (too few updates), but not all: "
                      + "; ".join(remains) + "." if remains else
                      "the equal-epoch difference reads as under-training (too few updates), not as a generalization gap."))
    elif judge(steps) == WORSE and judge(loss) == WORSE:
        verdict = (f"The large batch against the small: {measured}. It is **worse** at equal steps and at equal training "
                   "loss too: a generalization gap, not only under-training.")
    else:
        verdict = (f"The large batch against the small: {measured}. At equal steps and equal training loss the claims are "
                   "**inconclusive**: the data tell neither under-training nor a generalization gap.")
    flatness = flatness_differences(results, study, "LB equal loss") if loss is not None else {}
    per_run = run_flatness(results, study)
    if flatness:
        unmatched = matched_lr_text(_labelled(per_run, "LB equal loss"), _labelled(per_run, "SB"), "LB equal loss")
        verdict += (f" At equal training loss, the large batch minus the small (Welch): {flatness_text(flatness)}"
                    + (f"; but {unmatched}" if unmatched else "") + ".")
    batches = sorted({row["global_batch"] for row in report["accuracy"]})
    return lines + [f"Small batch {batches[0]} against large batch {batches[-1]} (experiments/{study}.yaml). Final train loss and steps are "
                    "means over ok seeds; one reference, the small batch (SB): *− SB* is test accuracy minus the small batch's, "
                    f"in points, with its 95% Welch interval and the claim on it. [report]({study}/report.md)", "",
                    markdown_table(["arm", "global batch", "steps", "train loss", "train acc", "test acc", "− SB (points)",
                                    "train − test", "sharpness", "top Hessian eigenvalue"], table), "", verdict, "",
                    *flatness_runs_table(per_run),
                    *figure_lines(results, study, FIGURE_SHARPNESS_VS_BATCH, "flatness against the global batch")]


def section_keskar_gap(results: Path) -> list[str]:
    lines, report = opening(results, "keskar_gap", "small vs large batch, Adam, with sharpness", REPORT_JSON, "lbtrain run experiments/keskar_gap.yaml")
    if report is None:
        return lines
    sharp = {row["recipe"]: row for row in report["sharpness"]}
    table = []
    for row in report["accuracy"]:
        s = sharp.get(row["recipe"])
        table.append([f"{row['recipe']}", shown(as_estimate(row["train_accuracy"])), accuracy_cell(row),
                      shown(as_estimate(row["gap_accuracy"])),
                      "-" if s is None else shown(Estimate(s["sharpness"], s["low"], s["high"], s["n"], df=s.get("df")), 1)])
    small, large = report["accuracy"][0], report["accuracy"][-1]
    seeds = seed_accuracies(results, "keskar_gap")
    difference = difference_interval(seeds.get((large["recipe"], large["global_batch"]), []),
                                     seeds.get((small["recipe"], small["global_batch"]), []))
    ratio = sharp[large["recipe"]]["sharpness"] / sharp[small["recipe"]]["sharpness"] if large["recipe"] in sharp and small["recipe"] in sharp else None
    return lines + [f"Budget: {report['budget']}. [report](keskar_gap/report.md)", "",
                    markdown_table(["", "train acc", "test acc", "train − test", "sharpness (ε = 1e-3)"], table), "",
                    f"The large batch ({large['recipe']}) tests {points_text(difference)} points against the small batch "
                    f"({small['recipe']}), {judge(difference)}," + ("" if ratio is None else f" and sits in a minimum {ratio:.1f}x as sharp (means)")
                    + f"; its train − test gap is {large['gap_accuracy']['mean']:.3f} against {small['gap_accuracy']['mean']:.3f}.", "",
                    *figure_lines(results, "keskar_gap", FIGURE_SHARPNESS_VS_BATCH, "sharpness against the global batch")]


def _separated(upper: dict[str, Any], lower: dict[str, Any]) -> bool:
    """Whether the interval of ``upper``'s mean lies wholly above ``lower``'s."""
    return None not in (upper["low"], lower["high"]) and upper["low"] > lower["high"]


def _sharpness_of_means(small: dict[str, Any], large: dict[str, Any], sharp: dict[str, dict[str, Any]]) -> tuple[bool, str]:
    """Whether the large batch is sharper than the small by the intervals of their mean sharpness
    (``report.json``'s rows: the large one's wholly above), and the phrase that says so."""
    sharper = _separated(sharp[large["recipe"]], sharp[small["recipe"]])
    return sharper, (f"sharpness {sharp[large['recipe']]['sharpness']:.0f} against {sharp[small['recipe']]['sharpness']:.0f} "
                     f"({'sharper' if sharper else 'not sharper: the intervals overlap or lie the other way'})")


def _keskar_judgement(small: dict[str, Any], large: dict[str, Any], sharp: dict[str, dict[str, Any]],
                      difference: Estimate) -> tuple[str, str]:
    """Keskar et al.'s claim judged on one small and one large batch (``report.json`` accuracy
    rows) at one budget (equal epochs, or equal training loss): the claim on the test difference large − small
    (``lbtrain.reports.decisions``), with whether the large batch is sharper (its sharpness
    interval above the small batch's) and whether its train − test gap is smaller as evidence."""
    _, sharpness = _sharpness_of_means(small, large, sharp)
    evidence = f"batch {large['global_batch']} minus {small['global_batch']}: test {points_text(difference)} points, {sharpness}"
    if _separated(small["gap_accuracy"], large["gap_accuracy"]):
        evidence += (f"; the large batch's train − test gap is smaller ({large['gap_accuracy']['mean']:.3f} against "
                     f"{small['gap_accuracy']['mean']:.3f}): it under-trains in the same epochs")
    return judge(difference), evidence


def anchor_keskar(results: Path, studies: tuple[str, ...] = ("keskar_v2", "keskar_gap")) -> tuple[str, str]:
    """Judged on each of ``studies`` committed: keskar_v2 (small batch 32 against 256 at equal
    epochs) and the first edition's keskar_gap (its smallest against its largest batch). The page
    judges each on its own row (``anchors.ANCHORS``), so one study's regime does not move the other's."""
    judgements = []
    v2 = study_json(results, "keskar_v2", REPORT_JSON) if "keskar_v2" in studies else None
    if v2 is not None:
        rows = {row["recipe"]: row for row in v2["accuracy"]}
        differences = keskar_v2_differences(results)
        judgements.append(("second edition",) + _keskar_judgement(
            rows["SB"], rows["LB equal epochs"], {row["recipe"]: row for row in v2["sharpness"]}, differences["LB equal epochs"]))
    v1 = study_json(results, "keskar_gap", REPORT_JSON) if "keskar_gap" in studies else None
    if v1 is not None:
        small, large = v1["accuracy"][0], v1["accuracy"][-1]
        seeds = seed_accuracies(results, "keskar_gap")
        difference = difference_interval(seeds.get((large["recipe"], large["global_batch"]), []),
                                         seeds.get((small["recipe"], small["global_batch"]), []))
        judgements.append(("first edition",) + _keskar_judgement(small, large, {row["recipe"]: row for row in v1["sharpness"]},
                                                                  difference))
    if not judgements:
        return "not measured yet", (f"{studies[0]} is not committed" if len(studies) == 1 else
                                    f"neither {' nor '.join(studies)} is committed")
    if len(judgements) == 1:
        return judgements[0][1], judgements[0][2]
    return (claims_at([verdict for _, verdict, _ in judgements], [f"({edition})" for edition, _, _ in judgements]),
            "; ".join(f"{edition}, {evidence}" for edition, _, evidence in judgements))


def anchor_hoffer(results: Path) -> tuple[str, str]:
    report = study_json(results, "keskar_v2", REPORT_JSON)
    if report is None:
        return "not measured yet", "keskar_v2 is not committed"
    differences = keskar_v2_differences(results)
    hoffer, epochs = differences.get("Hoffer"), differences.get("LB equal epochs")
    if hoffer is None or epochs is None:
        return INCONCLUSIVE, "keskar_v2 lacks an ok Hoffer or equal-epochs arm"
    claims, places = [judge(hoffer)], ["(keskar_v2)"]
    evidence = (f"keskar_v2, batch 256 minus 32: large batch at equal epochs {points_text(epochs)} points ({judge(epochs)}), with "
                f"ghost batch norm and equal steps {points_text(hoffer)} points ({judge(hoffer)})")
    longer = sorted((study_json(results, "goyal_bn", PROTOCOL_FILE) or {}).get("equal_steps", []), key=lambda row: row["world_size"])
    claims += [judge(row["equal_steps_minus_reference"]) for row in longer]
    places += [f"(goyal_bn, batch {row['global_batch']})" for row in longer]
    if not longer:
        return claims_at(claims, places), evidence
    return claims_at(claims, places), evidence + ("; goyal_bn's best arm (ghost batch norm) for world size 1's updates minus its "
                                                  "recipe at batch 16: ") + "; ".join(
        f"batch {row['global_batch']}: {points_text(row['equal_steps_minus_reference'])} points "
        f"({points_text(row['gain_of_steps'])} over equal epochs)" for row in longer)


def anchor_keskar_v3(results: Path) -> tuple[str, str]:
    """Keskar et al. judged on keskar_v3 at equal training loss (the large batch trained until
    its loss reached the small batch's: their comparison at convergence). The verdict is the
    decision rule's on the test difference large − small; the evidence opens with what that
    and the flatness say of the claim (it holds only when the large batch is worse *and*
    sharper), then how many large-batch runs reached the loss (a run that did not, at its epoch
    cap, is still ok and averaged in: the count says so), a gap that remains within the margin
    (``remaining_gap``), the flatness differences with Welch intervals (``flatness_differences``;
    without per-run values, the intervals of the two means) and the equal-epoch difference.
    *inconclusive* when either arm has no ok run or no sharpness."""
    report = study_json(results, "keskar_v3", REPORT_JSON)
    if report is None:
        return "not measured yet", "keskar_v3 is not committed"
    rows, differences = {row["recipe"]: row for row in report["accuracy"]}, keskar_v2_differences(results, "keskar_v3")
    sharp = {row["recipe"]: row for row in report.get("sharpness", []) if row.get("sharpness") is not None and row.get("n")}
    arms = ("SB", "LB equal loss")
    if not all(arm in rows and rows[arm]["ok_runs"] and arm in sharp for arm in arms):
        counts = "; ".join(f"{arm}: {rows[arm]['ok_runs']} of {rows[arm]['total']} runs ok" for arm in arms if arm in rows)
        return INCONCLUSIVE, f"keskar_v3 lacks an ok small batch or large batch at equal loss with its sharpness ({counts or 'no runs'})"
    loss = differences["LB equal loss"]
    verdict = judge(loss)
    runs = [row for row in study_runs(results, "keskar_v3") if row["label"] == "LB equal loss" and is_ok(row["status"])]
    reached = sum(1 for row in runs if row.get("target_reached_step") not in (None, ""))
    flatness = flatness_differences(results, "keskar_v3", "LB equal loss")
    if flatness:
        sharper = any(flatness_reading(difference) == SHARPER for difference in flatness.values())
        sharpness = f"large minus small batch (Welch), {flatness_text(flatness)}"
    else:  # no per-run sharpness: the intervals of the two means, as the earlier editions judge
        sharper, sharpness = _sharpness_of_means(rows["SB"], rows["LB equal loss"], sharp)
    per_run = run_flatness(results, "keskar_v3")
    unmatched = matched_lr_text(_labelled(per_run, "LB equal loss"), _labelled(per_run, "SB"), "LB equal loss")
    if unmatched:
        sharpness += f"; {unmatched}"
        accuracy = {WORSE: "tests worse", BETTER: "tests better", MATCHES: f"tests within the {100 * MARGIN:g}-point margin of the small batch"}.get(
            verdict, "tests inconclusively")
        reading = (f"the claim is not judged on flatness here: the large batch {accuracy}, and its flatness was measured at "
                   "another LR than the small batch's (the LRs follow)")
    elif verdict == WORSE and sharper:
        reading = "the claim holds here: the large batch tests worse and sits in a sharper minimum"
    elif verdict in (MATCHES, BETTER) and not sharper:
        tests = "better than" if verdict == BETTER else f"within the {100 * MARGIN:g}-point margin of"
        reading = f"the claim does not hold here: the large batch tests {tests} the small batch and is not sharper"
    else:
        reading = "the claim holds in part or not measurably: see the differences"
    epochs, remains = differences.get("LB equal epochs"), remaining_gap(loss)
    return verdict, (f"{reading}. keskar_v3 at equal training loss ({reached} of {len(runs)} ok large-batch runs reached the "
                     f"small batch's loss), batch {rows['LB equal loss']['global_batch']} minus {rows['SB']['global_batch']}: test "
                     f"{points_text(loss)} points" + (f", {remains}" if remains else "") + f"; {sharpness}"
                     + ("" if epochs is None else f"; at equal epochs {points_text(epochs)} points ({judge(epochs)})"))


KESKAR_V4 = "keskar_v4"
KESKAR_V4_COMMAND = "lbtrain sweep experiments/keskar_v4.yaml && lbtrain report results/keskar_v4"
# keskar_v4's two comparisons, by the world size of their large batch (experiments/keskar_v4.yaml):
# batch 1,024 (1.9% of the data, 1,040 updates) and Keskar et al.'s 10% (batch 5,376, 200 updates).
# Each is judged on its own (``anchor_keskar_v4``): one does not move the other's verdict.
KESKAR_V4_REGIMES = {"in regime": 8, "Keskar's regime": 42}


def longer_factor(label: str) -> float:
    """The factor of a ``protocol.train_longer`` arm's label (``"momentum tuned 2x longer"`` -> 2);
    1 for an arm at its own budget.

    >>> longer_factor("momentum tuned 2x longer"), longer_factor("momentum tuned")
    (2.0, 1.0)
    """
    match = re.search(r" (\d+(?:\.\d+)?)x longer$", label)
    return float(match.group(1)) if match else 1.0


def _mean(values: list[float | None]) -> float | None:
    finite = [value for value in values if value is not None]
    return sum(finite) / len(finite) if finite else None


@dataclasses.dataclass(frozen=True)
class V4Comparison:
    """One of keskar_v4's regimes: the small batch's runs, the large batch's at equal epochs and at
    each longer annealed horizon (by factor), and which of those is its equal-loss arm: the
    shortest whose mean final training loss is at most the small batch's (None: none reached it)."""

    small: list[RunFlatness]
    large: dict[float, list[RunFlatness]]
    equal_loss: float | None


def keskar_v4_comparison(runs: list[RunFlatness], world_size: int) -> V4Comparison | None:
    """``V4Comparison`` of the large batch at ``world_size`` against the small batch (the smallest
    world size's runs at their own budget); None when either has no ok run."""
    if not runs:
        return None
    smallest = min(run.world_size for run in runs)
    small = [run for run in runs if run.world_size == smallest and longer_factor(run.label) == 1]
    large: dict[float, list[RunFlatness]] = {}
    for run in runs:
        if run.world_size == world_size and world_size != smallest:
            large.setdefault(longer_factor(run.label), []).append(run)
    if not small or 1.0 not in large:
        return None
    target = _mean([run.train_loss for run in small])
    reached = [factor for factor, group in sorted(large.items())
               if target is not None and (loss := _mean([run.train_loss for run in group])) is not None and loss <= target]
    return V4Comparison(small, dict(sorted(large.items())), reached[0] if reached else None)


def _welch_flatness(large: list[RunFlatness], small: list[RunFlatness]) -> dict[str, Estimate]:
    """Each ``FLATNESS`` measure large − small with Welch's interval, where both arms have values."""
    differences = {}
    for key, attribute in (("sharpness", "sharpness"), ("hessian_top_eigenvalue", "eigenvalue")):
        first = [getattr(run, attribute) for run in large if getattr(run, attribute) is not None]
        second = [getattr(run, attribute) for run in small if getattr(run, attribute) is not None]
        if first and second:
            differences[key] = difference_interval(first, second)
    return differences


def _accuracy_difference(large: list[RunFlatness], small: list[RunFlatness]) -> Estimate:
    return difference_interval([run.test_accuracy for run in large if run.test_accuracy is not None],
                               [run.test_accuracy for run in small if run.test_accuracy is not None])


def _budget_name(factor: float, comparison: V4Comparison) -> str:
    name = "equal epochs" if factor == 1 else f"{factor:g}x longer, annealed"
    return name + (" = equal training loss" if factor == comparison.equal_loss else "")


def flatness_part(flatness: dict[str, Estimate], unmatched: str) -> tuple[str, str]:
    """What the flatness differences large − small say of Keskar et al.'s first part (sharper
    minima), read on every measure (``flatness_reading``): it holds when a measure is sharper and
    none flatter; it does not hold when a measure is flatter and none sharper; inconclusive when
    the measures disagree, when none is sharper or flatter (every interval contains 0, or fewer
    than 3 seeds: no interval), or when flatness was not measured or not at equal LR
    (``unmatched``, ``matched_lr_text``). Returns (``HOLDS``, ``DOES_NOT_HOLD`` or ``UNDECIDED``,
    its words).

    >>> level, up = Estimate(0.0, -1.0, 1.0, 5, n_second=5), Estimate(2.0, 1.0, 3.0, 5, n_second=5)
    >>> flatness_part({"sharpness": level, "hessian_top_eigenvalue": level}, "")
    ('the claim is inconclusive', 'neither sharper nor flatter')
    >>> flatness_part({"sharpness": up, "hessian_top_eigenvalue": level}, "")
    ('the claim holds', 'sharper by sharpness')
    """
    if unmatched or not flatness:
        return UNDECIDED, "flatness not judged (" + ("not measured at equal LR" if unmatched else "not measured") + ")"
    readings = {FLATNESS[key]: flatness_reading(difference) for key, difference in flatness.items()}
    sharper = [name for name, reading in readings.items() if reading == SHARPER]
    flatter = [name for name, reading in readings.items() if reading == FLATTER]
    if sharper and flatter:
        return UNDECIDED, f"sharper by {' and '.join(sharper)}, flatter by {' and '.join(flatter)}"
    if sharper:
        return HOLDS, SHARPER if len(sharper) == len(readings) else f"sharper by {' and '.join(sharper)}"
    if flatter:
        return DOES_NOT_HOLD, FLATTER if len(flatter) == len(readings) else f"flatter by {' and '.join(flatter)}"
    if all(reading == NOT_READ for reading in readings.values()):
        return UNDECIDED, f"flatness not judged ({FEW_SEEDS})"
    return UNDECIDED, NEITHER


def accuracy_part(verdict: str) -> tuple[str, str, str]:
    """What the decision on the test difference large − small says of Keskar et al.'s second part
    (the large batch tests worse): (``HOLDS``, ``DOES_NOT_HOLD`` or ``UNDECIDED``, its words, a
    note after the basis of the comparison).

    >>> accuracy_part("worse"), accuracy_part("inconclusive")[1:]
    (('the claim holds', 'tests worse', ''), ('not measurably worse', '(inconclusive at the 1-point margin)'))
    """
    margin = f"{100 * MARGIN:g}-point margin"
    if verdict == WORSE:
        return HOLDS, "tests worse", ""
    if verdict == MATCHES:
        return DOES_NOT_HOLD, f"tests within the {margin}", ""
    if verdict == BETTER:
        return DOES_NOT_HOLD, "tests better", ""
    return UNDECIDED, "not measurably worse", f"({verdict} at the {margin})"


def keskar_claim(verdict: str, flatness: dict[str, Estimate], unmatched: str, basis: str, epochs: str | None = None) -> str:
    """What the data say of Keskar et al.'s claim, made of two parts (large batches reach sharper
    minima; they test worse), each read on its own (``flatness_part``, ``accuracy_part``) and the
    whole by ``common.parts_claim``: ``the claim holds in part: sharper, not measurably worse at
    equal training loss (inconclusive at the 1-point margin); worse at equal epochs``. ``verdict``:
    the decision on the test difference at ``basis``; ``epochs``: the decision at equal epochs
    when ``basis`` is another, shown after it."""
    flat_support, flat_words = flatness_part(flatness, unmatched)
    test_support, test_words, note = accuracy_part(verdict)
    return (f"{parts_claim([flat_support, test_support])}: {flat_words}, {test_words} at {basis}" + (f" {note}" if note else "")
            + ("" if epochs is None else f"; {epochs} at equal epochs"))


class KeskarV4Judgement(NamedTuple):
    """keskar_v4 judged in one regime: the decision on the test difference (the verdict), what
    the data say of Keskar et al.'s claim (``keskar_claim``; empty when nothing was judged) and
    the evidence."""

    verdict: str
    claim: str
    evidence: str


def judge_keskar_v4(results: Path, regime: str) -> KeskarV4Judgement:
    """Keskar et al. judged on keskar_v4 in one of ``KESKAR_V4_REGIMES``, on that regime's runs
    alone. The verdict is the decision rule's on the test difference large − small at equal
    training loss (the shortest annealed horizon whose mean training loss is at most the small
    batch's), or at equal epochs when no horizon reached it (said so). The claim is read part by
    part (``keskar_claim``): sharper on the flatness differences with both arms annealed (flatness
    measured at unequal LRs is not read: ``matched_lr_text``), worse on the verdict."""
    if study_json(results, KESKAR_V4, PROTOCOL_FILE) is None:  # a protocol writes it last: a running study is not read
        return KeskarV4Judgement("not measured yet", "", f"{KESKAR_V4} is not committed")
    comparison = keskar_v4_comparison(run_flatness(results, KESKAR_V4), KESKAR_V4_REGIMES[regime])
    if comparison is None:
        return KeskarV4Judgement(INCONCLUSIVE, UNDECIDED, f"{KESKAR_V4} lacks an ok small batch or an ok large batch {regime}")
    factor = 1.0 if comparison.equal_loss is None else comparison.equal_loss
    large = comparison.large[factor]
    difference = _accuracy_difference(large, comparison.small)
    verdict = judge(difference)
    flatness = _welch_flatness(large, comparison.small)
    unmatched = matched_lr_text(large, comparison.small, "the large batch", "the small batch's")
    epochs = None if factor == 1 else judge(_accuracy_difference(comparison.large[1.0], comparison.small))
    claim = keskar_claim(verdict, flatness, unmatched, "equal epochs" if factor == 1 else "equal training loss", epochs)
    small_loss = _mean([run.train_loss for run in comparison.small])
    basis = (f"at equal training loss ({_budget_name(factor, comparison)}: mean train loss "
             f"{_mean([run.train_loss for run in large]):.3f} against the small batch's {small_loss:.3f})"
             if comparison.equal_loss is not None else
             f"at equal epochs: no annealed horizon ({', '.join(f'{f:g}x' for f in comparison.large)}) reached the small batch's "
             f"mean train loss {small_loss:.3f}" if small_loss is not None else "at equal epochs")
    others = [f"{_budget_name(other, comparison)} {points_text(_accuracy_difference(group, comparison.small))} points "
              f"({judge(_accuracy_difference(group, comparison.small))})" for other, group in comparison.large.items() if other != factor]
    return KeskarV4Judgement(verdict, claim, (
        f"keskar_v4 {regime}, batch {large[0].global_batch} minus {comparison.small[0].global_batch}, {basis}: test "
        f"{points_text(difference)} points" + (f"; large minus small batch (Welch), {flatness_text(flatness)}" if flatness else "")
        + (f"; {unmatched}" if unmatched else "") + (f"; {'; '.join(others)}" if others else "")))


def anchor_keskar_v4(results: Path, regime: str) -> tuple[str, str]:
    """``judge_keskar_v4``'s verdict and evidence: the anchor's judge."""
    judged = judge_keskar_v4(results, regime)
    return judged.verdict, judged.evidence


def keskar_v4_claim(results: Path, regime: str) -> str:
    """``judge_keskar_v4``'s reading of the claim: the anchor's ``reading``."""
    return judge_keskar_v4(results, regime).claim


def section_keskar_v4(results: Path) -> list[str]:
    """keskar_v4: a row per arm (the small batch; each large batch at equal epochs and at each
    annealed longer horizon) with steps, the LR it ended at, train loss, test accuracy and its
    difference from the small batch, and both flatness measures; each regime's decision, reading of the
    claim and evidence (``judge_keskar_v4``); each run's eigenvalue beside its stability limit."""
    lines, protocol = opening(results, KESKAR_V4, "Keskar in both regimes, every run annealed", PROTOCOL_FILE, KESKAR_V4_COMMAND)
    if protocol is None:
        return lines
    runs = run_flatness(results, KESKAR_V4)
    table, readings = [], []
    for regime, world_size in KESKAR_V4_REGIMES.items():
        comparison = keskar_v4_comparison(runs, world_size)
        if comparison is None:
            continue
        groups = ([("SB", comparison.small)] if not table else []) + [
            (f"{regime}: {_budget_name(factor, comparison)}", group) for factor, group in comparison.large.items()]
        for name, group in groups:
            difference = None if group is comparison.small else _accuracy_difference(group, comparison.small)
            end = max((run.end_lr for run in group if run.end_lr is not None), default=None)
            steps = _mean([run.steps for run in group])
            table.append([name, group[0].global_batch, "-" if steps is None else f"{steps:.0f}", _general(end),
                          _general(_mean([run.train_loss for run in group])),
                          shown(mean_interval([run.test_accuracy for run in group])), judged_points(difference),
                          shown(mean_interval([run.eigenvalue for run in group]), 3), shown(mean_interval([run.sharpness for run in group]), 3)])
        judged = judge_keskar_v4(results, regime)
        readings.append(f"- **{regime}**: **{judged.verdict}**; {judged.claim}. {judged.evidence}.")
    if not table:
        return lines + [f"{KESKAR_V4} has no ok small batch with an ok large batch yet.", ""]
    return lines + ["Every run's cosine ends at its last step (LR ~0), the longer arms' included, so both flatness measures "
                    "compare minima at the same LR; equal training loss is the shortest annealed horizon whose mean train loss "
                    "is at most the small batch's (chosen on training loss, never test). *− SB*: test accuracy minus the small "
                    "batch's, in points, Welch's interval and the claim on it. Each regime is judged on its own rows. "
                    f"[protocol]({KESKAR_V4}/protocol.md)", "",
                    markdown_table(["arm", "global batch", "steps", "LR at end (largest)", "train loss", "test acc", "− SB (points)",
                                    "top Hessian eigenvalue", "sharpness"], table), "", *readings, "",
                    *figure_lines(results, KESKAR_V4, FIGURE_SHARPNESS_VS_BATCH, "flatness against the global batch"),
                    *flatness_runs_table(runs)]
