"""The fourth edition's steps-to-target studies on the results page (``STEPS_STUDIES_V4``): critical_batch_v4
on goyal_v4's workload (an MLP with momentum SGD, LR candidates around the linear rule) and
critical_batch_vit_v4 on adam_vit_v4's (a small ViT with Adam, around the square-root rule), a
section each. Shallue et al. 2018 and McCandlish et al. 2018 are judged on each, a row per study
(``anchors.steps_anchors(4)``).

Each study is a plain ``lbtrain run`` of a grid (every batch x LR candidate x seed) and ``lbtrain
report`` (``report.json``), so the page reads those and ``experiment.yaml``: the design sentence
(batches, the LR candidates as multiples of the study's rule, the seeds, the schedule, how often each
batch validates, where the runs stop: ``training.stop_at``), a table of every candidate's steps to
the target at every batch (the one standing for the batch in the fit in bold), the fit and the
noise scale as critical_batch_v3's section writes them, and the predictions
``lab.advisor_validation`` set against it in ``results/advisor_validation_v4``. Like every
fourth-edition study, nothing is shown before it has finished (its ``report.json``)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

from lab.advisor_validation import ADVISOR_VALIDATION_REPORT, OWN_B_SIMPLE, RULE_EXPONENTS
from lab.advisor_validation import OUTPUT_V4 as ADVISOR_VALIDATION_V4
from lab.results_page.adam_vit_v4 import STUDY as ADAM_VIT_V4
from lab.results_page.common import figure_lines, listed, opening, shown, study_experiment, study_json
from lab.results_page.critical_batch import best_rows, fit_text, noise_table, predicted_text, shallue_region
from lab.results_page.goyal_v4 import STUDY as GOYAL_V4
from lbtrain.reports.scaling_laws import CriticalBatchFit
from lbtrain.reports.statistics import Estimate
from lbtrain.reports.tables import markdown_table
from lbtrain.results import ADVISOR_VALIDATION_FILE, FIGURE_STEPS_TO_TARGET, REPORT_JSON


class StepsStudy(NamedTuple):
    """A fourth-edition steps-to-target study: its folder, the section's title, the commands that
    made it, the study whose workload (model, data, optimizer and schedule family) it measures, and
    the rule (a key of ``RULE_EXPONENTS``) its LR candidates are multiples of at every batch: the
    workload study's ``lr.rule``, the rule its grids are centred on (a test keeps them equal)."""

    name: str
    title: str
    command: str
    workload_of: str
    rule: str


MLP_MOMENTUM = StepsStudy("critical_batch_v4", "the critical batch and the noise scale (fourth edition, study 2)",
                          "lbtrain run experiments/critical_batch_v4.yaml && lbtrain report results/critical_batch_v4 --target 0.87",
                          GOYAL_V4, "linear")
VIT_ADAM = StepsStudy("critical_batch_vit_v4", "the critical batch on the second workload, a ViT with Adam (fourth edition)",
                      "lbtrain run experiments/critical_batch_vit_v4.yaml && lbtrain report results/critical_batch_vit_v4 --target 0.85",
                      ADAM_VIT_V4, "sqrt")
STEPS_STUDIES_V4 = (MLP_MOMENTUM, VIT_ADAM)
STUDY = MLP_MOMENTUM.name
# How the page names each rule the candidates are multiples of, and how that rule grows the LR.
RULE_WORDS = {"linear": ("linear", "grown with the batch"), "sqrt": ("square-root", "grown with the square root of the batch"),
              "none": ("constant", "the same at every batch")}


def _batches(batches: list[int]) -> str:
    """``512, 1,024 and 2,048``."""
    return listed([f"{batch:,}" for batch in sorted(batches)])


def _multiple(value: float) -> str:
    """A multiple of a rule's LR as a fraction: ``1/4``, ``2``.

    >>> _multiple(0.25), _multiple(2.0), _multiple(0.03125)
    ('1/4', '2', '1/32')
    """
    fraction = Fraction(value).limit_denominator(1024)
    return str(fraction.numerator) if fraction.denominator == 1 else f"{fraction.numerator}/{fraction.denominator}"


def _snapped(ratio: float) -> float:
    """``ratio`` as the nearest fraction with a denominator up to 1,024 when it lies within 1e-4
    (relative) of it, as an experiment's LRs written to 6 digits do (0.000176777 for 0.004 sqrt 8 / 64);
    else to 4 significant digits.

    >>> _snapped(0.000176777 / (0.004 * 8 ** 0.5)), _snapped(0.25000012), _snapped(0.3)
    (0.015625, 0.25, 0.3)
    """
    fraction = Fraction(ratio).limit_denominator(1024)
    return float(fraction) if abs(float(fraction) - ratio) <= 1e-4 * abs(ratio) else float(f"{ratio:.4g}")


