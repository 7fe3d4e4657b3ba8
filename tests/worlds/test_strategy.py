"""mode: mirrored and mode: multiworker (lbtrain.worlds.strategy): replicas get their workers'
samples, the synchronous worlds reach the same weights, runs end to end, bad input is refused."""

import csv
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import yaml

from helpers import REPO_ROOT, run_cli, stderr_lines, two_rank_run
from lbtrain._keras import KERAS_3
from lbtrain.config import ConfigError, run_config_from_dict
from lbtrain.data import make_input_pipeline
from lbtrain.launch.cluster import launch_multiworker
from lbtrain.trainer import train
from lbtrain.worlds.modes import get_mode
from lbtrain.worlds.multiworker import MULTIWORKER_KERAS_3
from lbtrain.worlds.simulated import SimulatedWorld
from lbtrain.worlds.strategy import contiguous_worker_batches

JOB = os.path.join(REPO_ROOT, "tests", "horovod_jobs", "tf_distribute_job.py")
needs_keras_2 = pytest.mark.skipif(KERAS_3, reason=MULTIWORKER_KERAS_3)
# Same seed, data order, global batch (2 x 16) and 6 momentum steps in every world. The worlds
# differ only in the order of float32 sums: the mean over the two workers' gradients (one mean
# over 32 samples in a simulated world; per-replica sums scaled by 1/32, then all-reduced by a
# strategy; Horovod's average of two means), and each worker's batch-norm statistics (ghost batch
# norm's kernel or ops against Keras's fused kernel): about 6e-8 relative per operation. Measured here: at
# most 1.2e-7 after 6 steps on weights of order 0.1-1 (with and without batch norm); 1e-6 allows
# ten times that, and is far below what one step changes (lr 0.2 x gradients of ~1e-2).
WEIGHT_TOLERANCE = 1e-6


def run_spec(batch_norm: bool) -> dict:
    return {
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [32], "batch_norm": batch_norm}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"world_size": 2, "per_worker_batch": 16, "steps": 6, "seed": 3, "checkpoint": False},
    }


def tiny_experiment(tmp_path, mode: str, **changes) -> str:
    """A 2-worker experiment of one run (mnist1d, 1 epoch) written to a YAML file; its path."""
    data = {
        "name": f"tiny-{mode}", "mode": mode, "output_dir": str(tmp_path / "results"),
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [32], "batch_norm": True}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.1, "base_batch": 16, "rule": "linear"},
        "training": {"per_worker_batch": 16, "epochs": 1},
        "grid": {"world_sizes": [2]},
        **changes,
    }
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_contiguous_worker_batches_moves_each_workers_samples_into_its_piece():
    """Position i*W + r of a global batch is worker r's i-th sample; after the reorder worker r's
    samples are piece r, in order (W=3, b=2)."""
    x = tf.reshape(tf.range(12, dtype=tf.float32), [6, 2])
    y = tf.range(6)
    reordered_x, reordered_y = contiguous_worker_batches(3, 2)(x, y)
    np.testing.assert_array_equal(reordered_y.numpy(), [0, 3, 1, 4, 2, 5])
    np.testing.assert_array_equal(reordered_x.numpy(), x.numpy()[[0, 3, 1, 4, 2, 5]])


