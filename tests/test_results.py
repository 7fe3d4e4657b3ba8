"""lbtrain.results: loaded without TensorFlow (``import lbtrain`` is lazy), a run's result written
and read back, its statuses, links out of a results folder refused, and the runs two labels share.

A regression run's ``accuracy`` is R² (``lbtrain.objectives``): it is named R² in the terminal's
table, the progress lines and report.md, never "accuracy" (issue #53, item 6); RunResult records
the data's task."""

import json
import math

import numpy as np
import pytest
import yaml

from helpers import run_python
from lbtrain.cli import main
from lbtrain.results import STATUSES, RunResult, accuracy_name, finite_or_none, is_finished, read_run, run_set, write_run
from lbtrain.studies.runner import summary_table


def test_results_and_report_tables_load_without_tensorflow_or_matplotlib():
    code = ("import sys, lbtrain.results, lbtrain.verdict, lbtrain.reports.tables; "
            "print(sorted(m for m in ('tensorflow', 'matplotlib', 'keras') if m in sys.modules))")
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "[]"


def test_import_lbtrain_is_lazy_and_registers_keras_objects_once_tensorflow_loads():
    code = (
        "import sys, lbtrain; print('tensorflow' in sys.modules, any(m.startswith('matplotlib') for m in sys.modules)); "
        "import tensorflow as tf; get = tf.keras.utils.get_registered_object; "
        "print([get(f'lbtrain>{n}') is not None for n in ('Warmup', 'Constant', 'LARS', 'LAMB', 'GhostBatchNormalization')]); "
        "print(lbtrain.LARS.__module__, lbtrain.sharpness.__module__)"
    )
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.splitlines() == [
        "False False", "[True, True, True, True, True]", "lbtrain.optimizers.lars lbtrain.measures.flatness"]


def test_unknown_public_name_is_an_attribute_error():
    import lbtrain

    with pytest.raises(AttributeError, match="module 'lbtrain' has no attribute 'Lars'"):
        lbtrain.Lars  # noqa: B018
    assert "LARS" in dir(lbtrain) and "RunResult" in lbtrain.__all__


def test_a_run_is_written_metrics_last_and_read_back(tmp_path):
    result = RunResult(config={"lr": {"base_lr": 0.1}}, status="diverged", reason="loss became nan",
                       metrics={"train_loss": math.nan, "train_accuracy": 0.1}, history=[{"epoch": 1, "loss": math.inf}],
                       budget={"steps": 600}, initial_loss=2.3)
    assert not is_finished(tmp_path)
    write_run(tmp_path, result)
    assert is_finished(tmp_path)
    assert (tmp_path / "history.csv").read_text() == "epoch,loss\n1,\n"
    assert json.loads((tmp_path / "metrics.json").read_text())["metrics"] == {"train_loss": None, "train_accuracy": 0.1}
    back = read_run(tmp_path)
    assert (back.status, back.reason, back.budget, back.initial_loss) == ("diverged", "loss became nan", {"steps": 600}, 2.3)


def test_statuses_and_finite_or_none():
    assert STATUSES == ("ok", "ok-unstable", "diverged", "collapsed", "failed")
    assert finite_or_none([1.0, {"a": -math.inf}, "x"]) == [1.0, {"a": None}, "x"]


EXPERIMENT = "name: linked\ndata: {dataset: synthetic, options: {train_size: 64, test_size: 16}}\ntraining: {epochs: 1, per_worker_batch: 16}\n"


@pytest.mark.parametrize("link", [".lock", "runs"])
def test_a_link_out_of_the_results_folder_is_refused_and_its_target_untouched(tmp_path, capsys, monkeypatch, link):
    from lbtrain.cli import main

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me\n")
    folder = tmp_path / "results" / "linked"
    folder.mkdir(parents=True)
    (folder / link).symlink_to(outside / "precious.txt" if link == ".lock" else outside)
    (tmp_path / "linked.yaml").write_text(EXPERIMENT)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "linked.yaml"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"lbtrain: error: results/linked/{link} is a symbolic link to ") and "outside the results folder" in line
    assert (outside / "precious.txt").read_text() == "keep me\n" and sorted(p.name for p in outside.iterdir()) == ["precious.txt"]


