"""goyal_v3 on the results page (``lab.results_page.goyal_v3``): where linear scaling
with warmup stops, set against critical_batch_v3's B_crit; the page's lead (the arm chosen on
validation at each world size, its cost in updates, its difference from world size 1's chosen
arm); the study's own table, with no arm for the empty side of a rule_only or tuned_only recipe
and no train-longer re-run among the arms chosen from; the convergence control and Hoffer et al.'s
anchor on it; and the second-edition anchors goyal_v3 supersedes (``results_page.anchors``).

Every study is synthetic, written to ``tmp_path`` as the protocol writes it: ``summary.csv``,
``protocol.json`` (rows as ``lbtrain.studies.protocol.comparison_rows`` makes them) and each run's
``metrics.json`` (the regime: 51,200 training images, 8 epochs at batch 32, 128 and 512 for world
sizes 1, 4 and 16). Five final seeds per arm, 0.1 point apart: Welch intervals of about ±0.2
points, narrow enough for a claim."""

import csv
import dataclasses
import json
import math
from pathlib import Path

from lab.results_page.anchors import ANCHORS, GOYAL_LINEAR, HOFFER, anchor_row, superseded_by
from lab.results_page.common import judge, judged_points, points_text, study_runs, validation_choice
from lab.results_page.goyal import anchor_goyal_no_warmup, final_runs, study_arms
from lab.results_page.goyal_v3 import (
    anchor_goyal_v3_longer,
    control_sentence,
    converged_text,
    section_goyal_v3,
    section_lead,
    stops_sentence,
    where_linear_scaling_stops,
)
from lbtrain.reports.decisions import claim
from lbtrain.reports.scaling_laws import CriticalBatchFit
from lbtrain.reports.statistics import Estimate, difference_interval, mean_interval

BATCH = {1: 32, 4: 128, 16: 512}
TRAIN_SIZE = 51_200  # 1,600 updates an epoch at batch 32, 400 at 128, 100 at 512
EPOCHS = 8
FINALS = [1, 2, 3, 4, 5]
# The regime study_regimes reads at each batch from the runs' metrics.json (the re-runs' longer
# budgets at 512 are not the fewest updates there).
REGIME_128 = "batch 128 = 0.25% of 51,200; 3,200 updates (8 epochs)"
REGIME_512 = "batch 512 = 1% of 51,200; 800 updates (8 epochs)"

# Per recipe: the rules it is carried by, and whether it is tuned beyond world size 1 (momentum
# without warmup is rule_only, LARS tuned_only: experiments/goyal_v3.yaml).
RECIPES = {"momentum+warmup": (("linear", "sqrt"), True), "momentum": (("linear",), False), "lars+warmup": ((), True)}
LONGER = "momentum+warmup tuned 3x longer"
EQUAL_STEPS = "momentum+warmup tuned equal steps"


def seeds(first):
    """Five seeds' accuracies 0.1 point apart from ``first``."""
    return [round(first + 0.001 * k, 3) for k in range(5)]


def ok(test, validation):
    return {"status": "ok", "test": test, "validation": validation}


DIVERGED = {"status": "diverged", "test": [None] * 5, "validation": [None] * 5}
REFERENCE = seeds(0.900)  # momentum+warmup tuned at world size 1: chosen there on validation


