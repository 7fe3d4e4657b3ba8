"""goyal_bn (which recipe at which world size, tuned with equal budgets), warmup_ablation, the
first edition's LR-rule studies (goyal_scaling, goyal_scaling_cnn), the figure beside Goyal et al.
2017's ImageNet numbers, and the anchors judged on them: Goyal et al. 2017, You et al. 2017 (LARS)
and Nado et al. 2021."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lbtrain.reports.decisions import BEST, TIED_WITH_THE_BEST, standing
from lbtrain.reports.results_page.arms import arm_label, no_ok_seed, run_labels
from lbtrain.reports.results_page.common import (
    ACCURACY_TABLE_NOTE,
    accuracy_table,
    as_estimate,
    claims_at,
    figure_lines,
    judge,
    judged_points,
    ok_accuracies,
    opening,
    points_text,
    seed_accuracies,
    status_counts,
    study_json,
    study_runs,
)
from lbtrain.reports.statistics import Estimate, difference_interval, mean_interval
from lbtrain.reports.tables import markdown_table
from lbtrain.results import FIGURE_ACCURACY_VS_BATCH, PROTOCOL_FILE, REPORT_JSON

# Goyal et al. 2017, Table 1: ResNet-50 on ImageNet, top-1 error (%) at kn = 256 and at kn = 8k = 32x.
GOYAL_2017_BASE_ERROR = 23.60
GOYAL_2017_ERROR_AT_32X = {"linear + gradual warmup": 23.74, "linear, no warmup": 24.84}
GOYAL_FIGURE = "goyal_vs_paper.png"


def goyal_bn_arms(protocol: dict[str, Any]) -> list[dict[str, Any]]:
    """Every arm at every world size beyond the reference: recipe, kind, its test accuracy and
    its difference from the recipe's tuned reference (plain data from ``protocol.json``)."""
    arms = []
    for row in protocol["rows"]:
        if row["rule_name"] == "reference":
            continue
        for kind in ("rule", "tuned"):
            key = "tuned" if kind == "tuned" else "rule"
            if kind == "tuned" and any(a["label"] == arm_label(row, "tuned") and a["world_size"] == row["world_size"] for a in arms):
                continue  # one tuned arm per recipe, however many rules it is carried by
            arms.append({"label": arm_label(row, kind), "run_labels": run_labels(row, kind),
                         "world_size": row["world_size"], "global_batch": row["global_batch"],
                         "accuracy": row[key], "runs": row[f"{key}_runs"], "minus_reference": row[f"{key}_minus_reference"]})
    return arms


