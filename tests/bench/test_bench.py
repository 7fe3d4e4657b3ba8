"""``lbtrain bench``: a tiny matrix end to end (the step alone, the input pipeline alone, the step
fed by it, what bounds each), the rule of the bound, the machine's peak, FLOP counting by hand, the
Horovod timeline, and bad input as one line with exit code 2 (the README's performance table:
tests/lab/test_performance.py)."""

import csv
import json
import math

import pytest
import tensorflow as tf

from helpers import horovod_installed, stderr_lines
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
def test_a_tiny_matrix_writes_a_csv_json_and_plot_with_positive_throughput(tmp_path, lbtrain_here):
    # In this process (a fresh one would only add its TensorFlow import): the bench's own children
    # measure the machine's peak (the one test that runs its --peak child: the others measure a
    # smaller matmul in their process, tests/bench/test_bench_own_model.py) and each configuration.
    result = lbtrain_here("bench", "--models", "mlp", "--batches", "16", "--worlds", "single,simulated:2,independent:2",
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
    "unknown model": (["--models", "mlp,vgg16"], "unknown model 'vgg16' (allowed: mlp, cnn, resnet, vit, resnet50, "
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
