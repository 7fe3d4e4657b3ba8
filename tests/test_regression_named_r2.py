"""A regression run's ``accuracy`` is R² (``lbtrain.objectives``): it is named R² in the terminal's
table, the progress lines and report.md, never "accuracy" (issue #53, item 6); RunResult records
the data's task."""

import numpy as np
import yaml

from lbtrain.cli import main
from lbtrain.results import accuracy_name
from lbtrain.studies.runner import summary_table


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
