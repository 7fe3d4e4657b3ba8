"""lbtrain compare (lbtrain.analysis.mode_comparison): two tiny experiments of one grid, the
second with every gradient applied one update late (simulated asynchrony), compared cell by
cell against numbers recomputed here from their summaries and histories."""

import csv
import json
import statistics

import pytest

from conftest import run_cli, stderr_lines
from lbtrain.analysis.mode_comparison import lr_that_works
from lbtrain.analysis.prose import unsupported_numbers
from lbtrain.analysis.scaling_laws import steps_to_target
from lbtrain.analysis.statistics import bootstrap_difference
from lbtrain.config import ExperimentConfig
from lbtrain.results import read_run
from lbtrain.runner import run_experiment


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
    completed = run_cli("compare", str(pair / "sync"), str(pair / "stale"), "--output", str(output), "--target", "0.3")
    assert completed.returncode == 0, completed.stderr
    record = json.loads((output / "compare.json").read_text())
    assert (record["first"]["label"], record["second"]["label"]) == ("sync", "stale")  # one mode: labelled by name
    assert record["target"] == 0.3 and record["first"]["budget"] == "2 epochs"
    assert [(row["recipe"], row["world_size"]) for row in record["rows"]] == [("lr 0.05", 2), ("lr 0.1", 2)]
    for row in record["rows"]:
        tests = {}
        for side in ("sync", "stale"):
            runs = [r for r in rows_of(pair / side) if r["label"] == row["recipe"]]
            ok = [r for r in runs if r["status"] == "ok"]
            tests[side] = [float(r["test_accuracy"]) for r in ok]
            cell = row[side]
            assert cell["runs"] == 2 and cell["ok_runs"] == len(ok) and cell["learning_rate"] == float(runs[0]["learning_rate"])
            if ok:
                assert cell["test_accuracy"]["mean"] == pytest.approx(statistics.fmean(tests[side]), abs=1e-9)
            results = [read_run(pair / side / "runs" / r["run_id"]) for r in ok]
            updates = [steps_to_target(r.history, r.steps_per_epoch, 0.3) for r in results]
            reached = [u for u in updates if u is not None]
            assert cell["reached"] == len(reached)
            if reached:
                assert cell["updates_to_target"]["mean"] == pytest.approx(statistics.fmean(reached))
                assert cell["epochs_to_target"]["mean"] == pytest.approx(statistics.fmean(u / results[0].steps_per_epoch for u in reached))
        assert row["sync"]["staleness"] is None and row["stale"]["staleness"] == (1.0 if row["stale"]["ok_runs"] else None)
        difference = bootstrap_difference(tests["stale"], tests["sync"])
        assert row["test_difference"]["mean"] == pytest.approx(difference.mean) and row["test_difference"]["n"] == difference.n
    text = (output / "compare.md").read_text()
    assert text.startswith("# sync vs stale\n") and "## The learning rate that works" in text
    assert unsupported_numbers(text, record) == []
    assert all((output / "figures" / name).stat().st_size > 5000 for name in ("accuracy_vs_lr.png", "updates_to_target_vs_lr.png"))


def test_folders_of_different_grids_are_one_line_exit_2(pair, tmp_path):
    run_experiment(tiny_experiment(tmp_path, "other", variants=TWO_LRS[:1], seeds=(0,)), progress=lambda line: None)
    completed = run_cli("compare", str(pair / "sync"), str(tmp_path / "other"), "--output", str(tmp_path / "out"))
    assert completed.returncode == 2
    assert stderr_lines(completed.stderr) == ["lbtrain: error: sync and other do not hold the same grid: 'lr 0.1' at W=2 (only in sync)"]
    assert not (tmp_path / "out").exists()
    itself = run_cli("compare", str(pair / "sync"), str(pair / "sync"), "--output", str(tmp_path / "out"))
    assert itself.returncode == 2 and stderr_lines(itself.stderr) == [
        "lbtrain: error: both folders hold experiment sync in mode simulated: compare two experiments"]
    missing = run_cli("compare", str(pair / "sync"), str(tmp_path / "nothing"), "--output", str(tmp_path / "out"))
    assert missing.returncode == 2 and stderr_lines(missing.stderr) == [
        f"lbtrain: error: {tmp_path / 'nothing'} has no summary.csv: run its experiment first (lbtrain run EXPERIMENT.yaml)"]


def cell(lr, validation, ok_runs=3, runs=3):
    return {"learning_rate": lr, "ok_runs": ok_runs, "runs": runs, "validation_accuracy": {"mean": validation}}


def test_the_lr_that_works_is_the_best_on_validation_among_cells_with_every_seed_ok():
    cells = [cell(0.025, 0.90), cell(0.05, 0.93), cell(0.1, 0.95, ok_runs=2), cell(0.2, None, ok_runs=0)]
    works = lr_that_works(cells)
    assert works["best"]["learning_rate"] == 0.05 and works["largest_ok_lr"] == 0.05
    assert lr_that_works([cell(0.1, None, ok_runs=0)]) == {"best": None, "largest_ok_lr": None}
