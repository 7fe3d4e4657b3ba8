"""What a user on today's TensorFlow gets (``make test`` runs this file on TensorFlow 2.21 /
Keras 3 and on 2.15): lbtrain installs next to the TensorFlow present without touching it, a
small simulated grid runs end to end with ``lbtrain run`` and ``lbtrain report``, a LARS + Warmup
model reloads from ``.keras`` in a fresh process with only ``import lbtrain``. (LAMB against Keras
3's own ``keras.optimizers.Lamb``: tests/optimizers/test_lamb.py.)"""

import csv
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import yaml

from helpers import REPO_ROOT, run_cli, run_python, stderr_lines
from lbtrain.optimizers import LARS
from lbtrain.schedules import Warmup


def test_installing_lbtrain_keeps_the_tensorflow_present_and_builds_nothing_else():
    """``pip install .`` resolved offline against this environment: lbtrain is the only thing
    it would install (TensorFlow is no dependency of lbtrain, so it is never replaced)."""
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation", "--quiet",
         "--report", "-", REPO_ROOT], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert [item["metadata"]["name"] for item in report["install"]] == ["lbtrain"]


def experiment(tmp_path):
    return {
        "name": "keras3",
        "output_dir": str(tmp_path / "results"),
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [32], "batch_norm": True}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 16, "decay": {"type": "cosine"}},
        "training": {"per_worker_batch": 16, "epochs": 3},
        "grid": {"world_sizes": [1, 4], "variants": [
            {"label": "linear+warmup", "lr.rule": "linear", "lr.warmup_epochs": 0.5},
            {"label": "lars", "optimizer.name": "lars", "optimizer.params": {"eta": 0.01}, "lr.base_lr": 1.0, "lr.rule": "sqrt",
             "lr.warmup_epochs": 0.5},
            {"label": "lamb", "optimizer.name": "lamb", "lr.base_lr": 0.02, "lr.rule": "sqrt"},
        ]},
    }


@pytest.mark.slow
def test_lbtrain_run_of_a_simulated_grid_finishes_every_run_ok_and_reports(tmp_path):
    """Ghost batch norm at world size 4, LARS, LAMB, momentum SGD, warmup and cosine decay, the
    runner's child process, checkpoints and results files, then the report."""
    path = tmp_path / "keras3.yaml"
    path.write_text(yaml.safe_dump(experiment(tmp_path)))
    completed = run_cli("run", str(path), timeout=900)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    folder = tmp_path / "results" / "keras3"
    with open(folder / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    assert {row["status"] for row in rows} == {"ok"}, [(row["label"], row["status"], row["reason"]) for row in rows]
    for row in rows:
        metrics = json.loads((folder / "runs" / row["run_id"] / "metrics.json").read_text())
        assert metrics["total_steps"] == 3 * 256 // (16 * int(row["world_size"]))
        assert 0.1 < metrics["metrics"]["test_accuracy"] <= 1.0
    report = run_cli("report", str(folder), timeout=600)
    assert report.returncode == 0, stderr_lines(report.stderr)
    assert (folder / "report.md").is_file()


RELOAD = textwrap.dedent(
    """
    import json, sys
    import numpy as np, tensorflow as tf
    import lbtrain
    model = tf.keras.models.load_model(sys.argv[1])
    x = np.asarray(json.loads(sys.argv[2]), np.float32)
    print(json.dumps({"class": type(model.optimizer).__name__, "schedule": type(model.optimizer._learning_rate).__name__,
                      "iterations": int(model.optimizer.iterations.numpy()),
                      "config": json.loads(json.dumps(model.optimizer.get_config(), default=float)),
                      "outputs": model.predict(x, verbose=0).tolist()}))
    """
)


@pytest.mark.slow
def test_a_lars_warmup_model_reloads_from_keras_format_in_a_fresh_process(tmp_path):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(3)])
    optimizer = LARS(Warmup(0.5, 4, start_lr=0.1, after=tf.keras.optimizers.schedules.CosineDecay(0.5, 20)),
                     eta=0.01, exclude_from_weight_decay=[r"bias", r"dense_1"])
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((24, 6)).astype(np.float32), rng.integers(0, 3, 24)
    model.fit(x, y, batch_size=8, verbose=0)
    path = str(tmp_path / "lars.keras")
    model.save(path)
    completed = run_python(RELOAD, path, json.dumps(x[:4].tolist()))
    assert completed.returncode == 0, completed.stderr[-3000:]
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    assert (loaded["class"], loaded["schedule"], loaded["iterations"]) == ("LARS", "Warmup", 3)
    assert loaded["config"] == json.loads(json.dumps(optimizer.get_config(), default=float))
    assert loaded["config"]["exclude_from_weight_decay"] == [r"bias", r"dense_1"]
    np.testing.assert_allclose(loaded["outputs"], model.predict(x[:4], verbose=0), rtol=1e-6, atol=1e-6)
