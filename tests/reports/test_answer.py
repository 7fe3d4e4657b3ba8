"""The scaling answer from summary rows: the arm chosen on validation, its Student-t interval, its
Welch difference against the reference, the decision words, where the linear rule stops, the
noise scale and the flags; every number re-derived here from the rows."""

import statistics

import pytest

from lbtrain.reports.answer import ArmSpec, StudyFacts, answer_data, answer_markdown
from lbtrain.reports.decisions import claim
from lbtrain.reports.statistics import difference_interval, mean_interval

RECIPE = "sgd+warmup"


def rows(label, world_size, tests, validations, statuses=None, batch=None, noise=100.0):
    statuses = statuses or ["ok"] * len(tests)
    return [{"run_id": f"{label}-w{world_size}-s{seed}", "label": label, "status": status, "world_size": world_size,
             "global_batch": batch or 32 * world_size, "test_accuracy": test, "validation_accuracy": validation,
             "learning_rate": 0.1 * world_size, "noise_scale": noise, "wall_time_seconds": 10.0}
            for seed, (test, validation, status) in enumerate(zip(tests, validations, statuses), start=1)]


def arms():
    specs = [ArmSpec(f"{RECIPE} tuned", 1, "tuned", RECIPE)]
    for size in (4, 16):
        specs += [ArmSpec(f"{RECIPE} tuned", size, "tuned", RECIPE)]
        specs += [ArmSpec(f"{RECIPE} {rule} rule", size, "rule", RECIPE, rule) for rule in ("linear", "sqrt")]
    return specs


FACTS = StudyFacts("own", "pkg.models:net", "data.npz", 20_000, 1, {1: 1875, 4: 468, 16: 300}, {1: 32, 4: 128, 16: 512},
                   interior={"own-sgd-w16": False})


REFERENCE = [0.910, 0.911, 0.912]


def summary():
    return (rows(f"{RECIPE} tuned", 1, REFERENCE, REFERENCE)
            + rows(f"{RECIPE} tuned", 4, [0.9105, 0.911, 0.9115], [0.9105, 0.911, 0.9115])
            + rows(f"{RECIPE} linear rule", 4, [0.910, 0.911, 0.912], [0.910, 0.911, 0.912])
            + rows(f"{RECIPE} sqrt rule", 4, [0.908, 0.909, 0.910], [0.908, 0.909, 0.910])
            + rows(f"{RECIPE} tuned", 16, [0.909, 0.910, 0.911], [0.909, 0.910, 0.911])
            + rows(f"{RECIPE} linear rule", 16, [0.70, 0.71, 0.72], [0.70, 0.71, 0.72], noise=300.0)
            + rows(f"{RECIPE} sqrt rule", 16, [0.85, 0.86, 0.5], [0.85, 0.86, 0.5], ["ok", "ok", "diverged"]))


def test_each_world_size_uses_the_best_arm_on_validation_with_its_intervals_rederived():
    answer = answer_data(summary(), arms(), FACTS)
    reference = REFERENCE
    by_size = {row["world_size"]: row for row in answer["per_world_size"]}
    assert by_size[4]["use"] == f"{RECIPE} tuned" and by_size[4]["tied_with_the_best"] == [f"{RECIPE} linear rule", f"{RECIPE} sqrt rule"]
    expected = mean_interval([0.9105, 0.911, 0.9115])
    assert by_size[4]["test_accuracy"] == {"mean": expected.mean, "low": expected.low, "high": expected.high, "n": 3}
    difference = difference_interval([0.9105, 0.911, 0.9115], reference)
    assert by_size[4]["difference"]["mean"] == pytest.approx(difference.mean)
    assert by_size[4]["difference"]["df"] == pytest.approx(difference.df)
    assert by_size[4]["decision"] == claim(difference) == "matches"
    # At 16 the sqrt arm lost a seed: not eligible, the one exclusion counted beside it.
    assert by_size[16]["use"] == f"{RECIPE} tuned" and by_size[16]["excluded"][f"{RECIPE} sqrt rule"] == 1
    linear16 = by_size[16]["rules"]["linear"]
    assert linear16["decision"] == "worse"
    assert linear16["cost"]["mean"] == pytest.approx(statistics.fmean([0.909, 0.910, 0.911]) - statistics.fmean([0.70, 0.71, 0.72]))


