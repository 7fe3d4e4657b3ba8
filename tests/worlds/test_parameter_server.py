"""mode: parameter_server (lbtrain.worlds.parameter_server): a 2-worker, 1-PS experiment trains end to
end asynchronously and records the measured staleness; bad input is one line, exit 2; a task
that dies ends the job."""

import csv
import json
import os
import sys
import time

import pytest
import yaml

from helpers import REPO_ROOT, run_cli, stderr_lines
from lbtrain._keras import KERAS_3
from lbtrain.config import ConfigError, run_config_from_dict
from lbtrain.launch.cluster import cluster, launch_parameter_server, tf_configs
from lbtrain.worlds.parameter_server import PARAMETER_SERVER_KERAS_3, launch_problem, unsupported_setting

needs_keras_2 = pytest.mark.skipif(KERAS_3, reason=PARAMETER_SERVER_KERAS_3)
FAILING_TASK = os.path.join(REPO_ROOT, "tests", "horovod_jobs", "failing_parameter_server_task.py")


def run_spec(**training) -> dict:
    return {
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [16]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"world_size": 2, "per_worker_batch": 16, "epochs": 1, **training},
    }


def tiny_experiment(tmp_path, **changes) -> str:
    """A 2-worker, 1-PS experiment of one run (mnist1d mlp [16], 1 epoch) as a YAML file; its path."""
    spec = run_spec()
    data = {
        "name": "tiny-ps", "mode": "parameter_server", "output_dir": str(tmp_path / "results"),
        **{section: spec[section] for section in ("data", "model", "optimizer", "lr")},
        "training": {"per_worker_batch": 16, "epochs": 1},
        "grid": {"world_sizes": [2]},
        **changes,
    }
    path = tmp_path / "parameter_server.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_job_is_a_chief_then_w_workers_then_the_parameter_servers():
    assert cluster([10, 11, 12, 13, 14], 2) == {
        "chief": ["localhost:10"], "worker": ["localhost:11", "localhost:12"], "ps": ["localhost:13", "localhost:14"]}
    tasks = tf_configs([10, 11, 12, 13], 2)
    assert [name for name, _ in tasks] == ["chief", "worker 0", "worker 1", "ps 0"]
    assert json.loads(tasks[3][1])["task"] == {"type": "ps", "index": 0}


def test_settings_the_mode_cannot_train_are_refused_by_name():
    refused = {
        "training.micro_batches is 2": run_spec(micro_batches=2),
        "training.accumulation_steps is 2": run_spec(accumulation_steps=2),
        "training.staleness is 3": run_spec(staleness=3),
        "training.samples is 512": {**run_spec(), "training": {"world_size": 2, "per_worker_batch": 16, "samples": 512}},
        "analysis.noise_scale is True": {**run_spec(), "analysis": {"noise_scale": True}},
        "analysis.sharpness is True": {**run_spec(), "analysis": {"sharpness": True}},
    }
    for start, spec in refused.items():
        message = unsupported_setting(run_config_from_dict(spec))
        assert message.startswith(f"{start}, which mode: parameter_server does not support"), message
    precise = {**run_spec(precise_bn_samples=64), "model": {"name": "mlp", "options": {"widths": [16], "batch_norm": True}}}
    assert unsupported_setting(run_config_from_dict(precise)).startswith("training.precise_bn_samples is 64")
    assert unsupported_setting(run_config_from_dict(run_spec(steps=10, epochs=None))) is None


@pytest.mark.parametrize("changes, message", [
    pytest.param({"training": {"per_worker_batch": 16, "epochs": 1, "accumulation_steps": 2}},
                 "lbtrain: error: training.accumulation_steps is 2, which mode: parameter_server does not support",
                 marks=needs_keras_2),
    ({"grid": {"world_sizes": [0]}}, "lbtrain: error: training.world_size: Input should be greater than 0 (got 0)"),
    ({"parameter_server": {"ps_tasks": 0}},
     "lbtrain: error: parameter_server.ps_tasks: Input should be greater than or equal to 1 (got 0)"),
], ids=["accumulation", "no-workers", "no-parameter-server"])
def test_bad_input_is_one_line_exit_2_before_training(tmp_path, changes, message, lbtrain_here):
    completed = lbtrain_here("run", tiny_experiment(tmp_path, **changes))
    assert completed.returncode == 2
    lines = stderr_lines(completed.stderr)
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert not (tmp_path / "results").exists()


@needs_keras_2
def test_ports_in_use_are_one_line_exit_2(tmp_path, busy_port, lbtrain_here):
    port = busy_port
    # The held port opens the range: the first port in use is reported, and the ports after it
    # may be taken by anything else on the machine (another test worker) without changing that.
    completed = lbtrain_here("run", tiny_experiment(tmp_path, parameter_server={"base_port": port}))
    assert completed.returncode == 2
    assert stderr_lines(completed.stderr) == [
        f"lbtrain: error: parameter_server.base_port: port {port} is in use (the job needs ports {port}-{port + 3})"]


@pytest.mark.skipif(not KERAS_3, reason="parameter_server runs on tf.keras 2")
def test_parameter_server_on_keras_3_is_one_line_exit_2(tmp_path, lbtrain_here):
    assert launch_problem() == PARAMETER_SERVER_KERAS_3
    completed = lbtrain_here("run", tiny_experiment(tmp_path))
    assert completed.returncode == 2
    assert stderr_lines(completed.stderr) == [f"lbtrain: error: {PARAMETER_SERVER_KERAS_3}"]


@pytest.mark.parametrize("failing", ["worker 1", "ps 0"])
def test_a_task_that_dies_ends_the_job_within_a_minute_with_its_error(failing):
    """The chief waits for a lost worker to come back; the launcher ends the job instead."""
    started = time.monotonic()
    job = launch_parameter_server(2, 1, [sys.executable, FAILING_TASK], env={"LBTRAIN_FAILING_TASK": failing})
    assert time.monotonic() - started < 60
    assert job.returncode != 0 and job.task == failing
    assert f"RuntimeError: {failing} fails on purpose" in job.output
    with pytest.raises(ConfigError, match="at least one worker and one parameter server"):
        launch_parameter_server(2, 0, [sys.executable, FAILING_TASK])


@pytest.mark.slow
@needs_keras_2
def test_lbtrain_run_trains_a_two_worker_one_ps_experiment_asynchronously(tmp_path):
    completed = run_cli("run", tiny_experiment(tmp_path), timeout=600)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    results = tmp_path / "results" / "tiny-ps"
    with open(results / "summary.csv") as summary:
        rows = list(csv.DictReader(summary))
    assert [(row["status"], row["world_size"], row["global_batch"]) for row in rows] == [("ok", "2", "32")]
    assert float(rows[0]["train_accuracy"]) > 0.2  # 10 classes: above chance after one epoch
    # 256 samples: 8 global batches of 2 x 16, each worker batch one update.
    assert rows[0]["total_steps"] == "16"
    run_dir = next((results / "runs").iterdir())
    assert sorted(path.name for path in run_dir.iterdir()) == ["checkpoints", "config.yaml", "history.csv", "metrics.json"]
    with open(run_dir / "history.csv") as history_file:
        history = list(csv.DictReader(history_file))
    assert len(history) == 1
    mean, largest = float(history[0]["staleness"]), float(history[0]["staleness_max"])
    assert 0 <= mean <= largest <= 15 and largest == int(largest)
    rerun = run_cli("run", tiny_experiment(tmp_path), timeout=300)
    assert rerun.returncode == 0 and "done before, skipped" in rerun.stderr
