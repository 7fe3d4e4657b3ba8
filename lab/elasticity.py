"""The elasticity study's report (issue 37, deliverable 4): ``lbtrain report`` of its results,
then every arm against the fixed world of 4, rendered from the runs.

``lbtrain report`` takes every difference against one reference, the first recipe at the
smallest global batch (``lbtrain.reports.tables.reference_group``): in ``results/elasticity``
that is the fixed world of 2 (batch 128), while the study's question is each elastic arm against
the fixed world of 4 it starts from. This script writes the report, then adds a section (and its
record, ``report.json``'s ``elasticity``) with, per arm: its world-size schedule and LR policy,
the updates and samples it trained, its test accuracy (mean over ok seeds, Student-t interval,
``lbtrain.reports.statistics.mean_interval``), the difference from ``fixed 4`` (Welch's interval,
``difference_interval``) with the decision rule's claim (``lbtrain.reports.decisions.claim`` at
``DEFAULT_CLAIM_MARGIN``), the runs excluded by status; what the naive policy (``lr: keep``) loses
against the rule-following one (``lr: follow``) on each schedule, keep − follow by the same
interval and rule, and why (the samples from which its schedule, clocked in steps, has run out,
and its rate over the rule's after the first change); and the world changes the runs recorded.
Only runs judged ok enter a mean.

Two figures: ``figures/elasticity_vs_fixed_4.png``, each arm's difference from ``fixed 4`` with
its Welch interval, the margin drawn, the runs that were not ok as marks; and
``figures/elasticity_lr.png``, the learning rate every arm applied at each step against the
samples seen, rebuilt from each run's resolved config with ``lbtrain.elastic`` (segments by
``plan_segments``, the rate by ``elastic_learning_rate`` over the recipe built for each world
size, ``RunConfig.at_world_size``, as the trainer builds it) and checked against the LR the run
recorded at each world change. (``lbtrain report``'s own LR figure rebuilds a run's schedule
without ``training.elastic``: for the elastic arms it is not the rate they applied.)

Run from the repository root: ``.venv/bin/python -m lab.elasticity [results/elasticity]``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from lbtrain.files import write_atomic, write_json_atomic
from lbtrain.reports.decisions import DEFAULT_CLAIM_MARGIN, MIN_CLAIM_SEEDS, claim, contains_zero
from lbtrain.reports.plots import Line, Mark, plot_panels, recipe_colors
from lbtrain.reports.report import write_report
from lbtrain.reports.statistics import DEFAULT_LEVEL, Estimate, difference_interval
from lbtrain.reports.tables import RunRecord, aggregate, column, load_records, markdown_table, recipes
from lbtrain.results import FIGURES_FOLDER, REPORT_FILE, REPORT_JSON, finite_or_none

REFERENCE = "fixed 4"
SECTION = "## Elastic worlds against the fixed world of 4"
BEFORE = "## Accuracy and generalization gap"
FIGURE_DIFFERENCES = "elasticity_vs_fixed_4.png"
FIGURE_LR = "elasticity_lr.png"
FIXED = "fixed"


def arm_of(record: RunRecord) -> dict[str, Any]:
    """A run's arm from its resolved config: ``policy`` (``fixed``, ``follow`` or ``keep``), the
    ``world_sizes`` in order from the ``points`` they start at (in ``unit``), the per-worker
    ``batch``, the ``global_batches`` in that order, and the ``rewarmup_steps`` of a jump up."""
    training = record.result.config["training"]
    batch = int(training["per_worker_batch"]) * int(training.get("accumulation_steps") or 1)
    elastic = training.get("elastic")
    if elastic is None:
        points, sizes, policy, unit, rewarmup = [0], [int(training["world_size"])], FIXED, None, 0
    else:
        schedule = sorted((int(point), int(size)) for point, size in elastic["world_sizes"].items())
        points, sizes = [point for point, _ in schedule], [size for _, size in schedule]
        policy, unit, rewarmup = elastic["lr"], elastic["unit"], int(elastic.get("rewarmup_steps") or 0)
    return {"policy": policy, "world_sizes": sizes, "points": points, "unit": unit, "batch": batch,
            "global_batches": [size * batch for size in sizes], "rewarmup_steps": rewarmup,
            "schedule": "-".join(str(size) for size in sizes)}


def samples_trained(record: RunRecord) -> int:
    """The training samples a run took: an elastic run's ``samples_trained`` metric, or its steps
    times its global batch."""
    result = record.result
    if result.metrics.get("samples_trained") is not None:
        return int(result.metrics["samples_trained"])
    return int(result.total_steps) * int(result.global_batch)


def _estimate(estimate: Estimate | None) -> dict[str, Any] | None:
    if estimate is None:
        return None
    return {"mean": estimate.mean, "low": estimate.low, "high": estimate.high, "n": estimate.n, "df": estimate.df,
            "n_second": estimate.n_second, "level": estimate.level}


def _describe(record: dict[str, Any] | None, digits: int = 4, signed: bool = False) -> str:
    return "-" if record is None else Estimate(**record).describe(digits, signed=signed)


def _group(members: Sequence[RunRecord]):
    groups = aggregate(members, column("test_accuracy"))
    if len(groups) != 1:
        raise ValueError(f"arm {members[0].recipe!r} ran at several global batches: {[g.global_batch for g in groups]}")
    return groups[0]


def comparison(records: Sequence[RunRecord], train_size: int, reference: str = REFERENCE) -> dict[str, Any]:
    """The section's record (module doc) of an experiment's ``records`` on ``train_size``
    training samples: ``arms`` (one per recipe, in the grid's order), ``naive`` (keep − follow
    per schedule), the ``reference``, ``margin`` and ``confidence_level``, the shared ``recipe``
    and ``budget``, and the ``regime`` at the largest global batch."""
    by_recipe = {recipe: [r for r in records if r.recipe == recipe] for recipe in recipes(records)}
    if reference not in by_recipe:
        raise ValueError(f"no run of the reference arm {reference!r} (have {', '.join(by_recipe)})")
    reference_values = _group(by_recipe[reference]).values
    arms = []
    for recipe, members in by_recipe.items():
        group, arm = _group(members), arm_of(members[0])
        difference = None if recipe == reference else difference_interval(group.values, reference_values)
        changes = [list(r.result.world_changes) for r in members if r.ok]
        arms.append({
            "recipe": recipe, **arm,
            "updates": sorted({int(r.result.total_steps) for r in members}),
            "samples": sorted({samples_trained(r) for r in members}),
            "test_accuracy": _estimate(group.estimate()),
            "runs": group.total, "ok_runs": group.ok_runs, "excluded": dict(group.excluded), "runs_text": group.count_text(),
            "difference_from_reference": _estimate(difference),
            "claim": None if difference is None else claim(difference),
            "world_changes": changes[0] if changes else [],
            "changes_agree_across_seeds": all(change == changes[0] for change in changes),
        })
    naive = []
    for keep in (arm for arm in arms if arm["policy"] == "keep"):
        follow = next((arm for arm in arms if arm["policy"] == "follow" and arm["points"] == keep["points"]
                       and arm["world_sizes"] == keep["world_sizes"] and arm["unit"] == keep["unit"]), None)
        if follow is None:
            continue
        difference = difference_interval(_group(by_recipe[keep["recipe"]]).values, _group(by_recipe[follow["recipe"]]).values)
        naive.append({"schedule": keep["schedule"], "keep": keep["recipe"], "follow": follow["recipe"],
                      "difference": _estimate(difference), "claim": claim(difference)})
    config = by_recipe[reference][0].result.config
    largest = max(batch for arm in arms for batch in arm["global_batches"])
    reference_arm = next(arm for arm in arms if arm["recipe"] == reference)
    samples = sorted({value for arm in arms for value in arm["samples"]})
    budget = config["training"].get("samples") or reference_arm["samples"][0]
    return {
        "reference": reference, "margin": DEFAULT_CLAIM_MARGIN, "confidence_level": DEFAULT_LEVEL, "train_size": train_size,
        "recipe": {"base_lr": config["lr"]["base_lr"], "base_batch": config["lr"]["base_batch"], "rule": config["lr"]["rule"],
                   "warmup_epochs": config["lr"]["warmup_epochs"], "decay": config["lr"]["decay"]["type"],
                   "optimizer": config["optimizer"]["name"], "per_worker_batch": config["training"]["per_worker_batch"]},
        "budget": {"samples": budget, "epochs": budget / train_size,
                   "samples_trained": samples, "equal": len(samples) == 1},
        "regime": {"largest_global_batch": largest, "fraction": largest / train_size,
                   "reference_updates": reference_arm["updates"], "fewest_updates": min(u for arm in arms for u in arm["updates"]),
                   "most_updates": max(u for arm in arms for u in arm["updates"])},
        "arms": arms, "naive": naive,
    }


def _schedule_text(arm: dict[str, Any]) -> str:
    if arm["policy"] == FIXED:
        return f"{arm['world_sizes'][0]} throughout"
    return ", ".join(f"{size} from {point} {arm['unit']}" for point, size in zip(arm["points"], arm["world_sizes"]))


def _claims_text(arms: Sequence[dict[str, Any]]) -> str:
    return "; ".join(f"`{arm['recipe']}` {arm['claim']} ({_points(arm['difference_from_reference'])} points, "
                     f"{_side_of_zero(arm['difference_from_reference'])})" for arm in arms)


def _points(estimate: dict[str, Any] | None) -> str:
    """A difference in points of accuracy with its interval and n: ``-0.36 [-0.57, -0.16] (n=5 vs 5, df=6.3)``."""
    if estimate is None or estimate["mean"] is None:
        return "no difference (no ok run)"
    scaled = {**estimate, **{key: None if estimate[key] is None else 100 * estimate[key] for key in ("mean", "low", "high")}}
    return Estimate(**scaled).describe(2, signed=True)


def _side_of_zero(estimate: dict[str, Any] | None) -> str:
    """Where a difference's interval lies against 0 (``decisions.contains_zero``): the claim
    says whether it is within the margin, this whether the arms differ at all."""
    if estimate is None or estimate["mean"] is None or estimate["low"] is None:
        return "no interval"
    if contains_zero(Estimate(**estimate)):
        return "its interval contains 0"
    return "its interval lies below 0" if estimate["high"] < 0 else "its interval lies above 0"


def _excluded_text(arms: Sequence[dict[str, Any]]) -> str:
    excluded = [f"`{arm['recipe']}` {arm['runs_text']}" for arm in arms if arm["excluded"]]
    return "none: every run was judged ok" if not excluded else "; ".join(excluded)


def section_markdown(record: dict[str, Any]) -> str:
    """The section (module doc), every number in its prose taken from ``record`` (``comparison``)."""
    recipe, budget, regime, margin = record["recipe"], record["budget"], record["regime"], record["margin"]
    arms = record["arms"]
    elastic = [arm for arm in arms if arm["policy"] != FIXED]
    follow, keep = [a for a in elastic if a["policy"] == "follow"], [a for a in elastic if a["policy"] == "keep"]
    others = [arm for arm in arms if arm["recipe"] != record["reference"]]
    samples = (f"every arm trained {budget['samples_trained'][0]} samples" if budget["equal"] else
               "the arms trained different numbers of samples: " + ", ".join(str(s) for s in budget["samples_trained"]))
    parts = [
        SECTION,
        f"The study's question, answered against the fixed world of 4 (`{record['reference']}`). `lbtrain report`'s table below takes "
        "its differences against the first recipe at the smallest global batch, `fixed 2`; this section's differences are against "
        f"`{record['reference']}`, the world every elastic arm starts from. Not tuned: the recipe was fixed in advance, "
        f"{recipe['optimizer']} with base LR {recipe['base_lr']} at batch {recipe['base_batch']}, the {recipe['rule']} rule, "
        f"{recipe['warmup_epochs']:g} epochs of gradual warmup and {recipe['decay']} decay, {recipe['per_worker_batch']} samples "
        "per worker (goyal_scaling's linear+warmup, which matched its small batch there); no arm was chosen on validation "
        "or test.",
        f"Budget: {budget['samples']} training samples per run ({budget['epochs']:.2f} epochs of the {record['train_size']} "
        f"training images); {samples}. Regime: the largest global batch, {regime['largest_global_batch']}, is "
        f"{100 * regime['fraction']:.2f}% of the training set; the arms took {regime['fewest_updates']} to "
        f"{regime['most_updates']} updates ({record['reference']}: {regime['reference_updates'][0]}).",
        f"Test accuracy: mean [{100 * record['confidence_level']:.0f}% Student-t interval] (n, df) over the seeds whose run was "
        "judged ok; *test − fixed 4*: the arm's mean minus the reference's, Welch's interval (n of the arm vs the reference, "
        f"Welch–Satterthwaite df); *claim* by the decision rule at a margin of {100 * margin:.0f} point: matches when the whole "
        "interval lies above −margin (non-inferiority), better above +margin, worse below −margin, inconclusive otherwise "
        f"and on fewer than {MIN_CLAIM_SEEDS} seeds a side. *runs*: the runs of the arm, and those excluded from its mean by "
        "verdict.",
        markdown_table(
            ["arm", "LR policy", "world size (from the point given)", "global batches", "updates", "samples", "test acc",
             "test − fixed 4", "claim", "runs"],
            [[arm["recipe"], f"{arm['policy']}, re-warmup {arm['rewarmup_steps']} steps" if arm["rewarmup_steps"] else arm["policy"],
              _schedule_text(arm), " → ".join(str(b) for b in arm["global_batches"]),
              ", ".join(str(u) for u in arm["updates"]), ", ".join(str(s) for s in arm["samples"]),
              _describe(arm["test_accuracy"]),
              "reference" if arm["recipe"] == record["reference"] else _describe(arm["difference_from_reference"], signed=True),
              "reference" if arm["recipe"] == record["reference"] else arm["claim"] or "-", arm["runs_text"]] for arm in arms]),
        f"Excluded from the means: {_excluded_text(arms)}.",
    ]
    if follow:
        parts.append(f"**The LR that follows the world**, against `{record['reference']}`: {_claims_text(follow)}.")
    if keep:
        parts.append(f"**The naive LR** (`lr: keep`), against `{record['reference']}`: {_claims_text(keep)}.")
    if record["naive"]:
        parts.append("**What the naive LR loses**, keep − follow on the same schedule (Welch's interval, the follow arm as the "
                     "reference, the same rule): " + "; ".join(
                         f"{item['schedule']}: {_points(item['difference'])} points, {item['claim']}, {_side_of_zero(item['difference'])}"
                         for item in record["naive"]) + ".")
    ran_out = [arm for arm in keep if arm.get("lr_runs_out_at")]
    if ran_out:
        parts.append(
            "Why: the naive LR is the schedule built for the initial world, clocked in optimizer steps. With fewer workers a step "
            "takes fewer samples, so that schedule has no step left before the budget is spent and the rest trains at the "
            "decay's end, a rate of 0 for a cosine: from " + "; ".join(
                f"{arm['lr_runs_out_at']['samples']} samples for `{arm['recipe']}` ({100 * arm['lr_runs_out_at']['share']:.1f}% "
                "of the budget)" for arm in ran_out) + ". Until then it applies the initial world's rate to the smaller batch: "
            + "; ".join(f"{item['lr_ratio_after_first_change']:g} times the rule's rate after the first change on {item['schedule']}"
                        for item in record["naive"] if item.get("lr_ratio_after_first_change")) + ".")
    fixed = [arm for arm in others if arm["policy"] == FIXED]
    if fixed:
        parts.append(f"The other fixed world{'s' if len(fixed) > 1 else ''}, against `{record['reference']}`: {_claims_text(fixed)}.")
    if elastic:
        parts += [
            "The world changes the runs recorded (the same for every ok seed of an arm: "
            f"{'yes' if all(arm['changes_agree_across_seeds'] for arm in elastic) else 'no'}): the step of the first update in the "
            "new world, the training samples seen before it, the LR the old world would have applied there and the LR the policy "
            "gives the new world, and the LR the step applied (below the new LR while a re-warmup ramps up).",
            markdown_table(["arm", "step", "samples", "world", "LR old → new", "LR applied"],
                           [[arm["recipe"], change["step"], change["samples"], f"{change['old_world_size']} → {change['new_world_size']}",
                             f"{change['old_lr']:.4g} → {change['new_lr']:.4g}", f"{change['applied_lr']:.4g}"]
                            for arm in elastic for change in arm["world_changes"]]),
        ]
    parts += [f"![test accuracy minus fixed 4, per arm]({FIGURES_FOLDER}/{FIGURE_DIFFERENCES})",
              "The learning rate each arm applied at every step, against the samples seen (rebuilt from each run's config by "
              "`lbtrain.elastic`, checked against the LR recorded at every world change). `lbtrain report`'s figure "
              "*Learning-rate schedules applied* further down draws the fixed arms only: an elastic arm's rate depends on "
              "the world changes it met, which this figure draws.",
              f"![learning rate per step against the samples seen]({FIGURES_FOLDER}/{FIGURE_LR})"]
    return "\n\n".join(parts)


def difference_panel(records: Sequence[RunRecord], record: dict[str, Any]) -> tuple[list[Line | Mark], dict[int, str]]:
    """Each arm but the reference at its own position: its test accuracy minus the reference's,
    in points, with Welch's interval; the margin and zero as reference lines; the runs that were
    not ok as marks on the bottom edge (never dropped)."""
    arms = [arm for arm in record["arms"] if arm["recipe"] != record["reference"]]
    positions = {arm["recipe"]: index for index, arm in enumerate(arms, start=1)}
    items: list[Line | Mark] = []
    for arm in arms:
        difference = arm["difference_from_reference"]
        if difference is not None and difference["mean"] is not None:
            low, high = difference["low"], difference["high"]
            items.append(Line(arm["recipe"], [positions[arm["recipe"]]], [100 * difference["mean"]],
                              low=[None if low is None else 100 * low], high=[None if high is None else 100 * high]))
    span = [0.5, len(arms) + 0.5]
    items += [Line(f"−margin ({100 * record['margin']:.0f} point)", span, [-100 * record["margin"]] * 2, reference=True),
              Line(f"{record['reference']} (0)", span, [0.0, 0.0], reference=True)]
    counts: dict[tuple[str, str], int] = {}
    for run in records:
        if not run.ok and run.recipe in positions:
            counts[(run.recipe, str(run.row["status"]))] = counts.get((run.recipe, str(run.row["status"])), 0) + 1
    items += [Mark(status, recipe, positions[recipe], count=count) for (recipe, status), count in counts.items()]
    return items, {position: recipe for recipe, position in positions.items()}


def applied_learning_rates(record: RunRecord, train_size: int) -> tuple[list[int], list[float]]:
    """The samples seen before each step of ``record``'s run and the LR the step applied,
    rebuilt from its resolved config (module doc), up to the steps it took (a run stopped early
    took fewer than planned); a ``ValueError`` when the rebuilt rate differs from the LR the run
    recorded at one of its world changes (rtol 1e-5), or the plan has fewer steps than the run."""
    from lbtrain.config import run_config_from_dict
    from lbtrain.data.pipeline import steps_per_epoch
    from lbtrain.elastic import plan_run
    from lbtrain.schedules import schedule_values

    config = run_config_from_dict(record.result.config)
    batch, total = config.training.update_batch, int(record.result.total_steps)
    if config.training.elastic is None:
        values = list(schedule_values(config.schedule(steps_per_epoch(train_size, batch, config.training.world_size)), total))
        return [step * config.global_batch for step in range(total)], values
    segments, rate = plan_run(config, train_size)
    samples, values = [], []
    for previous, segment in zip([None, *segments], segments):
        if previous is not None and segment.world_size != previous.world_size:
            rate.change_world(segment.start_step, segment.world_size, segment.start_samples)
        values += list(schedule_values(rate, segment.end_step)[segment.start_step:])
        samples += [segment.start_samples + i * segment.world_size * batch for i in range(segment.steps)]
    if len(values) < total:
        raise ValueError(f"{record.row['run_id']}: rebuilt {len(values)} steps, the run took {total}")
    samples, values = samples[:total], values[:total]
    for change in record.result.world_changes:
        if not math.isclose(values[change["step"]], change["applied_lr"], rel_tol=1e-5):
            raise ValueError(f"{record.row['run_id']}: the rebuilt LR at step {change['step']} is {values[change['step']]:.6g}, "
                             f"the run recorded {change['applied_lr']:.6g}")
    return samples, values


def applied_by_arm(records: Sequence[RunRecord], train_size: int) -> dict[str, tuple[list[int], list[float]]]:
    """Per arm, ``applied_learning_rates`` of its longest-trained seed (seeds share a schedule)."""
    longest = {recipe: max((r for r in records if r.recipe == recipe), key=lambda r: r.result.total_steps or 0)
               for recipe in recipes(records)}
    return {recipe: applied_learning_rates(run, train_size) for recipe, run in longest.items()}


def schedule_run_out(record: dict[str, Any], applied: dict[str, tuple[list[int], list[float]]]) -> None:
    """Adds to each keep arm of ``record`` (``comparison``) ``lr_runs_out_at``: the samples seen
    when its schedule, built for the initial world and clocked in optimizer steps, has no step
    left (``budget // initial global batch`` steps) and its rate stays at the decay's end, with
    that as a ``share`` of the budget (None when the run ends first); and to each ``naive`` pair
    ``lr_ratio_after_first_change``, keep's rate over follow's at the first world change."""
    budget = record["budget"]["samples"]
    arms = {arm["recipe"]: arm for arm in record["arms"]}
    for arm in arms.values():
        if arm["policy"] != "keep":
            continue
        samples, _ = applied[arm["recipe"]]
        planned = budget // arm["global_batches"][0]
        arm["lr_runs_out_at"] = None if planned >= len(samples) else {"samples": samples[planned], "share": samples[planned] / budget}
    for item in record["naive"]:
        keep, follow = arms[item["keep"]]["world_changes"], arms[item["follow"]]["world_changes"]
        item["lr_ratio_after_first_change"] = keep[0]["applied_lr"] / follow[0]["applied_lr"] if keep and follow else None


def lr_panels(records: Sequence[RunRecord], applied: dict[str, tuple[list[int], list[float]]],
              train_size: int) -> dict[str, list[Line]]:
    """One panel per world-size schedule of the elastic arms: its follow and keep arms and the
    fixed worlds, the LR per step (``applied_by_arm``) against the data epochs seen."""
    lines = {recipe: Line(recipe, [s / train_size for s in samples], values) for recipe, (samples, values) in applied.items()}
    arms = {recipe: arm_of(next(r for r in records if r.recipe == recipe)) for recipe in applied}
    fixed = [recipe for recipe, arm in arms.items() if arm["policy"] == FIXED]
    panels: dict[str, list[Line]] = {}
    for recipe, arm in arms.items():
        if arm["policy"] != FIXED:
            panels.setdefault(f"world {arm['schedule']}", [lines[name] for name in fixed]).append(lines[recipe])
    return panels


def training_size(records: Sequence[RunRecord]) -> int:
    """The training samples the runs' data section gives (loaded as the trainer loads it; one
    data section for every run, else a ``ValueError``)."""
    from lbtrain.config import run_config_from_dict
    from lbtrain.data import load_dataset

    sections = {json.dumps(r.result.config["data"], sort_keys=True) for r in records}
    if len(sections) != 1:
        raise ValueError(f"the runs train on {len(sections)} different data sections: one study, one data set")
    config = run_config_from_dict(records[0].result.config)
    data = load_dataset(config.data.dataset, train_subset=config.data.train_subset, validation_split=config.data.validation_split,
                        seed=config.training.seed, task=config.data.task, test_split=config.data.test_split, **config.data.options)
    return len(data.x_train)


def render(folder: str | Path) -> list[Path]:
    """``lbtrain report`` of ``folder``, then this study's section inserted before the accuracy
    table (or at the end), its record in ``report.json`` and its two figures; returns the files written."""
    folder = Path(folder)
    report = write_report(folder)
    records = load_records(folder)
    train_size = training_size(records)
    record = comparison(records, train_size)
    applied = applied_by_arm(records, train_size)
    schedule_run_out(record, applied)
    colors = recipe_colors(recipes(records))
    items, labels = difference_panel(records, record)
    figures = folder / FIGURES_FOLDER
    written = [plot_panels({f"test accuracy − {record['reference']} (points)": items}, figures / FIGURE_DIFFERENCES, colors=colors,
                           xlabel="arm", ylabel="points of test accuracy", x_labels=labels,
                           band_label=f"{100 * record['confidence_level']:.0f}% CI (Welch)"),
               plot_panels(lr_panels(records, applied, train_size), figures / FIGURE_LR, colors=colors, xlabel="epochs of data seen",
                           ylabel="learning rate")]
    text, section = report.read_text(), section_markdown(record)
    text = text.replace(BEFORE, f"{section}\n\n{BEFORE}", 1) if BEFORE in text else f"{text.rstrip()}\n\n{section}\n"
    summary = json.loads((folder / REPORT_JSON).read_text())
    written += [write_json_atomic(folder / REPORT_JSON, finite_or_none({**summary, "elasticity": record})),
                write_atomic(folder / REPORT_FILE, text)]
    return written


def main(arguments: list[str]) -> None:
    for path in render(Path(arguments[0]) if arguments else Path("results/elasticity")):
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