def test_the_linear_rule_holds_up_to_the_last_match_and_the_first_worse_is_named():
    answer = answer_data(summary(), arms(), FACTS)
    assert answer["linear_rule_holds_up_to"] == 4 and answer["first_worse"] == 16
    text = answer_markdown(answer)
    assert "holds up to: **4 workers (global batch 128)** (matches world 1's chosen arm within 1 point); its decision at each " \
           "world size: 4: matches, 16: worse." in text
    assert "worse: **16 workers (global batch 512)**" in text


def test_noise_scale_flags_and_machine_time():
    answer = answer_data(summary(), arms(), FACTS, histories={f"{RECIPE} tuned-w1-s1": [20.0, 50.0, 400.0]})
    noise = answer["noise_scale"]
    ok_runs = [row for row in summary() if row["status"] == "ok"]
    assert noise["b_simple"] == statistics.median(row["noise_scale"] for row in ok_runs)
    assert (noise["low"], noise["high"]) == (20.0, 400.0)
    flags = "\n".join(answer["flags"])
    assert "own-sgd-w16: the best LR sits on the edge" in flags
    assert "1 run diverged, left out of every mean" in flags
    assert "world 16: global batch 512 is 2.6% of the training set" not in flags  # in regime: no flag
    assert answer["machine_hours"] == pytest.approx(10.0 * len(summary()) / 3600)


def test_a_study_with_no_ok_trial_and_a_control_that_could_not_run_are_flagged_as_such():
    """A tuned study with no ok trial (not a best on an edge: goyal_v4's LARS from batch 512 before
    the protocol searched below such a grid), and a linear rule's control that could not run (no ok
    seed, as goyal_v4's at world 64): the answer says both."""
    facts = StudyFacts("own", "m", "d", 20_000, 1, {1: 625, 4: 300}, {1: 32, 4: 128},
                       interior={"own-sgd-w1": True, "own-sgd-w4": False, "own-lars-w4": None},
                       controls_not_run=["world 4: sgd+warmup linear rule 3x longer not run: sgd+warmup linear rule has no ok final run"])
    answer = answer_data(rows(f"{RECIPE} tuned", 1, REFERENCE, REFERENCE), [ArmSpec(f"{RECIPE} tuned", 1, "tuned", RECIPE)], facts)
    flags = answer["flags"]
    assert "own-sgd-w4: the best LR sits on the edge of the grid tried (extend the grid)" in flags
    assert "own-lars-w4: no trial ended ok at any LR tried, every one diverged or spiked (no LR to carry)" in flags
    assert not any(flag.startswith("own-sgd-w1") or flag.startswith("own-lars-w4: the best") for flag in flags)
    assert "world 4: sgd+warmup linear rule 3x longer not run: sgd+warmup linear rule has no ok final run" in flags


def test_one_seed_and_a_batch_out_of_the_data_regime_are_flagged():
    small = StudyFacts("own", "m", "d", 2_000, 1, {1: 187, 4: 46}, {1: 32, 4: 128}, interior={})
    data = (rows(f"{RECIPE} tuned", 1, REFERENCE, REFERENCE)
            + rows(f"{RECIPE} tuned", 4, [0.88], [0.88]))
    answer = answer_data(data, [ArmSpec(f"{RECIPE} tuned", 1, "tuned", RECIPE), ArmSpec(f"{RECIPE} tuned", 4, "tuned", RECIPE)], small)
    flags = "\n".join(answer["flags"])
    assert "world 4: sgd+warmup tuned has 1 ok seeds, fewer than 3" in flags
    assert "world 4: 46 updates, fewer than 300" in flags
    assert "world 4: global batch 128 is 6.4% of the training set, above 5%" in flags
    assert answer["per_world_size"][1]["decision"] == "inconclusive"  # one seed: no interval, no claim


def test_a_world_size_without_a_finished_run_still_has_its_batch_and_says_no_arm_was_ok():
    facts = StudyFacts("own", "m", "d", 20_000, 1, {1: 625, 4: 300}, {1: 32, 4: 128})
    data = rows(f"{RECIPE} tuned", 1, REFERENCE, REFERENCE)
    answer = answer_data(data, [ArmSpec(f"{RECIPE} tuned", 1, "tuned", RECIPE), ArmSpec(f"{RECIPE} tuned", 4, "tuned", RECIPE)], facts)
    large = answer["per_world_size"][1]
    assert (large["global_batch"], large["use"], large["decision"]) == (128, None, "inconclusive")
    assert "world 4: no arm had every seed ok" in answer["flags"]
    assert "holds up to: **no larger world size shown**; its decision at each world size: none measured." in answer_markdown(answer)