def lr_multiples(report: dict[str, Any], experiment: dict[str, Any], rule: str = "linear") -> dict[str, float]:
    """Per recipe, its LR as a multiple of ``rule``'s at its batch (``lr.base_lr`` at
    ``lr.base_batch``, times ``(B / base_batch) ** RULE_EXPONENTS[rule]``), read from the report's
    accuracy rows (``_snapped``: an experiment writes 0.00141421 for 0.001 sqrt 2); a recipe whose
    multiple differs between batches is left out (its header names it alone).

    >>> rows = [{"recipe": "half", "global_batch": 32, "learning_rate": 0.002}, {"recipe": "half", "global_batch": 64, "learning_rate": 0.00282843}]
    >>> lr_multiples({"accuracy": rows}, {"lr": {"base_lr": 0.004, "base_batch": 32}}, "sqrt")
    {'half': 0.5}
    >>> lr_multiples({"accuracy": rows}, {"lr": {"base_lr": 0.004, "base_batch": 32}}, "linear")
    {}
    >>> sixty_fourth = [{"recipe": "1/64", "global_batch": batch, "learning_rate": float(f"{0.004 * (batch / 32) ** 0.5 / 64:.6g}")}
    ...                 for batch in (32, 64, 256, 2048)]
    >>> lr_multiples({"accuracy": sixty_fourth}, {"lr": {"base_lr": 0.004, "base_batch": 32}}, "sqrt")
    {'1/64': 0.015625}
    """
    lr = experiment.get("lr") or {}
    if not lr.get("base_lr") or not lr.get("base_batch"):
        return {}
    found: dict[str, set[float]] = {}
    for row in report["accuracy"]:
        ruled = float(lr["base_lr"]) * (row["global_batch"] / float(lr["base_batch"])) ** RULE_EXPONENTS[rule]
        found.setdefault(row["recipe"], set()).add(_snapped(row["learning_rate"] / ruled))
    return {recipe: values.pop() for recipe, values in found.items() if len(values) == 1}


def _validation_text(experiment: dict[str, Any]) -> str:
    """``every 100 steps at batch 32 to every 5 at batch 1,024 and 2,048``: how often each batch
    validates (``training.validation_every_steps`` of its variants)."""
    per_worker = int((experiment.get("training") or {}).get("per_worker_batch") or 0)
    every: dict[int, set[int]] = {}
    for variant in (experiment.get("grid") or {}).get("variants") or []:
        steps = variant.get("training.validation_every_steps")
        if steps is not None and variant.get("training.world_size") is not None:
            every.setdefault(int(steps), set()).add(int(variant["training.world_size"]) * per_worker)
    if not every:
        return "at each epoch's end"
    if len(every) == 1:
        return f"every {next(iter(every))} steps"
    most, fewest = max(every), min(every)
    return f"every {most} steps at batch {_batches(list(every[most]))} to every {fewest} at batch {_batches(list(every[fewest]))}"


def _lr_grid(report: dict[str, Any], multiples: dict[str, float], rule: str, base: str) -> str:
    """``LR candidates 1/4, 1/2, 1 and 2 times the linear rule's (<base>) at every batch, and past an
    edge ...: 1/8 at 512, 1,024 and 2,048; 1/32 and 1/16 at 2,048``: the candidates every batch ran,
    and those added at some batches (grouped by where); ``rule`` names the rule (``RULE_WORDS``)."""
    rows = report["steps_to_target"]
    batches = {row["global_batch"] for row in rows}
    at: dict[str, set[int]] = {}
    for row in rows:
        at.setdefault(row["recipe"], set()).add(row["global_batch"])

    def named(recipes: list[str]) -> str:
        return listed([_multiple(multiples[recipe]) if recipe in multiples else recipe
                       for recipe in sorted(recipes, key=lambda recipe: multiples.get(recipe, 0))])

    everywhere = [recipe for recipe in at if at[recipe] == batches]
    added: dict[tuple[int, ...], list[str]] = {}
    for recipe in at:
        if recipe not in everywhere:
            added.setdefault(tuple(sorted(at[recipe])), []).append(recipe)
    places = "; ".join(f"{named(recipes)} at {_batches(list(where))}" for where, recipes in
                       sorted(added.items(), key=lambda item: (-len(item[0]), item[0])))
    word = RULE_WORDS[rule][0]
    if not everywhere:  # no candidate ran at every batch: each where it ran
        return f"LR candidates as multiples of the {word} rule's ({base}): {places}"
    text = f"LR candidates {named(everywhere)} times the {word} rule's ({base}) at every batch"
    return text + (f", and more at some batches (extensions of the grid; its experiment.yaml says why each was added): {places}" if added else "")