@pytest.mark.parametrize("mode", ["mirrored", pytest.param("multiworker", marks=needs_keras_2)])
def test_replica_r_receives_exactly_worker_rs_samples(tmp_path, mode):
    world_size, batch = 2, 3
    output = str(tmp_path / "batches")
    program = [sys.executable, JOB, "batches", mode, str(world_size), str(batch), output]
    if mode == "mirrored":
        completed = subprocess.run(program, capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stderr[-2000:]
        received = dict(np.load(f"{output}-0.npz"))
    else:
        job = launch_multiworker(world_size, program)
        assert job.returncode == 0, job.output[-2000:]
        received = {**np.load(f"{output}-0.npz"), **np.load(f"{output}-1.npz")}
    x = np.arange(40 * world_size * batch, dtype=np.float32).reshape(-1, 2)
    y = np.arange(len(x), dtype=np.int32)
    for rank in range(world_size):
        expected = iter(make_input_pipeline(x, y, per_worker_batch=batch, rank=rank, world_size=world_size, seed=3, training=True))
        for step in range(2):
            np.testing.assert_array_equal(received[f"replica{rank}:{step}"], next(expected)[1].numpy())


def _trained_in_job(tmp_path, mode: str, spec: dict) -> tuple[list[np.ndarray], dict]:
    output = str(tmp_path / f"{mode}.npz")
    program = [sys.executable, JOB, "train", mode, json.dumps(spec), output]
    if mode == "mirrored":
        completed = subprocess.run(program, capture_output=True, text=True, timeout=600)
        assert completed.returncode == 0, completed.stderr[-3000:]
    else:
        job = launch_multiworker(2, program)
        assert job.returncode == 0, job.output[-3000:]
    saved = np.load(output)
    weights = [saved[f"w{i}"] for i in range(len(saved.files) - 1)]
    return weights, json.loads(str(saved["result"]))


def _assert_same_weights(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.reshape(b.shape), b, atol=WEIGHT_TOLERANCE, rtol=0)
    return max(float(np.abs(a.reshape(b.shape) - b).max()) for a, b in zip(got, want))


@pytest.mark.slow
@pytest.mark.parametrize("batch_norm", [False, True], ids=["mlp", "mlp-batch-norm"])
@pytest.mark.parametrize("mode", ["mirrored", pytest.param("multiworker", marks=needs_keras_2)])
def test_strategy_world_reaches_the_simulated_worlds_weights(tmp_path, mode, batch_norm):
    """Simulated W=2 (ghost BN at b=16) and the strategy's W=2 replicas (each normalizing its own
    16 samples) take the same 6 steps: same trainable weights, same step count and recorded batch."""
    spec = run_spec(batch_norm)
    simulated = train(run_config_from_dict(spec), SimulatedWorld(2))
    want = [variable.numpy() for variable in simulated.model.trainable_variables]
    got, result = _trained_in_job(tmp_path, mode, spec)
    _assert_same_weights(got, want)
    assert (result["total_steps"], result["global_batch"]) == (6, 32)
    assert result["learning_rate"] == pytest.approx(simulated.learning_rate)
    assert result["metrics"]["train_loss"] == pytest.approx(simulated.metrics["train_loss"], rel=1e-3)


# Trained in the session's shared horovodrun job (conftest: two_rank_runs).
HOROVOD_RUNS = {batch_norm: two_rank_run(f"test_strategy:{batch_norm}", run_spec(batch_norm)) for batch_norm in (False, True)}


@pytest.mark.horovod
@pytest.mark.slow
@pytest.mark.parametrize("batch_norm", [False, True], ids=["mlp", "mlp-batch-norm"])
def test_horovod_reaches_the_simulated_worlds_weights(two_rank_runs, batch_norm):
    """The fourth synchronous world: horovodrun -np 2 against the simulated world, within the
    tolerance the test above holds mirrored and multiworker to (so all four agree)."""
    spec = run_spec(batch_norm)
    saved, _ = two_rank_runs(HOROVOD_RUNS[batch_norm])
    simulated = train(run_config_from_dict(spec), SimulatedWorld(2)).model
    trainable = {variable.name for variable in simulated.trainable_variables}
    horovod = [saved[f"rank0:{i}"] for i, variable in enumerate(simulated.weights) if variable.name in trainable]
    _assert_same_weights(horovod, [variable.numpy() for variable in simulated.trainable_variables])


def test_settings_a_strategy_cannot_train_are_refused_by_name():
    config = run_config_from_dict({**run_spec(False), "training": {**run_spec(False)["training"], "accumulation_steps": 2}})
    assert "training.accumulation_steps is 2" in get_mode("mirrored").unsupported_setting(config)
    assert "mode: mirrored" in get_mode("mirrored").unsupported_setting(config)
    staleness = run_config_from_dict({**run_spec(False), "training": {**run_spec(False)["training"], "staleness": 1}})
    assert get_mode("multiworker").unsupported_setting(staleness).startswith("training.staleness is 1, which mode: multiworker")
    noise = run_config_from_dict({**run_spec(False), "analysis": {"noise_scale": True}})
    assert "analysis.noise_scale" in get_mode("mirrored").unsupported_setting(noise)
    precise = run_config_from_dict({**run_spec(True), "training": {**run_spec(True)["training"], "precise_bn_samples": 64}})
    assert get_mode("mirrored").unsupported_setting(precise).startswith("training.precise_bn_samples is 64, which mode: mirrored")
    assert get_mode("mirrored").unsupported_setting(run_config_from_dict(run_spec(True))) is None


def test_a_run_with_an_unsupported_setting_is_one_line_exit_2_before_training(tmp_path, lbtrain_here):
    path = tiny_experiment(tmp_path, "mirrored", training={"per_worker_batch": 16, "epochs": 1, "accumulation_steps": 2})
    completed = lbtrain_here("run", path)
    assert completed.returncode == 2
    lines = stderr_lines(completed.stderr)
    assert len(lines) == 1 and lines[0].startswith("lbtrain: error: training.accumulation_steps is 2, which mode: mirrored")
    assert not (tmp_path / "results").exists()


def test_an_unknown_mode_is_refused_with_the_allowed_ones(tmp_path, lbtrain_here):
    completed = lbtrain_here("run", tiny_experiment(tmp_path, "mirorred"))
    assert completed.returncode == 2 and "mode" in completed.stderr and "multiworker" in completed.stderr


@pytest.mark.skipif(not KERAS_3, reason="multiworker runs on tf.keras 2")
def test_multiworker_on_keras_3_is_one_line_exit_2(tmp_path, lbtrain_here):
    assert get_mode("multiworker").launch_problem() == MULTIWORKER_KERAS_3 and get_mode("mirrored").launch_problem() is None
    completed = lbtrain_here("run", tiny_experiment(tmp_path, "multiworker"))
    assert completed.returncode == 2
    assert stderr_lines(completed.stderr) == [f"lbtrain: error: {MULTIWORKER_KERAS_3}"]


@needs_keras_2
def test_multiworker_ports_in_use_are_one_line_exit_2(tmp_path, busy_port):
    port = busy_port
    completed = run_cli("run", tiny_experiment(tmp_path, "multiworker", multiworker={"base_port": port}))
    assert completed.returncode == 2
    assert stderr_lines(completed.stderr) == [
        f"lbtrain: error: multiworker.base_port: port {port} is in use (the job needs ports {port}-{port + 1})"]
    # The launcher checks every port of the job, not only the first.
    with pytest.raises(ConfigError, match=f"port {port + 2} is in use"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
            other.bind(("localhost", port + 2))
            launch_multiworker(2, [sys.executable, "-c", "pass"], base_port=port + 1)


@needs_keras_2
def test_a_worker_that_dies_ends_the_job_within_a_minute_with_its_error():
    started = time.monotonic()
    job = launch_multiworker(2, [sys.executable, os.path.join(REPO_ROOT, "tests", "horovod_jobs", "failing_worker.py")])
    assert time.monotonic() - started < 60
    assert job.returncode != 0 and job.worker == 1
    assert "RuntimeError: worker 1 fails on purpose" in job.output


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["mirrored", pytest.param("multiworker", marks=needs_keras_2)])
def test_lbtrain_run_trains_a_two_worker_experiment_end_to_end(tmp_path, mode):
    completed = run_cli("run", tiny_experiment(tmp_path, mode), timeout=900)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    results = tmp_path / "results" / f"tiny-{mode}"
    with open(results / "summary.csv") as summary:
        rows = list(csv.DictReader(summary))
    assert [(row["status"], row["world_size"], row["global_batch"]) for row in rows] == [("ok", "2", "32")]
    assert float(rows[0]["train_accuracy"]) > 0.2  # 10 classes: above chance after one epoch
    run_dir = next((results / "runs").iterdir())
    assert sorted(path.name for path in run_dir.iterdir()) == ["checkpoints", "config.yaml", "history.csv", "metrics.json"]
    rerun = run_cli("run", tiny_experiment(tmp_path, mode), timeout=300)
    assert rerun.returncode == 0 and "done before, skipped" in rerun.stderr


@pytest.mark.slow
@needs_keras_2
def test_a_failing_multiworker_run_is_recorded_failed_with_its_error(tmp_path):
    """A run whose workers fail (here: a model factory that raises in a tf.distribute worker, as
    code that runs only on the cluster might, after the pre-flight check built it in the parent)
    is a failed row with the worker's error line; lbtrain run exits 1."""
    package = tmp_path / "workerfail"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import os\n"
        "from lbtrain.models import build_model\n\n"
        "def build(input_shape, num_classes):\n"
        "    if 'TF_CONFIG' in os.environ:\n"
        "        raise RuntimeError('this model does not build on a worker')\n"
        "    return build_model('mlp', input_shape, num_classes, widths=[8])\n")
    path = tiny_experiment(tmp_path, "multiworker", model={"name": "workerfail:build"})
    completed = run_cli("run", path, cwd=tmp_path, timeout=900)
    assert completed.returncode == 1
    with open(tmp_path / "results" / "tiny-multiworker" / "summary.csv") as summary:
        row = next(csv.DictReader(summary))
    assert row["status"] == "failed" and row["reason"].startswith("worker ")
