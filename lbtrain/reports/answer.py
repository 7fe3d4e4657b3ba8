"""The answer of a scaling study (``lbtrain scale``): which recipe at each world size, what it
costs, and where scaling stops, rendered from the study's runs only.

Per world size W (global batch B = W x b):

- **use**: the arm with the highest mean *validation* accuracy among the arms whose every final
  seed was ok (never ranked on test), with the arms ``tied with the best`` on validation
  (``lbtrain.reports.decisions.standing``: Welch interval of the difference contains 0);
- its **test accuracy**: mean over its ok seeds with a 95% Student-t interval and n;
- its **difference** against the reference world size's chosen arm, with Welch's interval and
  df, and the decision word (``lbtrain.reports.decisions.claim``, non-inferiority margin
  ``DEFAULT_CLAIM_MARGIN`` = 1 point of accuracy): ``matches`` / ``worse`` / ``better`` /
  ``inconclusive``;
- **what each rule costs** against the LR tuned at W: tuned − rule (Welch).

The tuned LR's exponent in the batch per recipe (``lbtrain.reports.scaling_laws.lr_exponent``, from the
tuning trials), beside the rules' 0.5 and 1.

Across world sizes: *the linear rule holds up to N* (the largest world size at which the linear
rule's arm, carried from the reference tuning, ``matches`` the reference's chosen arm, every
smaller one matching too) and *the first N where it is worse*, else "not reached within the
budget". The gradient noise scale B_simple (McCandlish et al. 2018) measured in the ok final runs
(the median of their final values; its range over training from every epoch's value) predicts
the critical batch B_crit ~ B_simple, beyond which more workers buy few fewer steps; it stands
beside the batch where the recipes stopped holding. Flags, one line each: fewer updates than
``lbtrain.reports.regime.MIN_UPDATES``, a best on a grid edge, fewer than 3 ok seeds, runs not ok,
a batch above ``MAX_BATCH_FRACTION`` of the training set, and a convergence control that gained.

Pure: plain rows in (``summary.csv``'s), plain data and text out; no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from lbtrain.config.experiment import MIN_PROTOCOL_SEEDS as MIN_SEEDS
from lbtrain.reports.decisions import (
    DEFAULT_CLAIM_MARGIN,
    TIED_WITH_THE_BEST,
    WORSE,
    claim,
    few_seeds,
    standing,
    trained_share_claim,
)
from lbtrain.reports.regime import MAX_BATCH_FRACTION, MIN_UPDATES
from lbtrain.reports.scaling_laws import LrExponentFit
from lbtrain.reports.statistics import Estimate, difference_interval, mean_interval
from lbtrain.results import ANSWER_FIGURES, FIGURES_FOLDER
from lbtrain.verdict import is_ok

__all__ = ["ArmSpec", "StudyFacts", "answer_data", "answer_markdown", "arm_decision", "estimate_text", "write_answer_figures"]

NOT_REACHED = "not reached within the budget"


@dataclasses.dataclass(frozen=True)
class ArmSpec:
    """One arm of the study at one world size: its final runs' ``label``, ``kind`` (``tuned``,
    ``rule`` or ``control``), ``rule`` (``linear``, ``sqrt``, ``none``) for a rule arm, and for a
    convergence control the label of the arm it trains longer and by what ``factor``."""

    label: str
    world_size: int
    kind: str
    recipe: str
    rule: str | None = None
    control_of: str | None = None
    factor: float | None = None


@dataclasses.dataclass(frozen=True)
class StudyFacts:
    """What the answer states beside the runs: the experiment, model and data, the training set's
    size, the reference world size, each world size's planned updates, the design's lines, the
    searched studies' edge flags (study name -> best interior or not) and the tuning seconds.
    ``updates`` and ``global_batches`` map each world size of the design to its planned updates
    and global batch (a world size may have no finished run to read them from). ``lr_exponents``:
    per recipe, the exponent of its tuned LR in the batch (``LrExponentFit.to_dict()``).
    ``interior``: None for a study no trial of which ended ok (no best). ``controls_not_run``: the
    designed convergence controls that could not run, each in words with why."""

    experiment: str
    model: str
    data: str
    train_size: int
    reference: int
    updates: Mapping[int, int]
    global_batches: Mapping[int, int]
    design: Sequence[str] = ()
    interior: Mapping[str, bool | None] = dataclasses.field(default_factory=dict)
    tuning_seconds: float = 0.0
    lr_exponents: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    controls_not_run: Sequence[str] = ()


def _rows(summary: Sequence[Mapping[str, Any]], label: str, world_size: int) -> list[Mapping[str, Any]]:
    return [row for row in summary if row["label"] == label and int(row["world_size"]) == world_size]


def _ok_values(rows: Sequence[Mapping[str, Any]], column: str) -> list[float]:
    return [float(row[column]) for row in rows if is_ok(row["status"]) and row.get(column) not in (None, "")]


def _tests(summary: Sequence[Mapping[str, Any]], label: str | None, world_size: int) -> list[float]:
    """The test accuracies of ``label``'s ok runs at ``world_size`` (none for no label)."""
    return _ok_values(_rows(summary, label, world_size), "test_accuracy") if label else []


