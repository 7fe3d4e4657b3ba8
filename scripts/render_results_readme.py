"""results/README.md, rendered from the committed studies' data.

Every number on that page comes from a study's ``report.json`` (``lbtrain report``),
``protocol.json`` (``lbtrain sweep`` in protocol mode) or ``summary.csv``; the words around
them are fixed here, one function per study, and a study that is not committed yet is named
with the command that makes it. Headline numbers carry their 95% bootstrap interval and n
(``lbtrain.analysis.statistics``); differences between recipes resample each recipe's seeds on
their own. ``tests/test_results_readme.py`` checks that the committed page is what this renders.

The README's quickstart table is rendered the same way, from ``make run``'s summary committed
as ``results/quickstart_reference/summary.csv``.

    python scripts/render_results_readme.py            # print the page
    python scripts/render_results_readme.py --write    # write results/README.md and the README's quickstart table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results"
sys.path.insert(0, str(REPO_ROOT))

from lbtrain.analysis.statistics import Estimate, bootstrap_difference, bootstrap_mean  # noqa: E402
from lbtrain.analysis.mode_comparison import count_text, works_sentence  # noqa: E402
from lbtrain.analysis.report import machine_minutes as folder_minutes  # noqa: E402
from lbtrain.analysis.tables import markdown_table, read_summary  # noqa: E402

# A difference whose interval lies within this many points of 0 counts as "matches".
MATCH_POINTS = 0.01
# Fewer points than this are shown, never fitted.
MIN_FIT_POINTS = 4
# Steps to target "follow" Shallue's curve when the fit's relative rms error is at most this.
FIT_RMS_TOLERANCE = 0.15


def _json(study: str, name: str) -> dict[str, Any] | None:
    path = RESULTS / study / name
    return json.loads(path.read_text()) if path.is_file() else None


def machine_minutes(study: str) -> tuple[float, float | None]:
    """The study's machine time in minutes (``lbtrain.analysis.report.machine_minutes``): its
    runs' wall times (for a comparison, both compared experiments') and its tuning trials'
    (None without an optuna.db)."""
    compared = _json(study, "compare.json")
    folders = [compared["first"]["name"], compared["second"]["name"]] if compared else [study]
    runs = sum(folder_minutes(RESULTS / folder)["runs"] or 0.0 for folder in folders)
    return runs, folder_minutes(RESULTS / study)["tuning_trials"]


def _opening(study: str, title: str, file: str, command: str) -> tuple[list[str], dict[str, Any] | None]:
    """A section's heading, the study's machine time, and the study's ``file`` (None, with a
    line naming ``command``, when the study is not committed)."""
    lines = [f"## {study}: {title}", ""]
    data = _json(study, file)
    if data is None:
        lines += [f"*Not committed yet*: `{command}` makes it (resumable).", ""]
    else:
        runs, tuning = machine_minutes(study)
        lines += [f"Machine time on 2 cores: {runs:.0f} minutes of runs" +
                  ("" if tuning is None else f" and {tuning:.0f} minutes of tuning trials") + ".", ""]
        experiment = RESULTS / study / "experiment.yaml"
        sizing = str(yaml.safe_load(experiment.read_text()).get("sizing") or "") if experiment.is_file() else ""
        lines += [f"Sized {sizing}", ""] if sizing else []
    return lines, data


def _figure(study: str, name: str, caption: str) -> list[str]:
    """The study's figure ``figures/<name>`` embedded, when the study committed it."""
    return [f"![{caption}]({study}/figures/{name})", ""] if (RESULTS / study / "figures" / name).is_file() else []


def _estimate(record: dict[str, Any] | None) -> Estimate | None:
    return None if record is None else Estimate(**record)


def _points(record: dict[str, Any] | Estimate | None) -> str:
    """A difference of accuracies in points, ``-1.2 [-2.0, -0.4] (n=3)``."""
    estimate = record if isinstance(record, Estimate) or record is None else Estimate(**record)
    if estimate is None or estimate.mean is None:
        return "-"
    if estimate.n == 1 or estimate.low is None:
        return f"{100 * estimate.mean:+.1f} (n={estimate.n})"
    return f"{100 * estimate.mean:+.1f} [{100 * estimate.low:+.1f}, {100 * estimate.high:+.1f}] (n={estimate.n})"


def _failures(row: dict[str, Any]) -> str:
    excluded = row.get("excluded") or {}
    return ", ".join(f"{count} {status}" for status, count in sorted(excluded.items()))


def _cell(row: dict[str, Any] | None) -> str:
    """One accuracy cell: the mean over ok seeds with its interval and n, and the runs that were
    not ok; only the failures when no seed was ok."""
    if row is None:
        return ""
    failures = _failures(row)
    if not row.get("ok_runs"):
        return f"{failures} (of {row['total']})" if failures else "-"
    estimate = Estimate(row["test_accuracy"], row["low"], row["high"], row["ok_runs"])
    return estimate.describe() + (f"; {failures}" if failures else "")


def _seed_accuracies(study: str) -> dict[tuple[str, int], list[float]]:
    """Per (label, global batch): the test accuracies of the ok runs of ``summary.csv``."""
    groups: dict[tuple[str, int], list[float]] = {}
    for row in _runs(study):
        if row["status"] == "ok" and row["test_accuracy"] is not None:
            groups.setdefault((row["label"], int(row["global_batch"])), []).append(float(row["test_accuracy"]))
    return groups


# Second edition ----------------------------------------------------------------------------


def _arm_label(row: dict[str, Any], kind: str) -> str:
    if kind == "tuned":
        return f"{row['recipe']}, tuned"
    return f"{row['recipe']}, {row['rule_name']} rule"


def _run_labels(row: dict[str, Any], kind: str) -> tuple[str, ...]:
    """The summary labels an arm's runs may carry (``lbtrain.protocol.Arm.label``: the rule's
    name is left out when ``protocol.rules`` names no rules for the recipe)."""
    if kind == "tuned":
        return (f"{row['recipe']} tuned",)
    return (f"{row['recipe']} {row['rule_name']} rule", f"{row['recipe']} rule")


def _no_ok_seed(arm: dict[str, Any] | None, runs: list[dict[str, Any]]) -> str:
    """``no ok seed (3 collapsed)``: an arm none of whose seeds was ok, its ``runs`` (the
    study's summary rows) by status; ``not run`` for an arm the study lacks."""
    if arm is None:
        return "not run"
    statuses = {status: count for (size, status), count in _status_counts(runs, arm["run_labels"]).items() if size == arm["world_size"]}
    failed = _failed(statuses)
    return f"no ok seed ({failed})" if failed else "no test accuracy"