def study_cells(**changes):
    """Summary label and world size -> the arm's five final runs. Validation and test disagree
    where it matters: choosing on test would take LARS at world sizes 1 and 16 and
    momentum+warmup tuned at 4; the re-runs at 16 have the highest validation accuracy of all.
    ``changes`` replace cells by name (``linear_4``, ``linear_16``)."""
    cells = {
        ("momentum+warmup tuned", 1): ok(REFERENCE, seeds(0.920)),
        ("momentum tuned", 1): ok(seeds(0.890), seeds(0.880)),
        ("lars+warmup tuned", 1): ok(seeds(0.910), seeds(0.890)),
        ("momentum+warmup tuned", 4): ok(seeds(0.903), seeds(0.880)),
        ("momentum+warmup linear rule", 4): changes.get("linear_4", ok(seeds(0.899), seeds(0.922))),
        ("momentum+warmup sqrt rule", 4): ok(seeds(0.880), seeds(0.860)),
        ("momentum rule", 4): ok(seeds(0.870), seeds(0.850)),
        ("lars+warmup tuned", 4): ok(seeds(0.895), seeds(0.870)),
        ("momentum+warmup tuned", 16): ok(seeds(0.880), seeds(0.912)),
        ("momentum+warmup linear rule", 16): changes.get("linear_16", ok(seeds(0.850), seeds(0.830))),
        ("momentum+warmup sqrt rule", 16): ok(seeds(0.860), seeds(0.840)),
        ("momentum rule", 16): ok(seeds(0.800), seeds(0.790)),
        ("lars+warmup tuned", 16): ok(seeds(0.890), seeds(0.880)),
        (LONGER, 16): ok(seeds(0.897), seeds(0.950)),
        (EQUAL_STEPS, 16): ok(seeds(0.898), seeds(0.960)),
    }
    assert set(changes) <= {"linear_4", "linear_16"}
    return cells


def ok_tests(cells, label, world):
    """The test accuracies of the ok runs of one arm, and how many runs it had."""
    cell = cells.get((label, world))
    if cell is None:
        return [], 0
    return ([value for value in cell["test"] if cell["status"] == "ok"]), len(cell["test"])


def estimate(values):
    return dataclasses.asdict(mean_interval(values))


def difference(a, b):
    return dataclasses.asdict(difference_interval(a, b))


def rule_label(cells, recipe, rule, world):
    """A rule arm's summary label: ``<recipe> <rule> rule``, or ``<recipe> rule`` for a recipe
    the protocol names no rules for (momentum without warmup, ``protocol.rule_only``)."""
    named = f"{recipe} {rule} rule"
    return named if (named, world) in cells else f"{recipe} rule"


def protocol_rows(cells):
    """protocol.json's rows as comparison_rows writes them: one row per recipe at world size 1
    (the reference), then one per rule (``-`` for a tuned_only recipe) at each larger world size."""
    rows = []
    for recipe, (rules, tuned_beyond) in RECIPES.items():
        base, _ = ok_tests(cells, f"{recipe} tuned", 1)
        for world in BATCH:
            at_reference = world == 1
            tuned, tuned_runs = ok_tests(cells, f"{recipe} tuned", world) if at_reference or tuned_beyond else ([], 0)
            for rule in (("reference",) if at_reference else rules or ("-",)):
                values, runs = (tuned, tuned_runs) if at_reference else ([], 0) if rule == "-" else ok_tests(cells, rule_label(cells, recipe, rule, world), world)
                rows.append({
                    "recipe": recipe, "rule_name": rule, "world_size": world, "global_batch": BATCH[world],
                    "tuned": estimate(tuned), "tuned_runs": tuned_runs, "tuned_trials": 8 if tuned_runs else 0,
                    "rule": estimate(values), "rule_runs": runs, "rule_trials": 0 if rule == "-" else 8,
                    "cost_of_rule": None if at_reference else difference(tuned, values),
                    "rule_minus_reference": None if at_reference else difference(values, base),
                    "tuned_minus_reference": None if at_reference else difference(tuned, base)})
    return rows


def train_longer_row(cells):
    """The convergence control: momentum+warmup tuned at world size 16 re-run 3x longer."""
    shorter, _ = ok_tests(cells, "momentum+warmup tuned", 16)
    longer, runs = ok_tests(cells, LONGER, 16)
    return {"arm": "momentum+warmup tuned", "recipe": "momentum+warmup", "world_size": 16, "global_batch": 512,
            "shorter": estimate(shorter), "longer": estimate(longer), "longer_runs": runs, "gain": difference(longer, shorter),
            "longer_minus_reference": difference(longer, REFERENCE), "factor": 3.0, "steps": 800, "longer_steps": 2400}


