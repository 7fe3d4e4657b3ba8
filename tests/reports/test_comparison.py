"""lbtrain compare (lbtrain.reports.comparison): two tiny experiments of one grid, the
second with every gradient applied one update late (simulated asynchrony), compared cell by
cell against numbers recomputed here from their summaries and histories."""

import csv
import json
import math
import statistics

import pytest

from helpers import run_cli, stderr_lines
from lbtrain.config import ExperimentConfig
from lbtrain.measures.steps_to_target import steps_to_target
from lbtrain.reports.comparison import Side, compare, lr_that_works, works_sentence
from lbtrain.reports.prose import unsupported_numbers
from lbtrain.reports.report import ReportError
from lbtrain.reports.statistics import difference_interval
from lbtrain.reports.tables import RunRecord
from lbtrain.results import RunResult, read_run
from lbtrain.studies.runner import run_experiment

TWO_LRS = [{"label": "lr 0.05", "lr.base_lr": 0.05}, {"label": "lr 0.1", "lr.base_lr": 0.1}]


def tiny_experiment(root, name, variants=TWO_LRS, seeds=(0, 1), **training):
    return ExperimentConfig.model_validate({
        "name": name, "output_dir": str(root),
        "data": {"dataset": "mnist1d", "train_subset": 256, "validation_split": 0.25, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [16]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.1, "base_batch": 16, "rule": "none"},
        "training": {"per_worker_batch": 16, "epochs": 2, "checkpoint": False, **training},
        "grid": {"world_sizes": [2], "seeds": list(seeds), "variants": variants},
    })


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    for experiment in (tiny_experiment(root, "sync"), tiny_experiment(root, "stale", staleness=1)):
        run_experiment(experiment, progress=lambda line: None)
    return root


def rows_of(folder):
    with open(folder / "summary.csv") as handle:
        return list(csv.DictReader(handle))


def test_compare_pairs_each_cell_with_numbers_from_the_runs(pair):
    output = pair / "comparison"
    completed = run_cli("compare", str(pair / "sync"), str(pair / "stale"), "--output", str(output))
    assert completed.returncode == 0, completed.stderr
    record = json.loads((output / "compare.json").read_text())
    assert (record["first"]["label"], record["second"]["label"]) == ("sync", "stale")  # one mode: labelled by name
    assert record["first"]["budget"] == record["second"]["budget"] == "2 epochs"
    assert [(row["recipe"], row["world_size"]) for row in record["rows"]] == [("lr 0.05", 2), ("lr 0.1", 2)]
    # The default target: the highest multiple of 0.005 the best run of each side reaches.
    peaks = [max(row["val_accuracy"] for run in rows_of(pair / side) if run["status"] == "ok" for row in read_run(pair / side / "runs" / run["run_id"]).history)
             for side in ("sync", "stale")]
    target = record["target"]
    assert target == pytest.approx(math.floor(min(peaks) / 0.005 + 1e-9) * 0.005)
    assert all(max(row[key]["reached"] for row in record["rows"]) >= 1 for key in ("first", "second"))
    for row in record["rows"]:
        tests = {}
        for side, key in (("sync", "first"), ("stale", "second")):
            runs = [r for r in rows_of(pair / side) if r["label"] == row["recipe"]]
            ok = [r for r in runs if r["status"] == "ok"]
            tests[side] = [float(r["test_accuracy"]) for r in ok]
            cell = row[key]
            assert cell["runs"] == 2 and cell["ok_runs"] == len(ok) and cell["learning_rate"] == float(runs[0]["learning_rate"])
            assert ok and cell["test_accuracy"]["mean"] == pytest.approx(statistics.fmean(tests[side]), abs=1e-9)
            results = [read_run(pair / side / "runs" / r["run_id"]) for r in ok]
            updates = [steps_to_target(r.history, r.steps_per_epoch, target) for r in results]
            reached = [u for u in updates if u is not None]
            assert cell["reached"] == len(reached)
            if reached:
                assert cell["updates_to_target"]["mean"] == pytest.approx(statistics.fmean(reached))
                assert cell["epochs_to_target"]["mean"] == pytest.approx(statistics.fmean(u / results[0].steps_per_epoch for u in reached))
        assert row["first"]["staleness"] is None and row["second"]["staleness"] == 1.0
        difference = difference_interval(tests["stale"], tests["sync"])
        assert row["test_difference"]["mean"] == pytest.approx(difference.mean) and row["test_difference"]["n"] == difference.n
    text = (output / "compare.md").read_text()
    assert text.startswith("# sync vs stale\n") and "## The learning rate that works" in text
    assert unsupported_numbers(text, record) == []
    assert all((output / "figures" / name).stat().st_size > 5000 for name in ("accuracy_vs_lr.png", "updates_to_target_vs_lr.png"))