def _excluded(summary: Sequence[Mapping[str, Any]], label: str, world_size: int) -> int:
    """How many of ``label``'s runs at ``world_size`` are not ok (left out of its mean)."""
    return sum(not is_ok(row["status"]) for row in _rows(summary, label, world_size))


def _estimate(record: Estimate) -> dict[str, Any]:
    return {"mean": record.mean, "low": record.low, "high": record.high, "n": record.n}


def _difference(record: Estimate) -> dict[str, Any]:
    return {**_estimate(record), "n_second": record.n_second, "df": record.df}


def _chosen(summary: Sequence[Mapping[str, Any]], arms: Sequence[ArmSpec], world_size: int) -> tuple[str | None, dict[str, str]]:
    """The arm to use at ``world_size`` and every eligible arm's standing on validation (module doc)."""
    eligible = {}
    for arm in arms:
        rows = _rows(summary, arm.label, world_size)
        if arm.kind != "control" and arm.world_size == world_size and rows and all(is_ok(row["status"]) for row in rows):
            eligible[arm.label] = _ok_values(rows, "validation_accuracy")
    words = standing(eligible)
    if not words:
        return None, {}
    means = {label: statistics.fmean(values) for label, values in eligible.items() if values}
    return max(means, key=lambda label: means[label]), words


def arm_decision(difference: Estimate | None, margin: float, ok: int, runs: int, reference_ok: int, reference_runs: int) -> dict[str, Any]:
    """The decision word on arm − reference, and when one side has no ok run (no difference to
    take: every seed of a rule diverged) the word from how many runs of each ended ok instead
    (``trained_share_claim``: Fisher's exact test, one-sided at 2.5%), with its text as
    ``decided_by``."""
    if (ok and reference_ok) or not runs or not reference_runs:
        return {"decision": claim(difference, margin)}
    word, text = trained_share_claim(ok, runs, reference_ok, reference_runs)
    return {"decision": word, "decided_by": text}


def _world_row(summary, arms, facts: StudyFacts, world_size: int, reference_tests: list[float], margin: float,
               reference_runs: int = 0) -> dict[str, Any]:
    here = [arm for arm in arms if arm.world_size == world_size and arm.kind != "control"]
    use, words = _chosen(summary, arms, world_size)
    batch = facts.global_batches[world_size]
    tests = _tests(summary, use, world_size)
    difference = difference_interval(tests, reference_tests)
    tuned = {arm.recipe: arm.label for arm in here if arm.kind == "tuned"}
    rules = {}
    for arm in (arm for arm in here if arm.kind == "rule"):
        rule_tests = _tests(summary, arm.label, world_size)
        against = difference_interval(rule_tests, reference_tests)
        # What the rule costs against tuning its own recipe's LR at this world size.
        cost = difference_interval(_tests(summary, tuned.get(arm.recipe), world_size), rule_tests)
        rules[arm.rule] = {"label": arm.label, "test_accuracy": _estimate(mean_interval(rule_tests)), "cost": _difference(cost),
                           "difference": _difference(against), "excluded": _excluded(summary, arm.label, world_size),
                           **arm_decision(against, margin, len(rule_tests), len(_rows(summary, arm.label, world_size)),
                                       len(reference_tests), reference_runs)}
    learning_rate = [float(row["learning_rate"]) for row in _rows(summary, use, world_size)] if use else []
    return {
        "world_size": world_size, "global_batch": batch,
        "share": batch / facts.train_size,
        "updates": facts.updates.get(world_size),
        "use": use, "tied_with_the_best": sorted(label for label, word in words.items() if word == TIED_WITH_THE_BEST and label != use),
        "standing": words.get(use),
        "learning_rate": learning_rate[0] if learning_rate else None,
        "test_accuracy": _estimate(mean_interval(tests)),
        "difference": _difference(difference),
        "decision": "reference" if world_size == facts.reference else claim(difference, margin),
        "rules": rules,
        "excluded": {arm.label: _excluded(summary, arm.label, world_size) for arm in here},
    }


