import pytest
import scipy.stats

from lbtrain.reports.tables import (
    RunRecord,
    aggregate,
    column,
    differences_from_reference,
    load_records,
    markdown_table,
    reference_group,
    standings_by_batch,
)
from lbtrain.results import RunResult


def record(recipe, world, seed, test, status="ok", train=None, validation=None):
    row = {"run_id": f"{recipe}-{world}-{seed}", "label": recipe, "status": status, "world_size": world,
           "global_batch": 128 * world, "seed": seed, "learning_rate": 0.1, "test_accuracy": test,
           "train_accuracy": train if train is not None or test is None else test + 0.02, "validation_accuracy": validation}
    return RunRecord(row, RunResult(config={}, status=status))


SYNTHETIC = [
    record("linear", 1, 0, 0.90), record("linear", 1, 1, 0.92),
    record("linear", 8, 0, 0.86), record("linear", 8, 1, 0.88), record("linear", 8, 2, 0.10, status="diverged"),
    record("sqrt", 8, 0, 0.87), record("sqrt", 1, 0, 0.91),
]


def test_aggregate_means_ok_runs_per_recipe_and_batch_and_counts_diverged():
    items = aggregate(SYNTHETIC, column("test_accuracy"))
    assert [(a.recipe, a.global_batch) for a in items] == [("linear", 128), ("linear", 1024), ("sqrt", 128), ("sqrt", 1024)]
    linear_small, linear_large, sqrt_small, sqrt_large = items
    assert linear_small.mean == pytest.approx(0.91) and linear_small.std == pytest.approx(0.0141421, rel=1e-5)
    assert linear_large.mean == pytest.approx(0.87) and linear_large.runs == 2 and linear_large.excluded == {"diverged": 1}
    assert linear_large.count_text() == "2 of 3 ok (1 diverged)" and linear_small.count_text() == "2"
    assert sqrt_large.runs == 1 and sqrt_large.std == 0.0 and sqrt_large.world_size == 8
    assert linear_large.values == (0.86, 0.88) and sqrt_large.describe() == "0.8700 (n=1)"
    # Two seeds 0.90 and 0.92: s = 0.02 / sqrt(2), so 0.91 ± t(0.975, 1) * 0.01.
    half = scipy.stats.t.ppf(0.975, 1) * 0.01
    assert linear_small.describe() == f"0.9100 [{0.91 - half:.4f}, {0.91 + half:.4f}] (n=2, df=1)"


def test_every_difference_is_taken_against_the_one_reference_of_the_table():
    reference, gaps = differences_from_reference(aggregate(SYNTHETIC, column("test_accuracy")))
    # The first recipe at the smallest batch, for every row: sqrt at 1024 is set against linear at 128, not sqrt at 128.
    assert (reference.recipe, reference.global_batch) == ("linear", 128)
    assert [gap is None for _, gap in gaps] == [True, False, False, False]
    linear, sqrt_small, sqrt_large = gaps[1][1], gaps[2][1], gaps[3][1]
    # Welch: both groups have s^2 = 2e-4 over 2 seeds, se = sqrt(2e-4 / 2 * 2) = 0.01414, df = 2; arm − reference.
    half = scipy.stats.t.ppf(0.975, 2) * (2e-4) ** 0.5
    assert linear.mean == pytest.approx(-0.04) and (linear.n, linear.n_second, linear.df) == (2, 2, pytest.approx(2.0))
    assert (linear.low, linear.high) == pytest.approx((-0.04 - half, -0.04 + half))
    # One seed on a side: a difference, no interval.
    assert sqrt_large.mean == pytest.approx(0.87 - 0.91) and (sqrt_large.n, sqrt_large.n_second) == (1, 2) and sqrt_large.low is None
    assert sqrt_small.mean == pytest.approx(0.91 - 0.91)


def test_the_reference_is_the_first_recipe_measured_at_the_smallest_batch():
    # keskar_gap's shape: a recipe per batch; SB at the smallest batch is the reference.
    records = [record("SB", 1, 0, 0.90), record("SB", 1, 1, 0.92), record("LB", 24, 0, 0.86), record("LB", 24, 1, 0.88)]
    reference, gaps = differences_from_reference(aggregate(records, column("test_accuracy")))
    assert reference.recipe == "SB" and [item.recipe for item, _ in gaps] == ["SB", "LB"] and gaps[0][1] is None
    assert gaps[1][1].mean == pytest.approx(-0.04) and gaps[1][1].n == 2
    # A first recipe whose every run at the smallest batch diverged measures nothing: the next one there is the reference.
    diverged = [record("none", 1, 0, 0.1, status="diverged"), record("linear", 1, 0, 0.9), record("none", 2, 0, 0.8)]
    assert (reference_group(aggregate(diverged, column("test_accuracy"))).recipe) == "linear"
    assert reference_group(aggregate(diverged[:1], column("test_accuracy"))) is None


def test_arms_at_a_batch_are_ranked_on_validation_not_test_and_tied_when_not_separable():
    # At batch 1024 validation and test disagree: "a" leads on test, "b" on validation (separably).
    runs = [record("a", 8, seed, test, validation=validation) for seed, (test, validation) in
            enumerate([(0.95, 0.80), (0.96, 0.81), (0.97, 0.82)])]
    runs += [record("b", 8, seed, test, validation=validation) for seed, (test, validation) in
             enumerate([(0.85, 0.90), (0.86, 0.91), (0.87, 0.92)])]
    ranked = standings_by_batch(aggregate(runs, column("validation_accuracy")))
    assert ranked == {("a", 1024): "below the best", ("b", 1024): "best"}
    # A third arm within noise of "b" on validation: neither is named best, both are tied with the best.
    runs += [record("c", 8, seed, 0.5, validation=validation) for seed, validation in enumerate([0.89, 0.91, 0.93])]
    ranked = standings_by_batch(aggregate(runs, column("validation_accuracy")))
    assert ranked == {("a", 1024): "below the best", ("b", 1024): "tied with the best", ("c", 1024): "tied with the best"}
    # One recipe at a batch ranks nothing; no validation values rank nothing.
    assert standings_by_batch(aggregate(runs[:3], column("validation_accuracy"))) == {}
    assert standings_by_batch(aggregate(SYNTHETIC, column("validation_accuracy"))) == {}


def test_missing_values_and_all_diverged_groups_give_no_mean():
    items = aggregate([record("x", 1, 0, None), record("x", 2, 0, 0.5, status="diverged")], column("test_accuracy"))
    assert [a.mean for a in items] == [None, None] and items[1].excluded == {"diverged": 1}
    assert items[0].describe() == "-" and items[1].estimate().n == 0
    reference, ((_, first), (_, second)) = differences_from_reference(items)
    assert reference is None and first is None and second is None


def test_markdown_table():
    assert markdown_table(["a", "b"], [[1, "x"], [2.5, "y"]]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | y |"


def test_load_records_needs_a_summary(tmp_path):
    with pytest.raises(FileNotFoundError, match="summary.csv does not exist"):
        load_records(tmp_path)
