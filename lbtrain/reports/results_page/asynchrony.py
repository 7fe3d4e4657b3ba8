"""Asynchronous SGD: staleness (simulated exactly, accuracy against the staleness) and
sync_vs_async (both modes at the same world size), and the anchors judged on them: Lian et al.
2015 and Dutta et al. 2018 (asynchrony degrades with the staleness), Zhang et al. 2016 (damping the
LR by the staleness) and Mitliagkas et al. 2016 (asynchrony as implicit momentum)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lbtrain.reports.comparison import count_text, works_sentence
from lbtrain.reports.decisions import BETTER
from lbtrain.reports.results_page.common import (
    as_estimate,
    claims_at,
    failed_text,
    figure_lines,
    judge,
    opening,
    points_text,
    study_json,
    study_runs,
)
from lbtrain.reports.statistics import difference_interval, mean_interval
from lbtrain.reports.tables import markdown_table
from lbtrain.results import COMPARE_JSON, FIGURE_ACCURACY_VS_LR, REPORT_JSON

STALENESS_DAMPINGS = ("none", "sqrt", "linear")
STALENESS_LABELS = {"none": "LR undamped", "sqrt": "LR / sqrt(tau + 1)", "linear": "LR / (tau + 1)"}
STALENESS_FIGURE = "accuracy_vs_staleness.png"


def staleness_cells(results: Path) -> tuple[list[int], dict[tuple[int, str], list[float]], dict[tuple[int, str], dict[str, int]]]:
    """The staleness study's taus, and per (tau, damping) the ok seeds' test accuracies and the
    count of runs by status (labels ``tau0`` and ``tau<t> <damping>``)."""
    accuracies: dict[tuple[int, str], list[float]] = {}
    statuses: dict[tuple[int, str], dict[str, int]] = {}
    for row in study_runs(results, "staleness"):
        tau_text, _, damping = row["label"].partition(" ")
        key = (int(tau_text[3:]), damping or "none")
        statuses.setdefault(key, {})
        statuses[key][row["status"]] = statuses[key].get(row["status"], 0) + 1
        if row["status"] == "ok" and row["test_accuracy"] is not None:
            accuracies.setdefault(key, []).append(float(row["test_accuracy"]))
    return sorted({tau for tau, _ in statuses}), accuracies, statuses


def section_staleness(results: Path) -> list[str]:
    lines, report = opening(results, "staleness", "asynchronous SGD simulated exactly: accuracy against the staleness", REPORT_JSON,
                             "lbtrain run experiments/staleness.yaml")
    if report is None:
        return lines
    taus, accuracies, statuses = staleness_cells(results)
    synchronous = accuracies.get((0, "none"), [])

    def cell(tau: int, damping: str) -> str:
        key = (tau, damping)
        if key not in statuses:
            return ""
        failed = failed_text(statuses[key])
        if key not in accuracies:
            return f"{failed} (of {sum(statuses[key].values())})"
        text = f"{mean_interval(accuracies[key]).describe()}; {points_text(difference_interval(accuracies[key], synchronous))}"
        return text + (f"; {failed}" if failed else "")

    table = [[tau, *[cell(tau, damping) for damping in STALENESS_DAMPINGS]] for tau in taus]
    return lines + ["One worker of batch 32 whose gradients are applied tau updates late (tau + 1 asynchronous workers taking "
                    "turns, experiments/staleness.yaml); the LR undamped, divided by sqrt(tau + 1) or by tau + 1. Test accuracy "
                    "[95% interval] (n, df); then minus the synchronous run (tau 0), in points; runs that were not ok named. "
                    "[report](staleness/report.md)", "",
                    markdown_table(["tau", *[STALENESS_LABELS[damping] for damping in STALENESS_DAMPINGS]],
                                   table), "", *figure_lines(results, "staleness", STALENESS_FIGURE, "test accuracy against the staleness")]


def staleness_figure(results: Path) -> Path | None:
    """``staleness/figures/accuracy_vs_staleness.png``: test accuracy against the number of
    asynchronous workers tau + 1 (log2 axis), one line per LR damping with its 95% band, runs that
    were not ok marked at their staleness; None when the study is not committed."""
    from lbtrain.reports.plots import Line, Mark, plot_panels

    if study_json(results, "staleness", REPORT_JSON) is None:
        return None
    taus, accuracies, statuses = staleness_cells(results)
    items: list[Line | Mark] = []
    for damping in STALENESS_DAMPINGS:
        points = [(tau, mean_interval(accuracies[(tau, damping if tau else "none")]))
                  for tau in taus if (tau, damping if tau else "none") in accuracies]
        items.append(Line(STALENESS_LABELS[damping], [tau + 1 for tau, _ in points], [e.mean for _, e in points],
                          [e.low for _, e in points], [e.high for _, e in points]))
        items += [Mark(status, STALENESS_LABELS[damping], tau + 1, count=count) for tau in taus if tau
                  for status, count in statuses.get((tau, damping), {}).items() if status in ("diverged", "collapsed", "failed")]
    return plot_panels({"test accuracy against the staleness": items}, results / "staleness" / "figures" / STALENESS_FIGURE,
                       xlabel="asynchronous workers (staleness + 1)", ylabel="test accuracy", log2_x=True)


def _staleness_effect(accuracies: dict[tuple[int, str], list[float]], statuses: dict[tuple[int, str], dict[str, int]],
                      tau: int, damping: str) -> str:
    """One cell of the staleness study (``staleness_cells``) as evidence: its difference from
    synchronous SGD and the claim on it, or its failures."""
    if (tau, damping) in accuracies:
        failed = failed_text(statuses[(tau, damping)])
        difference = difference_interval(accuracies[(tau, damping)], accuracies.get((0, "none"), []))
        return f"{points_text(difference)} points, {judge(difference)}" + (f" ({failed})" if failed else "")
    return f"no run trained ({failed_text(statuses[(tau, damping)])})"


def anchor_staleness(results: Path) -> tuple[str, str]:
    if study_json(results, "staleness", REPORT_JSON) is None:
        return "not measured yet", "staleness is not committed"
    taus, accuracies, statuses = staleness_cells(results)
    synchronous = accuracies.get((0, "none"), [])
    stale = [tau for tau in taus if tau > 0 and (tau, "none") in statuses]

    claims = [judge(difference_interval(accuracies.get((tau, "none"), []), synchronous)) for tau in stale]
    effects = [f"staleness {tau}: {_staleness_effect(accuracies, statuses, tau, 'none')}" for tau in stale]
    return (claims_at(claims, [f"at staleness {tau}" for tau in stale]) if stale else "not measured yet",
            "undamped LR minus synchronous SGD: " + "; ".join(effects))


def anchor_staleness_damping(results: Path) -> tuple[str, str]:
    if study_json(results, "staleness", REPORT_JSON) is None:
        return "not measured yet", "staleness is not committed"
    taus, accuracies, statuses = staleness_cells(results)
    largest = max(tau for tau in taus if tau > 0)
    undamped, linear = accuracies.get((largest, "none"), []), accuracies.get((largest, "linear"), [])
    if not linear:
        return ("not reproduced",
                f"at staleness {largest} the LR divided by tau + 1: {_staleness_effect(accuracies, statuses, largest, 'linear')}")
    # Without an undamped run that trained, damping kept training where none did: a claim on
    # statuses (run verdicts), not on an interval.
    helps = not undamped or judge(difference_interval(linear, undamped)) == BETTER
    evidence = (f"at staleness {largest}, against synchronous SGD: LR / (tau + 1) {_staleness_effect(accuracies, statuses, largest, 'linear')}; "
                f"undamped {_staleness_effect(accuracies, statuses, largest, 'none')}")
    return ("reproduced" if helps else "not reproduced"), evidence


def section_sync_vs_async(results: Path) -> list[str]:
    lines, record = opening(results, "sync_vs_async", "synchronous against asynchronous SGD at the same world size", COMPARE_JSON,
                             "lbtrain run experiments/sync_vs_async_sync.yaml; lbtrain run experiments/sync_vs_async_async.yaml; "
                             "lbtrain compare results/sync_vs_async_sync results/sync_vs_async_async --output results/sync_vs_async")
    if record is None:
        return lines
    first, second = record["first"]["label"], record["second"]["label"]

    def accuracy(cell: dict[str, Any]) -> str:
        if not cell["ok_runs"]:
            return f"no ok run ({failed_text(cell['not_ok'])})"
        failed = failed_text(cell["not_ok"])
        return as_estimate(cell["test_accuracy"]).describe() + (f"; {failed}" if failed else "")

    table = [[row["world_size"], f"{row['first']['learning_rate']:.4g}", accuracy(row["first"]), accuracy(row["second"]),
              points_text(row["test_difference"]), count_text(row["first"]), count_text(row["second"]),
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
                    *works, "", *figure_lines(results, "sync_vs_async", FIGURE_ACCURACY_VS_LR, "test accuracy against the learning rate, both modes")]


def anchor_async_lr(results: Path) -> tuple[str, str]:
    """Asynchrony as implicit momentum (Mitliagkas et al. 2016): the best asynchronous LR is
    smaller than synchronous SGD's best at the same world size carried to one worker batch by
    the linear rule (divided by W: a synchronous update averages W worker batches, an
    asynchronous one applies each), so the comparison is per sample, not per nominal LR."""
    record = study_json(results, "sync_vs_async", COMPARE_JSON)
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