def _linear_rule(per_world: list[dict[str, Any]], reference: int) -> tuple[int | None, int | None]:
    """(the largest world size where the linear rule ``matches`` or is ``better`` with no smaller
    world size ``worse``, the first world size where it is ``worse``); None where there is none."""
    holds, first_worse = None, None
    for row in per_world:
        decision = row["rules"].get("linear", {}).get("decision")
        if row["world_size"] == reference or first_worse is not None:
            continue
        if decision == WORSE:
            first_worse = row["world_size"]
        elif decision in ("matches", "better"):
            holds = row["world_size"]
    return holds, first_worse


def _noise_scale(summary: Sequence[Mapping[str, Any]], histories: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    finals = [float(row["noise_scale"]) for row in summary if is_ok(row["status"]) and row.get("noise_scale") not in (None, "")
              and math.isfinite(float(row["noise_scale"])) and float(row["noise_scale"]) > 0]
    over_training = [value for row in summary if is_ok(row["status"]) for value in histories.get(row["run_id"], ())
                     if value is not None and math.isfinite(value) and value > 0]
    if not finals:
        return {"b_simple": None, "low": None, "high": None, "runs": 0}
    spread = over_training or finals
    return {"b_simple": statistics.median(finals), "low": min(spread), "high": max(spread), "runs": len(finals)}


def _flags(per_world: list[dict[str, Any]], summary, facts: StudyFacts, controls: list[dict[str, Any]]) -> list[str]:
    flags = []
    for row in per_world:
        if row["updates"] is not None and row["updates"] < MIN_UPDATES:
            flags.append(f"world {row['world_size']}: {row['updates']} updates, fewer than {MIN_UPDATES}: a loss there may be the "
                         "budget's, not the batch's")
        if row["share"] > MAX_BATCH_FRACTION:
            flags.append(f"world {row['world_size']}: global batch {row['global_batch']} is {100 * row['share']:.1f}% of the "
                         f"training set, above {MAX_BATCH_FRACTION:.0%}: out of the papers' regime")
        if row["use"] is None:
            flags.append(f"world {row['world_size']}: no arm had every seed ok")
        elif row["test_accuracy"]["n"] < MIN_SEEDS:
            flags.append(f"world {row['world_size']}: {row['use']} has {row['test_accuracy']['n']} ok seeds, fewer than "
                         f"{MIN_SEEDS}: no claim rests on it")
        for rule, entry in row["rules"].items():
            ok = entry["test_accuracy"]["n"]
            if 0 < ok < MIN_SEEDS and entry["label"] != row["use"]:
                flags.append(f"world {row['world_size']}: the {rule} rule ({entry['label']}) has {ok} ok seeds, fewer than "
                             f"{MIN_SEEDS}: no claim rests on it")
    flags += [f"{study}: the best LR sits on the edge of the grid tried (extend the grid)" if interior is False else
              f"{study}: no trial ended ok at any LR tried, every one diverged or spiked (no LR to carry)"
              for study, interior in facts.interior.items() if not interior]
    flags += list(facts.controls_not_run)
    statuses: dict[str, int] = {}
    for row in summary:
        if not is_ok(row["status"]):
            statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    flags += [f"{count} run{'s' if count > 1 else ''} {status}, left out of every mean" for status, count in sorted(statuses.items())]
    for control in controls:
        if control["decision"] == "better":
            flags.append(f"world {control['world_size']}: {control['arm']} gains {100 * control['gain']['mean']:+.1f} points when "
                         f"trained {control['factor']:g}x longer: the budget has not converged there")
    return flags


def _controls(summary, arms: Sequence[ArmSpec], margin: float) -> list[dict[str, Any]]:
    rows = []
    for arm in (arm for arm in arms if arm.kind == "control"):
        longer = _tests(summary, arm.label, arm.world_size)
        shorter = _tests(summary, arm.control_of, arm.world_size)
        gain = difference_interval(longer, shorter)
        rows.append({"arm": arm.control_of, "world_size": arm.world_size, "factor": arm.factor,
                     "longer": _estimate(mean_interval(longer)), "gain": _difference(gain), "decision": claim(gain, margin)})
    return rows


def answer_data(summary: Sequence[Mapping[str, Any]], arms: Sequence[ArmSpec], facts: StudyFacts, *,
                histories: Mapping[str, Sequence[float]] | None = None, margin: float = DEFAULT_CLAIM_MARGIN) -> dict[str, Any]:
    """``answer.json``'s content (module doc) from the study's summary rows and its arms."""
    sizes = sorted(facts.global_batches)
    reference_use, _ = _chosen(summary, arms, facts.reference)
    reference_tests = _tests(summary, reference_use, facts.reference)
    reference_runs = len(_rows(summary, reference_use, facts.reference)) if reference_use else 0
    per_world = [_world_row(summary, arms, facts, size, reference_tests, margin, reference_runs) for size in sizes]
    holds, first_worse = _linear_rule(per_world, facts.reference)
    controls = _controls(summary, arms, margin)
    seconds = sum(float(row["wall_time_seconds"] or 0) for row in summary) + facts.tuning_seconds
    return {
        "experiment": facts.experiment, "model": facts.model, "data": facts.data, "train_size": facts.train_size,
        "reference_world_size": facts.reference, "margin": margin,
        "per_world_size": per_world,
        "linear_rule_holds_up_to": holds, "first_worse": first_worse,
        "noise_scale": _noise_scale(summary, histories or {}),
        "lr_exponent": {recipe: dict(fit) for recipe, fit in facts.lr_exponents.items()},
        "controls": controls,
        "flags": _flags(per_world, summary, facts, controls),
        "machine_hours": seconds / 3600,
        "design": list(facts.design),
    }


def estimate_text(record: Mapping[str, Any], signed: bool = False) -> str:
    """The estimate as text; with fewer than ``MIN_SEEDS`` values on a side no interval is shown
    (``lbtrain.reports.decisions.few_seeds``: a number, not a bound, and no claim rests on it)."""
    few = few_seeds(Estimate(**record))
    estimate = Estimate(record["mean"], None if few else record["low"], None if few else record["high"], record["n"],
                        df=None if few else record.get("df"), n_second=record.get("n_second"))
    text = estimate.describe(signed=signed)
    return f"{text[:-1]}: no interval)" if few and record["mean"] is not None and record["n"] else text


def _world_text(world_size: int | None, per_world: Sequence[Mapping[str, Any]]) -> str:
    if world_size is None:
        return "-"
    batch = next(row["global_batch"] for row in per_world if row["world_size"] == world_size)
    return f"{world_size} workers (global batch {batch})"


def answer_markdown(answer: Mapping[str, Any]) -> str:
    """``answer.md``: the verdict first, then one table row per world size, the rules' costs,
    the noise scale, the controls, the flags and the design, every number from ``answer``."""
    from lbtrain.reports.tables import markdown_table

    per_world, reference = answer["per_world_size"], answer["reference_world_size"]
    holds, worse = answer["linear_rule_holds_up_to"], answer["first_worse"]
    margin = 100 * answer["margin"]
    decisions = ", ".join(f"{row['world_size']}: {row['rules']['linear']['decision']}" for row in per_world if "linear" in row["rules"])
    held = (f"**{_world_text(holds, per_world)}** (matches world {reference}'s chosen arm within {margin:g} "
            f"point{'s' if margin != 1 else ''})" if holds else "**no larger world size shown**")
    verdict = [f"- The linear rule (with warmup) holds up to: {held}; its decision at each world size: {decisions or 'none measured'}.",
               f"- First world size where it is worse: **{_world_text(worse, per_world) if worse else NOT_REACHED}**."]
    largest = per_world[-1]
    if largest["use"]:
        verdict.append(f"- At {largest['world_size']} workers use **{largest['use']}** (LR {largest['learning_rate']:.4g}): test accuracy "
                       f"{estimate_text(largest['test_accuracy'])}, {estimate_text(largest['difference'], True)} against world {reference} "
                       f"({largest['decision']}).")
    noise = answer["noise_scale"]
    if noise["b_simple"] is not None:
        verdict.append(f"- Gradient noise scale B_simple = {noise['b_simple']:.0f} (median of {noise['runs']} runs' final values; "
                       f"{noise['low']:.0f} to {noise['high']:.0f} over training): it predicts a critical batch of about that size, "
                       "beyond which more workers buy few fewer steps.")
    table = markdown_table(
        ["world", "global batch", "share of data", "updates", "use (best on validation)", "tied with the best", "LR",
         "test acc [95% CI]", f"− world {reference} [95% CI]", "decision", "not ok"],
        [[row["world_size"], row["global_batch"], f"{100 * row['share']:.2f}%", row["updates"], row["use"] or "no arm ok",
          ", ".join(row["tied_with_the_best"]) or "-", "-" if row["learning_rate"] is None else f"{row['learning_rate']:.4g}",
          estimate_text(row["test_accuracy"]), "reference" if row["world_size"] == reference else estimate_text(row["difference"], True),
          row["decision"], sum(row["excluded"].values())] for row in per_world])
    rule_rows = [[row["world_size"], rule, estimate_text(entry["test_accuracy"]), estimate_text(entry["difference"], True),
                  entry["decision"] + (f" ({entry['decided_by']})" if entry.get("decided_by") else ""),
                  estimate_text(entry["cost"], True), entry["excluded"]]
                 for row in per_world for rule, entry in row["rules"].items()]
    sections = [f"# {answer['experiment']}: the scaling answer",
                f"{answer['model']} on {answer['data']} ({answer['train_size']:,} training samples). Chosen on validation, "
                f"reported on test; means over ok seeds with Student-t intervals, differences with Welch's interval and df; "
                f"decision words by the non-inferiority margin of {margin:g} point{'s' if margin != 1 else ''}.",
                "\n".join(verdict), table]
    if rule_rows:
        sections.append("What each rule gives and costs (carried from the reference tuning; *cost* = tuned at this world "
                        "size − rule):\n\n" + markdown_table(
                            ["world", "rule", "test acc [95% CI]", f"− world {reference}", "decision", "cost (tuned − rule)", "not ok"],
                            rule_rows))
    if answer.get("lr_exponent"):
        sections.append("The tuned LR against the global batch, per recipe (`lr ~ B^alpha`: 1 is the linear rule, 0.5 the "
                        "sqrt rule; least squares over the log of each world size's top 3 ok trials' LRs, bootstrap interval "
                        "over trials):\n\n" + "\n".join(f"- {recipe}: {LrExponentFit.from_dict(fit).describe()}"
                                                         for recipe, fit in answer["lr_exponent"].items()))
    if answer["controls"]:
        sections.append("Convergence controls (the arm trained longer, same seeds):\n\n" + markdown_table(
            ["world", "arm", "factor", "longer: test acc", "gain (longer − arm)", "decision"],
            [[row["world_size"], row["arm"], f"{row['factor']:g}x", estimate_text(row["longer"]), estimate_text(row["gain"], True), row["decision"]]
             for row in answer["controls"]]))
    sections.append(f"![test accuracy against the global batch]({FIGURES_FOLDER}/{ANSWER_FIGURES['accuracy']})\n\n"
                    f"![the chosen learning rate against the global batch]({FIGURES_FOLDER}/{ANSWER_FIGURES['learning_rate']})")
    sections.append("Flags:\n\n" + ("\n".join(f"- {flag}" for flag in answer["flags"]) or "- none"))
    sections.append(f"Machine time: {answer['machine_hours']:.2f} hours (tuning trials and runs, one after another).")
    if answer["design"]:
        sections.append("Design:\n\n" + "\n".join(f"- {line.strip()}" for line in answer["design"]))
    return "\n\n".join(sections) + "\n"


def write_answer_figures(answer: Mapping[str, Any], summary: Sequence[Mapping[str, Any]], arms: Sequence[ArmSpec],
                         folder: Path) -> list[Path]:
    """Accuracy against the global batch (the chosen arm and each rule arm: means with 95% bands,
    each point's ok seeds given so a point on fewer is drawn open and labelled, no band below
    ``MIN_SEEDS``, every run not ok drawn as a mark) and the chosen LR against the batch, beside
    the linear and sqrt rules carried from the reference."""
    from lbtrain.reports.plots import Line, plot_panels

    per_world = answer["per_world_size"]
    lines = accuracy_lines(answer, summary, arms)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [] if not lines else [plot_panels({"test accuracy": lines}, folder / ANSWER_FIGURES["accuracy"], xlabel="global batch",
                                              ylabel="test accuracy", log2_x=True)]
    chosen = [(row["global_batch"], row["learning_rate"]) for row in per_world if row["learning_rate"]]
    if chosen:
        batches = [float(row["global_batch"]) for row in per_world]
        base = chosen[0][1] * batches[0] / chosen[0][0]
        rate_lines = [Line("use", [float(b) for b, _ in chosen], [lr for _, lr in chosen]),
                      Line("linear rule", batches, [base * b / batches[0] for b in batches], reference=True),
                      Line("sqrt rule", batches, [base * math.sqrt(b / batches[0]) for b in batches], reference=True)]
        paths.append(plot_panels({"learning rate": rate_lines}, folder / ANSWER_FIGURES["learning_rate"], xlabel="global batch",
                                 ylabel="learning rate", log2_x=True, log_y=True))
    return paths


def accuracy_lines(answer: Mapping[str, Any], summary: Sequence[Mapping[str, Any]], arms: Sequence[ArmSpec]) -> list:
    """The accuracy figure's lines and marks (``write_answer_figures``): the chosen arm's and each
    rule's test accuracy against the global batch, a point's ``n`` its ok seeds and its band only
    from ``MIN_SEEDS`` seeds, every run not ok a mark at its batch."""
    from lbtrain.reports.plots import Line, Mark

    per_world = answer["per_world_size"]
    lines: list[Line | Mark] = []
    reference = answer["reference_world_size"]
    families = {"use": [(row["world_size"], row["use"]) for row in per_world if row["use"]]}
    for arm in (arm for arm in arms if arm.kind == "rule"):
        # A rule carries its recipe's tuning at the reference: its line starts at that tuned arm.
        start = [(reference, f"{arm.recipe} tuned")]
        families.setdefault(f"{arm.rule} rule", start).append((arm.world_size, arm.label))
    for name, points in families.items():
        xs, ys, lows, highs, seeds = [], [], [], [], []
        for size, label in points:
            estimate = mean_interval(_tests(summary, label, size))
            rows = _rows(summary, label, size)
            if estimate.mean is not None:
                few = estimate.n < MIN_SEEDS  # no band on 1 or 2 seeds, as the tables show no interval
                xs.append(float(rows[0]["global_batch"]))
                ys.append(estimate.mean)
                lows.append(None if few else estimate.low)
                highs.append(None if few else estimate.high)
                seeds.append(estimate.n)
            for row in rows:
                if not is_ok(row["status"]):
                    value = row.get("test_accuracy")
                    finite = value not in (None, "") and math.isfinite(float(value))
                    lines.append(Mark(row["status"], name, float(row["global_batch"]), float(value) if finite else None))
        if xs:
            lines.append(Line(name, xs, ys, lows, highs, n=seeds))
    return lines