def test_the_tuned_lrs_exponent_in_the_batch_is_stated_with_its_interval():
    import dataclasses

    from lbtrain.reports.scaling_laws import lr_exponent

    # Trials whose best LR grows as B^0.5: the fit says 0.5, and the answer carries it as fitted.
    trials = {b: [{"learning_rate": 0.1 * (b / 32) ** 0.5 * f, "validation_accuracy": a}
                  for f, a in ((1, 0.9), (2, 0.89), (0.5, 0.88))] for b in (32, 128, 512, 2048)}
    fit = lr_exponent(trials).to_dict()
    facts = dataclasses.replace(FACTS, lr_exponents={"momentum+warmup": fit})
    answer = answer_data(summary(), arms(), facts)
    assert answer["lr_exponent"]["momentum+warmup"]["alpha"] == pytest.approx(0.5)
    text = answer_markdown(answer)
    low, high = fit["alpha_95_low"], fit["alpha_95_high"]
    assert low < 0.5 < high
    assert (f"- momentum+warmup: tuned lr ~ global_batch^0.50 (95% CI {low:.2f} to {high:.2f}; top 3 ok trials at each of 4 "
            "batch sizes)") in text
    assert "lr_exponent" in answer_data(summary(), arms(), FACTS) and "The tuned LR against" not in answer_markdown(
        answer_data(summary(), arms(), FACTS))


def test_the_accuracy_figure_gives_each_point_its_seeds_and_no_band_below_three():
    from lbtrain.reports.answer import accuracy_lines
    from lbtrain.reports.plots import Line, Mark

    drawn = accuracy_lines(answer_data(summary(), arms(), FACTS), summary(), arms())
    lines = {item.label: item for item in drawn if isinstance(item, Line)}
    sqrt = lines["sqrt rule"]  # world 1's tuned arm, then 3 ok seeds at world 4 and 2 (one diverged) at world 16
    assert sqrt.x == [32.0, 128.0, 512.0] and sqrt.n == [3, 3, 2]
    assert sqrt.low[2] is None and sqrt.high[2] is None and sqrt.low[1] == pytest.approx(mean_interval([0.908, 0.909, 0.910]).low)
    assert [(mark.kind, mark.recipe, mark.x) for mark in drawn if isinstance(mark, Mark)] == [("diverged", "sqrt rule", 512.0)]


def test_a_rule_left_with_two_ok_seeds_decides_nothing_and_is_flagged():
    answer = answer_data(summary(), arms(), FACTS)
    sqrt16 = answer["per_world_size"][2]["rules"]["sqrt"]
    assert sqrt16["test_accuracy"]["n"] == 2 and sqrt16["excluded"] == 1
    assert sqrt16["decision"] == "inconclusive"
    assert "world 16: the sqrt rule (sgd+warmup sqrt rule) has 2 ok seeds, fewer than 3: no claim rests on it" in answer["flags"]
    assert not any("the linear rule" in flag or "world 4: the" in flag for flag in answer["flags"])  # 3 ok seeds each


def test_a_rule_whose_every_seed_diverged_is_judged_by_how_many_runs_ended_ok():
    """No ok run, no difference to take: 0 of 5 runs ok against the reference's 3 of 3 is worse by
    Fisher's exact test (one-sided p = 1/56 < 0.025), and it is where the linear rule stops."""
    rows = [row for row in summary() if not (row["label"] == f"{RECIPE} linear rule" and row["world_size"] == 16)]
    (template,) = [r for r in summary() if r["label"] == f"{RECIPE} linear rule" and r["world_size"] == 16][:1]
    rows += [{**template, "status": "diverged", "run_id": f"d{seed}", "test_accuracy": 0.1} for seed in range(5)]
    answer = answer_data(rows, arms(), FACTS)
    linear = answer["per_world_size"][2]["rules"]["linear"]
    assert linear["decision"] == "worse" and linear["decided_by"] == (
        "0 of 5 runs ok against 3 of 3 (Fisher's exact test, one-sided p = 0.018)")
    assert answer["first_worse"] == 16 and "worse (0 of 5 runs ok against 3 of 3" in answer_markdown(answer)
