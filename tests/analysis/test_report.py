import csv
import json
import math
import statistics

import pytest
import yaml

from conftest import run_cli
from lbtrain.analysis.report import write_report
from lbtrain.cli import main
from lbtrain.config import ExperimentConfig
from lbtrain.runner import run_experiment

FIGURES = {"accuracy_vs_batch.png", "gap_vs_batch.png", "learning_curves.png", "lr_schedules.png", "steps_to_target.png",
           "sharpness_vs_batch.png", "sweep_lr_vs_batch.png"}


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory):
    """A tiny experiment on MNIST-1D (2 recipes x world sizes 1 and 4 x 2 seeds, 3 epochs, with
    sharpness and noise scale), plus a synthetic sweep summary beside it."""
    root = tmp_path_factory.mktemp("report")
    experiment = ExperimentConfig.model_validate({
        "name": "tiny", "description": "a tiny report test", "output_dir": str(root),
        "data": {"dataset": "mnist1d", "train_subset": 384, "validation_split": 0.25, "options": {"num_samples": 600}},
        "model": {"name": "mlp", "options": {"widths": [32]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.05, "base_batch": 16, "decay": {"type": "cosine"}},
        "training": {"per_worker_batch": 16, "epochs": 3, "checkpoint": False},
        "analysis": {"sharpness": True, "sharpness_samples": 128, "noise_scale": True, "noise_scale_every": 3},
        "grid": {"world_sizes": [1, 4], "seeds": [0, 1],
                 "variants": [{"label": "none", "lr.rule": "none"}, {"label": "linear+warmup", "lr.rule": "linear", "lr.warmup_epochs": 1}]},
    })
    run_experiment(experiment, progress=lambda line: None)
    results = root / "tiny"
    (results / "sweep_summary.csv").write_text(
        "world_size,study,complete,pruned,global_batch,best_validation_accuracy,best_test_accuracy,best_learning_rate,param:lr.base_lr\n"
        "1,tiny-w1,4,1,16,0.61,0.60,0.05,0.05\n4,tiny-w4,4,0,64,0.58,0.57,0.1,0.1\n")
    (results / "sweep_fit.json").write_text(json.dumps({"alpha": 0.5, "alpha_95_low": None, "alpha_95_high": None, "points": 2}))
    return results


def summary_rows(results):
    with open(results / "summary.csv") as handle:
        return list(csv.DictReader(handle))


def test_report_writes_every_section_and_figure(tiny_results):
    path = write_report(tiny_results)
    assert path == tiny_results / "report.md"
    text = path.read_text()
    assert text.startswith("# tiny\n\na tiny report test")
    for heading in ("## Accuracy and generalization gap", "## Learning curves", "## Learning-rate schedules applied",
                    "## Steps to target", "## Sharpness (Keskar et al. 2017)", "## Sweep: tuned learning rate per world size",
                    "## Where a recipe fails"):
        assert heading in text
    assert {p.name for p in (tiny_results / "figures").iterdir()} == FIGURES
    assert all((tiny_results / "figures" / name).stat().st_size > 5000 for name in FIGURES)
    assert "Tuned lr ~ global_batch^0.50" in text and "| 4 | 64 | 4 (0) | 0.1 | 0.5800 | 0.5700 | 0.1 |" in text


def test_report_means_and_stds_are_those_of_the_summary(tiny_results):
    write_report(tiny_results)
    rows = summary_rows(tiny_results)
    headline = json.loads((tiny_results / "report.json").read_text())
    for entry in headline["accuracy"]:
        group = [float(r["test_accuracy"]) for r in rows if r["label"] == entry["recipe"]
                 and int(r["global_batch"]) == entry["global_batch"] and r["status"] == "ok"]
        assert entry["runs"] == len(group) == 2
        assert entry["test_accuracy"] == pytest.approx(statistics.fmean(group))
        assert entry["std"] == pytest.approx(statistics.stdev(group))
        line = next(l for l in (tiny_results / "report.md").read_text().splitlines()
                    if l.startswith(f"| {entry['recipe']} | {entry['global_batch'] // 16} | {entry['global_batch']} |"))
        assert f"{statistics.fmean(group):.4f} ± {statistics.stdev(group):.4f}" in line


def test_default_target_is_the_highest_every_batch_reaches(tiny_results):
    write_report(tiny_results)
    headline = json.loads((tiny_results / "report.json").read_text())
    assert headline["metric"] == "val_accuracy"
    peaks = {}
    for row in summary_rows(tiny_results):
        with open(tiny_results / "runs" / row["run_id"] / "history.csv") as handle:
            best = max(float(epoch["val_accuracy"]) for epoch in csv.DictReader(handle))
        peaks[row["global_batch"]] = max(peaks.get(row["global_batch"], 0.0), best)
    assert headline["target"] == pytest.approx(math.floor(min(peaks.values()) / 0.005 + 1e-9) * 0.005)


def test_explicit_target_above_every_run_reports_nothing_reached(tiny_results):
    write_report(tiny_results, target=0.999)
    text = (tiny_results / "report.md").read_text()
    assert "reaches **0.999**" in text and "Critical batch: not fitted (critical_batch needs steps to target at two or more" in text


def test_cli_report_and_its_errors(tiny_results, tmp_path, capsys):
    assert main(["report", str(tiny_results), "--metric", "accuracy"]) == 0
    assert "wrote " in capsys.readouterr().out
    before = (tiny_results / "report.md").read_text()
    for args, message in (
        ([str(tmp_path / "missing")], "is not a folder of results"),
        ([str(tmp_path)], "has neither summary.csv nor sweep_summary.csv"),
        ([str(tiny_results), "--target", "2"], "--target must be an accuracy in (0, 1], got 2.0"),
        ([str(tiny_results), "--metric", "bogus"], "--metric 'bogus' is not in the runs' history"),
    ):
        assert main(["report", *args]) == 2
        error = capsys.readouterr().err
        assert error.startswith("lbtrain: error: ") and message in error and error.count("\n") == 1
    assert (tiny_results / "report.md").read_text() == before


def test_report_command_in_a_fresh_process(tiny_results):
    result = run_cli("report", str(tiny_results))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == ""
    assert yaml.safe_load((tiny_results / "experiment.yaml").read_text())["name"] == "tiny"


def test_targets_reached_in_the_first_epoch_are_upper_bounds_left_out_of_the_fit(tiny_results):
    write_report(tiny_results, target=0.05)
    text = (tiny_results / "report.md").read_text()
    section = text.split("## Steps to target")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| none |")]
    # 384 * 0.75 = 288 training samples: 18 steps an epoch at batch 16, 4 at batch 64.
    assert rows == ["| none | 16 | ≤18 | 2/2 |", "| none | 64 | ≤4 | 2/2 |"]
    assert "Critical batch: not fitted" in text


def synthetic(recipe, world, seed, curve, status="ok", test=0.8):
    """A run record with a validation curve (one value per epoch) and 10 steps an epoch at world 1."""
    from lbtrain.analysis.tables import RunRecord
    from lbtrain.results import RunResult

    history = [{"epoch": e + 1, "val_accuracy": v, "accuracy": v + 0.01} for e, v in enumerate(curve)]
    row = {"run_id": f"{recipe}{world}{seed}", "label": recipe, "status": status, "world_size": world, "global_batch": 16 * world,
           "seed": seed, "learning_rate": 0.1 * world, "test_accuracy": test, "reason": "loss became nan" if status != "ok" else None}
    return RunRecord(row, RunResult(config={}, status=status, history=history, steps_per_epoch=10 // world, global_batch=16 * world))


def test_learning_curves_average_seeds_per_epoch_and_panel_per_world():
    from lbtrain.analysis.report import learning_curves

    panels = learning_curves([synthetic("a", 1, 0, [0.5, 0.7]), synthetic("a", 1, 1, [0.6, 0.9]), synthetic("b", 2, 0, [0.4])],
                             "val_accuracy")
    assert list(panels) == ["world 1 (batch 16)", "world 2 (batch 32)"]
    (line,) = panels["world 1 (batch 16)"]
    assert line.label == "a" and line.x == [1, 2] and line.y == pytest.approx([0.55, 0.8])


def test_steps_rows_best_steps_and_failures_on_synthetic_runs():
    from lbtrain.analysis.report import best_steps, failures, steps_rows
    from lbtrain.analysis.tables import aggregate, column

    records = [synthetic("a", 1, 0, [0.5, 0.7, 0.8], test=0.85), synthetic("a", 2, 0, [0.6, 0.8], test=0.80),
               synthetic("b", 2, 0, [0.75, 0.9], test=0.86), synthetic("b", 4, 0, [0.1], status="diverged", test=0.1)]
    rows = steps_rows(records, 0.7, "val_accuracy")
    assert [(r["recipe"], r["global_batch"], r["upper_bound"]) for r in rows] == [
        ("a", 16, False), ("a", 32, False), ("b", 32, True), ("b", 64, False)]
    assert [r["steps_to_target"] for r in rows[:3]] == pytest.approx([20.0, 7.5, 5.0]) and rows[3]["steps_to_target"] is None
    assert [(r["global_batch"], r["recipe"]) for r in best_steps(rows)] == [(16, "a"), (32, "b")]
    lines = failures(records, aggregate(records, column("test_accuracy")))
    assert lines == ["`b` at global batch 64 (world 4, seed 0, lr 0.4) diverged: loss became nan",
                     "`a` at global batch 32 loses 5.0 points of test accuracy against the small-batch reference"]


def test_noise_scale_is_read_in_the_epoch_each_run_reaches_the_target():
    from lbtrain.analysis.report import noise_scale_at_target

    first, second, diverged = synthetic("a", 1, 0, [0.5, 0.7, 0.8]), synthetic("a", 2, 0, [0.75, 0.9]), synthetic("b", 4, 0, [0.9], "diverged")
    for record, scales in ((first, [None, 120.0, 300.0]), (second, [float("inf"), 80.0]), (diverged, [50.0])):
        for row, scale in zip(record.result.history, scales):
            row["noise_scale"] = scale
    assert noise_scale_at_target([first, second, diverged], 0.7, "val_accuracy") == [120.0]
    assert noise_scale_at_target([first, second, diverged], 0.8, "val_accuracy") == [300.0, 80.0]


def test_damaged_rows_and_run_files_are_left_out_by_name_and_the_rest_reported(tiny_results, tmp_path):
    import shutil

    results = tmp_path / "tiny"
    shutil.copytree(tiny_results, results)
    rows = summary_rows(results)
    damaged_run = results / "runs" / rows[0]["run_id"] / "metrics.json"
    damaged_run.write_text(damaged_run.read_text()[:100])
    with open(results / "summary.csv", "a") as handle:
        handle.write(rows[1]["run_id"] + ",linear")  # a row cut short, as a full disk leaves one
    problems = []
    text = write_report(results, on_damaged=problems.append).read_text()
    assert problems == [f"{results / 'summary.csv'}, line {len(rows) + 2}: a damaged row, left out",
                        problems[1]]
    assert problems[1].startswith(f"{damaged_run} is damaged (JSONDecodeError: ") and problems[1].endswith(": run left out")
    assert f"{len(rows) - 1} runs: " in text and all(f"- {problem}" in text for problem in problems)


def test_a_summary_without_its_columns_is_one_line(tiny_results, tmp_path, capsys):
    results = tmp_path / "tiny"
    results.mkdir()
    (results / "summary.csv").write_text("\x00\x01 not a summary\n")
    assert main(["report", str(results)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"lbtrain: error: {results / 'summary.csv'} is damaged: no column run_id")
