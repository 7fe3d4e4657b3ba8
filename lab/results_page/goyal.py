"""goyal_bn (which recipe at which world size, tuned with equal budgets), warmup_ablation, the
first edition's LR-rule studies (goyal_scaling, goyal_scaling_cnn), the figure beside Goyal et al.
2017's ImageNet numbers, and the anchors judged on them: Goyal et al. 2017, You et al. 2017 (LARS)
and Nado et al. 2021."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lab.results_page.arms import arm_label, no_ok_seed, run_labels
from lab.results_page.common import (
    ACCURACY_TABLE_NOTE,
    accuracy_table,
    as_estimate,
    claims_at,
    failed_text,
    figure_lines,
    judge,
    judged_points,
    ok_accuracies,
    opening,
    points_text,
    runs_by_cell,
    seed_accuracies,
    shown,
    standing_text,
    status_counts,
    study_json,
    study_runs,
    validation_choice,
)
from lbtrain.reports.decisions import BEST, TIED_WITH_THE_BEST, trained_share_claim
from lbtrain.reports.statistics import Estimate, difference_interval, mean_interval
from lbtrain.reports.tables import markdown_table
from lbtrain.results import FIGURE_ACCURACY_VS_BATCH, PROTOCOL_FILE, REPORT_JSON
from lbtrain.verdict import is_ok

# Goyal et al. 2017, Table 1: ResNet-50 on ImageNet, top-1 error (%) at kn = 256 and at kn = 8k = 32x.
GOYAL_2017_BASE_ERROR = 23.60
GOYAL_2017_ERROR_AT_32X = {"linear + gradual warmup": 23.74, "linear, no warmup": 24.84}
GOYAL_FIGURE = "goyal_vs_paper.png"


def study_arms(protocol: dict[str, Any]) -> list[dict[str, Any]]:
    """Every arm at every world size beyond the smallest: its label, the summary labels its runs
    carry, world size and global batch (plain data from ``protocol.json``). A side with no final
    run is no arm: the tuned side of a ``rule_only`` recipe, the rule side of a ``tuned_only`` one."""
    arms = []
    for row in protocol["rows"]:
        if row["rule_name"] == "reference":
            continue
        for kind in ("rule", "tuned"):
            if not row[f"{kind}_runs"]:
                continue
            if kind == "tuned" and any(a["label"] == arm_label(row, "tuned") and a["world_size"] == row["world_size"] for a in arms):
                continue  # one tuned arm per recipe, however many rules it is carried by
            arms.append({"label": arm_label(row, kind), "run_labels": run_labels(row, kind),
                         "world_size": row["world_size"], "global_batch": row["global_batch"]})
    return arms


def chosen_arms(protocol: dict[str, Any], arms: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per world size, the arm the protocol chose on validation (``best_arms`` of protocol.json:
    the highest mean validation accuracy among arms whose every seed was ok; never test), as a
    ``study_arms`` record (at the smallest world size, a recipe's tuned reference) whose
    ``run_label`` is the chosen summary label."""
    chosen: dict[int, dict[str, Any]] = {}
    for size, label in protocol.get("best_arms", {}).items():
        arm = next((a for a in arms if a["world_size"] == int(size) and label in a["run_labels"]), None)
        if arm is None:
            row = next(r for r in protocol["rows"]
                       if r["rule_name"] == "reference" and r["world_size"] == int(size) and f"{r['recipe']} tuned" == label)
            arm = {"label": arm_label(row, "tuned"), "run_labels": (label,), "world_size": row["world_size"],
                   "global_batch": row["global_batch"]}
        chosen[int(size)] = {**arm, "run_label": label}
    return chosen


# The labels of an arm re-run for more updates (``lbtrain.studies.protocol``: ``equal_steps_label``,
# ``train_longer_label``): not arms the protocol chooses among.
LONGER_RUN = re.compile(r" (equal steps|[0-9.]+x longer)$")


