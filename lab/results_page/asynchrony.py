"""Asynchronous SGD: staleness (simulated exactly, accuracy against the staleness) and
sync_vs_async (both modes at the same world size), and the anchors judged on them: Lian et al.
2015 and Dutta et al. 2018 (asynchrony degrades with the staleness), Zhang et al. 2016 (damping the
LR by the staleness) and Mitliagkas et al. 2016 (asynchrony as implicit momentum)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.results_page.common import (
    as_estimate,
    claims_at,
    failed_text,
    figure_lines,
    judge,
    judged_points,
    opening,
    points_text,
    shown,
    study_json,
    study_runs,
)
from lbtrain.reports.comparison import count_text, works_sentence
from lbtrain.reports.decisions import BETTER, INCONCLUSIVE, MATCHES, WORSE, trained_share_claim
from lbtrain.reports.statistics import difference_interval, mean_interval
from lbtrain.reports.tables import markdown_table
from lbtrain.results import COMPARE_JSON, FIGURE_ACCURACY_VS_LR, REPORT_JSON
from lbtrain.rounding import is_close
from lbtrain.verdict import is_ok

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
        if is_ok(row["status"]) and row["test_accuracy"] is not None:
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
        against = "the reference" if key == (0, "none") else judged_points(difference_interval(accuracies[key], synchronous))
        text = f"{shown(mean_interval(accuracies[key]))}; {against}"
        return text + (f"; {failed}" if failed else "")

    table = [[tau, *[cell(tau, damping) for damping in STALENESS_DAMPINGS]] for tau in taus]
    return lines + ["One worker of batch 32 whose gradients are applied tau updates late (tau + 1 asynchronous workers taking "
                    "turns, experiments/staleness.yaml); the LR undamped, divided by sqrt(tau + 1) or by tau + 1. Test accuracy "
                    "[95% interval] (n, df); then minus the one reference, the synchronous run (tau 0), in points, with the claim on it; runs "
                    "that were not ok named. "
                    "[report](staleness/report.md)", "",
                    markdown_table(["tau", *[STALENESS_LABELS[damping] for damping in STALENESS_DAMPINGS]],
                                   table), "", *figure_lines(results, "staleness", STALENESS_FIGURE, "test accuracy against the staleness")]


def staleness_figure(results: Path) -> Path | None:
    """``staleness/figures/accuracy_vs_staleness.png``: test accuracy against the number of
    asynchronous workers tau + 1 (log2 axis), one line per LR damping with its 95% band, runs that
    were not ok marked at their staleness, a point on fewer ok seeds than its line's others open
    and labelled with its n (``staleness_figure_items``); None when the study is not committed."""
    from lbtrain.reports.plots import plot_panels

    if study_json(results, "staleness", REPORT_JSON) is None:
        return None
    return plot_panels({"test accuracy against the staleness": staleness_figure_items(results)},
                       results / "staleness" / "figures" / STALENESS_FIGURE,
                       xlabel="asynchronous workers (staleness + 1)", ylabel="test accuracy", log2_x=True)


def staleness_figure_items(results: Path) -> list[Any]:
    """The lines and marks of ``staleness_figure``: per LR damping, the mean over ok seeds at each
    tau + 1 with its interval and its seeds (``Line.n``), and the runs that were not ok as marks."""
    from lbtrain.reports.plots import Line, Mark

    taus, accuracies, statuses = staleness_cells(results)
    items: list[Line | Mark] = []
    for damping in STALENESS_DAMPINGS:
        points = [(tau, mean_interval(accuracies[(tau, damping if tau else "none")]))
                  for tau in taus if (tau, damping if tau else "none") in accuracies]
        items.append(Line(STALENESS_LABELS[damping], [tau + 1 for tau, _ in points], [e.mean for _, e in points],
                          [e.low for _, e in points], [e.high for _, e in points], n=[e.n for _, e in points]))
        items += [Mark(status, STALENESS_LABELS[damping], tau + 1, count=count) for tau in taus if tau
                  for status, count in statuses.get((tau, damping), {}).items() if status in ("diverged", "collapsed", "failed")]
    return items


def _ok_and_total(statuses: dict[tuple[int, str], dict[str, int]], key: tuple[int, str]) -> tuple[int, int]:
    counts = statuses.get(key, {})
    return counts.get("ok", 0), sum(counts.values())


def staleness_claim(accuracies: dict[tuple[int, str], list[float]], statuses: dict[tuple[int, str], dict[str, int]],
                    cell: tuple[int, str], reference: tuple[int, str]) -> tuple[str, str]:
    """One cell of the staleness study (``staleness_cells``) against another: the claim on the
    Welch difference of their ok seeds' test accuracies with its text, or where either has fewer
    than two ok seeds (no interval), the claim on how many of their runs ended ok
    (``trained_share_claim``)."""
    mine, theirs = accuracies.get(cell, []), accuracies.get(reference, [])
    failed = failed_text(statuses.get(cell, {}))
    if len(mine) >= 2 and len(theirs) >= 2:
        difference = difference_interval(mine, theirs)
        return judge(difference), f"{points_text(difference)} points, {judge(difference)}" + (f" ({failed})" if failed else "")
    verdict, shares = trained_share_claim(*_ok_and_total(statuses, cell), *_ok_and_total(statuses, reference))
    accuracy = f"{points_text(difference_interval(mine, theirs))} points, " if mine and theirs else "no accuracy to compare, "
    return verdict, f"{accuracy}{shares}: {verdict}" + (f" ({failed})" if failed else "")


def anchor_staleness(results: Path) -> tuple[str, str]:
    """Lian et al. 2015, Dutta et al. 2018: asynchronous SGD degrades as the staleness grows,
    judged on the undamped LR. Each staleness against synchronous SGD (tau 0), and each against
    the next smaller one, by ``staleness_claim``. The rule, stated in the evidence: ``worse``
    (it degrades) when some staleness is worse than synchronous SGD and no staleness is better
    than the next smaller one (no rise beyond the margin as the staleness grows); ``matches`` when
    every staleness matches synchronous SGD (no degradation); ``inconclusive`` otherwise."""
    if study_json(results, "staleness", REPORT_JSON) is None:
        return "not measured yet", "staleness is not committed"
    taus, accuracies, statuses = staleness_cells(results)
    stale = [tau for tau in taus if tau > 0 and (tau, "none") in statuses]
    if not stale:
        return "not measured yet", "the staleness study has no asynchronous run"
    against_sync = {tau: staleness_claim(accuracies, statuses, (tau, "none"), (0, "none")) for tau in stale}
    steps = {tau: staleness_claim(accuracies, statuses, (tau, "none"), (below, "none"))
             for below, tau in zip([0, *stale], stale) if below > 0}
    rises = [f"staleness {tau} against {below}: {steps[tau][1]}" for below, tau in zip([0, *stale], stale)
             if below > 0 and steps[tau][0] == BETTER]
    claims = [claim for claim, _ in against_sync.values()]
    if WORSE in claims and not rises:
        verdict = WORSE
    elif all(claim == MATCHES for claim in claims):
        verdict = MATCHES
    else:
        verdict = INCONCLUSIVE
    return verdict, ("undamped LR minus synchronous SGD: " + "; ".join(f"staleness {tau}: {text}" for tau, (_, text) in against_sync.items())
                     + (f"; rises as the staleness grows: {'; '.join(rises)}" if rises else "; no rise as the staleness grows")
                     + ". Rule: worse (it degrades) when some staleness is worse than synchronous SGD and none is better than "
                     "the next smaller; matches when every staleness matches synchronous SGD; else inconclusive")


def anchor_staleness_damping(results: Path) -> tuple[str, str]:
    """Zhang et al. 2016: dividing the LR by tau + 1 keeps asynchronous SGD training. At the
    largest staleness, LR / (tau + 1) against the undamped LR by ``staleness_claim``: the Welch
    difference of their ok seeds where both have two or more, else how many of their runs ended
    ok (Fisher's exact test); ``better`` supports the claim."""
    if study_json(results, "staleness", REPORT_JSON) is None:
        return "not measured yet", "staleness is not committed"
    taus, accuracies, statuses = staleness_cells(results)
    largest = max(tau for tau in taus if tau > 0)
    if (largest, "linear") not in statuses or (largest, "none") not in statuses:
        return "not measured yet", f"staleness {largest} lacks the undamped or the LR / (tau + 1) arm"
    verdict, text = staleness_claim(accuracies, statuses, (largest, "linear"), (largest, "none"))
    sync = {damping: staleness_claim(accuracies, statuses, (largest, damping), (0, "none"))[1] for damping in ("linear", "none")}
    return verdict, (f"at staleness {largest}, LR / (tau + 1) minus the undamped LR: {text}; against synchronous SGD, "
                     f"LR / (tau + 1) {sync['linear']}, undamped {sync['none']}")


def updates_text(cell: dict[str, Any]) -> str:
    """``lbtrain.reports.comparison.count_text`` of a compare.json cell (updates to the target,
    then reached/ok seeds), its interval shown only from 3 seeds (``shown``).

    >>> updates_text({"ok_runs": 3, "reached": 2, "updates_to_target": {"mean": 527.0, "low": 64.0, "high": 989.0, "n": 2, "df": 1}})
    '527 (n=2; 1 or 2 seeds: no interval), 2/3'
    """
    if not cell["ok_runs"] or cell["updates_to_target"]["mean"] is None:
        return count_text(cell)
    return f"{shown(as_estimate(cell['updates_to_target']), 0)}, {cell['reached']}/{cell['ok_runs']}"


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
        return shown(as_estimate(cell["test_accuracy"])) + (f"; {failed}" if failed else "")

    table = [[row["world_size"], f"{row['first']['learning_rate']:.4g}", accuracy(row["first"]), accuracy(row["second"]),
              judged_points(row["test_difference"]), updates_text(row["first"]), updates_text(row["second"]),
              "-" if row["second"]["staleness"] is None else f"{row['second']['staleness']:.2f}"] for row in record["rows"]]
    works = [f"- {works_sentence(world, record[key]['label'], by_side[key])}" for world, by_side in record["lr_that_works"].items()
             for key in ("first", "second")]
    budget = (f"{record['first']['budget']} in both" if record["first"]["budget"] == record["second"]["budget"]
              else f"{first} {record['first']['budget']}, {second} {record['second']['budget']}")
    per_worker = record["rows"][0]["first"]["per_worker_batch"]
    return lines + [f"The same grid run twice (experiments/sync_vs_async_sync.yaml and its _async twin): {first} and {second} "
                    f"(a chief, W workers and a parameter server on this machine, each worker applying its own batch of "
                    f"{per_worker}). Budget: {budget}. Test accuracy [95% interval] (n); *{second} − {first}*: test accuracy minus the reference, {first} at the "
                    f"same world size and LR, in points, with the claim on it; "
                    f"updates until `{record['metric']}` reaches {record['target']:.3f}, [interval] (n), then reached/ok seeds; "
                    f"the {second} gradients' staleness measured on the parameter server (W workers share 2 cores here, so "
                    "they overlap less than on W machines and the staleness stays below W − 1). At one nominal LR an "
                    "asynchronous update applies one worker batch where a synchronous one averages W of them. "
                    "[comparison](sync_vs_async/compare.md)", "",
                    markdown_table(["world", "lr", f"{first}: test acc", f"{second}: test acc", f"{second} − {first}",
                                    f"{first}: updates to target", f"{second}: updates to target", "staleness"], table), "",
                    "The learning rate that works (the best mean validation accuracy among LRs whose every seed was ok):", "",
                    *works, "", *figure_lines(results, "sync_vs_async", FIGURE_ACCURACY_VS_LR, "test accuracy against the learning rate, both modes")]


def _validation_seeds(runs: list[dict[str, Any]], world: int, learning_rate: float) -> tuple[list[float], int, int]:
    """The ok runs' validation accuracies at ``world`` and ``learning_rate``, and how many runs
    were ok of how many."""
    mine = [row for row in runs if int(row["world_size"]) == world and is_close(float(row["learning_rate"]), learning_rate)]
    ok = [float(row["validation_accuracy"]) for row in mine if is_ok(row["status"]) and row.get("validation_accuracy") is not None]
    return ok, sum(1 for row in mine if is_ok(row["status"])), len(mine)


def anchor_async_lr(results: Path) -> tuple[str, str]:
    """Asynchrony as implicit momentum (Mitliagkas et al. 2016): the best asynchronous LR is
    smaller than synchronous SGD's best at the same world size carried to one worker batch by
    the linear rule (divided by W: a synchronous update averages W worker batches, an
    asynchronous one applies each), so the comparison is per sample. The rule, stated in the
    evidence: at each W, asynchronous SGD's validation accuracy (what a best LR is chosen on) at
    the next smaller LR of its grid minus at that per-sample LR, Welch's interval over seeds and
    the page's claim (``better``: a smaller LR is better, the claim holds; ``matches``: it is no
    worse; ``worse``: the smaller LR is worse, the best is not smaller); where either LR has fewer
    than two ok seeds, how many runs ended ok (Fisher's exact test)."""
    record = study_json(results, "sync_vs_async", COMPARE_JSON)
    if record is None:
        return "not measured yet", "sync_vs_async is not committed"
    first, second = record["first"]["label"], record["second"]["label"]
    runs = study_runs(results, record["second"]["name"])
    claims, places, texts = [], [], []
    for world_text, by_side in record["lr_that_works"].items():
        world, best = int(world_text), by_side["first"]["best"]
        if best is None:
            claims.append(INCONCLUSIVE)
            texts.append(f"W={world}: {first} had no LR with every seed ok")
            places.append(f"at W={world}")
            continue
        per_sample = best["learning_rate"] / world
        grid = sorted({float(row["learning_rate"]) for row in runs if int(row["world_size"]) == world})
        smaller = [lr for lr in grid if lr < per_sample and not is_close(lr, per_sample)]
        edge = f" ({first}'s best is the grid's largest LR: its best may be larger)" if by_side["first"]["edge"] == "largest" else ""
        head = f"W={world}: {first} best {best['learning_rate']:.4g} / {world} = {per_sample:.4g}{edge}"
        if not smaller or not any(is_close(lr, per_sample) for lr in grid):
            claims.append(INCONCLUSIVE)
            texts.append(f"{head}; {second} was not run at it and a smaller LR")
        else:
            low_seeds, low_ok, low_runs = _validation_seeds(runs, world, smaller[-1])
            at_seeds, at_ok, at_runs = _validation_seeds(runs, world, per_sample)
            if len(low_seeds) >= 2 and len(at_seeds) >= 2:
                difference = difference_interval(low_seeds, at_seeds)
                verdict, text = judge(difference), f"{points_text(difference)} points"
            else:
                verdict, text = trained_share_claim(low_ok, low_runs, at_ok, at_runs)
            claims.append(verdict)
            texts.append(f"{head}; {second} validation accuracy at {smaller[-1]:.4g} minus at {per_sample:.4g}: {text}, {verdict}"
                         + ("" if by_side["second"]["best"] is None else
                            f" ({second}'s best {by_side['second']['best']['learning_rate']:.4g}"
                            + ("" if by_side["second"]["best"].get("staleness") is None else
                               f", measured staleness {by_side['second']['best']['staleness']:.2f}") + ")"))
        places.append(f"at W={world}")
    return claims_at(claims, places), ("; ".join(texts) + ". Rule: better (the best asynchronous LR is smaller) when the "
                                       "smaller LR's validation accuracy is better than at the per-sample LR")