def test_folders_of_different_grids_are_one_line_exit_2(pair, tmp_path, lbtrain_here):
    run_experiment(tiny_experiment(tmp_path, "other", variants=TWO_LRS[:1], seeds=(0,)), progress=lambda line: None)
    completed = lbtrain_here("compare", str(pair / "sync"), str(tmp_path / "other"), "--output", str(tmp_path / "out"))
    assert completed.returncode == 2
    assert stderr_lines(completed.stderr) == ["lbtrain: error: sync and other do not hold the same grid: 'lr 0.1' at W=2 (only in sync)"]
    assert not (tmp_path / "out").exists()
    itself = lbtrain_here("compare", str(pair / "sync"), str(pair / "sync"), "--output", str(tmp_path / "out"))
    assert itself.returncode == 2 and stderr_lines(itself.stderr) == [
        "lbtrain: error: both sides are labelled 'sync': compare two experiments (or one grid in two modes)"]
    bad_target = lbtrain_here("compare", str(pair / "sync"), str(pair / "stale"), "--output", str(tmp_path / "out"), "--target", "1.5")
    assert bad_target.returncode == 2 and stderr_lines(bad_target.stderr) == [
        "lbtrain: error: --target must be an accuracy in (0, 1], got 1.5"]
    assert not (tmp_path / "out").exists()
    missing = lbtrain_here("compare", str(pair / "sync"), str(tmp_path / "nothing"), "--output", str(tmp_path / "out"))
    assert missing.returncode == 2 and stderr_lines(missing.stderr) == [
        f"lbtrain: error: {tmp_path / 'nothing'} has no summary.csv: run its experiment first (lbtrain run EXPERIMENT.yaml)"]


def cell(lr, validation, ok_runs=3, runs=3, spread=0.001, test=None):
    """A side's cell: ``ok_runs`` seeds' validation values ``validation ± spread`` (their mean
    ``validation``), and the test accuracy reported beside it."""
    values = [] if validation is None else [validation + spread * (i - (ok_runs - 1) / 2) for i in range(ok_runs)]
    return {"learning_rate": lr, "ok_runs": ok_runs, "runs": runs,
            "validation_accuracy": {"mean": validation, "low": None, "high": None, "n": ok_runs},
            "validation_values": values, "test_accuracy": {"mean": test, "low": None, "high": None, "n": ok_runs}}


def test_the_lr_that_works_is_the_best_on_validation_among_cells_with_every_seed_ok():
    cells = [cell(0.025, 0.90), cell(0.05, 0.93), cell(0.1, 0.95, ok_runs=2), cell(0.2, None, ok_runs=0)]
    works = lr_that_works(cells)
    assert works["best"]["learning_rate"] == 0.05 and works["largest_ok_lr"] == 0.05 and works["edge"] is None
    assert (works["standing"], works["tied"]) == ("best", [])
    assert lr_that_works(cells[:2])["edge"] == "largest" and lr_that_works([cell(0.025, 0.95), *cells[1:]])["edge"] == "smallest"
    assert lr_that_works([cell(0.1, None, ok_runs=0)]) == {"best": None, "standing": None, "tied": [], "edge": None,
                                                           "largest_ok_lr": None}


def test_the_lr_that_works_follows_validation_where_test_disagrees_and_is_tied_when_not_separable():
    # Test ranks 0.1 first, validation 0.05 (separably): the choice is 0.05, its test accuracy is reported.
    cells = [cell(0.025, 0.90, test=0.91), cell(0.05, 0.93, test=0.90), cell(0.1, 0.91, test=0.95)]
    works = lr_that_works(cells)
    assert works["best"]["learning_rate"] == 0.05 and works["standing"] == "best"
    assert works_sentence("4", "simulated", works) == (
        "At W=4, simulated: best on validation: lr 0.05 (validation 0.930 (n=3), test 0.900 (n=3)); largest lr with every seed ok: 0.1.")
    # Seeds spread 0.05 wide: 0.1's validation interval overlaps 0.05's, so neither is named best.
    noisy = [cell(0.025, 0.70), cell(0.05, 0.93, spread=0.05, test=0.90), cell(0.1, 0.92, spread=0.05, test=0.95)]
    works = lr_that_works(noisy)
    assert works["best"]["learning_rate"] == 0.05 and works["standing"] == "tied with the best" and works["tied"] == [0.1]
    assert works_sentence("4", "simulated", works) == (
        "At W=4, simulated: tied with the best on validation: lr 0.05 (the highest mean: validation 0.930 (n=3), test 0.900 (n=3)), "
        "0.1; largest lr with every seed ok: 0.1.")