def final_runs(runs: list[dict[str, Any]], world_size: int) -> dict[str, list[dict[str, Any]]]:
    """The summary rows ``runs`` at ``world_size`` per label, the equal-steps and train-longer
    re-runs left out (``LONGER_RUN``): the arms the protocol chose among there."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in runs:
        if int(row["world_size"]) == world_size and not LONGER_RUN.search(str(row["label"])):
            groups.setdefault(row["label"], []).append(row)
    return groups


def arm_accuracies(runs: list[dict[str, Any]], labels: tuple[str, ...], world_size: int) -> list[float]:
    """The test accuracies of the ok runs at ``world_size`` labelled one of ``labels``."""
    return [value for label in labels for value in ok_accuracies(runs, label, world_size)]


def goyal_bn_reference(protocol: dict[str, Any], runs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[float]]:
    """The one reference of goyal_bn's tables: the arm chosen on validation at the smallest world
    size (``chosen_arms``), and its ok seeds' test accuracies."""
    chosen = chosen_arms(protocol, study_arms(protocol))
    arm = chosen[min(chosen)]
    return arm, arm_accuracies(runs, (arm["run_label"],), arm["world_size"])


def what_to_use_rows(protocol: dict[str, Any], arms: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[list[Any]]:
    """Per world size: the chosen arm (``chosen_arms``) with its standing on validation
    (``validation_choice`` over the arms the protocol chose among there), its test accuracy and
    its difference from the table's one reference (``goyal_bn_reference``: the arm chosen at the
    smallest world size) with the claim on it, then the same at equal steps where the protocol
    re-ran it (``equal_steps`` of protocol.json: its runs are labelled ``<arm> equal steps``)."""
    longer = {row["world_size"]: row for row in protocol.get("equal_steps", [])}
    reference_arm, reference = goyal_bn_reference(protocol, runs)
    rows = []
    for size, arm in sorted(chosen_arms(protocol, arms).items()):
        seeds = arm_accuracies(runs, (arm["run_label"],), size)
        steps = longer.get(size)
        if size == reference_arm["world_size"]:
            at_epochs, at_steps = "the reference", ["-", "-"]
        else:
            at_epochs = judged_points(difference_interval(seeds, reference))
            if steps is None:
                at_steps = ["not run", "-"]
            else:
                label = f"{steps['arm']} equal steps"
                longer_seeds = arm_accuracies(runs, (label,), size)
                at_steps = [f"{shown(mean_interval(longer_seeds))}, {steps['steps']} updates" + excluded_text(runs, (label,), size),
                            judged_points(difference_interval(longer_seeds, reference))]
        _, ranks = validation_choice(final_runs(runs, size))
        name = f"{arm['label']}; {standing_text(arm['run_label'], ranks)}" if arm["run_label"] in ranks else arm["label"]
        rows.append([size, arm["global_batch"], name, shown(mean_interval(seeds)), at_epochs, *at_steps])
    return rows


def excluded_text(runs: list[dict[str, Any]], labels: tuple[str, ...], world_size: int) -> str:
    """``; 1 diverged``: the runs at ``world_size`` labelled one of ``labels`` that were not ok
    (left out of every mean and difference), or nothing."""
    failed = failed_text({status: count for (size, status), count in status_counts(runs, labels).items() if size == world_size})
    return f"; {failed}" if failed else ""


def arm_cell(arm: dict[str, Any] | None, runs: list[dict[str, Any]], reference: list[float]) -> str:
    """An arm's test accuracy minus the reference in points with its claim and the runs left out,
    or why it has none."""
    seeds = [] if arm is None else arm_accuracies(runs, arm["run_labels"], arm["world_size"])
    if not seeds:
        return no_ok_seed(arm, runs)
    return judged_points(difference_interval(seeds, reference)) + excluded_text(runs, arm["run_labels"], arm["world_size"])


def section_goyal_bn(results: Path) -> list[str]:
    lines, protocol = opening(results, "goyal_bn", "which recipe at which world size (batch norm, tuned, equal budgets)", PROTOCOL_FILE, "lbtrain sweep experiments/goyal_bn.yaml")
    if protocol is None:
        return lines
    references = [row for row in protocol["rows"] if row["rule_name"] == "reference"]
    trials = sorted(set(protocol["trials"].values()))
    arms, runs = study_arms(protocol), study_runs(results, "goyal_bn")
    reference_arm, reference = goyal_bn_reference(protocol, runs)
    sizes = sorted({a["world_size"] for a in arms})
    stated = (f"the arm chosen on validation at world size {reference_arm['world_size']}, {reference_arm['label']} "
              f"({shown(mean_interval(reference))})")
    lines += [
        f"The resnet with batch norm on Fashion-MNIST (experiments/goyal_bn.yaml); every recipe tuned with "
        f"{' or '.join(map(str, trials))} trials per study on validation, the best of every arm re-run with "
        f"{max(row['tuned_runs'] for row in protocol['rows'])} seeds and tested. One reference for both tables: {stated}. "
        "*− reference*: test accuracy minus the reference's, in points, with its 95% Welch interval, n (ok seeds of the arm "
        "vs the reference) and df, and the claim on it. [protocol](goyal_bn/protocol.md)",
        "",
        "**What to use**, per world size: the arm with the highest mean validation accuracy among those whose every seed "
        "was ok (chosen on validation, never on test; *best* only when the Welch interval of every other arm's difference "
        "from it excludes 0, else *tied with the best* and how many arms are tied with it), at equal epochs and re-run with the same seeds for world size 1's "
        "number of updates (equal steps, Hoffer et al. 2017's \"train longer\": W times the samples, so W times the "
        "compute of world size 1's run; its tuning is the equal-epoch one):",
        "",
        markdown_table(["world size", "global batch", "chosen arm (on validation)", "equal epochs: test accuracy", "− reference (points)",
                        "equal steps: test accuracy", "− reference (points)"], what_to_use_rows(protocol, arms, runs)),
        "",
        f"Each recipe tuned at world size {reference_arm['world_size']}, test accuracy (each rule's difference from its own "
        "recipe there is in the protocol): " + "; ".join(f"{row['recipe']} {shown(as_estimate(row['tuned']))}" for row in references) + ".",
        "",
        f"Every arm, test accuracy minus the reference ({reference_arm['label']} at world size {reference_arm['world_size']}):",
        "",
        markdown_table(["arm", *[f"world {size} (batch {next(a['global_batch'] for a in arms if a['world_size'] == size)})" for size in sizes]],
                       [[label, *[arm_cell(next((a for a in arms if a["label"] == label and a["world_size"] == size), None), runs, reference)
                                  for size in sizes]]
                        for label in dict.fromkeys(a["label"] for a in arms)]),
        "",
        *figure_lines(results, "goyal_bn", FIGURE_ACCURACY_VS_BATCH, "test accuracy against the global batch, every arm"),
    ]
    return lines


def section_warmup_ablation(results: Path) -> list[str]:
    lines, report = opening(results, "warmup_ablation", "how much warmup does linear scaling need?", REPORT_JSON, "lbtrain run experiments/warmup_ablation.yaml")
    if report is None:
        return lines
    runs = study_runs(results, "warmup_ablation")
    reference = ok_accuracies(study_runs(results, "goyal_bn"), "momentum tuned", 1)
    labels = list(dict.fromkeys(row["recipe"] for row in report["accuracy"]))
    sizes = sorted({int(r["world_size"]) for r in runs})
    table = [[label, *[judged_points(difference_interval(ok_accuracies(runs, label, size), reference)) for size in sizes]]
             for label in labels]
    largest, baseline = sizes[-1], labels[0]
    against = [f"{label} {judged_points(difference)}" for label in labels[1:]
               for difference in [difference_interval(ok_accuracies(runs, label, largest), ok_accuracies(runs, baseline, largest))]]
    return lines + [f"Linear scaling at goyal_bn's tuned base LR; test accuracy [95% interval] (n, df) per arm and batch, then each "
                    f"minus goyal_bn's momentum recipe tuned at world size 1 ({shown(mean_interval(reference))}), "
                    f"in points, with its claim. {ACCURACY_TABLE_NOTE} [report](warmup_ablation/report.md)", "",
                    accuracy_table(report, runs), "",
                    markdown_table(["warmup", *[f"world {size} − reference" for size in sizes]], table), "",
                    f"Against {baseline} at world size {largest}, in points: " + "; ".join(against) + ".", "",
                    *figure_lines(results, "warmup_ablation", FIGURE_ACCURACY_VS_BATCH, "test accuracy against the global batch")]


def best_per_batch_sentences(results: Path, study: str, report: dict[str, Any]) -> str:
    """Per batch: the recipe chosen on validation (``validation_choice``: the highest mean
    validation accuracy among recipes whose every seed was ok), named the best only when it is
    separable from every other there, else tied with the best with the recipes tied with it; its
    test accuracy; beyond the smallest batch, its test accuracy minus that of the recipe chosen at
    the smallest batch (the one reference) with the claim on it (seeds from ``summary.csv``)."""
    runs = study_runs(results, study)
    cells, seeds = runs_by_cell(runs), seed_accuracies(results, study)
    batches = sorted({row["global_batch"] for row in report["accuracy"]})
    recipes = list(dict.fromkeys(row["recipe"] for row in report["accuracy"]))
    choices = {batch: validation_choice({recipe: cells.get((recipe, batch), []) for recipe in recipes}) for batch in batches}

    def leader(batch: int) -> str:
        chosen, ranks = choices[batch]
        if chosen is None:
            return "no recipe had every seed ok"
        tied = [name for name, rank in ranks.items() if rank == TIED_WITH_THE_BEST and name != chosen]
        standing_words = BEST if ranks[chosen] == BEST else f"{TIED_WITH_THE_BEST} with {', '.join(tied)}"
        return f"{chosen} ({standing_words}), test {shown(mean_interval(seeds.get((chosen, batch), [])))}"

    base_batch = next((batch for batch in batches if choices[batch][0] is not None), None)
    if base_batch is None:
        return "No recipe had every seed ok at any batch: none is chosen."
    base = seeds.get((choices[base_batch][0], base_batch), [])
    parts = [f"at batch {batch} {leader(batch)}" for batch in batches if batch <= base_batch]
    for batch in (b for b in batches if b > base_batch):
        chosen = choices[batch][0]
        if chosen is None:
            parts.append(f"at {batch} {leader(batch)}")
            continue
        difference = difference_interval(seeds.get((chosen, batch), []), base)
        parts.append(f"at {batch} {leader(batch)}, {points_text(difference)} points: {judge(difference)}")
    return ("Chosen on validation at each batch (the highest mean validation accuracy among recipes whose every seed was ok; "
            "test accuracy only reported): " + "; ".join(parts) +
            f" (beyond batch {base_batch}: the chosen recipe's test accuracy minus that of batch {base_batch}'s, in points, "
            "Welch's 95% interval over seeds and its claim).")


def section_accuracy_study(results: Path, study: str, title: str, note: str) -> list[str]:
    lines, report = opening(results, study, title, REPORT_JSON, f"lbtrain run experiments/{study}.yaml")
    if report is None:
        return lines
    return lines + [f"{note} Budget: {report['budget']}. Test accuracy, mean over ok seeds [95% interval] (n, df); runs that "
                    f"were not ok named. {ACCURACY_TABLE_NOTE} [report]({study}/report.md)", "",
                    accuracy_table(report, study_runs(results, study)), "",
                    best_per_batch_sentences(results, study, report), "",
                    *figure_lines(results, study, FIGURE_ACCURACY_VS_BATCH, "test accuracy against the global batch")]


def goyal_figure(results: Path) -> Path | None:
    """``goyal_bn/figures/goyal_vs_paper.png``: test accuracy at k times the base batch minus the
    base batch, in points, against k (log2): goyal_bn's linear rule with and without gradual
    warmup (95% bands; runs that were not ok marked at their k) and its best arm re-run at equal
    steps, beside Goyal et al. 2017's two ImageNet points at 32x; None when goyal_bn is not
    committed."""
    from lbtrain.reports.plots import plot_panels

    protocol = study_json(results, "goyal_bn", PROTOCOL_FILE)
    if protocol is None:
        return None
    return plot_panels({"large batch minus base batch": goyal_figure_items(protocol, study_runs(results, "goyal_bn"))},
                       results / "goyal_bn" / "figures" / GOYAL_FIGURE,
                       xlabel="batch / base batch", ylabel="test accuracy change (points)", log2_x=True)


def seeds(estimate: Estimate) -> int:
    """The seeds a point of a figure rests on (``Line.n``): a mean's n, a difference's smaller arm."""
    return min(estimate.n, estimate.n if estimate.n_second is None else estimate.n_second)


def goyal_figure_items(protocol: dict[str, Any], runs: list[dict[str, Any]]) -> list[Any]:
    """The lines and marks of ``goyal_figure`` from goyal_bn's protocol.json and summary rows;
    each point with its seeds (``seeds``), so one on fewer than its line's others is marked."""
    from lbtrain.reports.plots import Line, Mark

    items: list[Line | Mark] = [Line("matches the base batch", [1, 64], [0.0, 0.0], reference=True)]
    for recipe, label in (("momentum+warmup", "linear + gradual warmup"), ("momentum", "linear, no warmup")):
        rows = sorted((r for r in protocol["rows"] if r["recipe"] == recipe and r["rule_name"] in ("reference", "linear")),
                      key=lambda r: r["world_size"])
        points = [(r["world_size"], Estimate(0.0, 0.0, 0.0, r["tuned"]["n"]) if r["rule_minus_reference"] is None
                   else as_estimate(r["rule_minus_reference"])) for r in rows]
        measured = [(size, e) for size, e in points if e.mean is not None]
        items += [] if not measured else [Line(f"here: {label}", [size for size, _ in measured], [100 * e.mean for _, e in measured],
                          [None if e.low is None else 100 * e.low for _, e in measured],
                          [None if e.high is None else 100 * e.high for _, e in measured], n=[seeds(e) for _, e in measured])]
        items += [Mark(status, f"here: {label}", size, count=count)
                  for (size, status), count in status_counts(runs, (f"{recipe} linear rule", f"{recipe} rule")).items() if not is_ok(status)]
        items.append(Line(f"Goyal et al. 2017: {label}", [32], [GOYAL_2017_BASE_ERROR - GOYAL_2017_ERROR_AT_32X[label]]))
    longer = sorted(protocol.get("equal_steps", []), key=lambda row: row["world_size"])
    if longer:
        estimates = [(row["world_size"], as_estimate(row["equal_steps_minus_reference"])) for row in longer]
        estimates = [(size, e) for size, e in estimates if e.mean is not None]
        items.append(Line("here: best arm, equal steps", [size for size, _ in estimates], [100 * e.mean for _, e in estimates],
                          [None if e.low is None else 100 * e.low for _, e in estimates],
                          [None if e.high is None else 100 * e.high for _, e in estimates], n=[seeds(e) for _, e in estimates]))
    return items


def not_ok_text(row: dict[str, Any], kind: str) -> str:
    """`` (1 of 5 runs not ok, left out)``: a protocol row's runs of one side (``rule`` or
    ``tuned``) that were not ok, or nothing."""
    left_out = row[f"{kind}_runs"] - row[kind]["n"]
    return f" ({left_out} of {row[f'{kind}_runs']} runs not ok, left out)" if left_out else ""


def anchor_goyal_linear_warmup(results: Path, study: str = "goyal_bn") -> tuple[str, str]:
    """Goyal et al.'s recipe (momentum SGD with gradual warmup, tuned at the smallest batch and
    carried by the linear rule) minus that recipe tuned at the smallest batch, at each larger batch."""
    protocol = study_json(results, study, PROTOCOL_FILE)
    if protocol is None:
        return "not measured yet", f"{study} is not committed"
    rows = sorted((r for r in protocol["rows"] if r["recipe"] == "momentum+warmup" and r["rule_name"] == "linear"),
                  key=lambda r: r["world_size"])
    evidence = "; ".join(f"batch {r['global_batch']}: {points_text(r['rule_minus_reference'])} points{not_ok_text(r, 'rule')}"
                         for r in rows)
    return (claims_at([judge(r["rule_minus_reference"]) for r in rows], [f"at batch {r['global_batch']}" for r in rows]),
            f"linear + gradual warmup (tuned at the smallest batch) minus the small batch: {evidence}")


def anchor_goyal_no_warmup(results: Path, study: str = "goyal_bn") -> tuple[str, str]:
    """At the largest batch: the linear rule without warmup (recipe ``momentum``) minus with it
    (``momentum+warmup``), each arm's runs by the labels its protocol row gives them
    (``run_labels``: ``momentum rule`` when the protocol names no rules for the recipe); an arm
    with no ok seed is judged by how many runs ended ok (``trained_share_claim``)."""
    protocol = study_json(results, study, PROTOCOL_FILE)
    if protocol is None:
        return "not measured yet", f"{study} is not committed"
    runs, largest = study_runs(results, study), max(r["world_size"] for r in protocol["rows"])
    rows = {r["recipe"]: r for r in protocol["rows"] if r["world_size"] == largest and r["rule_name"] == "linear"}
    if not {"momentum", "momentum+warmup"} <= set(rows):
        return "not measured yet", f"{study} has no linear-rule arm with and without warmup at its largest world size"
    without, with_warmup = (rows[recipe] for recipe in ("momentum", "momentum+warmup"))
    what = f"linear scaling without minus with gradual warmup at batch {without['global_batch']}"
    if not (without["rule"]["n"] and with_warmup["rule"]["n"]):
        verdict, shares = trained_share_claim(without["rule"]["n"], without["rule_runs"], with_warmup["rule"]["n"], with_warmup["rule_runs"])
        return verdict, f"{what}: no accuracy to compare, {shares}"
    difference = difference_interval(arm_accuracies(runs, run_labels(without, "rule"), largest),
                                     arm_accuracies(runs, run_labels(with_warmup, "rule"), largest))
    left_out = not_ok_text(without, "rule") + not_ok_text(with_warmup, "rule")
    return judge(difference), f"{what}: {points_text(difference)} points{left_out}"


def _largest_rows(results: Path, recipe: str, study: str = "goyal_bn") -> list[dict[str, Any]]:
    """The study's protocol rows of ``recipe`` at its largest world size (empty when absent)."""
    protocol = study_json(results, study, PROTOCOL_FILE)
    if protocol is None:
        return []
    largest = max(r["world_size"] for r in protocol["rows"])
    return [r for r in protocol["rows"] if r["recipe"] == recipe and r["world_size"] == largest]


def anchor_lars(results: Path, study: str = "goyal_bn") -> tuple[str, str]:
    """LARS with warmup at the largest batch minus LARS tuned at world size 1: carried there by
    the linear rule, or tuned there when the study gives LARS its own grid at every world size
    (``protocol.tuned_only``: no rule side)."""
    rows = _largest_rows(results, "lars+warmup", study)
    if not rows:
        return "not measured yet", f"{study} is not committed"
    row, runs = rows[0], study_runs(results, study)
    kind = "rule" if row["rule_runs"] else "tuned"
    how = "carried by the linear rule" if kind == "rule" else "tuned on its own grid"
    what = f"LARS + warmup {how} at batch {row['global_batch']} minus LARS tuned at world size 1"
    if row[kind]["n"]:
        return judge(row[f"{kind}_minus_reference"]), f"{what}: {points_text(row[f'{kind}_minus_reference'])} points"
    # No ok seed: no accuracy to take a difference of; the runs that ended ok, arm against reference.
    total = sum(count for (size, _), count in status_counts(runs, run_labels(row, kind)).items() if size == row["world_size"])
    protocol = study_json(results, study, PROTOCOL_FILE)
    base = next(r for r in protocol["rows"] if r["recipe"] == "lars+warmup" and r["rule_name"] == "reference")
    verdict, shares = trained_share_claim(0, total, base["tuned"]["n"], base["tuned_runs"])
    return verdict, f"{what}: no accuracy, {shares}"


def anchor_nado(results: Path) -> tuple[str, str]:
    nesterov, lars, lamb = (_largest_rows(results, recipe) for recipe in ("nesterov+warmup", "lars+warmup", "lamb+warmup"))
    if not (nesterov and lars and lamb):
        return "not measured yet", "goyal_bn is not committed"
    runs, size, batch = study_runs(results, "goyal_bn"), nesterov[0]["world_size"], nesterov[0]["global_batch"]
    tuned = ok_accuracies(runs, "nesterov+warmup tuned", size)
    differences = {name: difference_interval(tuned, ok_accuracies(runs, f"{name} tuned", size)) for name in ("lars+warmup", "lamb+warmup")}
    verdict = claims_at([judge(d) for d in differences.values()], [f"against {name.split('+')[0].upper()}" for name in differences])
    trials = sorted({row["tuned_trials"] for row in (nesterov[0], lars[0], lamb[0])})
    return verdict, f"tuned Nesterov momentum minus tuned LARS / LAMB at batch {batch} ({' or '.join(map(str, trials))} trials each): " + ", ".join(
        f"{name.split('+')[0].upper()} {points_text(d)} points" for name, d in differences.items())