def design_text(results: Path, report: dict[str, Any], study: StepsStudy = MLP_MOMENTUM) -> str:
    """The design in one sentence, from ``experiment.yaml`` and ``report.json``: the model and data
    (``<workload_of>'s workload`` when they are those of ``study.workload_of``), the batches, the LR
    candidates as multiples of the study's rule (``_lr_grid``), the seeds, the optimizer and schedule
    (``as <workload_of>`` when its warmup and decay are that study's), how often each batch validates and
    where the runs stop (``training.stop_at``, ``_stop_text``) within their budget."""
    experiment, companion = study_experiment(results, study.name), study_experiment(results, study.workload_of)
    rows = report["steps_to_target"]
    batches = sorted({row["global_batch"] for row in rows})
    lr, optimizer = experiment.get("lr") or {}, experiment.get("optimizer") or {}
    model, data = experiment.get("model") or {}, experiment.get("data") or {}
    workload = f"{model.get('name', '?')} on {data.get('dataset', '?')}" + (
        f" ({study.workload_of}'s workload)" if companion and (model, data) == (companion.get("model"), companion.get("data")) else "")
    base = f"LR {lr.get('base_lr', '?')} at batch {lr.get('base_batch', '?')}, {RULE_WORDS[study.rule][1]}"
    seeds = len((experiment.get("grid") or {}).get("seeds") or []) or max(row["runs"] for row in rows)
    params = ", ".join(f"{name} {value:g}" for name, value in (optimizer.get("params") or {}).items())
    warmup = float(lr.get("warmup_epochs") or 0)
    same = bool(companion) and ((companion.get("lr") or {}).get("warmup_epochs"), (companion.get("lr") or {}).get("decay")) == (
        lr.get("warmup_epochs"), lr.get("decay"))
    schedule = (f"optimizer `{optimizer.get('name', '?')}`" + (f" ({params})" if params else "") +
                f" with {warmup:g} epoch{'' if warmup == 1 else 's'} of warmup and {(lr.get('decay') or {}).get('type', 'no')} decay"
                + (f", as {study.workload_of}" if same else ""))
    return (f"Design: {workload}; {len(batches)} batches, {batches[0]:,} to {batches[-1]:,}; "
            f"{_lr_grid(report, lr_multiples(report, experiment, study.rule), study.rule, base)}; {seeds} seeds each; {schedule}; validation "
            f"{_validation_text(experiment)}, so steps to the target are read between validation points; "
            f"{_stop_text(experiment, report)} (budget: {report['budget']}).")


def _stop_targets(experiment: dict[str, Any]) -> set[tuple[str, float]]:
    """The ``(metric, value)`` each run stops at (``training.stop_at``, a variant's
    ``training.stop_at.<metric>`` over it); empty when no run stops early."""
    base = {metric: value for metric, value in ((experiment.get("training") or {}).get("stop_at") or {}).items() if value is not None}
    variants = (experiment.get("grid") or {}).get("variants") or [{}]
    targets = set()
    for variant in variants:
        stop = {**base, **{key.rsplit(".", 1)[1]: value for key, value in variant.items()
                           if key.startswith("training.stop_at.") and value is not None}}
        targets.update((metric, float(value)) for metric, value in stop.items())
    return targets


def _stop_text(experiment: dict[str, Any], report: dict[str, Any]) -> str:
    """Where the runs stop, from ``training.stop_at``: ``each run stops at the target`` when they
    all stop at the report's target, else where they stop, or that they run their whole budget."""
    targets = _stop_targets(experiment)
    if not targets:
        return "each run trains its whole budget, past the target"
    if targets == {(report["metric"], float(report["target"]))}:
        return "each run stops at the target"
    return "the runs stop at " + listed([f"{metric} {value:g}" for metric, value in sorted(targets)]) + " (`training.stop_at`)"


def _cell(row: dict[str, Any] | None, best: bool) -> str:
    """A candidate's steps to the target at one batch: the mean over the seeds that reached it with
    its interval and n (``common.shown``: none with fewer than 3), how many reached it when not
    all, how many runs were not ok; bold when it stands for the batch in the fit; ``-`` not run."""
    if row is None:
        return "-"
    failed = row["runs"] - row["ok_runs"] if row.get("ok_runs") is not None else 0
    if not row["reached"]:
        return f"none of {row['runs']} reached" + (f" ({failed} not ok)" if failed else "")
    notes = [] if row["reached"] == row["runs"] else [f"{row['reached']} of {row['runs']} reached"]
    notes += [f"{failed} not ok"] if failed else []
    notes += ["reached by the end of the first epoch: an upper bound"] if row.get("upper_bound") else []
    text = shown(Estimate(row["steps_to_target"], row["low"], row["high"], row["reached"]), 0) + (f"; {', '.join(notes)}" if notes else "")
    return f"**{text}**" if best else text


