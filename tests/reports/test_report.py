import csv
import json
import math
import statistics
from pathlib import Path

import pytest
import scipy.stats
import yaml

from helpers import REPO_ROOT, run_cli, stderr_lines
from lbtrain.cli import main
from lbtrain.config import ExperimentConfig
from lbtrain.reports.plots import OKABE_ITO
from lbtrain.reports.prose import unsupported_numbers
from lbtrain.reports.report import write_report
from lbtrain.reports.statistics import mean_interval
from lbtrain.studies.runner import run_experiment

FIGURES = {"accuracy_vs_batch.png", "gap_vs_batch.png", "learning_curves.png", "lr_schedules.png", "steps_to_target.png",
           "sharpness_vs_batch.png", "sweep_lr_vs_batch.png"}


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory):
    """A tiny experiment on MNIST-1D (2 recipes x world sizes 1 and 4 x 2 seeds, 3 epochs, with
    sharpness and noise scale), plus a synthetic sweep summary beside it."""
    root = tmp_path_factory.mktemp("report")
    experiment = ExperimentConfig.model_validate({
        "name": "tiny", "description": "a tiny report test", "sizing": "to run in seconds", "output_dir": str(root),
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
    assert text.startswith("# tiny\n\n> a tiny report test\n\n> Sizing: to run in seconds\n\nModel `mlp` on data `mnist1d`.\n\nMachine time: ")
    # Machine time: the runs' wall times (no optuna.db here: no tuning trials).
    minutes = json.loads((tiny_results / "report.json").read_text())["machine_minutes"]
    assert minutes["tuning_trials"] is None
    assert minutes["runs"] == pytest.approx(sum(float(row["wall_time_seconds"]) for row in summary_rows(tiny_results)) / 60)
    assert f"Machine time: {minutes['runs']:.0f} minutes of runs (their wall times)." in text
    for heading in ("## Accuracy and generalization gap", "## Learning curves", "## Learning-rate schedules applied",
                    "## Steps to target", "## Sharpness (Keskar et al. 2017)", "## Sweep: tuned learning rate per world size",
                    "## Where a recipe fails"):
        assert heading in text
    assert {p.name for p in (tiny_results / "figures").iterdir()} == FIGURES
    assert all((tiny_results / "figures" / name).stat().st_size > 5000 for name in FIGURES)
    assert "Tuned lr ~ global_batch^0.50 (no interval)" in text and "| 4 | 64 | 4 (0) | 0.1 | 0.5800 | 0.5700 | 0.1 |" in text


def test_every_number_in_the_reports_prose_is_in_its_tables_or_json(tiny_results):
    text = write_report(tiny_results).read_text()
    record = json.loads((tiny_results / "report.json").read_text())
    assert unsupported_numbers(text, record) == []
    assert record["runs"]["total"] == len(summary_rows(tiny_results)) and record["margin"] == 0.01
    # The check has teeth: a hand-written number, or one edited in a sentence, is caught.
    drifted = text.replace("runs: ", "runs (grew 25-fold): ", 1)
    assert unsupported_numbers(drifted, record) == [("25", next(l for l in drifted.splitlines() if "25-fold" in l))]
    target_line = next(line for line in text.splitlines() if "first reaches **" in line)
    edited = text.replace(target_line, target_line.replace(f"**{record['target']:.3f}**", f"**{record['target'] + 0.2:.3f}**"))
    assert [token for token, _ in unsupported_numbers(edited, record)] == [f"{record['target'] + 0.2:.3f}"]


COMMITTED_REPORTS = sorted(path.parent.name for path in (Path(REPO_ROOT) / "results").glob("*/report.json"))


@pytest.mark.parametrize("study", COMMITTED_REPORTS)
def test_committed_reports_state_only_numbers_from_their_data(study):
    folder = Path(REPO_ROOT) / "results" / study
    assert unsupported_numbers((folder / "report.md").read_text(), json.loads((folder / "report.json").read_text())) == []


def test_each_recipe_has_one_colour_in_every_figure(tiny_results):
    import matplotlib.colors
    import matplotlib.image

    write_report(tiny_results)
    first, second = (tuple(round(255 * c) for c in matplotlib.colors.to_rgb(color)) for color in OKABE_ITO[:2])
    for name in ("accuracy_vs_batch.png", "gap_vs_batch.png", "learning_curves.png", "lr_schedules.png", "steps_to_target.png",
                 "sharpness_vs_batch.png"):
        image = matplotlib.image.imread(tiny_results / "figures" / name)
        pixels = {tuple(pixel) for pixel in (image[..., :3] * 255).round().astype(int).reshape(-1, 3)}
        assert first in pixels and second in pixels, name  # "none" in blue, "linear+warmup" in vermillion


def test_report_means_and_intervals_are_those_of_the_summary(tiny_results):
    write_report(tiny_results)
    rows = summary_rows(tiny_results)
    headline = json.loads((tiny_results / "report.json").read_text())
    for entry in headline["accuracy"]:
        group = [float(r["test_accuracy"]) for r in rows if r["label"] == entry["recipe"]
                 and int(r["global_batch"]) == entry["global_batch"] and r["status"] == "ok"]
        assert entry["runs"] == len(group) == 2
        assert entry["test_accuracy"] == pytest.approx(statistics.fmean(group))
        assert entry["std"] == pytest.approx(statistics.stdev(group))
        estimate = mean_interval(group)
        assert (entry["low"], entry["high"]) == pytest.approx((estimate.low, estimate.high)) and entry["low"] <= entry["test_accuracy"]
        line = next(l for l in (tiny_results / "report.md").read_text().splitlines()
                    if l.startswith(f"| {entry['recipe']} | {entry['global_batch'] // 16} | {entry['global_batch']} |"))
        assert f"| {estimate.describe(4)} |" in line and line.endswith("| 2 |")
        assert estimate.describe(4).endswith("(n=2, df=1)") and entry["df"] == 1


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
    assert "reaches **0.999**" in text and "not fitted — not enough points (n = 0 batch sizes < 4)" in text


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
    assert stderr_lines(result.stderr) == []
    assert yaml.safe_load((tiny_results / "experiment.yaml").read_text())["name"] == "tiny"


def test_targets_reached_in_the_first_epoch_are_upper_bounds_left_out_of_the_fit(tiny_results):
    write_report(tiny_results, target=0.05)
    text = (tiny_results / "report.md").read_text()
    section = text.split("## Steps to target")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| none |")]
    # 384 * 0.75 = 288 training samples: 18 steps an epoch at batch 16, 4 at batch 64.
    assert rows == ["| none | 16 | ≤18 | 2/2 |", "| none | 64 | ≤4 | 2/2 |"]
    assert "not fitted — not enough points (n = 0 batch sizes < 4)" in text


def synthetic(recipe, world, seed, curve, status="ok", test=0.8):
    """A run record with a validation curve (one value per epoch) and 10 steps an epoch at world 1."""
    from lbtrain.reports.tables import RunRecord
    from lbtrain.results import RunResult

    history = [{"epoch": e + 1, "val_accuracy": v, "accuracy": v + 0.01} for e, v in enumerate(curve)]
    row = {"run_id": f"{recipe}{world}{seed}", "label": recipe, "status": status, "world_size": world, "global_batch": 16 * world,
           "seed": seed, "learning_rate": 0.1 * world, "test_accuracy": test, "reason": "loss became nan" if status != "ok" else None}
    return RunRecord(row, RunResult(config={}, status=status, history=history, steps_per_epoch=10 // world, global_batch=16 * world))


def test_learning_curves_draw_each_seed_thin_the_ok_mean_thick_and_mark_where_bad_runs_ended():
    from lbtrain.reports.plots import Line, Mark
    from lbtrain.reports.report import learning_curves

    records = [synthetic("a", 1, 0, [0.5, 0.7]), synthetic("a", 1, 1, [0.6, 0.9]), synthetic("a", 1, 2, [0.3, float("nan")], "diverged"),
               synthetic("b", 2, 0, [0.4])]
    panels = learning_curves(records, "val_accuracy")
    assert list(panels) == ["world 1 (batch 16)", "world 2 (batch 32)"]
    seeds, mean, mark = panels["world 1 (batch 16)"][:3], panels["world 1 (batch 16)"][3], panels["world 1 (batch 16)"][4]
    assert [(line.thin, line.y[:1]) for line in seeds] == [(True, [0.5]), (True, [0.6]), (True, [0.3])]
    assert isinstance(mean, Line) and not mean.thin and mean.x == [1, 2] and mean.y == pytest.approx([0.55, 0.8])  # ok seeds only
    assert mark == Mark("diverged", "a", 1, 0.3)
    assert panels["world 2 (batch 32)"] == [Line("b", [1], [0.4], thin=True)]  # one seed: no mean


def test_batch_figures_keep_every_bad_run_as_a_mark_and_band_only_with_two_seeds():
    from lbtrain.reports.plots import Mark
    from lbtrain.reports.report import batch_lines, status_marks
    from lbtrain.reports.tables import aggregate, column

    records = [synthetic("a", 1, 0, [0.5], test=0.80), synthetic("a", 1, 1, [0.5], test=0.84), synthetic("a", 4, 0, [0.5], test=0.70),
               synthetic("a", 4, 1, [0.1], "diverged"), synthetic("b", 4, 0, [0.1], "collapsed"), synthetic("b", 4, 1, [0.1], "collapsed")]
    (line,) = batch_lines(aggregate(records, column("test_accuracy")), ["a", "b"])  # "b" has no ok run: no line ...
    assert line.x == [16, 64] and line.y == pytest.approx([0.82, 0.70]) and line.n == [2, 1]  # seeds behind each point
    # Two seeds 0.80 and 0.84: 0.82 ± t(0.975, 1) * 0.02; one seed: no band.
    half = scipy.stats.t.ppf(0.975, 1) * 0.02
    assert line.low == pytest.approx([0.82 - half, None]) and line.high == pytest.approx([0.82 + half, None])
    assert status_marks(records) == [Mark("diverged", "a", 64), Mark("collapsed", "b", 64, count=2)]  # ... but its marks


def test_arms_compared_at_one_batch_get_a_position_each_and_keep_their_marks():
    from lbtrain.reports.plots import Line, Mark, draw_panels
    from lbtrain.reports.report import arm_positions, batch_lines, comparison_axis, status_marks
    from lbtrain.reports.tables import aggregate, column

    # keskar_v2's shape: SB at batch 16, two large-batch arms at batch 64 (one with a diverged seed).
    records = [synthetic("SB", 1, 0, [0.5], test=0.86), synthetic("LB", 4, 0, [0.5], test=0.84),
               synthetic("LB longer", 4, 0, [0.5], test=0.88), synthetic("LB longer", 4, 1, [0.1], "diverged")]
    assert arm_positions(records) == {("SB", 16): 1, ("LB", 64): 2, ("LB longer", 64): 3}
    panels, axis = comparison_axis(records, {"test": [*batch_lines(aggregate(records, column("test_accuracy")), ["SB", "LB", "LB longer"]),
                                                      *status_marks(records)]})
    assert axis == {"xlabel": "arm (global batch)", "log2_x": False, "x_labels": {1: "SB (16)", 2: "LB (64)", 3: "LB longer (64)"}}
    assert panels["test"] == [Line("SB", [1], [0.86], [None], [None], n=[1]), Line("LB", [2], [0.84], [None], [None], n=[1]),
                              Line("LB longer", [3], [0.88], [None], [None], n=[1]), Mark("diverged", "LB longer", 3)]
    (axes,) = draw_panels(panels, ylabel="test accuracy", **axis).axes
    assert [label.get_text() for label in axes.get_xticklabels()] == ["SB (16)", "LB (64)", "LB longer (64)"]
    # A recipe at several batches, or one arm per batch: the batch axis shows them apart.
    assert arm_positions(records + [synthetic("SB", 4, 0, [0.5])]) is None
    assert arm_positions(records[:2]) is None
    assert comparison_axis(records[:2], {})[1] == {"xlabel": "global batch", "log2_x": True}


def test_steps_rows_best_steps_and_failures_on_synthetic_runs():
    from lbtrain.reports.plots import Line, Mark
    from lbtrain.reports.report import best_steps, failure_sentence, failures, steps_panel, steps_rows
    from lbtrain.reports.scaling_laws import critical_batch
    from lbtrain.reports.tables import aggregate, column

    records = [synthetic("a", 1, 0, [0.5, 0.7, 0.8], test=0.85), synthetic("a", 2, 0, [0.6, 0.8], test=0.80),
               synthetic("b", 2, 0, [0.75, 0.9], test=0.86), synthetic("b", 4, 0, [0.1], status="diverged", test=0.1),
               synthetic("b", 4, 1, [0.5, 0.6], test=0.6)]
    rows = steps_rows(records, 0.7, "val_accuracy")
    assert [(r["recipe"], r["global_batch"], r["upper_bound"], r["reached"], r["ok_runs"], r["runs"]) for r in rows] == [
        ("a", 16, False, 1, 1, 1), ("a", 32, False, 1, 1, 1), ("b", 32, True, 1, 1, 1), ("b", 64, False, 0, 1, 2)]
    assert [r["steps_to_target"] for r in rows[:3]] == pytest.approx([20.0, 7.5, 5.0]) and rows[3]["steps_to_target"] is None
    assert [r["seed_steps"] for r in rows] == [pytest.approx([20.0]), pytest.approx([7.5]), pytest.approx([5.0]), []]
    # b's 5 steps at 32 are an upper bound (reached by the first epoch's end): a stands for batch 32.
    assert [(r["global_batch"], r["recipe"]) for r in best_steps(rows)] == [(16, "a"), (32, "a")]
    fit = critical_batch(rows)
    assert not fit.fitted and fit.excluded == ({"recipe": "b", "global_batch": 32, "reached": 1, "runs": 1, "upper_bound": True},)
    panel = steps_panel(rows, records, fit)
    assert panel[0] == Line("a", [16, 32], pytest.approx([20.0, 7.5]), low=[None, None], high=[None, None], n=[1, 1])
    assert panel[1:4] == [Mark("upper bound", "b", 32, 5.0), Mark("not reached", "b", 64), Mark("diverged", "b", 64)]
    assert panel[4] == Line("perfect scaling", [16, 32], [20.0, 10.0], reference=True) and len(panel) == 5  # no fit from 2 points
    # One seed a group: no interval, so no arm is worse than the reference by the decision rule; the diverged run is listed.
    found = failures(records, aggregate(records, column("test_accuracy")))
    assert [failure_sentence(f) for f in found] == ["`b` at global batch 64 (world 4, seed 0, lr 0.4) diverged: loss became nan"]


def test_steps_to_target_reads_validation_points_when_a_run_has_them_and_epoch_ends_otherwise():
    """Run a (world 1, 10 steps an epoch, points every 4 steps) crosses 0.7 between its epoch end
    at step 10 (0.69) and its point at 12 (0.8): 10 + 2 x 0.01 / 0.11 steps, where its epoch ends
    alone would say 10 + 10 x 0.01 / 0.21 (0.9 at 20). A run whose first point already meets the
    target is an upper bound; the run without points is read at its epoch ends, and the report
    says which."""
    from lbtrain.reports.report import resolution_text, steps_rows

    points = [{"step": 4, "val_accuracy": 0.3}, {"step": 8, "val_accuracy": 0.6}, {"step": 12, "val_accuracy": 0.8},
              {"step": 16, "val_accuracy": 0.85}]
    finer = synthetic("a", 1, 0, [0.69, 0.9])
    finer.result.validation_points, finer.result.config = points, {"training": {"validation_every_steps": 4}}
    early = synthetic("a", 1, 1, [0.8, 0.9])
    early.result.validation_points = [{"step": 4, "val_accuracy": 0.75}, {"step": 8, "val_accuracy": 0.8}]
    early.result.config = {"training": {"validation_every_steps": 4}}
    coarse = synthetic("a", 2, 0, [0.6, 0.8])
    rows = steps_rows([finer, early, coarse], 0.7, "val_accuracy")
    assert [(r["global_batch"], r["seed_steps"], r["upper_bound"]) for r in rows] == [
        (16, pytest.approx([10 + 2 * 0.01 / 0.11, 4.0]), True), (32, pytest.approx([7.5]), False)]
    assert steps_rows([finer], 0.7, "val_accuracy")[0]["steps_to_target"] == pytest.approx(10 + 2 * 0.01 / 0.11)
    assert steps_rows([finer], 0.7, "val_accuracy")[0]["upper_bound"] is False
    assert resolution_text([finer, early]) == "interpolated between validation points measured every 4 steps"
    assert resolution_text([finer, coarse]) == ("interpolated between validation points measured every 4 steps; between "
                                                "epoch ends for runs without points")
    assert resolution_text([coarse]) == "interpolated between epoch ends"


def with_noise(record, *rows):
    """Sets each epoch's logged (noise_trace, gradient_norm_sq); None for an epoch not measured."""
    for epoch, values in zip(record.result.history, rows):
        if values is not None:
            epoch["noise_trace"], epoch["gradient_norm_sq"] = values
    return record


def test_noise_scale_is_read_in_the_epoch_each_run_reaches_the_target_and_never_negative():
    from lbtrain.reports.report import noise_scale_at_target, noise_scale_sentence, noise_scale_summary

    first = with_noise(synthetic("a", 1, 0, [0.5, 0.7, 0.8]), None, (240.0, 2.0), (300.0, 1.0))
    second = with_noise(synthetic("a", 2, 0, [0.75, 0.9]), (80.0, -0.02), (80.0, 1.0))  # |G|^2 estimate below 0 at 0.75
    diverged = with_noise(synthetic("b", 4, 0, [0.9], "diverged"), (50.0, 1.0))
    found = noise_scale_at_target([first, second, diverged], 0.7, "val_accuracy")
    assert [(f["global_batch"], f["epoch"], f["noise_scale"], f["undetermined"]) for f in found] == [
        (16, 2, 120.0, None), (32, 1, None, "|G|^2 estimate <= 0")]
    summary = noise_scale_summary(found)
    assert summary == {"median": 120.0, "range": None, "per_batch": {"16": 120.0}, "batches": 1, "runs": 1,
                       "training_median": 120.0, "training_range": None, "undetermined": {"|G|^2 estimate <= 0": 1}}
    assert noise_scale_sentence(summary) == ("B_simple at the target is 120, the median over 1 batch size of each batch's median "
                                             "over its runs (1 runs, each read at the end of the epoch it reached the target); "
                                             "1 run undetermined (|G|^2 estimate <= 0), left out.")
    assert [f["noise_scale"] for f in noise_scale_at_target([first, second], 0.8, "val_accuracy")] == [300.0, 80.0]
    only_undetermined = noise_scale_summary(noise_scale_at_target([second], 0.7, "val_accuracy"))
    assert noise_scale_sentence(only_undetermined) == "Gradient noise scale at the target: 1 run undetermined (|G|^2 estimate <= 0)."


def test_b_simple_over_the_second_half_of_training_widens_the_predicted_over_measured_ratio():
    """A run reaching 0.7 in epoch 4 logs B_simple 50, 100, 150, 200: over epochs 2 to 4 (the second
    half of its way) it moves from 100 to 200, median 150; another reaching it in epoch 1 reads 80
    there. The ratio's interval: B_simple's lowest of both ranges (80) over B_crit's highest, its
    highest (200) over B_crit's lowest."""
    from lbtrain.reports.report import noise_scale_at_target, noise_scale_sentence, noise_scale_summary
    from lbtrain.reports.scaling_laws import CriticalBatchFit

    slow = with_noise(synthetic("a", 1, 0, [0.4, 0.5, 0.6, 0.7]), (50.0, 1.0), (100.0, 1.0), (150.0, 1.0), (200.0, 1.0))
    fast = with_noise(synthetic("a", 2, 0, [0.75, 0.9]), (80.0, 1.0), (90.0, 1.0))
    found = noise_scale_at_target([slow, fast], 0.7, "val_accuracy")
    assert [f["second_half"] for f in found] == [[100.0, 150.0, 200.0], [80.0]]
    summary = noise_scale_summary(found)
    assert (summary["median"], summary["range"]) == (140.0, [80.0, 200.0])
    assert (summary["training_median"], summary["training_range"]) == (125.0, [80.0, 200.0])
    assert "moves from 80 to 200 (median 125)" in noise_scale_sentence(summary)
    fit = CriticalBatchFit(5, 100.0, 250.0, 0.01, noise_scale=140.0, noise_scale_range=(120.0, 160.0),
                           noise_scale_training_range=(80.0, 200.0), b_crit_profile=(200.0, 400.0))
    assert fit.interval_method == "profile" and fit.noise_scale_ratio_interval == pytest.approx((80 / 400, 200 / 200))
    assert CriticalBatchFit.from_dict(fit.to_dict()) == fit


def test_b_simple_counts_each_batch_once_and_runs_trained_alike_once():
    """Batch 16: seeds 0-2 logged 90, 150, 60 under one label and the very same values under a
    second (the base batch, where every rule gives one LR), plus seed 0 at 200 under a third:
    median of {90, 150, 60, 200} = 120, not of the seven values (150). Batch 32: 300 and 340,
    median 320. Over batches: median 220, range [120, 320]."""
    from lbtrain.reports.report import noise_scale_at_target, noise_scale_sentence, noise_scale_summary

    logged = [("a", 1, 0, 90.0), ("a", 1, 1, 150.0), ("a", 1, 2, 60.0), ("b", 1, 0, 90.0), ("b", 1, 1, 150.0),
              ("b", 1, 2, 60.0), ("c", 1, 0, 200.0), ("a", 2, 0, 300.0), ("a", 2, 1, 340.0)]
    runs = [with_noise(synthetic(recipe, world, seed, [0.8]), (scale, 1.0)) for recipe, world, seed, scale in logged]
    summary = noise_scale_summary(noise_scale_at_target(runs, 0.7, "val_accuracy"))
    assert summary["per_batch"] == {"16": 120.0, "32": 320.0}
    assert (summary["median"], summary["range"], summary["batches"], summary["runs"]) == (220.0, [120.0, 320.0], 2, 6)
    assert noise_scale_sentence(summary) == (
        "B_simple at the target is 220, the median over 2 batch sizes of each batch's median over its runs (6 runs, each read "
        "at the end of the epoch it reached the target); it ranges from 120 to 320 over the batch sizes, the range claims use "
        "(a spread of measurements, not a confidence interval). Over the second half of each run's way to the target it moves "
        "from 60 to 340 (median 150); the ratio B_simple / B_crit's interval takes B_simple's lowest over both ranges against "
        "B_crit's highest and its highest against B_crit's lowest (a hull: no confidence level).")


def test_report_shows_an_undetermined_noise_scale_with_its_reason_not_a_number(tiny_results, tmp_path):
    """Every run's |G|^2 estimate set to 0 or below: the report has no B_simple, only the reason."""
    import shutil

    results = tmp_path / "tiny"
    shutil.copytree(tiny_results, results)
    for metrics in (results / "runs").glob("*/metrics.json"):
        data = json.loads(metrics.read_text())
        for row in data["history"]:
            row["gradient_norm_sq"], row["noise_scale"] = -abs(row["gradient_norm_sq"] or 1.0), None
        metrics.write_text(json.dumps(data))
    text = write_report(results, target=0.1).read_text()
    record = json.loads((results / "report.json").read_text())
    runs = len(summary_rows(results))
    assert f"Gradient noise scale at the target: {runs} runs undetermined (|G|^2 estimate <= 0)." in text
    assert "B_simple" not in text and record["critical_batch"]["noise_scale"] is None
    assert record["noise_scale"]["median"] is None and all(f["noise_scale"] is None for f in record["noise_scale"]["runs_at_target"])
    assert unsupported_numbers(text, record) == []


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


def scored(recipe, world, seed, test, validation, status="ok", budget="3 epochs"):
    """A run record with final train, validation and test accuracy (train = test + 0.05), 16 samples a worker."""
    from lbtrain.reports.tables import RunRecord
    from lbtrain.results import RunResult

    row = {"run_id": f"{recipe}{world}{seed}", "label": recipe, "status": status, "world_size": world, "global_batch": 16 * world,
           "seed": seed, "learning_rate": 0.1 * world, "budget": budget, "test_accuracy": test, "validation_accuracy": validation,
           "train_accuracy": test + 0.05, "gap_accuracy": 0.05, "reason": None if status == "ok" else "loss became nan"}
    return RunRecord(row, RunResult(config={}, status=status))


def accuracy_table(records, folder):
    """The accuracy section of a report of ``records`` (figures into ``folder``): its text and record."""
    from lbtrain.reports.report import _accuracy_section, _Report, budgets_text
    from lbtrain.reports.tables import recipes

    report = _Report(Path(folder), {recipe: OKABE_ITO[i] for i, recipe in enumerate(recipes(records))})
    report.summary["budget"] = budgets_text(records)  # as the runs section records it
    _accuracy_section(report, records)
    return "\n\n".join(report.sections), report.summary


def row_of(text, recipe, batch):
    return next(line for line in text.splitlines() if line.startswith(f"| {recipe} | {batch // 16} | {batch} |")).split(" | ")


def test_the_accuracy_table_ranks_arms_on_validation_shows_their_test_and_sets_every_difference_against_one_reference(tmp_path):
    from lbtrain.reports.statistics import difference_interval

    # At batch 64 test and validation disagree: "fast" leads on test, "steady" on validation (separably).
    records = [scored("steady", 1, s, t, v) for s, (t, v) in enumerate([(0.90, 0.88), (0.91, 0.89), (0.92, 0.90)])]
    records += [scored("fast", 1, s, t, v) for s, (t, v) in enumerate([(0.90, 0.87), (0.92, 0.89), (0.94, 0.91)])]
    records += [scored("steady", 4, s, t, v) for s, (t, v) in enumerate([(0.84, 0.86), (0.85, 0.87), (0.86, 0.88)])]
    records += [scored("fast", 4, s, t, v) for s, (t, v) in enumerate([(0.95, 0.80), (0.96, 0.81), (0.97, 0.82)])]
    records += [scored("fast", 4, 3, 0.1, 0.1, status="diverged")]
    text, summary = accuracy_table(records, tmp_path)
    assert summary["reference"] == {"recipe": "steady", "global_batch": 16, "world_size": 1}
    assert "One reference for the whole table: `steady` at global batch 16 (world 1)" in text
    steady, fast = row_of(text, "steady", 64), row_of(text, "fast", 64)
    assert steady[-2] == "best" and fast[-2] == "below the best"  # the choice follows validation ...
    test_of = {(e["recipe"], e["global_batch"]): e for e in summary["accuracy"]}
    assert test_of[("fast", 64)]["test_accuracy"] == pytest.approx(0.96)  # ... though "fast" leads on test, which is shown
    assert mean_interval([0.95, 0.96, 0.97]).describe(4) in fast and mean_interval([0.84, 0.85, 0.86]).describe(4) in steady
    assert fast[-1] == "3 of 4 ok (1 diverged) |"
    # At batch 16 neither arm is separable on validation: both tied with the best, none named best.
    assert row_of(text, "steady", 16)[-2] == row_of(text, "fast", 16)[-2] == "tied with the best"
    # Every difference against the one reference (steady at 16), not against the arm's own smallest batch, with its claim.
    reference = [0.90, 0.91, 0.92]
    for recipe, batch, values, word in (("fast", 16, [0.90, 0.92, 0.94], "inconclusive"), ("steady", 64, [0.84, 0.85, 0.86], "worse"),
                                        ("fast", 64, [0.95, 0.96, 0.97], "better")):
        difference = difference_interval(values, reference)
        entry, cells = test_of[(recipe, batch)], row_of(text, recipe, batch)
        assert entry["difference_from_reference"]["mean"] == pytest.approx(difference.mean) and entry["claim"] == word
        assert cells[-4:-2] == [difference.describe(4, signed=True), word]
    assert row_of(text, "steady", 16)[-4:-2] == ["reference", "reference"]
    assert unsupported_numbers(text, summary) == []


def test_an_arm_with_no_ok_run_is_claimed_by_how_many_of_its_runs_ended_ok(tmp_path):
    records = [scored("a", 1, s, 0.85 + s / 100, 0.8) for s in range(5)]
    records += [scored("a", 32, s, 0.1, 0.1, status="diverged") for s in range(5)]  # goyal_v4's linear rule at batch 1,024
    records += [scored("b", 32, s, 0.1, 0.1, status="diverged") for s in range(3)]  # 0 of 3 against 5 of 5: p = 1/56 * ...
    text, summary = accuracy_table(records, tmp_path)
    claims = {(e["recipe"], e["global_batch"]): (e["claim"], e.get("decided_by")) for e in summary["accuracy"]}
    # Fisher's exact test, one-sided: 0 of 5 against 5 of 5 is p = 1 / C(10, 5) = 1/252; 0 of 3 against 5 of 5 is 1 / C(8, 3) = 1/56.
    assert claims[("a", 512)] == ("worse", "0 of 5 runs ok against 5 of 5 (Fisher's exact test, one-sided p = 0.004)")
    assert scipy.stats.fisher_exact([[0, 5], [5, 0]], alternative="less").pvalue == pytest.approx(1 / 252)
    assert claims[("b", 512)] == ("worse", "0 of 3 runs ok against 5 of 5 (Fisher's exact test, one-sided p = 0.018)")
    assert claims[("a", 16)] == (None, None)  # the reference
    assert row_of(text, "a", 512)[-4:-2] == ["-", "worse"]
    assert "- `a` at global batch 512: worse, 0 of 5 runs ok against 5 of 5 (Fisher's exact test, one-sided p = 0.004)" in text
    # Three runs of three against none of three: p = 1/20, not below 2.5%: inconclusive.
    few = [scored("a", 1, s, 0.85, 0.8) for s in range(3)] + [scored("a", 4, s, 0.1, 0.1, status="diverged") for s in range(3)]
    text, summary = accuracy_table(few, tmp_path)
    assert summary["accuracy"][1]["claim"] == "inconclusive" and "one-sided p = 0.050" in text


def test_arms_given_another_budget_are_ranked_apart_and_no_validation_ranks_nothing(tmp_path):
    records = [scored("a", 1, s, 0.8, v) for s, v in enumerate([0.80, 0.81, 0.82])]
    records += [scored("a", 4, s, 0.8, v) for s, v in enumerate([0.70, 0.71, 0.72])]
    records += [scored("a longer", 4, s, 0.9, v, budget="600 steps") for s, v in enumerate([0.90, 0.91, 0.92])]
    records += [scored("b", 4, s, 0.8, v) for s, v in enumerate([0.60, 0.61, 0.62])]
    text, summary = accuracy_table(records, tmp_path)
    # "a longer" trained longer: it is not ranked against the 3-epoch arms, which leaves "a" the best of them.
    assert row_of(text, "a", 64)[-2] == "best" and row_of(text, "b", 64)[-2] == "below the best"
    assert row_of(text, "a longer", 64)[-2] == "-" and row_of(text, "a", 16)[-2] == "-"  # alone at its batch and budget
    unvalidated = [scored(r.recipe, r.row["world_size"], r.row["seed"], r.row["test_accuracy"], None) for r in records]
    text, summary = accuracy_table(unvalidated, tmp_path)
    assert "standing" not in text.split("\n\n| ")[1] and "no arm is ranked" in text
    assert all(entry["standing_on_validation"] is None for entry in summary["accuracy"])


def test_failures_list_the_arms_worse_than_the_one_reference_by_the_decision_rule():
    from lbtrain.reports.report import failure_sentence, failures
    from lbtrain.reports.statistics import difference_interval
    from lbtrain.reports.tables import aggregate, column

    records = [scored("a", 1, s, t, 0.8) for s, t in enumerate([0.85, 0.86, 0.87])]
    records += [scored("a", 4, s, t, 0.8) for s, t in enumerate([0.80, 0.81, 0.82])]  # 5 points below: worse
    records += [scored("b", 4, s, t, 0.8) for s, t in enumerate([0.70, 0.85, 0.99])]  # too noisy: inconclusive
    records += [scored("b", 1, s, t, 0.8) for s, t in enumerate([0.855, 0.86, 0.865])]  # matches
    found = failures(records, aggregate(records, column("test_accuracy")))
    difference = difference_interval([0.80, 0.81, 0.82], [0.85, 0.86, 0.87])
    assert [(f["recipe"], f["global_batch"]) for f in found] == [("a", 64)]
    assert failure_sentence(found[0]) == (
        f"`a` at global batch 64 is worse than the reference (`a` at global batch 16): -5.0 points of test accuracy "
        f"(95% CI {100 * difference.low:+.1f} to {100 * difference.high:+.1f}, n=3 vs 3, df=4.0)")


def test_a_sweep_names_its_trial_chosen_on_validation_and_reports_its_test(tmp_path):
    (tmp_path / "sweep_summary.csv").write_text(
        "world_size,study,complete,pruned,global_batch,best_validation_accuracy,best_test_accuracy,best_learning_rate\n"
        "1,s-w1,4,0,16,0.61,0.70,0.05\n")
    text = write_report(tmp_path).read_text()
    assert ("| world | global batch | trials (pruned) | lr of the best on validation | validation acc (chosen on) | "
            "test acc (reported) |") in text and "| 1 | 16 | 4 (0) | 0.05 | 0.6100 | 0.7000 |" in text


def test_a_committed_study_is_ranked_on_validation_where_its_test_accuracy_disagrees(tmp_path):
    from lbtrain.reports.decisions import standing
    from lbtrain.reports.tables import load_records

    # adam_scaling at batch 512: "adam tuned" has the highest mean validation accuracy, "adam sqrt rule" the highest test.
    records = load_records(Path(REPO_ROOT) / "results" / "adam_scaling")
    text, summary = accuracy_table(records, tmp_path)
    at_512 = {e["recipe"]: e for e in summary["accuracy"] if e["global_batch"] == 512}
    validation = {recipe: [float(r.row["validation_accuracy"]) for r in records if r.recipe == recipe and r.global_batch == 512 and r.ok]
                  for recipe in at_512}
    assert max(at_512, key=lambda recipe: at_512[recipe]["test_accuracy"]) == "adam sqrt rule"
    assert max(validation, key=lambda recipe: statistics.fmean(validation[recipe])) == "adam tuned"
    assert {recipe: entry["standing_on_validation"] for recipe, entry in at_512.items()} == standing(validation)
    assert "best" not in standing(validation).values()  # not separable: no arm is named best at 512
    # At 64 "adam linear rule" is separable from the others on validation: named best.
    assert {e["recipe"]: e["standing_on_validation"] for e in summary["accuracy"] if e["global_batch"] == 64}["adam linear rule"] == "best"
    assert summary["reference"] == {"recipe": "adam tuned", "global_batch": 32, "world_size": 1}
    assert unsupported_numbers(text, summary) == []


def test_the_applied_schedule_of_a_run_that_stops_at_a_validation_target_is_rebuilt():
    """A run with ``training.stop_at.val_accuracy`` (critical_batch_v3's) keeps its validation
    split when its schedule is rebuilt on lbtrain's own data: without it the config is refused."""
    from lbtrain.reports.report import applied_schedules
    from lbtrain.reports.tables import RunRecord
    from lbtrain.results import RunResult

    config = {"data": {"dataset": "fashion_mnist", "validation_split": 0.1}, "model": {"name": "resnet"},
              "lr": {"base_lr": 0.1, "base_batch": 16, "warmup_epochs": 1},
              "training": {"per_worker_batch": 16, "epochs": 2, "stop_at": {"val_accuracy": 0.8}}}
    row = {"run_id": "r", "label": "a", "status": "ok", "world_size": 1, "global_batch": 16, "seed": 0}
    record = RunRecord(row, RunResult(config=config, status="ok", history=[], steps_per_epoch=4, global_batch=16, total_steps=8))
    (line,) = applied_schedules([record])["world 1 (batch 16)"]
    assert line.x == [step / 4 for step in range(8)]
    assert line.y == pytest.approx([0.1] * 8)  # warmup from the base batch's LR, which at the base batch is the LR