def _status_counts(runs: list[dict[str, Any]], labels: tuple[str, ...]) -> dict[tuple[int, str], int]:
    """Per (world size, status): how many of the summary rows ``runs`` labelled one of ``labels``."""
    counts: dict[tuple[int, str], int] = {}
    for row in runs:
        if row["label"] in labels:
            key = (int(row["world_size"]), row["status"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def goyal_bn_arms(protocol: dict[str, Any]) -> list[dict[str, Any]]:
    """Every arm at every world size beyond the reference: recipe, kind, its test accuracy and
    its difference from the recipe's tuned reference (plain data from ``protocol.json``)."""
    arms = []
    for row in protocol["rows"]:
        if row["rule_name"] == "reference":
            continue
        for kind in ("rule", "tuned"):
            key = "tuned" if kind == "tuned" else "rule"
            if kind == "tuned" and any(a["label"] == _arm_label(row, "tuned") and a["world_size"] == row["world_size"] for a in arms):
                continue  # one tuned arm per recipe, however many rules it is carried by
            arms.append({"label": _arm_label(row, kind), "run_labels": _run_labels(row, kind),
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
            arm = {"label": _arm_label(row, "tuned"), "world_size": row["world_size"], "global_batch": row["global_batch"],
                   "accuracy": row["tuned"], "minus_reference": None}
        chosen[int(size)] = arm
    return chosen


def what_to_use_rows(protocol: dict[str, Any], arms: list[dict[str, Any]]) -> list[list[Any]]:
    """Per world size: the chosen arm (``chosen_arms``), its test accuracy and its difference
    from its recipe's reference at equal epochs, then the same re-run at equal steps where the
    protocol did (``equal_steps`` of protocol.json)."""
    longer = {row["world_size"]: row for row in protocol.get("equal_steps", [])}
    rows = []
    for size, arm in sorted(chosen_arms(protocol, arms).items()):
        steps = longer.get(size)
        if arm["minus_reference"] is None:
            at_steps = ["the reference", "reference"]
        elif steps is None:
            at_steps = ["not run", "-"]
        else:
            at_steps = [f"{_estimate(steps['equal_steps']).describe()}, {steps['steps']} updates",
                        _points(steps["equal_steps_minus_reference"])]
        rows.append([size, arm["global_batch"], arm["label"], _estimate(arm["accuracy"]).describe(),
                     "reference" if arm["minus_reference"] is None else _points(arm["minus_reference"]), *at_steps])
    return rows


def _arm_cell(arm: dict[str, Any] | None, runs: list[dict[str, Any]]) -> str:
    """An arm's difference from its reference in points, or why it has none."""
    if arm is None or arm["accuracy"]["mean"] is None:
        return _no_ok_seed(arm, runs)
    return _points(arm["minus_reference"])


def section_goyal_bn() -> list[str]:
    lines, protocol = _opening("goyal_bn", "which recipe at which world size (batch norm, tuned, equal budgets)", "protocol.json", "lbtrain sweep experiments/goyal_bn.yaml")
    if protocol is None:
        return lines
    references = [row for row in protocol["rows"] if row["rule_name"] == "reference"]
    trials = sorted(set(protocol["trials"].values()))
    arms, runs = goyal_bn_arms(protocol), _runs("goyal_bn")
    lines += [
        f"The resnet with batch norm on Fashion-MNIST (experiments/goyal_bn.yaml); every recipe tuned with "
        f"{' or '.join(map(str, trials))} trials per study on validation, the best of every arm re-run with "
        f"{max(row['tuned_runs'] for row in protocol['rows'])} seeds and tested. *− reference*: test accuracy minus the same "
        "recipe tuned at world size 1, in points, with its 95% interval and n (ok seeds). [protocol](goyal_bn/protocol.md)",
        "",
        "**What to use**, per world size: the arm with the highest mean validation accuracy among those whose every seed "
        "was ok (chosen on validation, never on test), at equal epochs and re-run with the same seeds for world size 1's "
        "number of updates (equal steps, Hoffer et al. 2017's \"train longer\": W times the samples, so W times the "
        "compute of world size 1's run; its tuning is the equal-epoch one):",
        "",
        markdown_table(["world size", "global batch", "best arm", "equal epochs: test accuracy", "− reference (points)",
                        "equal steps: test accuracy", "− reference (points)"], what_to_use_rows(protocol, arms)),
        "",
        "References (world size 1): " + "; ".join(f"{row['recipe']} {_estimate(row['tuned']).describe()}" for row in references) + ".",
        "",
        markdown_table(["arm", *[f"world {size} (batch {next(a['global_batch'] for a in arms if a['world_size'] == size)})"
                                 for size in sorted({a['world_size'] for a in arms})]],
                       [[label, *[_arm_cell(next((a for a in arms if a["label"] == label and a["world_size"] == size), None), runs)
                                  for size in sorted({a['world_size'] for a in arms})]]
                        for label in dict.fromkeys(a["label"] for a in arms)]),
        "",
        *_figure("goyal_bn", "accuracy_vs_batch.png", "test accuracy against the global batch, every arm"),
    ]
    return lines


def keskar_v2_differences() -> dict[str, Estimate]:
    """keskar_v2: each large-batch arm's test accuracy minus the small batch's (seeds resampled
    per arm)."""
    runs = _runs("keskar_v2")
    small = [float(r["test_accuracy"]) for r in runs if r["label"] == "SB" and r["status"] == "ok"]
    labels = dict.fromkeys(r["label"] for r in runs if r["label"] != "SB")
    return {label: bootstrap_difference([float(r["test_accuracy"]) for r in runs if r["label"] == label and r["status"] == "ok"], small)
            for label in labels}


def _mean_of(runs: list[dict[str, Any]], label: str, key: str, digits: int) -> str:
    values = [float(r[key]) for r in runs if r["label"] == label and r["status"] == "ok" and r[key] is not None]
    return "-" if not values else f"{sum(values) / len(values):.{digits}f}"


def section_keskar_v2() -> list[str]:
    lines, report = _opening("keskar_v2", "generalization gap or under-training?", "report.json", "lbtrain run experiments/keskar_v2.yaml")
    if report is None:
        return lines
    runs, differences = _runs("keskar_v2"), keskar_v2_differences()
    sharp = {row["recipe"]: row for row in report.get("sharpness", [])}
    hessian = {row["recipe"]: row for row in report.get("hessian_top_eigenvalue", [])}

    def measure(table: dict[str, Any], recipe: str, key: str, digits: int) -> str:
        row = table.get(recipe)
        return "-" if row is None or row[key] is None else Estimate(row[key], row["low"], row["high"], row["n"]).describe(digits)

    table = [[row["recipe"], row["global_batch"], _mean_of(runs, row["recipe"], "total_steps", 0), _mean_of(runs, row["recipe"], "train_loss", 3),
              _estimate(row["train_accuracy"]).describe(), _cell(row), _points(differences.get(row["recipe"])),
              _estimate(row["gap_accuracy"]).describe(), measure(sharp, row["recipe"], "sharpness", 1),
              measure(hessian, row["recipe"], "hessian_top_eigenvalue", 2)] for row in report["accuracy"]]
    epochs, steps, loss = (differences.get(label) for label in ("LB equal epochs", "LB equal steps", "LB equal loss"))
    measured = "; ".join(f"at equal {budget} {_points(difference)} points" for budget, difference in
                         (("epochs", epochs), ("steps", steps), ("training loss", loss)) if difference is not None)
    if epochs is None or epochs.mean is None:
        verdict = "Without an ok large-batch run at equal epochs there is nothing to explain."
    elif _matches(epochs):
        verdict = f"The large batch against the small: {measured}. At equal epochs it is already no worse: there is no gap here."
    elif (steps is not None and _matches(steps)) or (loss is not None and _matches(loss)):
        verdict = (f"The large batch against the small: {measured}. Its loss at equal epochs is **under-training**: given the "
                   "small batch's steps or its training loss it is no worse (within 1 point or better).")
    else:
        verdict = (f"The large batch against the small: {measured}. It still tests worse at equal steps and at equal training "
                   "loss: a **generalization gap**, not only under-training.")
    return lines + [f"Small batch 32 against large batch 256 (experiments/keskar_v2.yaml). Final train loss and steps are "
                    "means over ok seeds; *− SB*: test accuracy minus the small batch's, in points. [report](keskar_v2/report.md)", "",
                    markdown_table(["arm", "global batch", "steps", "train loss", "train acc", "test acc", "− SB (points)",
                                    "train − test", "sharpness", "top Hessian eigenvalue"], table), "", verdict, "",
                    *_figure("keskar_v2", "sharpness_vs_batch.png", "flatness against the global batch")]


def section_warmup_ablation() -> list[str]:
    lines, report = _opening("warmup_ablation", "how much warmup does linear scaling need?", "report.json", "lbtrain run experiments/warmup_ablation.yaml")
    if report is None:
        return lines
    runs = _runs("warmup_ablation")
    reference = _ok_accuracies(_runs("goyal_bn"), "momentum tuned", 1)
    labels = list(dict.fromkeys(row["recipe"] for row in report["accuracy"]))
    sizes = sorted({int(r["world_size"]) for r in runs})
    table = [[label, *[_points(bootstrap_difference(_ok_accuracies(runs, label, size), reference)) for size in sizes]] for label in labels]
    largest, baseline = sizes[-1], labels[0]
    against = [f"{label} {_points(difference)} ({_direction(difference)})" for label in labels[1:]
               for difference in [bootstrap_difference(_ok_accuracies(runs, label, largest), _ok_accuracies(runs, baseline, largest))]]
    return lines + [f"Linear scaling at goyal_bn's tuned base LR; test accuracy [95% interval] (n) per arm and batch, then each "
                    f"minus goyal_bn's momentum recipe tuned at world size 1 ({bootstrap_mean(reference).describe()}), "
                    "in points. [report](warmup_ablation/report.md)", "", accuracy_table(report), "",
                    markdown_table(["warmup", *[f"world {size} − reference" for size in sizes]], table), "",
                    f"Against {baseline} at world size {largest}, in points: " + "; ".join(against) + ".", "",
                    *_figure("warmup_ablation", "accuracy_vs_batch.png", "test accuracy against the global batch")]


def _direction(difference: Estimate) -> str:
    """``better`` or ``worse`` when the 95% interval of a difference excludes 0, else ``no different``."""
    if difference.mean is None:
        return "not measured"
    if difference.low is not None and difference.low > 0:
        return "better"
    if difference.high is not None and difference.high < 0:
        return "worse"
    return "no different"


def _region(batch: int, b_crit: float) -> str:
    """Shallue et al.'s regions by the fitted S(B) = S_min (1 + B_crit / B): perfect scaling while
    the samples needed stay within 10% of their minimum (B <= B_crit / 10), no further gain once
    the steps are within 10% of theirs (B >= 10 B_crit), diminishing returns between."""
    if batch <= b_crit / 10:
        return "perfect scaling"
    return "no further gain" if batch >= 10 * b_crit else "diminishing returns"


def section_steps_to_target() -> list[str]:
    lines, report = _opening("steps_to_target", "steps to a target against the batch, with the LR chosen per batch", "report.json", "lbtrain run experiments/steps_to_target.yaml")
    if report is None:
        return lines
    rows = [row for row in report["steps_to_target"] if row["steps_to_target"] is not None]
    best = {}
    for row in rows:
        if row["global_batch"] not in best or row["steps_to_target"] < best[row["global_batch"]]["steps_to_target"]:
            best[row["global_batch"]] = row
    fit = report["critical_batch"]
    fitted = {r["global_batch"]: r["fitted_steps"] for r in fit.get("residuals") or []}
    b_crit = fit.get("b_crit")
    table = [[batch, row["recipe"], ("≤" if row["upper_bound"] else "") + Estimate(row["steps_to_target"], row["low"], row["high"], row["reached"]).describe(0),
              f"{row['reached']} of {row['runs']}", "-" if batch not in fitted else f"{fitted[batch]:.0f}",
              "-" if b_crit is None else _region(batch, b_crit)] for batch, row in sorted(best.items())]
    if b_crit is None:
        text = f"Not enough batch sizes reach the target to fit ({fit['batches']}; a fit needs at least {fit['min_batches']})."
    else:
        text = (f"Measured critical batch B_crit = {b_crit:.0f}, S_min = {fit['s_min']:.1f} steps, on {fit['batches']} batch sizes "
                f"(relative rms error {100 * fit['relative_rms']:.1f}%).")
        if fit.get("noise_scale") is not None:
            text += (f" Predicted from the gradient noise scale: B_simple = {fit['noise_scale']:.0f} (median over runs at the "
                     f"target), {fit['noise_scale_ratio']:.2f}x the measured B_crit.")
    return lines + [f"Steps to {report['metric']} {report['target']} (experiments/steps_to_target.yaml): per batch the recipe "
                    "with the fewest mean steps (selected on validation), with its interval over the seeds that reached the "
                    "target. [report](steps_to_target/report.md)", "",
                    markdown_table(["global batch", "best recipe", "steps [95% CI] (n)", "seeds reaching", "fit", "region"], table),
                    "", text, "", *_figure("steps_to_target", "steps_to_target.png", "steps to the target against the global batch")]


def section_adam_scaling() -> list[str]:
    lines, protocol = _opening("adam_scaling", "Adam's tuned LR against the batch", "protocol.json", "lbtrain sweep experiments/adam_scaling.yaml")
    if protocol is None:
        return lines
    fit, runs = protocol["lr_fits"]["adam"], _runs("adam_scaling")

    def rule_cell(row: dict[str, Any]) -> str:
        if row["rule"]["mean"] is not None or row["rule_name"] == "reference":
            return _estimate(row["rule"]).describe()
        return _no_ok_seed({"run_labels": _run_labels(row, "rule"), "world_size": row["world_size"]}, runs)

    table = [[row["world_size"], row["global_batch"], row["rule_name"], rule_cell(row),
              _points(row["rule_minus_reference"]), _estimate(row["tuned"]).describe(), _points(row["cost_of_rule"])]
             for row in protocol["rows"]]
    tuned = markdown_table(["global batch", "ok trials", "tuned LR (geometric mean of the top 3)"],
                           [[b["global_batch"], b["ok_trials"], "-" if b["learning_rate"] is None else f"{b['learning_rate']:.3g}"]
                            for b in fit["batches"]])
    verdict, evidence = anchor_malladi()
    return lines + ["The MNIST-1D cnn with Adam (experiments/adam_scaling.yaml): each rule carries the LR tuned at batch 32; "
                    "*cost of the rule* = tuned − rule, in points. [protocol](adam_scaling/protocol.md)", "",
                    markdown_table(["world", "global batch", "rule", "rule: test acc", "rule − reference", "tuned: test acc",
                                    "cost of the rule"], table), "", tuned, "", f"{evidence[0].upper()}{evidence[1:]}: **{verdict}**.", "",
                    *_figure("adam_scaling", "accuracy_vs_batch.png", "test accuracy against the global batch")]


STALENESS_DAMPINGS = ("none", "sqrt", "linear")
STALENESS_LABELS = {"none": "LR undamped", "sqrt": "LR / sqrt(tau + 1)", "linear": "LR / (tau + 1)"}


def staleness_cells() -> tuple[list[int], dict[tuple[int, str], list[float]], dict[tuple[int, str], dict[str, int]]]:
    """The staleness study's taus, and per (tau, damping) the ok seeds' test accuracies and the
    count of runs by status (labels ``tau0`` and ``tau<t> <damping>``)."""
    accuracies: dict[tuple[int, str], list[float]] = {}
    statuses: dict[tuple[int, str], dict[str, int]] = {}
    for row in _runs("staleness"):
        tau_text, _, damping = row["label"].partition(" ")
        key = (int(tau_text[3:]), damping or "none")
        statuses.setdefault(key, {})
        statuses[key][row["status"]] = statuses[key].get(row["status"], 0) + 1
        if row["status"] == "ok" and row["test_accuracy"] is not None:
            accuracies.setdefault(key, []).append(float(row["test_accuracy"]))
    return sorted({tau for tau, _ in statuses}), accuracies, statuses


def _failed(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {status}" for status, count in sorted(counts.items()) if status != "ok")


def section_staleness() -> list[str]:
    lines, report = _opening("staleness", "asynchronous SGD simulated exactly: accuracy against the staleness", "report.json",
                             "lbtrain run experiments/staleness.yaml")
    if report is None:
        return lines
    taus, accuracies, statuses = staleness_cells()
    synchronous = accuracies.get((0, "none"), [])

    def cell(tau: int, damping: str) -> str:
        key = (tau, damping)
        if key not in statuses:
            return ""
        failed = _failed(statuses[key])
        if key not in accuracies:
            return f"{failed} (of {sum(statuses[key].values())})"
        text = f"{bootstrap_mean(accuracies[key]).describe()}; {_points(bootstrap_difference(accuracies[key], synchronous))}"
        return text + (f"; {failed}" if failed else "")

    table = [[tau, *[cell(tau, damping) for damping in STALENESS_DAMPINGS]] for tau in taus]
    return lines + ["One worker of batch 32 whose gradients are applied tau updates late (tau + 1 asynchronous workers taking "
                    "turns, experiments/staleness.yaml); the LR undamped, divided by sqrt(tau + 1) or by tau + 1. Test accuracy "
                    "[95% interval] (n); then minus the synchronous run (tau 0), in points; runs that were not ok named. "
                    "[report](staleness/report.md)", "",
                    markdown_table(["tau", *[STALENESS_LABELS[damping] for damping in STALENESS_DAMPINGS]],
                                   table), "", *_figure("staleness", STALENESS_FIGURE, "test accuracy against the staleness")]


def section_sync_vs_async() -> list[str]:
    lines, record = _opening("sync_vs_async", "synchronous against asynchronous SGD at the same world size", "compare.json",
                             "lbtrain run experiments/sync_vs_async_sync.yaml; lbtrain run experiments/sync_vs_async_async.yaml; "
                             "lbtrain compare results/sync_vs_async_sync results/sync_vs_async_async --output results/sync_vs_async")
    if record is None:
        return lines
    first, second = record["first"]["label"], record["second"]["label"]

    def accuracy(cell: dict[str, Any]) -> str:
        if not cell["ok_runs"]:
            return f"no ok run ({_failed(cell['not_ok'])})"
        failed = _failed(cell["not_ok"])
        return _estimate(cell["test_accuracy"]).describe() + (f"; {failed}" if failed else "")

    table = [[row["world_size"], f"{row['first']['learning_rate']:.4g}", accuracy(row["first"]), accuracy(row["second"]),
              _points(row["test_difference"]), count_text(row["first"]), count_text(row["second"]),
              "-" if row["second"]["staleness"] is None else f"{row['second']['staleness']:.2f}"] for row in record["rows"]]
    works = [f"- {works_sentence(world, record[key]['label'], by_side[key])}" for world, by_side in record["lr_that_works"].items()
             for key in ("first", "second")]
    budget = (f"{record['first']['budget']} in both" if record["first"]["budget"] == record["second"]["budget"]
              else f"{first} {record['first']['budget']}, {second} {record['second']['budget']}")
    per_worker = record["rows"][0]["first"]["per_worker_batch"]
    return lines + [f"The same grid run twice (experiments/sync_vs_async_sync.yaml and its _async twin): {first} and {second} "
                    f"(a chief, W workers and a parameter server on this machine, each worker applying its own batch of "
                    f"{per_worker}). Budget: {budget}. Test accuracy [95% interval] (n); *{second} − {first}* in points; "
                    f"updates until `{record['metric']}` reaches {record['target']:.3f}, [interval] (n), then reached/ok seeds; "
                    f"the {second} gradients' staleness measured on the parameter server (W workers share 2 cores here, so "
                    "they overlap less than on W machines and the staleness stays below W − 1). At one nominal LR an "
                    "asynchronous update applies one worker batch where a synchronous one averages W of them. "
                    "[comparison](sync_vs_async/compare.md)", "",
                    markdown_table(["world", "lr", f"{first}: test acc", f"{second}: test acc", f"{second} − {first}",
                                    f"{first}: updates to target", f"{second}: updates to target", "staleness"], table), "",
                    "The learning rate that works (the best mean validation accuracy among LRs whose every seed was ok):", "",
                    *works, "", *_figure("sync_vs_async", "accuracy_vs_lr.png", "test accuracy against the learning rate, both modes")]


def anchor_async_lr() -> tuple[str, str]:
    """Asynchrony as implicit momentum (Mitliagkas et al. 2016): the best asynchronous LR is
    smaller than synchronous SGD's best at the same world size carried to one worker batch by
    the linear rule (divided by W: a synchronous update averages W worker batches, an
    asynchronous one applies each), so the comparison is per sample, not per nominal LR."""
    record = _json("sync_vs_async", "compare.json")
    if record is None:
        return "not measured yet", "sync_vs_async is not committed"
    first, second = record["first"]["label"], record["second"]["label"]
    pairs = [(int(world), by_side["first"], by_side["second"]) for world, by_side in record["lr_that_works"].items()]
    missing = [f"W={world}" for world, a, b in pairs if a["best"] is None or b["best"] is None]
    if missing:
        return "not measured", "a mode had no LR with every seed ok at " + ", ".join(missing)
    smaller = [b["best"]["learning_rate"] < a["best"]["learning_rate"] / world for world, a, b in pairs]
    # A best at the grid's edge is a bound: the asynchronous best may be smaller, the synchronous larger.
    edges = [f"{label} best at the grid's {edge} LR at W={world}" for world, a, b in pairs
             for label, cell, edge in ((second, b, "smallest"), (first, a, "largest")) if cell["edge"] == edge]
    verdict = ("reproduced" if all(smaller) else "not reproduced" if not any(smaller) else "mixed") + \
        (f" ({'; '.join(edges)})" if edges else "")
    def staleness(cell: dict[str, Any]) -> str:
        return "" if cell.get("staleness") is None else f" (measured staleness {cell['staleness']:.2f})"

    return verdict, "; ".join(f"W={world}: best LR {second} {b['best']['learning_rate']:.4g}{staleness(b['best'])} against {first} "
                              f"{a['best']['learning_rate']:.4g} / {world} = {a['best']['learning_rate'] / world:.4g}"
                              for world, a, b in pairs)


STALENESS_FIGURE = "accuracy_vs_staleness.png"


def staleness_figure() -> Path | None:
    """``staleness/figures/accuracy_vs_staleness.png``: test accuracy against the number of
    asynchronous workers tau + 1 (log2 axis), one line per LR damping with its 95% band, runs that
    were not ok marked at their staleness; None when the study is not committed."""
    from lbtrain.analysis.plots import Line, Mark, plot_panels

    if _json("staleness", "report.json") is None:
        return None
    taus, accuracies, statuses = staleness_cells()
    items: list[Line | Mark] = []
    for damping in STALENESS_DAMPINGS:
        points = [(tau, bootstrap_mean(accuracies[(tau, damping if tau else "none")]))
                  for tau in taus if (tau, damping if tau else "none") in accuracies]
        items.append(Line(STALENESS_LABELS[damping], [tau + 1 for tau, _ in points], [e.mean for _, e in points],
                          [e.low for _, e in points], [e.high for _, e in points]))
        items += [Mark(status, STALENESS_LABELS[damping], tau + 1, count=count) for tau in taus if tau
                  for status, count in statuses.get((tau, damping), {}).items() if status in ("diverged", "collapsed", "failed")]
    return plot_panels({"test accuracy against the staleness": items}, RESULTS / "staleness" / "figures" / STALENESS_FIGURE,
                       xlabel="asynchronous workers (staleness + 1)", ylabel="test accuracy", log2_x=True)


def _staleness_effect(accuracies: dict[tuple[int, str], list[float]], statuses: dict[tuple[int, str], dict[str, int]],
                      tau: int, damping: str) -> str:
    """One cell of the staleness study (``staleness_cells``) as evidence: its difference from
    synchronous SGD, or its failures."""
    if (tau, damping) in accuracies:
        failed = _failed(statuses[(tau, damping)])
        difference = _points(bootstrap_difference(accuracies[(tau, damping)], accuracies.get((0, "none"), [])))
        return f"{difference} points" + (f" ({failed})" if failed else "")
    return f"no run trained ({_failed(statuses[(tau, damping)])})"


def anchor_staleness() -> tuple[str, str]:
    if _json("staleness", "report.json") is None:
        return "not measured yet", "staleness is not committed"
    taus, accuracies, statuses = staleness_cells()
    synchronous = accuracies.get((0, "none"), [])
    stale = [tau for tau in taus if tau > 0 and (tau, "none") in statuses]

    def worse(tau: int) -> bool:
        if (tau, "none") not in accuracies:
            return True  # no undamped run at this staleness trained
        difference = bootstrap_difference(accuracies[(tau, "none")], synchronous)
        return difference.high is not None and difference.high < -MATCH_POINTS

    verdict = "reproduced" if stale and worse(max(stale)) else "not reproduced"
    effects = [f"staleness {tau}: {_staleness_effect(accuracies, statuses, tau, 'none')}" for tau in stale]
    return verdict, "undamped LR against synchronous SGD: " + "; ".join(effects)


def anchor_staleness_damping() -> tuple[str, str]:
    if _json("staleness", "report.json") is None:
        return "not measured yet", "staleness is not committed"
    taus, accuracies, statuses = staleness_cells()
    largest = max(tau for tau in taus if tau > 0)
    undamped, linear = accuracies.get((largest, "none"), []), accuracies.get((largest, "linear"), [])
    if not linear:
        return ("not reproduced",
                f"at staleness {largest} the LR divided by tau + 1: {_staleness_effect(accuracies, statuses, largest, 'linear')}")
    difference = bootstrap_difference(linear, undamped) if undamped else None
    helps = not undamped or (difference.low is not None and difference.low > 0)
    evidence = (f"at staleness {largest}, against synchronous SGD: LR / (tau + 1) {_staleness_effect(accuracies, statuses, largest, 'linear')}; "
                f"undamped {_staleness_effect(accuracies, statuses, largest, 'none')}")
    return ("reproduced" if helps else "not reproduced"), evidence


# First edition -----------------------------------------------------------------------------


def accuracy_table(report: dict[str, Any]) -> str:
    """Global batch x recipe, each cell ``_cell``; the best mean of each batch in bold."""
    rows = report["accuracy"]
    recipes = list(dict.fromkeys(row["recipe"] for row in rows))
    batches = sorted({row["global_batch"] for row in rows})
    table = []
    for batch in batches:
        cells = {row["recipe"]: row for row in rows if row["global_batch"] == batch}
        ok = [row for row in cells.values() if row.get("ok_runs")]
        top = max(ok, key=lambda row: row["test_accuracy"])["recipe"] if ok else None
        table.append([batch, *[(f"**{_cell(cells.get(r))}**" if r == top else _cell(cells.get(r))) for r in recipes]])
    return markdown_table(["global batch", *recipes], table)


def best_per_batch_sentences(study: str, report: dict[str, Any]) -> str:
    """Per batch beyond the smallest: the best recipe (highest mean) and its difference from the
    smallest batch's best recipe, with an interval over seeds (``summary.csv``)."""
    rows = [row for row in report["accuracy"] if row.get("ok_runs")]
    batches = sorted({row["global_batch"] for row in rows})
    best = {batch: max((r for r in rows if r["global_batch"] == batch), key=lambda r: r["test_accuracy"]) for batch in batches}
    seeds = _seed_accuracies(study)
    base = best[batches[0]]
    parts = [f"At batch {batches[0]} the best recipe is {base['recipe']} ({base['test_accuracy']:.3f})"]
    for batch in batches[1:]:
        row = best[batch]
        difference = bootstrap_difference(seeds.get((row["recipe"], batch), []), seeds.get((base["recipe"], batches[0]), []))
        parts.append(f"at {batch} {row['recipe']}, {_points(difference)} points")
    return "; ".join(parts) + " (best recipe at each batch minus the best at the smallest, 95% interval over seeds)."


def section_accuracy_study(study: str, title: str, note: str) -> list[str]:
    lines, report = _opening(study, title, "report.json", f"lbtrain run experiments/{study}.yaml")
    if report is None:
        return lines
    return lines + [f"{note} Budget: {report['budget']}. Test accuracy, mean over ok seeds [95% interval] (n); runs that "
                    f"were not ok named. [report]({study}/report.md)", "", accuracy_table(report), "",
                    best_per_batch_sentences(study, report), "",
                    *_figure(study, "accuracy_vs_batch.png", "test accuracy against the global batch")]


def section_keskar_gap() -> list[str]:
    lines, report = _opening("keskar_gap", "small vs large batch, Adam, with sharpness", "report.json", "lbtrain run experiments/keskar_gap.yaml")
    if report is None:
        return lines
    sharp = {row["recipe"]: row for row in report["sharpness"]}
    table = []
    for row in report["accuracy"]:
        s = sharp.get(row["recipe"])
        table.append([f"{row['recipe']}", _estimate(row["train_accuracy"]).describe(), _cell(row),
                      _estimate(row["gap_accuracy"]).describe(),
                      "-" if s is None else Estimate(s["sharpness"], s["low"], s["high"], s["n"]).describe(1)])
    small, large = report["accuracy"][0], report["accuracy"][-1]
    seeds = _seed_accuracies("keskar_gap")
    difference = bootstrap_difference(seeds.get((large["recipe"], large["global_batch"]), []),
                                      seeds.get((small["recipe"], small["global_batch"]), []))
    ratio = sharp[large["recipe"]]["sharpness"] / sharp[small["recipe"]]["sharpness"] if large["recipe"] in sharp and small["recipe"] in sharp else None
    return lines + [f"Budget: {report['budget']}. [report](keskar_gap/report.md)", "",
                    markdown_table(["", "train acc", "test acc", "train − test", "sharpness (ε = 1e-3)"], table), "",
                    f"The large batch ({large['recipe']}) tests {_points(difference)} points against the small batch "
                    f"({small['recipe']})" + ("" if ratio is None else f" and sits in a minimum {ratio:.1f}x as sharp (means)")
                    + f"; its train − test gap is {large['gap_accuracy']['mean']:.3f} against {small['gap_accuracy']['mean']:.3f}.", "",
                    *_figure("keskar_gap", "sharpness_vs_batch.png", "sharpness against the global batch")]


def section_goyal_sweep() -> list[str]:
    lines, report = _opening("goyal_sweep", "the LR tuned per world size (one sweep per world size)", "report.json", "lbtrain sweep experiments/goyal_sweep.yaml")
    if report is None:
        return lines
    sweep = report["sweep"]
    table = [[row["world_size"], row["global_batch"], row["complete"] + row["pruned"], row["diverged"] + row["collapsed"],
              f"{row['best_learning_rate']:.3g}", f"{row['best_validation_accuracy']:.3f}", f"{row['best_test_accuracy']:.3f}"]
             for row in sweep["rows"]]
    fit = sweep["fit"]
    text = (f"Not enough batch sizes to fit the tuned LR against the batch ({len(sweep['rows'])}; a fit needs at least "
            f"{MIN_FIT_POINTS})." if fit is None or fit.get("alpha") is None or fit["points"] < MIN_FIT_POINTS else
            f"The tuned LR grows as batch^alpha with alpha = {fit['alpha']:.2f} (95% bootstrap interval {fit['alpha_95_low']:.2f} "
            f"to {fit['alpha_95_high']:.2f} over the top {fit['top_k']} ok trials of each of {fit['points']} batch sizes). "
            "One seed per trial: the protocol mode (goyal_bn) re-runs each arm's best with 3 seeds.")
    return lines + ["[report](goyal_sweep/report.md)", "",
                    markdown_table(["world", "global batch", "trials", "diverged or collapsed", "best LR", "best validation",
                                    "its test accuracy (one seed)"], table), "", text, "",
                    *_figure("goyal_sweep", "sweep_lr_vs_batch.png", "tuned LR against the global batch")]


def section_critical_batch() -> list[str]:
    lines, report = _opening("critical_batch", "measured vs predicted critical batch", "report.json", "lbtrain run experiments/critical_batch.yaml")
    if report is None:
        return lines
    fit = report["critical_batch"]
    if fit.get("b_crit") is None:
        return lines + [f"Not enough batch sizes reach the target to fit ({fit['batches']} of the {fit['min_batches']} needed).", ""]
    table = markdown_table(["global batch", *[str(r["global_batch"]) for r in fit["residuals"]]],
                           [["fewest steps to target (best recipe)", *[f"{r['steps']:.0f}" for r in fit["residuals"]]],
                            ["fit S_min (1 + B_crit / B)", *[f"{r['fitted_steps']:.0f}" for r in fit["residuals"]]]])
    noise = ("" if fit.get("noise_scale") is None else
             f" The gradient noise scale logged when each run reached the target, median B_simple = {fit['noise_scale']:.0f}, is "
             f"{fit['noise_scale_ratio']:.2f}x the measured B_crit (results/advisor_validation for why it runs low).")
    return lines + [f"Steps to {report['metric']} {report['target']}. [report](critical_batch/report.md)", "", table, "",
                    f"Measured critical batch B_crit = {fit['b_crit']:.0f}, S_min = {fit['s_min']:.1f} steps, fitted on "
                    f"{fit['batches']} batch sizes (relative rms error {100 * fit['relative_rms']:.1f}%)." + noise, "",
                    *_figure("critical_batch", "steps_to_target.png", "steps to the target against the global batch")]


# Published anchors ------------------------------------------------------------------------


def _runs(study: str) -> list[dict[str, Any]]:
    path = RESULTS / study / "summary.csv"
    return read_summary(path) if path.is_file() else []


def _ok_accuracies(runs: list[dict[str, Any]], label: str, world_size: int) -> list[float]:
    return [float(r["test_accuracy"]) for r in runs
            if r["label"] == label and int(r["world_size"]) == world_size and r["status"] == "ok" and r["test_accuracy"] is not None]


def _matches(estimate: Estimate) -> bool:
    """Within ``MATCH_POINTS`` of no difference: the interval reaches above ``-MATCH_POINTS``."""
    return estimate.mean is not None and (estimate.high if estimate.high is not None else estimate.mean) >= -MATCH_POINTS


def anchor_goyal_linear_warmup() -> tuple[str, str]:
    protocol = _json("goyal_bn", "protocol.json")
    if protocol is None:
        return "not measured yet", "goyal_bn is not committed"
    rows = sorted((r for r in protocol["rows"] if r["recipe"] == "momentum+warmup" and r["rule_name"] == "linear"),
                  key=lambda r: r["world_size"])
    held = [r for r in rows if _matches(_estimate(r["rule_minus_reference"]))]
    evidence = "; ".join(f"batch {r['global_batch']}: {_points(r['rule_minus_reference'])} points" for r in rows)
    if len(held) == len(rows):
        return "reproduced", f"linear + gradual warmup (tuned at batch 16) against the small batch: {evidence}"
    if held and held == rows[:len(held)]:
        return (f"reproduced up to batch {held[-1]['global_batch']}",
                f"linear + gradual warmup against the small batch: {evidence}")
    return "not reproduced", f"linear + gradual warmup against the small batch: {evidence}"


# Goyal et al. 2017, Table 1: ResNet-50 on ImageNet, top-1 error (%) at kn = 256 and at kn = 8k = 32x.
GOYAL_2017_BASE_ERROR = 23.60
GOYAL_2017_ERROR_AT_32X = {"linear + gradual warmup": 23.74, "linear, no warmup": 24.84}
GOYAL_FIGURE = "goyal_vs_paper.png"


def goyal_figure() -> Path | None:
    """``goyal_bn/figures/goyal_vs_paper.png``: test accuracy at k times the base batch minus the
    base batch, in points, against k (log2): goyal_bn's linear rule with and without gradual
    warmup (95% bands; runs that were not ok marked at their k) and its best arm re-run at equal
    steps, beside Goyal et al. 2017's two ImageNet points at 32x; None when goyal_bn is not
    committed."""
    from lbtrain.analysis.plots import plot_panels

    protocol = _json("goyal_bn", "protocol.json")
    if protocol is None:
        return None
    return plot_panels({"large batch minus base batch": goyal_figure_items(protocol, _runs("goyal_bn"))},
                       RESULTS / "goyal_bn" / "figures" / GOYAL_FIGURE,
                       xlabel="batch / base batch", ylabel="test accuracy change (points)", log2_x=True)


def goyal_figure_items(protocol: dict[str, Any], runs: list[dict[str, Any]]) -> list[Any]:
    """The lines and marks of ``goyal_figure`` from goyal_bn's protocol.json and summary rows."""
    from lbtrain.analysis.plots import Line, Mark

    items: list[Line | Mark] = [Line("matches the base batch", [1, 64], [0.0, 0.0], reference=True)]
    for recipe, label in (("momentum+warmup", "linear + gradual warmup"), ("momentum", "linear, no warmup")):
        rows = sorted((r for r in protocol["rows"] if r["recipe"] == recipe and r["rule_name"] in ("reference", "linear")),
                      key=lambda r: r["world_size"])
        points = [(r["world_size"], Estimate(0.0, 0.0, 0.0, r["tuned"]["n"]) if r["rule_minus_reference"] is None
                   else _estimate(r["rule_minus_reference"])) for r in rows]
        measured = [(size, e) for size, e in points if e.mean is not None]
        items += [] if not measured else [Line(f"here: {label}", [size for size, _ in measured], [100 * e.mean for _, e in measured],
                          [None if e.low is None else 100 * e.low for _, e in measured],
                          [None if e.high is None else 100 * e.high for _, e in measured])]
        items += [Mark(status, f"here: {label}", size, count=count)
                  for (size, status), count in _status_counts(runs, (f"{recipe} linear rule", f"{recipe} rule")).items() if status != "ok"]
        items.append(Line(f"Goyal et al. 2017: {label}", [32], [GOYAL_2017_BASE_ERROR - GOYAL_2017_ERROR_AT_32X[label]]))
    longer = sorted(protocol.get("equal_steps", []), key=lambda row: row["world_size"])
    if longer:
        estimates = [(row["world_size"], _estimate(row["equal_steps_minus_reference"])) for row in longer]
        estimates = [(size, e) for size, e in estimates if e.mean is not None]
        items.append(Line("here: best arm, equal steps", [size for size, _ in estimates], [100 * e.mean for _, e in estimates],
                          [None if e.low is None else 100 * e.low for _, e in estimates],
                          [None if e.high is None else 100 * e.high for _, e in estimates]))
    return items


def anchor_goyal_no_warmup() -> tuple[str, str]:
    protocol = _json("goyal_bn", "protocol.json")
    if protocol is None:
        return "not measured yet", "goyal_bn is not committed"
    runs, largest = _runs("goyal_bn"), max(r["world_size"] for r in protocol["rows"])
    difference = bootstrap_difference(_ok_accuracies(runs, "momentum linear rule", largest),
                                      _ok_accuracies(runs, "momentum+warmup linear rule", largest))
    batch = next(r["global_batch"] for r in protocol["rows"] if r["world_size"] == largest)
    verdict = ("reproduced" if difference.high is not None and difference.high < 0
               else "not reproduced" if difference.mean is not None else "not measurable (no ok seeds)")
    return verdict, f"linear scaling without minus with gradual warmup at batch {batch}: {_points(difference)} points"


def _keskar_judgement(small: dict[str, Any], large: dict[str, Any], sharp: dict[str, dict[str, Any]],
                      difference: Estimate) -> tuple[str, str]:
    """Keskar et al.'s claim judged on one small and one large batch (``report.json`` accuracy
    rows) at equal epochs: sharper (the large batch's sharpness interval above the small
    batch's) and worse (the test difference's interval below 0)."""
    sharper = sharp[large["recipe"]]["low"] > sharp[small["recipe"]]["high"]
    worse = difference.high is not None and difference.high < 0
    smaller_gap = large["gap_accuracy"]["high"] < small["gap_accuracy"]["low"]
    evidence = (f"batch {large['global_batch']} against {small['global_batch']}: test {_points(difference)} points, sharpness "
                f"{sharp[large['recipe']]['sharpness']:.0f} against {sharp[small['recipe']]['sharpness']:.0f}")
    if sharper and worse and smaller_gap:
        return ("reproduced with a caveat", evidence + f"; but the large batch's train − test gap is smaller "
                f"({large['gap_accuracy']['mean']:.3f} against {small['gap_accuracy']['mean']:.3f}): it under-trains in the same epochs")
    if worse and not sharper:
        return "not reproduced (worse, not sharper)", evidence
    return ("reproduced" if sharper and worse else "not reproduced"), evidence


def anchor_keskar() -> tuple[str, str]:
    """Judged on each edition committed: keskar_v2 (small batch 32 against 256 at equal epochs)
    and the first edition's keskar_gap (its smallest against its largest batch)."""
    judgements = []
    v2 = _json("keskar_v2", "report.json")
    if v2 is not None:
        rows = {row["recipe"]: row for row in v2["accuracy"]}
        differences = keskar_v2_differences()
        judgements.append(("second edition",) + _keskar_judgement(
            rows["SB"], rows["LB equal epochs"], {row["recipe"]: row for row in v2["sharpness"]}, differences["LB equal epochs"]))
    v1 = _json("keskar_gap", "report.json")
    if v1 is not None:
        small, large = v1["accuracy"][0], v1["accuracy"][-1]
        seeds = _seed_accuracies("keskar_gap")
        difference = bootstrap_difference(seeds.get((large["recipe"], large["global_batch"]), []),
                                          seeds.get((small["recipe"], small["global_batch"]), []))
        judgements.append(("first edition",) + _keskar_judgement(small, large, {row["recipe"]: row for row in v1["sharpness"]},
                                                                  difference))
    if not judgements:
        return "not measured yet", "neither keskar_v2 nor keskar_gap is committed"
    if len(judgements) == 1:
        return judgements[0][1], judgements[0][2]
    return ("; ".join(f"{verdict} ({edition})" for edition, verdict, _ in judgements),
            "; ".join(f"{edition}, {evidence}" for edition, _, evidence in judgements))


def _steps_study() -> tuple[str, dict[str, Any] | None]:
    """The steps-to-target study to judge by: the second edition where committed, else the first."""
    for study in ("steps_to_target", "critical_batch"):
        report = _json(study, "report.json")
        if report is not None:
            return study, report
    return "steps_to_target", None


def anchor_shallue() -> tuple[str, str]:
    study, report = _steps_study()
    if report is None:
        return "not measured yet", f"{study} is not committed"
    fit = report["critical_batch"]
    if fit.get("b_crit") is None or fit["batches"] < MIN_FIT_POINTS:
        return "not measurable", f"{fit['batches']} batch sizes reach the target (a fit needs {MIN_FIT_POINTS})"
    follows = fit["relative_rms"] <= FIT_RMS_TOLERANCE
    return ("reproduced" if follows else "not reproduced"), (
        f"{study}: S(B) = S_min (1 + B_crit / B) fitted over {fit['batches']} batch sizes with relative rms error "
        f"{100 * fit['relative_rms']:.1f}% ({'within' if follows else 'above'} {100 * FIT_RMS_TOLERANCE:.0f}%): "
        f"near-perfect scaling below B_crit = {fit['b_crit']:.0f}, diminishing returns above")


def anchor_mccandlish() -> tuple[str, str]:
    study, report = _steps_study()
    if report is None or report["critical_batch"].get("noise_scale_ratio") is None:
        return "not measured yet", f"{study} with a noise scale is not committed"
    ratio = report["critical_batch"]["noise_scale_ratio"]
    verdict = "reproduced" if 0.5 <= ratio <= 2 else "not reproduced"
    return verdict, (f"{study}: B_simple, read when each run reached the target, is {ratio:.2f}x the measured B_crit (B_simple "
                     "equals the noise scale B_noise only when the Hessian is a multiple of the identity)")


def _largest_rows(recipe: str) -> list[dict[str, Any]]:
    """goyal_bn's protocol rows of ``recipe`` at its largest world size (empty when absent)."""
    protocol = _json("goyal_bn", "protocol.json")
    if protocol is None:
        return []
    largest = max(r["world_size"] for r in protocol["rows"])
    return [r for r in protocol["rows"] if r["recipe"] == recipe and r["world_size"] == largest]


def anchor_lars() -> tuple[str, str]:
    rows = _largest_rows("lars+warmup")
    if not rows:
        return "not measured yet", "goyal_bn is not committed"
    row = rows[0]
    verdict = "reproduced" if _matches(_estimate(row["rule_minus_reference"])) else "not reproduced"
    effect = (f"{_points(row['rule_minus_reference'])} points" if row["rule"]["n"]
              else f"no seed of {row['rule_runs']} ended ok")
    return verdict, f"LARS + warmup carried by the linear rule to batch {row['global_batch']}: {effect} against LARS tuned at world size 1"


def anchor_nado() -> tuple[str, str]:
    nesterov, lars, lamb = (_largest_rows(recipe) for recipe in ("nesterov+warmup", "lars+warmup", "lamb+warmup"))
    if not (nesterov and lars and lamb):
        return "not measured yet", "goyal_bn is not committed"
    runs, size, batch = _runs("goyal_bn"), nesterov[0]["world_size"], nesterov[0]["global_batch"]
    tuned = _ok_accuracies(runs, "nesterov+warmup tuned", size)
    differences = {name: bootstrap_difference(tuned, _ok_accuracies(runs, f"{name} tuned", size)) for name in ("lars+warmup", "lamb+warmup")}
    verdict = "reproduced" if all(_matches(d) for d in differences.values()) else "not reproduced"
    return verdict, f"tuned Nesterov momentum minus tuned LARS / LAMB at batch {batch} (5 trials each): " + ", ".join(
        f"{name.split('+')[0].upper()} {_points(d)} points" for name, d in differences.items())


def anchor_malladi() -> tuple[str, str]:
    protocol = _json("adam_scaling", "protocol.json")
    if protocol is None:
        return "not measured yet", "adam_scaling is not committed"
    fit = protocol["lr_fits"]["adam"]
    if fit["alpha"] is None:
        return "not measurable", f"Adam's tuned LR: {fit['note']}"
    low, high = fit["alpha_95_low"], fit["alpha_95_high"]
    interval = "" if low is None else f" (95% interval {low:.2f} to {high:.2f})"
    if low is None:
        verdict = "not measurable"
    elif low <= 0.5 <= high and not low <= 1 <= high:
        verdict = "reproduced"
    elif low <= 0.5 <= high:
        verdict = "reproduced with a caveat"
    else:
        verdict = "not reproduced"
    caveat = " (the interval also holds the linear rule's 1)" if verdict == "reproduced with a caveat" else ""
    return verdict, f"Adam's tuned LR grows as batch^{fit['alpha']:.2f}{interval} over {fit['points']} batch sizes{caveat}"


def anchor_hoffer() -> tuple[str, str]:
    report = _json("keskar_v2", "report.json")
    if report is None:
        return "not measured yet", "keskar_v2 is not committed"
    differences = keskar_v2_differences()
    hoffer, epochs = differences.get("Hoffer"), differences.get("LB equal epochs")
    if hoffer is None or epochs is None:
        return "not measurable", "keskar_v2 lacks an ok Hoffer or equal-epochs arm"
    verdict = "reproduced" if _matches(hoffer) and not _matches(epochs) else (
        "no gap to close" if _matches(epochs) else "not reproduced")
    evidence = (f"keskar_v2, batch 256 against 32: large batch at equal epochs {_points(epochs)} points, with ghost batch norm "
                f"and equal steps {_points(hoffer)} points")
    longer = sorted((_json("goyal_bn", "protocol.json") or {}).get("equal_steps", []), key=lambda row: row["world_size"])
    if not longer:
        return verdict, evidence
    held = [row for row in longer if _matches(_estimate(row["equal_steps_minus_reference"]))]
    if verdict == "reproduced" and len(held) < len(longer):
        verdict = (f"reproduced up to {held[-1]['world_size']}x the small batch" if held and held == longer[:len(held)]
                   else "reproduced with a caveat")
    return verdict, evidence + "; goyal_bn's best arm (ghost batch norm) for world size 1's updates against its recipe at batch 16: " + "; ".join(
        f"batch {row['global_batch']}: {_points(row['equal_steps_minus_reference'])} points "
        f"({_points(row['gain_of_steps'])} over equal epochs)" for row in longer)


ANCHORS = [
    ("Goyal et al. 2017", "linear scaling with gradual warmup matches the small batch (up to 8k on ImageNet)", anchor_goyal_linear_warmup),
    ("Goyal et al. 2017", "without warmup, linear scaling loses accuracy at the large batch", anchor_goyal_no_warmup),
    ("Keskar et al. 2017", "large batches reach sharper minima and test worse", anchor_keskar),
    ("Shallue et al. 2018", "steps to a target fall perfectly with the batch, then with diminishing returns", anchor_shallue),
    ("McCandlish et al. 2018", "the critical batch is predicted by the gradient noise scale", anchor_mccandlish),
    ("Hoffer et al. 2017", "training longer with ghost batch norm closes the large-batch gap", anchor_hoffer),
    ("You et al. 2017", "LARS with warmup holds at large batches", anchor_lars),
    ("Nado et al. 2021", "tuned Nesterov momentum matches LARS and LAMB at large batches", anchor_nado),
    ("Malladi et al. 2022", "Adam's LR should grow as the square root of the batch", anchor_malladi),
    ("Lian et al. 2015; Dutta et al. 2018", "asynchronous SGD degrades as the staleness grows", anchor_staleness),
    ("Zhang et al. 2016", "dividing the LR by the staleness keeps asynchronous SGD training", anchor_staleness_damping),
    ("Mitliagkas et al. 2016", "asynchrony acts as implicit momentum: per sample, the best asynchronous LR is smaller than "
     "synchronous SGD's", anchor_async_lr),
]


def section_anchors() -> list[str]:
    rows = []
    for paper, claim, judge in ANCHORS:
        verdict, evidence = judge()
        rows.append([paper, claim, f"**{verdict}**", evidence])
    return ["## Published findings: reproduced or not", "",
            "Each verdict is computed from the data below (scripts/render_results_readme.py says how); intervals as everywhere "
            "on this page. \"Matches\" means the interval of the difference reaches within 1 point of none.", "",
            markdown_table(["paper", "claim", "here", "evidence"], rows), "",
            *_figure("goyal_bn", GOYAL_FIGURE, "goyal_bn's linear rule with and without gradual warmup beside Goyal et al. 2017's "
                     f"ImageNet numbers (Table 1: top-1 error {GOYAL_2017_BASE_ERROR:.2f} at batch 256, at 8k "
                     + ", ".join(f"{error:.2f} with {label.split(', ')[-1].replace('linear + ', '')}"
                                 for label, error in GOYAL_2017_ERROR_AT_32X.items()) + ")")]


SECTIONS: list[Callable[[], list[str]]] = [
    section_anchors,
    section_goyal_bn,
    section_warmup_ablation,
    section_keskar_v2,
    section_adam_scaling,
    section_steps_to_target,
    section_staleness,
    section_sync_vs_async,
    lambda: section_accuracy_study("goyal_scaling", "LR rules x world sizes (mlp 512-512, no batch norm)",
                                   "Fashion-MNIST mlp, momentum SGD, fixed base LR, decay clocked after warmup (first edition)."),
    lambda: section_accuracy_study("goyal_scaling_cnn", "the same on a conv net",
                                   "Fashion-MNIST cnn without batch norm, fixed base LR (first edition)."),
    section_keskar_gap,
    section_goyal_sweep,
    section_critical_batch,
]


def render() -> str:
    lines = [
        "# Results of the canonical studies",
        "",
        "Rendered by `python scripts/render_results_readme.py --write` from each study's committed `report.json`, "
        "`protocol.json` and `summary.csv` (a test keeps this page equal to what it renders): no number here is typed by "
        "hand. Simulated worlds on 2 CPU cores, real Fashion-MNIST (MNIST-1D where said). Intervals are 95% bootstrap "
        "intervals over seeds; n counts the seeds whose run was judged ok, and runs that diverged or collapsed are named, "
        "never averaged in. Second-edition studies (tuned with equal budgets, decay clocked from step 0, precise batch-norm "
        "statistics) come first; the first edition follows.",
        "",
    ]
    for section in SECTIONS:
        lines += section()
    return "\n".join(lines).rstrip() + "\n"


QUICKSTART_SNAPSHOT = RESULTS / "quickstart_reference" / "summary.csv"
QUICKSTART_BEGIN = "<!-- quickstart table: rendered by scripts/render_results_readme.py from results/quickstart_reference -->"
QUICKSTART_END = "<!-- end of the quickstart table -->"


def render_quickstart() -> str:
    """The README's quickstart table and the runs that were not ok, from ``make run``'s summary
    as committed in ``results/quickstart_reference`` (``results/quickstart`` itself is each
    user's own run). No recipe is called best: one seed, and the quickstart has no validation
    split to choose on."""
    rows = read_summary(QUICKSTART_SNAPSHOT, required=("label", "status", "world_size", "global_batch", "test_accuracy"))
    labels = list(dict.fromkeys(row["label"] for row in rows))
    worlds = sorted({row["world_size"] for row in rows})
    cell = {(row["label"], row["world_size"]): row for row in rows}
    batch = {row["world_size"]: row["global_batch"] for row in rows}

    def accuracy(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        return f"{row['test_accuracy']:.3f}" if row["status"] == "ok" else str(row["status"])

    table = markdown_table([f"world x {rows[0]['per_worker_batch']}", "global batch", *labels],
                           [[world, batch[world], *[accuracy(cell.get((label, world))) for label in labels]] for world in worlds])
    failed = [f"{row['label']} {row['status']} at {row['world_size']} workers (LR {row['learning_rate']:.4g}: {row['reason']})"
              for row in rows if row["status"] != "ok"]
    return "\n".join([
        QUICKSTART_BEGIN, table, "",
        f"(test accuracy after {rows[0]['budget']}, one seed: a first look, not a comparison; `lbtrain sweep` with a `protocol` "
        "section makes the tuned, multi-seed one.) " + (f"Not ok: {'; '.join(failed)}." if failed else "Every run was ok."),
        QUICKSTART_END])


def readme_with_quickstart(readme: str) -> str:
    """``readme`` with the text between the quickstart markers replaced by ``render_quickstart()``."""
    start, end = readme.index(QUICKSTART_BEGIN), readme.index(QUICKSTART_END) + len(QUICKSTART_END)
    return readme[:start] + render_quickstart() + readme[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write results/README.md")
    args = parser.parse_args()
    text = render()
    if args.write:
        from lbtrain.files import write_atomic

        staleness_figure()
        goyal_figure()
        write_atomic(RESULTS / "README.md", render().encode())
        readme = REPO_ROOT / "README.md"
        write_atomic(readme, readme_with_quickstart(readme.read_text()).encode())
        print(f"wrote {RESULTS / 'README.md'} and the quickstart table in {readme}")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
