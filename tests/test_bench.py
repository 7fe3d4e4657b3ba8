"""``lbtrain bench``: a tiny matrix end to end (the step alone, the input pipeline alone, the step
fed by it, what bounds each), the rule of the bound, the machine's peak, FLOP counting by hand, the
Horovod timeline, bad input as one line with exit code 2, and the README's performance table."""

import csv
import json
import math
import os

import pytest
import tensorflow as tf

from conftest import REPO_ROOT, horovod_installed, run_cli, stderr_lines
from lbtrain._keras import horovod_problem
from lbtrain.bench import (
    COLUMNS,
    INPUT_BOUND_MARGIN,
    Case,
    Settings,
    WorldSpec,
    allreduce_seconds,
    bound_by,
    forward_macs_per_sample,
    matmul_peak_flops,
    measure_case,
    read_timeline,
    training_flops_per_sample,
)
from lbtrain.models import build_model


@pytest.mark.slow
def test_a_tiny_matrix_writes_a_csv_json_and_plot_with_positive_throughput(tmp_path):
    result = run_cli("bench", "--models", "mlp", "--batches", "16", "--worlds", "single,simulated:2,independent:2",
                     "--steps", "3", "--warmup", "2", "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "bench.csv") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == COLUMNS
    assert [row["world"] for row in rows] == ["single", "simulated:2", "independent:2"]
    assert all(row["status"] == "ok" and float(row["images_per_second"]) > 0 for row in rows)
    assert [int(row["global_batch"]) for row in rows] == [16, 32, 32]
    assert float(rows[0]["scaling_efficiency"]) == 1.0
    assert all(0 < float(row["peak_fraction"]) for row in rows)
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["peak_gflops"] > 0 and len(report["rows"]) == 3
    assert report["input_bound_margin"] == INPUT_BOUND_MARGIN
    for row, written in zip(report["rows"], rows):
        speeds = [row[key] for key in ("images_per_second", "pipeline_images_per_second", "fed_images_per_second")]
        assert all(math.isfinite(speed) and speed > 0 for speed in speeds), row
        assert row["bound"] == bound_by(row["pipeline_images_per_second"], row["images_per_second"]) == written["bound"]
        assert float(written["pipeline_images_per_second"]) == pytest.approx(row["pipeline_images_per_second"])
    assert (tmp_path / "bench.png").stat().st_size > 0
    assert "mlp" in result.stdout and "matmul peak" in result.stdout
    assert f"input-bound where pipeline/s < {INPUT_BOUND_MARGIN:g} x images/s" in result.stdout


@pytest.mark.parametrize("pipeline, step, bound", [
    (100.0, 100.0, "input-bound"),        # as fast as the step: no slack to keep it fed
    (119.0, 100.0, "input-bound"),
    (120.0, 100.0, "compute-bound"),      # the rule's edge: 1.2 x the step
    (5000.0, 100.0, "compute-bound"),
    (50.0, 100.0, "input-bound"),
])
def test_a_run_is_input_bound_where_the_pipeline_delivers_less_than_the_margin_times_the_step(pipeline, step, bound):
    assert INPUT_BOUND_MARGIN == 1.2
    assert bound_by(pipeline, step) == bound
    assert bound_by(pipeline, step, margin=0.4) == "compute-bound"


def test_the_performance_table_shows_pipeline_and_fed_over_step_per_model_and_nothing_for_an_older_bench():
    from lbtrain.reports.performance import bench_bound_rows

    rows = [{"model": "mlp", "world": "single", "images_per_second": 1000.0, "pipeline_images_per_second": 5000.0,
             "fed_images_per_second": 950.0, "bound": "compute-bound"},
            {"model": "glance", "world": "single", "images_per_second": 4000.0, "pipeline_images_per_second": 2000.0,
             "fed_images_per_second": 1500.0, "bound": "input-bound"},
            {"model": "mlp", "world": "simulated:2", "images_per_second": 1.0, "pipeline_images_per_second": 1.0,
             "fed_images_per_second": 1.0, "bound": "input-bound"}]
    pipeline, fed = bench_bound_rows(rows, [64], 1.2, "bench/bench.json")
    assert pipeline.ratio == "mlp 5.0 (compute-bound), glance 0.5 (input-bound)"
    assert pipeline.limit.startswith("input-bound below 1.2: ")
    assert fed.ratio == "mlp 0.950, glance 0.375"
    assert bench_bound_rows([{"model": "mlp", "world": "single", "images_per_second": 1.0}], [64], None, "bench/bench.json") == []


def test_the_performance_table_shows_the_trainer_over_plain_fit_and_what_compiling_gives_per_model():
    from lbtrain.reports.performance import jit_rows

    seconds = {"trainer_uncompiled": [0.195, 0.199, 0.190], "fit_uncompiled": [0.181, 0.180, 0.185],
               "trainer_compiled": [0.7, 0.7, 0.7], "fit_compiled": [0.7, 0.7, 0.7]}
    result = {"trainer_over_fit_uncompiled": 1.02, "trainer_over_fit_compiled": 1.041, "trainer_compiled_over_uncompiled": 3.7,
              "fit_compiled_over_uncompiled": 3.61, "auto_is_faster_side": True, "epoch_seconds": seconds}
    data = {"targets": {"trainer_over_fit": 1.03}, "settings": {"batch": 256},
            "auto": {"compiled": False, "why": "training.jit_compile is auto and only the CPU is visible"},
            "results": {"cnn_batch_norm": result, "mlp": {**result, "auto_is_faster_side": False}}}
    rows = jit_rows(data)
    assert [(row.ratio, row.target, row.met) for row in rows[:3]] == [
        ("1.020", "<= 1.03", True), ("1.041", "<= 1.03", False), ("trainer 3.700, plain fit 3.610", "", None)]
    assert rows[0].comparison.endswith("(cnn with batch norm, batch 256, uncompiled)")
    # Round by round, trainer minus fit: +14, +19, +5 ms; their median, against fit's median epoch.
    assert "+14 ms an epoch of 0.18 s (medians over rounds)" in rows[0].limit and "+0 ms an epoch of 0.70 s" in rows[1].limit
    assert rows[2].limit == "`jit_compile: auto` does not compile here, the faster side: only the CPU is visible"
    assert rows[5].limit.startswith("`jit_compile: auto` does not compile here, the slower side")
    assert len(rows) == 6 and {row.source for row in rows} == {"jit.json"}


def test_the_performance_table_shows_the_pipeline_without_over_with_the_autotuning_model_per_batch():
    from lbtrain.reports.performance import pipeline_rows

    data = {"targets": {"without_over_with": 0.9},
            "batches": {"32": {"without_over_with": 0.861}, "4096": {"without_over_with": 1.166}},
            "deletion": {"without": {"max_seconds": 0.0031}, "with": {"max_seconds": 1.254}}}
    rows = pipeline_rows(data)
    assert [(row.ratio, row.target, row.met) for row in rows] == [("0.861", ">= 0.9", False), ("1.166", ">= 0.9", True)]
    assert rows[1].comparison.endswith("samples/s at batch 4096")
    assert rows[0].limit.endswith("waited at most 0.00 s without the model, 1.25 s with it")


def test_the_matmul_peak_is_positive():
    assert matmul_peak_flops(size=128, chain=2, repeats=2) > 0


def test_flops_are_counted_from_dense_and_conv_shapes_as_by_hand():
    inputs = tf.keras.Input((8, 8, 3))
    x = tf.keras.layers.Conv2D(4, 3, padding="same")(inputs)               # 8*8 positions x 3*3*3*4
    x = tf.keras.layers.Conv2D(6, 3, strides=2, padding="valid")(x)        # 3*3 positions x 3*3*4*6
    x = tf.keras.layers.MaxPooling2D()(x)                                   # 0
    x = tf.keras.layers.Flatten()(x)
    outputs = tf.keras.layers.Dense(10)(x)                                  # 1*1*6 inputs x 10
    model = tf.keras.Model(inputs, outputs)
    macs = 8 * 8 * 3 * 3 * 3 * 4 + 3 * 3 * 3 * 3 * 4 * 6 + 6 * 10
    assert forward_macs_per_sample(model) == macs
    assert training_flops_per_sample(model) == 3 * 2 * macs


def test_flops_of_the_zoo_mlp_and_a_nested_model():
    mlp = build_model("mlp", (28, 28, 1), 10)
    macs = 784 * 512 + 512 * 512 + 512 * 10
    assert forward_macs_per_sample(mlp) == macs
    outer = tf.keras.Sequential([tf.keras.Input((28, 28, 1)), mlp, tf.keras.layers.Dense(3)])
    assert forward_macs_per_sample(outer) == macs + 10 * 3


def test_an_unclosed_timeline_is_read_and_fused_allreduces_are_counted_once(tmp_path):
    events = [{"ph": "B", "name": "ALLREDUCE", "ts": 0, "pid": 1}, {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 10, "pid": 1},
              {"ph": "B", "name": "ALLREDUCE", "ts": 0, "pid": 2}, {"ph": "E", "ts": 900, "pid": 1},
              {"ph": "E", "ts": 1000, "pid": 1}, {"ph": "E", "ts": 1000, "pid": 2}]
    path = tmp_path / "timeline.json"
    path.write_text("[\n" + ",\n".join(json.dumps(event) for event in events) + ",")
    assert read_timeline(path) == events
    assert allreduce_seconds(events) == pytest.approx(0.001)


@pytest.mark.horovod
@pytest.mark.slow
def test_horovod_two_ranks_report_throughput_and_the_allreduce_share(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = Settings(steps=3, warmup_steps=2, timeline=True, pin_cores=True, idle_horovod_threads=True, allreduce_groups=1)
    result = measure_case(Case("mlp", 16, WorldSpec("horovod", 2)), settings)
    assert result["images"] == 2 * 16 * 3 and result["seconds"] > 0
    assert result["pipeline_seconds"] > 0 and result["fed_seconds"] > 0
    assert 0 < result["allreduce_share"] < 1
    assert list(tmp_path.iterdir()) == []  # the timeline went to the bench's file, none into the working folder


BAD_ARGUMENTS = {
    "unknown world": (["--worlds", "single,ring:4"], "argument --worlds: unknown world 'ring:4' (allowed: single, simulated:N, "
                                                     "horovod:N, independent:N, mirrored:N)"),
    "world without size": (["--worlds", "simulated"], "argument --worlds: world 'simulated' needs a size: simulated:N"),
    "zero batch": (["--batches", "64,0"], "argument --batches: expected a whole number >= 1, got 0"),
    "negative seconds": (["--seconds", "-1"], "argument --seconds: expected a number > 0, got '-1'"),
    "unknown model": (["--models", "mlp,vgg16"], "unknown model 'vgg16' (allowed: mlp, cnn, resnet, resnet50, "
                                                 "a reference package.module:function, or keras.applications.<Name>)"),
}


@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_bad_arguments_are_one_line_and_exit_2(case, tmp_path, lbtrain_here):
    arguments, message = BAD_ARGUMENTS[case]
    result = lbtrain_here("bench", *arguments, "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert stderr_lines(result.stderr) == [f"lbtrain: error: {message}"]
    assert not (tmp_path / "out").exists()


def test_gpu_without_a_gpu_is_one_line_and_exit_2(tmp_path, lbtrain_here):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    result = lbtrain_here("bench", "--device", "gpu", "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert stderr_lines(result.stderr) == ["lbtrain: error: --device gpu: TensorFlow sees no GPU on this machine (run with --device cpu)"]


def test_horovod_where_it_cannot_run_is_its_one_line_problem_and_exit_2(tmp_path, lbtrain_here):
    if horovod_installed():
        pytest.skip("Horovod runs here")
    result = lbtrain_here("bench", "--worlds", "single,horovod:2", "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert stderr_lines(result.stderr) == [f"lbtrain: error: {horovod_problem()}"]


def test_the_readme_performance_table_is_the_one_rendered_from_the_committed_json():
    from lbtrain.reports import performance as render

    readme = open(os.path.join(REPO_ROOT, "README.md")).read()
    assert render.table_in(readme) == render.render_table(render.load_results(os.path.join(REPO_ROOT, "results", "benchmarks"))), \
        "README's performance table is stale: run python scripts/render_benchmarks.py --write"