def chosen_arms(protocol: dict[str, Any], arms: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per world size, the arm the protocol chose on validation (``best_arms`` of protocol.json:
    the highest mean validation accuracy among arms whose every seed was ok; never test), as a
    ``goyal_bn_arms`` record; at the reference world size, its recipe's tuned reference."""
    chosen: dict[int, dict[str, Any]] = {}
    for size, label in protocol.get("best_arms", {}).items():
        arm = next((a for a in arms if a["world_size"] == int(size) and label in a["run_labels"]), None)
        if arm is None:
            row = next(r for r in protocol["rows"]
                       if r["rule_name"] == "reference" and r["world_size"] == int(size) and f"{r['recipe']} tuned" == label)
            arm = {"label": arm_label(row, "tuned"), "world_size": row["world_size"], "global_batch": row["global_batch"],
                   "accuracy": row["tuned"], "minus_reference": None}
        chosen[int(size)] = arm
    return chosen


def validation_standing(runs: list[dict[str, Any]], world_size: int, label: str) -> str:
    """The chosen arm ``label`` at ``world_size`` against the other arms the protocol chose among
    (final runs at that world size whose every seed was ok, equal-steps re-runs left out), on
    mean validation accuracy (``lbtrain.reports.decisions.standing``): ``best`` when separable
    from every other, else ``tied with the best (k others)``; empty when it is not ranked (no validation accuracy)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in runs:
        if int(row["world_size"]) == world_size and not str(row["label"]).endswith(" equal steps"):
            groups.setdefault(row["label"], []).append(row)
    eligible = {name: [float(r["validation_accuracy"]) for r in rows] for name, rows in groups.items()
                if all(r["status"] == "ok" and r.get("validation_accuracy") is not None for r in rows)}
    ranks = standing(eligible)
    if label not in ranks:
        return ""
    if ranks[label] == BEST:
        return BEST
    others = sum(1 for name, rank in ranks.items() if rank == TIED_WITH_THE_BEST and name != label)
    return f"{TIED_WITH_THE_BEST} ({others} other{'s' if others != 1 else ''})"


def what_to_use_rows(protocol: dict[str, Any], arms: list[dict[str, Any]], runs: list[dict[str, Any]] | None = None) -> list[list[Any]]:
    """Per world size: the chosen arm (``chosen_arms``) with its standing on validation
    (``validation_standing``, when the study's summary rows ``runs`` are given), its test
    accuracy and its difference from its recipe's reference at equal epochs, then the same re-run
    at equal steps where the protocol did (``equal_steps`` of protocol.json)."""
    longer = {row["world_size"]: row for row in protocol.get("equal_steps", [])}
    labels = protocol.get("best_arms", {})
    rows = []
    for size, arm in sorted(chosen_arms(protocol, arms).items()):
        steps = longer.get(size)
        if arm["minus_reference"] is None:
            at_steps = ["the reference", "reference"]
        elif steps is None:
            at_steps = ["not run", "-"]
        else:
            at_steps = [f"{as_estimate(steps['equal_steps']).describe()}, {steps['steps']} updates",
                        judged_points(steps["equal_steps_minus_reference"])]
        rank = "" if runs is None else validation_standing(runs, size, labels[str(size)])
        name = f"{arm['label']} ({rank})" if rank else arm["label"]
        rows.append([size, arm["global_batch"], name, as_estimate(arm["accuracy"]).describe(),
                     "reference" if arm["minus_reference"] is None else judged_points(arm["minus_reference"]), *at_steps])
    return rows


def _arm_cell(arm: dict[str, Any] | None, runs: list[dict[str, Any]]) -> str:
    """An arm's difference from its reference in points with its claim, or why it has none."""
    if arm is None or arm["accuracy"]["mean"] is None:
        return no_ok_seed(arm, runs)
    return judged_points(arm["minus_reference"])


def section_goyal_bn(results: Path) -> list[str]:
    lines, protocol = opening(results, "goyal_bn", "which recipe at which world size (batch norm, tuned, equal budgets)", PROTOCOL_FILE, "lbtrain sweep experiments/goyal_bn.yaml")
    if protocol is None:
        return lines
    references = [row for row in protocol["rows"] if row["rule_name"] == "reference"]
    trials = sorted(set(protocol["trials"].values()))
    arms, runs = goyal_bn_arms(protocol), study_runs(results, "goyal_bn")
    lines += [
        f"The resnet with batch norm on Fashion-MNIST (experiments/goyal_bn.yaml); every recipe tuned with "
        f"{' or '.join(map(str, trials))} trials per study on validation, the best of every arm re-run with "
        f"{max(row['tuned_runs'] for row in protocol['rows'])} seeds and tested. *− reference*: test accuracy minus the same "
        "recipe tuned at world size 1, in points, with its 95% Welch interval, n (ok seeds of the arm vs the reference) and df, and "
        "the claim on it. [protocol](goyal_bn/protocol.md)",
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
        "References (world size 1): " + "; ".join(f"{row['recipe']} {as_estimate(row['tuned']).describe()}" for row in references) + ".",
        "",
        markdown_table(["arm", *[f"world {size} (batch {next(a['global_batch'] for a in arms if a['world_size'] == size)})"
                                 for size in sorted({a['world_size'] for a in arms})]],
                       [[label, *[_arm_cell(next((a for a in arms if a["label"] == label and a["world_size"] == size), None), runs)
                                  for size in sorted({a['world_size'] for a in arms})]]
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
                    f"minus goyal_bn's momentum recipe tuned at world size 1 ({mean_interval(reference).describe()}), "
                    f"in points, with its claim. {ACCURACY_TABLE_NOTE} [report](warmup_ablation/report.md)", "",
                    accuracy_table(report, seed_accuracies(results, "warmup_ablation")), "",
                    markdown_table(["warmup", *[f"world {size} − reference" for size in sizes]], table), "",
                    f"Against {baseline} at world size {largest}, in points: " + "; ".join(against) + ".", "",
                    *figure_lines(results, "warmup_ablation", FIGURE_ACCURACY_VS_BATCH, "test accuracy against the global batch")]


def best_per_batch_sentences(results: Path, study: str, report: dict[str, Any]) -> str:
    """Per batch: the recipe with the highest mean, named the best only when it is separable
    from every other recipe there (``lbtrain.reports.decisions.standing``), else with the recipes
    tied with it; beyond the smallest batch, its difference from the smallest batch's highest
    with the claim on it (seeds from ``summary.csv``)."""
    rows = [row for row in report["accuracy"] if row.get("ok_runs")]
    batches = sorted({row["global_batch"] for row in rows})
    seeds = seed_accuracies(results, study)
    top = {batch: max((r for r in rows if r["global_batch"] == batch), key=lambda r: r["test_accuracy"]) for batch in batches}

    def leader(batch: int) -> str:
        ranks = standing({r["recipe"]: seeds.get((r["recipe"], batch), []) for r in rows if r["global_batch"] == batch})
        recipe = top[batch]["recipe"]
        if ranks.get(recipe) == BEST:
            return f"the best recipe is {recipe}"
        tied = [name for name, rank in ranks.items() if rank == TIED_WITH_THE_BEST and name != recipe]
        return f"the highest mean is {recipe}'s, tied with the best: {', '.join(tied)}"

    base = top[batches[0]]
    parts = [f"At batch {batches[0]} {leader(batches[0])} ({base['test_accuracy']:.3f})"]
    for batch in batches[1:]:
        row = top[batch]
        difference = difference_interval(seeds.get((row["recipe"], batch), []), seeds.get((base["recipe"], batches[0]), []))
        parts.append(f"at {batch} {leader(batch)}, {points_text(difference)} points, {judge(difference)}")
    return "; ".join(parts) + (" (the highest mean at each batch minus the highest at the smallest, in points, Welch's 95% "
                               "interval over seeds and its claim).")


def section_accuracy_study(results: Path, study: str, title: str, note: str) -> list[str]:
    lines, report = opening(results, study, title, REPORT_JSON, f"lbtrain run experiments/{study}.yaml")
    if report is None:
        return lines
    return lines + [f"{note} Budget: {report['budget']}. Test accuracy, mean over ok seeds [95% interval] (n, df); runs that "
                    f"were not ok named. {ACCURACY_TABLE_NOTE} [report]({study}/report.md)", "",
                    accuracy_table(report, seed_accuracies(results, study)), "",
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


def goyal_figure_items(protocol: dict[str, Any], runs: list[dict[str, Any]]) -> list[Any]:
    """The lines and marks of ``goyal_figure`` from goyal_bn's protocol.json and summary rows."""
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
                          [None if e.high is None else 100 * e.high for _, e in measured])]
        items += [Mark(status, f"here: {label}", size, count=count)
                  for (size, status), count in status_counts(runs, (f"{recipe} linear rule", f"{recipe} rule")).items() if status != "ok"]
        items.append(Line(f"Goyal et al. 2017: {label}", [32], [GOYAL_2017_BASE_ERROR - GOYAL_2017_ERROR_AT_32X[label]]))
    longer = sorted(protocol.get("equal_steps", []), key=lambda row: row["world_size"])
    if longer:
        estimates = [(row["world_size"], as_estimate(row["equal_steps_minus_reference"])) for row in longer]
        estimates = [(size, e) for size, e in estimates if e.mean is not None]
        items.append(Line("here: best arm, equal steps", [size for size, _ in estimates], [100 * e.mean for _, e in estimates],
                          [None if e.low is None else 100 * e.low for _, e in estimates],
                          [None if e.high is None else 100 * e.high for _, e in estimates]))
    return items


def anchor_goyal_linear_warmup(results: Path) -> tuple[str, str]:
    protocol = study_json(results, "goyal_bn", PROTOCOL_FILE)
    if protocol is None:
        return "not measured yet", "goyal_bn is not committed"
    rows = sorted((r for r in protocol["rows"] if r["recipe"] == "momentum+warmup" and r["rule_name"] == "linear"),
                  key=lambda r: r["world_size"])
    evidence = "; ".join(f"batch {r['global_batch']}: {points_text(r['rule_minus_reference'])} points" for r in rows)
    return (claims_at([judge(r["rule_minus_reference"]) for r in rows], [f"at batch {r['global_batch']}" for r in rows]),
            f"linear + gradual warmup (tuned at the smallest batch) minus the small batch: {evidence}")


def anchor_goyal_no_warmup(results: Path) -> tuple[str, str]:
    protocol = study_json(results, "goyal_bn", PROTOCOL_FILE)
    if protocol is None:
        return "not measured yet", "goyal_bn is not committed"
    runs, largest = study_runs(results, "goyal_bn"), max(r["world_size"] for r in protocol["rows"])
    difference = difference_interval(ok_accuracies(runs, "momentum linear rule", largest),
                                     ok_accuracies(runs, "momentum+warmup linear rule", largest))
    batch = next(r["global_batch"] for r in protocol["rows"] if r["world_size"] == largest)
    return judge(difference), f"linear scaling without minus with gradual warmup at batch {batch}: {points_text(difference)} points"


def _largest_rows(results: Path, recipe: str) -> list[dict[str, Any]]:
    """goyal_bn's protocol rows of ``recipe`` at its largest world size (empty when absent)."""
    protocol = study_json(results, "goyal_bn", PROTOCOL_FILE)
    if protocol is None:
        return []
    largest = max(r["world_size"] for r in protocol["rows"])
    return [r for r in protocol["rows"] if r["recipe"] == recipe and r["world_size"] == largest]


def anchor_lars(results: Path) -> tuple[str, str]:
    rows = _largest_rows(results, "lars+warmup")
    if not rows:
        return "not measured yet", "goyal_bn is not committed"
    row = rows[0]
    effect = (f"{points_text(row['rule_minus_reference'])} points" if row["rule"]["n"]
              else f"no seed of {row['rule_runs']} ended ok")
    return (judge(row["rule_minus_reference"]),
            f"LARS + warmup carried by the linear rule to batch {row['global_batch']} minus LARS tuned at world size 1: {effect}")


def anchor_nado(results: Path) -> tuple[str, str]:
    nesterov, lars, lamb = (_largest_rows(results, recipe) for recipe in ("nesterov+warmup", "lars+warmup", "lamb+warmup"))
    if not (nesterov and lars and lamb):
        return "not measured yet", "goyal_bn is not committed"
    runs, size, batch = study_runs(results, "goyal_bn"), nesterov[0]["world_size"], nesterov[0]["global_batch"]
    tuned = ok_accuracies(runs, "nesterov+warmup tuned", size)
    differences = {name: difference_interval(tuned, ok_accuracies(runs, f"{name} tuned", size)) for name in ("lars+warmup", "lamb+warmup")}
    verdict = claims_at([judge(d) for d in differences.values()], [f"against {name.split('+')[0].upper()}" for name in differences])
    return verdict, f"tuned Nesterov momentum minus tuned LARS / LAMB at batch {batch} (5 trials each): " + ", ".join(
        f"{name.split('+')[0].upper()} {points_text(d)} points" for name, d in differences.items())