def budget(label):
    if label.endswith("x longer"):
        return {"epochs": 3 * EPOCHS}
    if label.endswith("equal steps"):
        return {"steps": EPOCHS * TRAIN_SIZE // BATCH[1]}
    return {"epochs": EPOCHS}


def learning_rate(label, world):
    """The linear rule's LR, 0.1 x the world size; the sqrt rule's, 0.1 x its square root."""
    return 0.1 * math.sqrt(world) if "sqrt" in label else 0.1 * world


def write_study(results: Path, cells=None, *, study="goyal_v3", summary=True, train_longer=True):
    """``results/<study>``: protocol.json, each run's metrics.json, and (``summary``) summary.csv;
    returns the protocol."""
    cells = study_cells() if cells is None else cells
    folder = results / study
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for number, ((label, world), cell) in enumerate(cells.items()):
        for seed, test, validation in zip(FINALS, cell["test"], cell["validation"]):
            run_id = f"{label.replace(' ', '-').replace('+', '-')}-w{world}-s{seed}-{number:04d}{seed:06d}"
            rows.append({"run_id": run_id, "label": label, "status": cell["status"], "world_size": world,
                         "global_batch": BATCH[world], "seed": seed, "learning_rate": learning_rate(label, world),
                         "test_accuracy": test, "validation_accuracy": validation})
            (folder / "runs" / run_id).mkdir(parents=True)
            (folder / "runs" / run_id / "metrics.json").write_text(json.dumps({
                "global_batch": BATCH[world], "world_size": world, "steps_per_epoch": TRAIN_SIZE // BATCH[world],
                "budget": budget(label)}))
    if summary:
        with open(folder / "summary.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    protocol = {"rows": protocol_rows(cells), "trials": {f"{study}-study-{k}": 8 for k in range(3)},
                "best_arms": {"1": "momentum+warmup tuned", "4": "momentum+warmup linear rule", "16": "momentum+warmup tuned"},
                "seeds": {"tuning": [0], "finals": FINALS}, "train_longer": [train_longer_row(cells)] if train_longer else []}
    (folder / "protocol.json").write_text(json.dumps(protocol))
    return protocol


def write_critical_batch(results: Path, fit: CriticalBatchFit) -> None:
    (results / "critical_batch_v3").mkdir(parents=True, exist_ok=True)
    (results / "critical_batch_v3" / "report.json").write_text(json.dumps({"critical_batch": fit.to_dict()}))


# A fit with an interval: B_crit's hull of bootstrap and leave-one-seed-out is [250, 380].
FIT = CriticalBatchFit(batches=6, s_min=100.0, b_crit=300.0, relative_rms=0.05, b_crit_bootstrap=(250.0, 350.0),
                       b_crit_leave_one_out=(260.0, 380.0), seeds=3)
FIT_TEXT = "critical_batch_v3 measured B_crit = 300 [250, 380] (6 batch sizes, 3 seeds or more each) on the same model and data"
NOT_COMMITTED = (" critical_batch_v3, the measured critical batch of the same model and data, is not committed yet "
                 "(`make study-v3` makes it).")


def lines_starting(text, start):
    return [line for line in text.splitlines() if line.startswith(start)]


# 1. Where linear scaling stops ----------------------------------------------------------------


def test_linear_scaling_matches_at_batch_128_and_stops_at_512_where_it_is_5_points_worse(tmp_path):
    protocol = write_study(tmp_path)
    held, stopped = where_linear_scaling_stops(protocol)
    # The sqrt rule (-2 points at 128) and momentum without warmup (-3) would stop it at 128.
    assert (held["rule_name"], held["global_batch"], stopped["rule_name"], stopped["global_batch"]) == ("linear", 128, "linear", 512)
    at_128, at_512 = difference_interval(seeds(0.899), REFERENCE), difference_interval(seeds(0.850), REFERENCE)
    assert (judge(at_128), judge(at_512)) == ("matches", "worse")
    assert points_text(at_128).startswith("-0.1 [") and points_text(at_512).startswith("-5.0 [")

    sentence = stops_sentence(tmp_path, protocol)
    assert sentence.startswith(
        "Linear scaling with warmup matches momentum+warmup tuned at world size 1 (the whole 95% interval above -1 point) "
        f"up to {REGIME_128}: {points_text(at_128)} points; at {REGIME_512} it is {points_text(at_512)} points: {judge(at_512)}")
    assert sentence.endswith(NOT_COMMITTED)

    write_critical_batch(tmp_path, FIT)
    sentence = stops_sentence(tmp_path, protocol)
    assert "not committed" not in sentence
    assert sentence.endswith(f" {FIT_TEXT}: batch 128 (held) is 0.43 x B_crit and batch 512 (stopped) is 1.7 x B_crit.")  # 128 / 300, 512 / 300

    write_critical_batch(tmp_path, CriticalBatchFit(batches=3, note="not enough points (n = 3 batch sizes < 4)"))
    assert stops_sentence(tmp_path, protocol).endswith(
        " critical_batch_v3 has no critical batch to set it against (not enough points (n = 3 batch sizes < 4)).")


def test_linear_scaling_that_matches_at_every_batch_was_not_seen_to_stop(tmp_path):
    protocol = write_study(tmp_path, study_cells(linear_16=ok(seeds(0.899), seeds(0.830))))
    held, stopped = where_linear_scaling_stops(protocol)
    assert held["global_batch"] == 512 and stopped is None
    at_512 = difference_interval(seeds(0.899), REFERENCE)
    sentence = stops_sentence(tmp_path, protocol)
    assert (f"up to {REGIME_512}: {points_text(at_512)} points. That is the largest batch goyal_v3 measured: "
            "it was not seen to stop.") in sentence
    assert REGIME_128 not in sentence
    write_critical_batch(tmp_path, FIT)
    assert stops_sentence(tmp_path, protocol).endswith(f" {FIT_TEXT}: batch 512 (held) is 1.7 x B_crit.")  # 512 / 300


def test_a_linear_rule_with_no_ok_seed_stops_linear_scaling_without_a_difference(tmp_path):
    protocol = write_study(tmp_path, study_cells(linear_16=DIVERGED))
    held, stopped = where_linear_scaling_stops(protocol)
    assert held["global_batch"] == 128 and stopped["global_batch"] == 512 and stopped["rule"]["n"] == 0
    sentence = stops_sentence(tmp_path, protocol)
    assert f"; at {REGIME_512} it is without an ok seed (0 of 5 final runs ok)." in sentence
    # The lead's column of Goyal's recipe says why it has no difference.
    (row_16,) = lines_starting("\n".join(section_lead(tmp_path)), "| 16 |")
    assert row_16.endswith("| no ok seed (5 diverged) |")


def test_a_linear_rule_not_shown_to_match_at_the_first_larger_batch_holds_nowhere(tmp_path):
    wide = [0.88, 0.90, 0.92, 0.89, 0.91]  # mean 0.900, but its interval reaches below -1 point
    protocol = write_study(tmp_path, study_cells(linear_4=ok(wide, seeds(0.922))))
    at_128 = difference_interval(wide, REFERENCE)
    assert judge(at_128) == "inconclusive"
    assert where_linear_scaling_stops(protocol)[0] is None
    write_critical_batch(tmp_path, FIT)
    assert stops_sentence(tmp_path, protocol) == (
        "Linear scaling with warmup is not shown to match momentum+warmup tuned at world size 1 at any larger batch: "
        f"at {REGIME_128} it is {points_text(at_128)} points: {judge(at_128)}. {FIT_TEXT}: batch 128 (stopped) is 0.43 x B_crit.")


# 2. The page's lead --------------------------------------------------------------------------


def test_the_lead_gives_per_world_size_the_arm_chosen_on_validation_its_cost_and_its_difference(tmp_path):
    cells = study_cells()
    protocol = write_study(tmp_path, cells)
    # On test accuracy another arm would win at every world size.
    for world, best_on_test in ((1, "lars+warmup tuned"), (4, "momentum+warmup tuned"), (16, "lars+warmup tuned")):
        finals = {label: cell for (label, size), cell in cells.items() if size == world and label not in (LONGER, EQUAL_STEPS)}
        assert max(finals, key=lambda label: sum(finals[label]["test"])) == best_on_test != protocol["best_arms"][str(world)]

    lines = section_lead(tmp_path)
    text = "\n".join(lines)
    linear_4, tuned_16, linear_16 = seeds(0.899), seeds(0.880), seeds(0.850)
    assert lines_starting(text, "| 1 |") == [
        f"| 1 | 32 | 0.062% | 12,800 | momentum+warmup, tuned; best | {mean_interval(REFERENCE).describe()} | the reference | the reference |"]
    at_4 = judged_points(difference_interval(linear_4, REFERENCE))
    assert lines_starting(text, "| 4 |") == [
        f"| 4 | 128 | 0.25% | 3,200 (0.25 x world size 1's) | momentum+warmup, linear rule; best | "
        f"{mean_interval(linear_4).describe()} | {at_4} | {at_4} |"]
    chosen_16 = judged_points(difference_interval(tuned_16, REFERENCE))
    assert chosen_16.startswith("-2.0 [") and chosen_16.endswith(": worse")
    assert lines_starting(text, "| 16 |") == [
        f"| 16 | 512 | 1% | 800 (0.062 x world size 1's) | momentum+warmup, tuned; best | {mean_interval(tuned_16).describe()} | "
        f"{chosen_16} | {judged_points(difference_interval(linear_16, REFERENCE))} |"]

    assert ("each arm's best re-run with 5 fresh seeds (1, 2, 3, 4, 5; the tuning trials used 0) and tested. The reference of "
            "every difference: the arm chosen on validation at world size 1, momentum+warmup, tuned "
            f"({mean_interval(REFERENCE).describe()})") in text
    assert stops_sentence(tmp_path, protocol) in lines and control_sentence(protocol) in lines


def test_the_lead_without_goyal_v3_names_the_command_that_makes_it(tmp_path):
    assert section_lead(tmp_path) == [
        "## Third edition: which recipe at world size N, what it costs, where linear scaling stops", "",
        "*Not committed yet*: `make study-v3` makes it (resumable).", ""]


# 3. The arms ---------------------------------------------------------------------------------


def test_an_empty_side_of_a_rule_only_or_tuned_only_recipe_is_no_arm_of_the_study_table(tmp_path):
    protocol = write_study(tmp_path)
    rows_16 = [(row["recipe"], row["rule_name"], row["tuned_runs"], row["rule_runs"]) for row in protocol["rows"] if row["world_size"] == 16]
    assert ("momentum", "linear", 0, 5) in rows_16 and ("lars+warmup", "-", 5, 0) in rows_16
    arms = study_arms(protocol)
    expected = ["momentum+warmup, linear rule", "momentum+warmup, tuned", "momentum+warmup, sqrt rule", "momentum, linear rule",
                "lars+warmup, tuned"]
    assert sorted((arm["world_size"], arm["label"]) for arm in arms) == sorted((world, label) for world in (4, 16) for label in expected)

    text = "\n".join(section_goyal_v3(tmp_path))
    assert "not run" not in text and "no test accuracy" not in text
    assert "| momentum, tuned |" not in text and "lars+warmup, - rule" not in text
    assert "| arm | world 4 (batch 128) − reference | LR | world 16 (batch 512) − reference | LR |" in text
    assert len(lines_starting(text, "| momentum")) + len(lines_starting(text, "| lars")) == len(expected)
    lars = [judged_points(difference_interval(seeds(first), REFERENCE)) for first in (0.895, 0.890)]
    assert f"| lars+warmup, tuned | {lars[0]} | 0.4 | {lars[1]} | 1.6 |" in text
    assert f"| momentum+warmup, sqrt rule | {judged_points(difference_interval(seeds(0.880), REFERENCE))} | 0.2 |" in text
    assert ("Each recipe tuned at world size 1, test accuracy: "
            f"momentum+warmup {mean_interval(REFERENCE).describe()}; momentum {mean_interval(seeds(0.890)).describe()}; "
            f"lars+warmup {mean_interval(seeds(0.910)).describe()}.") in text


def test_train_longer_and_equal_steps_re_runs_are_never_among_the_arms_chosen_from(tmp_path):
    protocol = write_study(tmp_path)
    runs = study_runs(tmp_path, "goyal_v3")
    highest = max((row for row in runs if row["world_size"] == 16), key=lambda row: row["validation_accuracy"])
    assert highest["label"] == EQUAL_STEPS
    everything = {}
    for row in runs:
        if row["world_size"] == 16:
            everything.setdefault(row["label"], []).append(row)
    assert validation_choice(everything)[0] == EQUAL_STEPS  # what choosing among every run there would take

    finals = final_runs(runs, 16)
    assert set(finals) == set(everything) - {LONGER, EQUAL_STEPS}
    chosen, ranks = validation_choice(finals)
    assert chosen == protocol["best_arms"]["16"] == "momentum+warmup tuned" and ranks[chosen] == "best"
    assert final_runs([{"label": "lars+warmup tuned 1.5x longer", "world_size": 16}], 16) == {}


# 4. The convergence control ------------------------------------------------------------------


def test_the_convergence_control_and_its_anchor_name_the_factor_the_updates_and_the_judged_gain(tmp_path):
    protocol = write_study(tmp_path)
    longer, shorter = seeds(0.897), seeds(0.880)
    gain, against = difference_interval(longer, shorter), difference_interval(longer, REFERENCE)
    assert (judge(gain), judge(against)) == ("better", "matches")
    assert control_sentence(protocol) == (
        "Convergence control (is the largest batch's budget enough to converge?): momentum+warmup tuned at world size 16 "
        f"(batch 512) trained 3x longer (2,400 updates against 800): test {mean_interval(longer).describe()}, "
        f"{points_text(gain)} points: {judge(gain)} over its own budget (not converged: the extra updates gained over 1 point) "
        f"and {points_text(against)} points: {judge(against)} against momentum+warmup tuned at world size 1.")

    verdict, evidence = anchor_goyal_v3_longer(tmp_path)
    assert verdict == claim(against) == "matches"
    at_equal_epochs = difference_interval(shorter, REFERENCE)
    assert judge(at_equal_epochs) == "worse"
    assert evidence == (f"goyal_v3, momentum+warmup tuned at batch 512 trained 3x longer minus momentum+warmup tuned at world "
                        f"size 1: {points_text(against)} points; at equal epochs {points_text(at_equal_epochs)} points: {judge(at_equal_epochs)}")


def test_a_budget_is_converged_only_when_the_whole_gain_lies_below_one_point():
    """*matches* on the gain bounds it from below only: [+0.3, +2.5] matches, yet training longer
    may have gained 2.5 points, so it shows no convergence."""
    assert converged_text({"low": -0.004, "high": 0.006}).startswith("converged")
    assert converged_text({"low": 0.003, "high": 0.025}).startswith("convergence not shown either way")
    assert claim(Estimate(0.014, 0.003, 0.025, 5)) == "matches"
    assert converged_text({"low": 0.012, "high": 0.03}).startswith("not converged")
    assert converged_text({"low": None, "high": None}) == "convergence not shown either way (no interval)"


def test_without_a_convergence_control_the_anchor_is_not_measured_yet(tmp_path):
    assert anchor_goyal_v3_longer(tmp_path) == ("not measured yet", "goyal_v3 is not committed")
    protocol = write_study(tmp_path, train_longer=False)
    assert control_sentence(protocol) == "No convergence control was run (protocol.train_longer)."
    assert anchor_goyal_v3_longer(tmp_path) == ("not measured yet", "goyal_v3 ran no convergence control")


# 5. The anchors goyal_v3 supersedes ----------------------------------------------------------


def anchor(claim_text, edition):
    return next(a for a in ANCHORS if a.claim == claim_text and a.edition == edition)


def test_a_second_edition_anchor_is_superseded_once_goyal_v3s_summary_is_committed(tmp_path):
    second, third = anchor(GOYAL_LINEAR, 2), anchor(GOYAL_LINEAR, 3)
    write_study(tmp_path, study="goyal_bn")
    # The decision on the difference, then what it says of the claim (linear scaling matches: matches supports it).
    shown = "**matches at batch 128; worse at batch 512**: the claim holds at batch 128; the claim does not hold at batch 512"
    assert superseded_by(tmp_path, second) == [] and anchor_row(tmp_path, second)[5] == shown

    write_study(tmp_path, summary=False)  # goyal_v3's protocol.json without its summary.csv: not committed
    assert superseded_by(tmp_path, second) == [] and "superseded" not in anchor_row(tmp_path, second)[5]

    (tmp_path / "goyal_v3").rename(tmp_path / "partial")
    write_study(tmp_path)
    assert superseded_by(tmp_path, second) == ["goyal_v3"] and superseded_by(tmp_path, third) == []
    row = anchor_row(tmp_path, second)
    assert row[2] == "second and first" and row[5] == f"{shown} (superseded by goyal_v3)"
    assert row[4] == "goyal_bn: batch 512 = 1% of 51,200; 800 updates (8 epochs); in regime"
    assert anchor_row(tmp_path, third)[2] == "third" and anchor_row(tmp_path, third)[5] == shown
    # Hoffer et al.'s second-edition anchor is re-tested by goyal_v3's convergence control too.
    assert superseded_by(tmp_path, anchor(HOFFER, 2)) == ["goyal_v3"]
    assert superseded_by(tmp_path, next(a for a in ANCHORS if a.paper == "Keskar et al. 2017" and a.edition == 2)) == []


def test_a_study_that_gives_the_claim_no_verdict_supersedes_nothing(tmp_path):
    """goyal_v3 committed without a convergence control: Hoffer et al.'s third-edition row is not
    measured, so the second edition's verdict stands unmarked."""
    write_study(tmp_path, study="goyal_bn")
    write_study(tmp_path, train_longer=False)
    assert anchor(HOFFER, 3).judge(tmp_path)[0] == "not measured yet"
    assert superseded_by(tmp_path, anchor(HOFFER, 2)) == [] and superseded_by(tmp_path, anchor(GOYAL_LINEAR, 2)) == ["goyal_v3"]


def test_the_no_warmup_anchor_reads_the_rule_only_arm_by_its_protocol_label(tmp_path):
    """goyal_v3 names no rules for momentum without warmup, so its runs are labelled
    ``momentum rule``: at 16, 0.790 against momentum+warmup's linear rule at 0.830."""
    write_study(tmp_path)
    cells = study_cells()
    expected = difference_interval(cells[("momentum rule", 16)]["test"], cells[("momentum+warmup linear rule", 16)]["test"])
    verdict, evidence = anchor_goyal_no_warmup(tmp_path, study="goyal_v3")
    assert verdict == "worse" == judge(expected)
    assert evidence == f"linear scaling without minus with gradual warmup at batch 512: {points_text(expected)} points"
    diverged = study_cells(linear_16=DIVERGED)
    write_study(tmp_path / "diverged", diverged)
    verdict, evidence = anchor_goyal_no_warmup(tmp_path / "diverged", study="goyal_v3")
    # 5 of 5 ok against 0 of 5: Fisher one-sided p = 1/252, below 2.5%: training without warmup is better.
    assert verdict == "better" and "no accuracy to compare, 5 of 5 runs ok against 0 of 5" in evidence


def test_an_arm_copied_from_another_is_ranked_once_and_named_as_the_same_runs(tmp_path):
    """At world size 4 the linear rule's runs are the tuned arm's (the runner copied them: the
    same hashes end both ids). Ranked as two arms they would tie with each other; as one, the
    tuned arm is the best on validation, and the table says whose runs they are."""
    cells = study_cells()
    cells[("momentum+warmup linear rule", 4)] = cells[("momentum+warmup tuned", 4)]
    protocol = write_study(tmp_path, cells)
    protocol["best_arms"]["4"] = "momentum+warmup tuned"
    (tmp_path / "goyal_v3" / "protocol.json").write_text(json.dumps(protocol))
    summary = tmp_path / "goyal_v3" / "summary.csv"
    rows = list(csv.DictReader(summary.read_text().splitlines()))
    tuned = {row["seed"]: row["run_id"].rsplit("-", 1)[1] for row in rows if row["label"] == "momentum+warmup tuned" and row["world_size"] == "4"}
    for row in rows:
        if row["label"] == "momentum+warmup linear rule" and row["world_size"] == "4":
            row["run_id"] = f"{row['run_id'].rsplit('-', 1)[0]}-{tuned[row['seed']]}"
    with open(summary, "w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text = "\n".join(section_lead(tmp_path))
    assert "| momentum+warmup, tuned; best (the same runs as momentum+warmup linear rule) |" in text


def test_a_difference_names_the_runs_it_leaves_out():
    from lab.results_page.goyal import not_ok_text

    assert not_ok_text({"rule_runs": 5, "rule": {"n": 4}}, "rule") == " (1 of 5 runs not ok, left out)"
    assert not_ok_text({"tuned_runs": 5, "tuned": {"n": 5}}, "tuned") == ""