def test_a_results_folder_that_is_itself_a_link_is_fine(tmp_path):
    from lbtrain.results import claim_folder

    disk = tmp_path / "other_disk"
    disk.mkdir()
    (tmp_path / "results").symlink_to(disk)
    claim_folder(tmp_path / "results" / "x", "x", "x.yaml", {"name": "x"})
    assert (disk / "x").is_dir()


def test_two_labels_hold_the_same_runs_when_their_configuration_hashes_match():
    """goyal_v3's committed tuned and linear-rule arms at world size 4 were trained once and
    copied (the tuned LR is the linear rule's): their run sets are equal; another world size's
    runs are another set."""
    import csv
    from pathlib import Path

    summary = Path(__file__).parents[1] / "results" / "goyal_v3" / "summary.csv"
    rows = list(csv.DictReader(summary.open()))
    arm = {(label, size): [row for row in rows if row["label"] == label and int(row["world_size"]) == size]
           for label in ("momentum+warmup tuned", "momentum+warmup linear rule") for size in (4, 16)}
    assert all(len(runs) == 5 for runs in arm.values())
    assert run_set(arm["momentum+warmup tuned", 4]) == run_set(arm["momentum+warmup linear rule", 4])
    assert len(run_set(arm["momentum+warmup tuned", 4])) == 5
    assert run_set(arm["momentum+warmup tuned", 4]) != run_set(arm["momentum+warmup tuned", 16])
    assert run_set([{"run_id": ""}]) is None and run_set([]) is None


# A regression run's accuracy named R².
def test_accuracy_is_named_r2_only_when_every_run_is_regression():
    assert accuracy_name(["regression", "regression"]) == "R²"
    assert accuracy_name(["regression", "classification"]) == accuracy_name([None]) == "accuracy"
    row = {"world_size": 1, "global_batch": 8, "label": "base", "optimizer": "sgd", "learning_rate": 0.1, "train_accuracy": 0.5,
           "test_accuracy": 0.4, "gap_accuracy": 0.1, "status": "ok"}
    assert summary_table([{**row, "task": "regression"}]).splitlines()[0].split()[5:9] == ["train", "R²", "test", "R²"]
    assert summary_table([{**row, "task": "classification"}]).splitlines()[0].split()[5:9] == ["train", "acc", "test", "acc"]


def test_a_regression_experiment_shows_r2_in_its_table_progress_and_report(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(320, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1 * rng.normal(size=320)).astype(np.float32)
    np.savez(tmp_path / "line.npz", x_train=x, y_train=y)
    spec = {"name": "line", "output_dir": str(tmp_path / "results"), "data": {"dataset": str(tmp_path / "line.npz")},
            "model": {"name": "mlp", "options": {"widths": [8]}}, "optimizer": {"name": "sgd"},
            "lr": {"base_lr": 0.05, "base_batch": 16}, "training": {"per_worker_batch": 16, "epochs": 2}}
    (tmp_path / "line.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "line.yaml")]) == 0
    captured = capsys.readouterr()
    assert "seed 0: ok, test R² " in captured.err
    assert captured.out.splitlines()[0].split()[5:9] == ["train", "R²", "test", "R²"]
    results = tmp_path / "results" / "line"
    [metrics] = list((results / "runs").glob("*/metrics.json"))
    assert '"task": "regression"' in metrics.read_text()
    assert main(["report", str(results)]) == 0
    report = (results / "report.md").read_text()
    assert "## R² and generalization gap" in report and "| train R² |" in report and "*gap* = train − test R²" in report
    assert "## Accuracy and generalization gap" not in report and "test accuracy" not in report
