import pytest
import scipy.stats

from lbtrain.reports.tables import RunRecord, aggregate, column, large_batch_gap, load_records, markdown_table
from lbtrain.results import RunResult


def record(recipe, world, seed, test, status="ok", train=None):
    row = {"run_id": f"{recipe}-{world}-{seed}", "label": recipe, "status": status, "world_size": world,
           "global_batch": 128 * world, "seed": seed, "learning_rate": 0.1, "test_accuracy": test,
           "train_accuracy": train if train is not None or test is None else test + 0.02}
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


def test_large_batch_gap_is_measured_against_the_recipes_smallest_batch():
    gaps = large_batch_gap(aggregate(SYNTHETIC, column("test_accuracy")))
    assert [gap is None for _, gap in gaps] == [True, False, True, False]  # each recipe's reference
    linear, sqrt = gaps[1][1], gaps[3][1]
    # Welch: both groups have s^2 = 2e-4 over 2 seeds, se = sqrt(2e-4 / 2 * 2) = 0.01414, df = 2.
    half = scipy.stats.t.ppf(0.975, 2) * (2e-4) ** 0.5
    assert linear.mean == pytest.approx(0.04) and (linear.n, linear.n_second, linear.df) == (2, 2, pytest.approx(2.0))
    assert (linear.low, linear.high) == pytest.approx((0.04 - half, 0.04 + half))
    # One seed on a side: a difference, no interval.
    assert sqrt.mean == pytest.approx(0.04) and (sqrt.n, sqrt.n_second) == (1, 1) and sqrt.low is None and sqrt.high is None


def test_recipes_at_one_batch_each_are_compared_with_the_smallest_batch():
    records = [record("SB", 1, 0, 0.90), record("SB", 1, 1, 0.92), record("LB", 24, 0, 0.86), record("LB", 24, 1, 0.88)]
    gaps = large_batch_gap(aggregate(records, column("test_accuracy")))
    assert [item.recipe for item, _ in gaps] == ["SB", "LB"] and gaps[0][1] is None
    assert gaps[1][1].mean == pytest.approx(0.04) and gaps[1][1].n == 2


def test_missing_values_and_all_diverged_groups_give_no_mean():
    items = aggregate([record("x", 1, 0, None), record("x", 2, 0, 0.5, status="diverged")], column("test_accuracy"))
    assert [a.mean for a in items] == [None, None] and items[1].excluded == {"diverged": 1}
    assert items[0].describe() == "-" and items[1].estimate().n == 0
    (_, first), (_, second) = large_batch_gap(items)
    assert first is None and second.mean is None and second.describe() == "-"


def test_markdown_table():
    assert markdown_table(["a", "b"], [[1, "x"], [2.5, "y"]]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | y |"


def test_load_records_needs_a_summary(tmp_path):
    with pytest.raises(FileNotFoundError, match="summary.csv does not exist"):
        load_records(tmp_path)
