"""keskar_v2 (generalization gap or under-training?) and the first edition's keskar_gap, and the
anchors judged on them: Keskar et al. 2017 (large batches reach sharper minima and test worse) and
Hoffer et al. 2017 (training longer with ghost batch norm closes the gap)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.results_page.common import (
    MARGIN,
    accuracy_cell,
    as_estimate,
    claims_at,
    figure_lines,
    judge,
    judged_points,
    opening,
    points_text,
    seed_accuracies,
    shown,
    study_json,
    study_runs,
)
from lbtrain.reports.decisions import BETTER, INCONCLUSIVE, MATCHES, WORSE
from lbtrain.reports.statistics import Estimate, difference_interval
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


def flatness_reading(difference: Estimate) -> str:
    """A flatness difference large − small read by where its Welch interval lies against 0:
    ``sharper`` wholly above, ``flatter`` wholly below, ``neither sharper nor flatter`` else."""
    if difference.low is not None and difference.low > 0:
        return "sharper"
    if difference.high is not None and difference.high < 0:
        return "flatter"
    return "neither sharper nor flatter"


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
    if flatness:
        verdict += f" At equal training loss, the large batch minus the small (Welch): {flatness_text(flatness)}."
    batches = sorted({row["global_batch"] for row in report["accuracy"]})
    return lines + [f"Small batch {batches[0]} against large batch {batches[-1]} (experiments/{study}.yaml). Final train loss and steps are "
                    "means over ok seeds; one reference, the small batch (SB): *− SB* is test accuracy minus the small batch's, "
                    f"in points, with its 95% Welch interval and the claim on it. [report]({study}/report.md)", "",
                    markdown_table(["arm", "global batch", "steps", "train loss", "train acc", "test acc", "− SB (points)",
                                    "train − test", "sharpness", "top Hessian eigenvalue"], table), "", verdict, "",
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
        sharper = any(flatness_reading(difference) == "sharper" for difference in flatness.values())
        sharpness = f"large minus small batch (Welch), {flatness_text(flatness)}"
    else:  # no per-run sharpness: the intervals of the two means, as the earlier editions judge
        sharper, sharpness = _sharpness_of_means(rows["SB"], rows["LB equal loss"], sharp)
    if verdict == WORSE and sharper:
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