def steps_table(report: dict[str, Any], multiples: dict[str, float]) -> str:
    """Global batch x LR candidate (smallest multiple first): ``_cell``, then the fit's steps and
    Shallue et al.'s region at that batch."""
    rows = report["steps_to_target"]
    recipes = sorted(dict.fromkeys(row["recipe"] for row in rows), key=lambda recipe: multiples.get(recipe, 0))
    best = best_rows(rows)
    fit = report["critical_batch"]
    fitted = {point["global_batch"]: point["fitted_steps"] for point in fit.get("residuals") or []}
    cells = {(row["recipe"], row["global_batch"]): row for row in rows}
    table = [[f"{batch:,}", *[_cell(cells.get((recipe, batch)), best.get(batch, {}).get("recipe") == recipe) for recipe in recipes],
              "-" if batch not in fitted else f"{fitted[batch]:.0f}",
              "-" if fit.get("b_crit") is None else shallue_region(batch, fit["b_crit"])]
             for batch in sorted({row["global_batch"] for row in rows})]
    headers = [recipe if recipe not in multiples else f"{recipe} ({_multiple(multiples[recipe])}x)" for recipe in recipes]
    return markdown_table(["global batch", *headers, "fit", "region"], table)


def advisor_lines(results: Path, fit: CriticalBatchFit, study: str = STUDY) -> list[str]:
    """The predictions of ``study``'s B_crit that ``lab.advisor_validation`` set against it
    (``results/advisor_validation_v4/validation.json``): each with its spread, the ratio predicted /
    measured and its decision; a note when that record was made from another B_crit than this
    report's; nothing when it is not committed."""
    folder = ADVISOR_VALIDATION_V4.name
    record = study_json(results, folder, ADVISOR_VALIDATION_FILE)
    entry = next((item for item in (record or {}).get("studies", []) if item["study"] == study), None)
    b_crit = (entry or {}).get("b_crit") or {}
    if not b_crit.get("predicted"):
        return []
    measured = b_crit["measured"]
    if round(measured["b_crit"]) != round(fit.b_crit):
        return [f"[{folder}]({folder}/{ADVISOR_VALIDATION_REPORT}) set its predictions against B_crit = {measured['b_crit']:.0f}, not "
                f"this report's {fit.b_crit:.0f}: rendered from an earlier report.json (`python scripts/validate_advisor.py` "
                "renders it again).", ""]
    tolerance = record["tolerance"]
    # The study's own B_simple is set against B_crit above, by McCandlish et al.'s rule.
    predictions = [f"{item['by']}: {item['value']:,.0f} [{item['low']:,.0f}, {item['high']:,.0f}] ({item['spread']}), predicted / "
                   f"measured {item['ratio']['ratio']:.2f} [{item['ratio']['low']:.2f}, {item['ratio']['high']:.2f}]: "
                   f"**{item['ratio']['decision']}**" for item in b_crit["predicted"]
                   if item.get("ratio") and item["by"] != OWN_B_SIMPLE]
    return [f"Predicted against measured ([{folder}]({folder}/{ADVISOR_VALIDATION_REPORT}); *matches* when the ratio's whole "
            f"interval lies within [{1 / tolerance:g}, {tolerance:g}], *does not match* when wholly outside, *inconclusive* "
            "otherwise):", "", *[f"- {line}" for line in predictions], ""]


def section_critical_batch_v4(results: Path, study: StepsStudy = MLP_MOMENTUM) -> list[str]:
    """``study``'s section (critical_batch_v4's by default), absent until its ``report.json`` is
    committed: the design (``design_text``), every candidate's steps to the target (``steps_table``),
    the fit, the noise scale's prediction and B_simple over training (``critical_batch``), the
    advisor's predictions (``advisor_lines``) and the steps figure."""
    lines, report = opening(results, study.name, study.title, REPORT_JSON, study.command)
    if report is None:
        return []
    fit = report["critical_batch"]
    text = fit_text(fit) + ("" if fit.get("noise_scale_ratio") is None else " " + predicted_text(fit))
    measured = CriticalBatchFit.from_dict(fit)
    return lines + [design_text(results, report, study), "",
                    f"Steps to {report['metric']} {report['target']} per batch and LR candidate: the mean over the seeds that reached "
                    "it, with its interval over them (n: those seeds); in bold at each batch the candidate standing for it in the fit, "
                    "the fewest mean steps among those whose every seed reached the target (chosen on validation, never on test). "
                    f"[report]({study.name}/report.md)", "",
                    steps_table(report, lr_multiples(report, study_experiment(results, study.name), study.rule)), "",
                    text, "",
                    *([] if not measured.fitted else advisor_lines(results, measured, study.name)),
                    *noise_table(results, study.name, report, best_rows(report["steps_to_target"])),
                    *figure_lines(results, study.name, FIGURE_STEPS_TO_TARGET, "steps to the target against the global batch, every LR "
                                  "candidate")]