def record(label, world, seed, status="ok", lr=0.1, test=0.9, validation=0.9, updates_per_epoch=10, curve=(0.5, 0.8, 0.9),
           staleness=None):
    """A synthetic run: its summary row and a history of validation accuracy per epoch."""
    history = [{"epoch": epoch, "val_accuracy": value, **({} if staleness is None else {"staleness": staleness})}
               for epoch, value in enumerate(curve, start=1)]
    ok = status == "ok"
    row = {"run_id": f"{label}-{world}-{seed}", "label": label, "status": status, "world_size": world, "per_worker_batch": 32,
           "global_batch": 32 * world, "budget": "3 epochs", "learning_rate": lr if status != "failed" else 0.0,
           "test_accuracy": test if ok else 0.1, "validation_accuracy": validation if ok else 0.1}
    result = RunResult(config={}, status=status, history=history if status != "failed" else [],
                       steps_per_epoch=updates_per_epoch if status != "failed" else 0)
    return RunRecord(row, result)


def sides(first_records, second_records):
    return (Side("sync_twin", "simulated", "simulated", tuple(first_records)),
            Side("async_twin", "parameter_server", "parameter_server", tuple(second_records)))


def test_two_modes_pair_per_cell_with_failures_counted_not_averaged():
    sync = [record("lr 0.1", 4, seed, test=0.90 + 0.01 * seed) for seed in range(3)]
    # Asynchronous: 4x the updates an epoch; its first seed failed before training (lr 0 recorded), one diverged.
    asynchronous = [record("lr 0.1", 4, 0, status="failed"), record("lr 0.1", 4, 1, status="diverged", curve=(0.3,)),
                    record("lr 0.1", 4, 2, test=0.95, updates_per_epoch=40, curve=(0.85, 0.9, 0.95), staleness=3.0)]
    result = compare(*sides(sync, asynchronous), target=0.85)
    (row,) = result["rows"]
    first, second = row["first"], row["second"]
    assert (result["first"]["label"], result["second"]["label"]) == ("simulated", "parameter_server")
    assert first["learning_rate"] == second["learning_rate"] == 0.1  # not the failed seed's 0
    assert second["not_ok"] == {"diverged": 1, "failed": 1} and second["ok_runs"] == 1 and second["test_accuracy"]["mean"] == 0.95
    assert first["test_accuracy"]["mean"] == pytest.approx(0.91) and row["test_difference"]["mean"] == pytest.approx(0.04)
    # Sync reaches 0.85 at epoch 2 + (0.05 / 0.1) of the way to 3 -> 2.5 epochs = 25 updates; async at its first epoch end.
    assert first["epochs_to_target"]["mean"] == pytest.approx(2.5) and first["updates_to_target"]["mean"] == pytest.approx(25)
    assert second["epochs_to_target"]["mean"] == 1 and second["updates_to_target"]["mean"] == 40
    assert (first["updates_per_epoch"], second["updates_per_epoch"]) == (10, 40)
    assert (first["staleness"], second["staleness"]) == (None, 3.0)
    works = result["lr_that_works"]["4"]
    assert works["first"]["best"]["learning_rate"] == 0.1 and works["second"] == {"best": None, "standing": None, "tied": [], "edge": None,
                                                                                   "largest_ok_lr": None}
    assert row["claim"] == "inconclusive"  # one ok seed on the second side: no interval


def test_the_default_target_is_what_the_best_run_of_every_world_reaches_on_both_sides():
    sync = [record("a", 2, 0, curve=(0.5, 0.93)), record("a", 4, 0, curve=(0.5, 0.917))]
    asynchronous = [record("a", 2, 0, curve=(0.96,)), record("a", 4, 0, status="diverged", curve=(0.99,))]
    assert compare(*sides(sync, asynchronous))["target"] == pytest.approx(0.915)  # the diverged run's 0.99 bounds nothing


@pytest.mark.parametrize("change, message", [
    ({"lr": 0.2}, "'a' at W=2 differs in learning_rate: 0.1 in sync_twin, 0.2 in async_twin (compare one grid run in two modes)"),
    ({"label": "b"}, "sync_twin and async_twin do not hold the same grid: 'a' at W=2 (only in sync_twin); 'b' at W=2 (only in async_twin)"),
])
def test_cells_that_do_not_pair_are_named(change, message):
    with pytest.raises(ReportError) as error:
        compare(*sides([record("a", 2, 0)], [record(**{"label": "a", "world": 2, "seed": 0, **change})]), target=0.5)
    assert str(error.value) == message


@pytest.mark.parametrize("content, message", [
    ("name: x\n" + "# padding\n" * 120_000, "larger than"),
    ("- a list\n", "expected a mapping at the top level, got list"),
    ("name: x\n", "names no experiment and mode"),
])
def test_a_damaged_or_oversized_experiment_file_is_one_line(tmp_path, content, message):
    """compare reads a folder's experiment.yaml as every config is read: bounded, a mapping."""
    from lbtrain.reports.comparison import load_side
    from lbtrain.reports.report import ReportError

    (tmp_path / "summary.csv").write_text("run_id\n")
    (tmp_path / "experiment.yaml").write_text(content)
    with pytest.raises(ReportError, match=message) as raised:
        load_side(tmp_path)
    assert "\n" not in str(raised.value) and "rerun of the experiment rewrites it" in str(raised.value)
