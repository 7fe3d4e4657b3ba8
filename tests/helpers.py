"""Builders and helpers that several test files share: running the CLI, Python and horovodrun
in fresh processes, the shared two-rank jobs, the problems and specs tests train on, deadline
waits, and snapshots of folders. Import them by name (``from helpers import run_cli``): pytest
puts ``tests/`` on ``sys.path`` as it does for ``conftest``, which keeps only fixtures and hooks."""

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def horovod_installed() -> bool:
    """Whether Horovod and its launcher are installed next to this interpreter (the TF 2.15
    stack); found without importing it."""
    import importlib.util

    return (importlib.util.find_spec("horovod") is not None
            and os.path.isfile(os.path.join(os.path.dirname(sys.executable), "horovodrun")))


# What TensorFlow 2.21's C++ side prints to stderr while it loads, before absl logging is set up
# (TF_CPP_MIN_LOG_LEVEL cannot silence it): absl's notice and glog-style info lines.
TENSORFLOW_STARTUP_LOG = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\)|[IWE]\d{4} [\d:. ]+\S+:\d+\] )")


def stderr_lines(stderr: str) -> list[str]:
    """The lines of a child's stderr that are not TensorFlow's start-up log."""
    return [line for line in stderr.strip().splitlines() if not TENSORFLOW_STARTUP_LOG.match(line)]


def run_python(code: str, *args: str, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh Python process (the venv's interpreter)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd or REPO_ROOT, timeout=timeout
    )


def run_cli(*args: str, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs ``lbtrain ARGS`` as a user would, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "lbtrain.cli", *args], capture_output=True, text=True, cwd=cwd or REPO_ROOT, timeout=timeout
    )


def run_horovod(script: str, *args: str, np: int = 2, timeout=300) -> subprocess.CompletedProcess:
    """Runs ``tests/horovod_jobs/SCRIPT ARGS`` under ``horovodrun -np NP`` with Gloo on this machine."""
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    command = [horovodrun, "-np", str(np), "-H", f"localhost:{np}", "--gloo", sys.executable,
               os.path.join(REPO_ROOT, "tests", "horovod_jobs", script), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout)


# Scripts of tests/horovod_jobs run under horovodrun -np 2 one after another in one shared job
# (tests/horovod_jobs/one_after_another.py; conftest.py's ``horovod_jobs`` fixture), registered by the test
# modules as they are imported (``shared_horovod_job``): a job's start (horovodrun, and two ranks
# each importing TensorFlow and starting Horovod) costs more CPU than most of these scripts' work.
SHARED_HOROVOD_JOBS: dict[str, list[str]] = {}
JOB_FOLDER = "{job_folder}"  # in a shared job's arguments: the folder of its outputs


def shared_horovod_job(name: str, script: str, *args: str) -> str:
    """Registers ``tests/horovod_jobs/SCRIPT ARGS`` as job ``name`` of the shared horovodrun job
    (``JOB_FOLDER`` in ARGS stands for the job's own folder); returns ``name``."""
    command = [script, *args]
    if SHARED_HOROVOD_JOBS.setdefault(name, command) != command:
        raise ValueError(f"shared Horovod job {name!r} registered twice with different arguments")
    return name


def two_rank_run(name: str, spec: dict) -> str:
    """Registers a run of lbtrain's trainer (``spec``, a run config) under horovodrun -np 2
    (tests/horovod_jobs/trainer_two_ranks.py) as job ``name`` of the shared job; returns ``name``."""
    return shared_horovod_job(name, "trainer_two_ranks.py", json.dumps(spec), f"{JOB_FOLDER}/weights.npz", f"{JOB_FOLDER}/runs")


def goyal_blow_up_run(world_size: int = 32, per_worker_batch: int = 128, epochs: int = 2) -> dict:
    """goyal_scaling's failing case as a run spec: momentum SGD on the Fashion-MNIST mlp 512-512,
    base LR 0.05 at batch 128 scaled linearly to 1.6 at global batch 4096, no warmup, seed 1
    (the seed once recorded ok after blowing up in its first epoch and settling at chance)."""
    return {
        "data": {"dataset": "fashion_mnist"}, "model": {"name": "mlp", "options": {"widths": [512, 512]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.05, "base_batch": 128, "rule": "linear", "decay": {"type": "cosine"}},
        "training": {"world_size": world_size, "per_worker_batch": per_worker_batch, "epochs": epochs, "seed": 1},
    }


def constant_output_problem(dimension=128, samples=20000, distance_sq=4.0, seed=0):
    """A model whose output is a trainable vector w (a Dense layer fed zeros: only its bias
    matters) fit to targets t_i ~ N(0, I) with mean squared error: the per-example gradient is
    2 (w - t_i) / d, so |G|^2 and tr(Sigma) are known from the targets exactly:
    B_simple = tr(Cov t) / |w - mean t|^2 (population moments of the finite sample; about
    128 / 4 = 32 by default, infinite at distance 0). Returns (model, inputs, targets, B_simple)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    targets = rng.standard_normal((samples, dimension)).astype(np.float32)
    mean = targets.astype(np.float64).mean(axis=0)
    direction = rng.standard_normal(dimension)
    w = mean + direction / np.linalg.norm(direction) * np.sqrt(distance_sq)
    model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(dimension)])
    model.layers[0].bias.assign(w.astype(np.float32))
    model.compile(optimizer=tf.keras.optimizers.SGD(0.0), loss=tf.keras.losses.MeanSquaredError())
    true_scale = targets.astype(np.float64).var(axis=0).sum() / distance_sq if distance_sq else math.inf
    return model, np.zeros((samples, 1), np.float32), targets, true_scale

# The ``models`` module of a user's own package: the factories (good and bad) a user might write.
USER_MODELS = textwrap.dedent("""
    import keras

    def convnet(input_shape, num_classes, width=4):
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x))

    def build(input_shape, num_classes, width=8):
        return convnet(input_shape, num_classes, width)

    def binary(input_shape, num_classes):
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))

    def glance(input_shape, num_classes):
        # One pixel of each image: a step that costs next to nothing beside the batch it is fed.
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Cropping2D(((0, input_shape[0] - 1), (0, input_shape[1] - 1)))(inputs)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(keras.layers.Flatten()(x)))

    def wide(input_shape, num_classes):
        return convnet(input_shape, num_classes + 3)

    def broken(input_shape, num_classes):
        raise ValueError("cannot build for this shape")

    def nothing(input_shape, num_classes):
        return None

    class Subclassed(keras.Model):
        def __init__(self, num_classes):
            super().__init__()
            self.norm = keras.layers.BatchNormalization()
            self.flat = keras.layers.Flatten()
            self.out = keras.layers.Dense(num_classes)

        def call(self, inputs, training=None):
            return self.out(self.flat(self.norm(inputs, training=training)))

    def subclassed(input_shape, num_classes):
        return Subclassed(num_classes)
""")


def write_package(folder: Path, name: str = "ownpkg", *, data: bool = True) -> Path:
    """A user's own package ``name`` in ``folder`` (its ``models`` module is ``USER_MODELS``: a
    functional convnet with batch norm, ``build`` the same at width 8, and bad factories), and,
    with ``data``, ``data.npz``: 8x8 images of a bar in one of four directions, 384 to train on and
    96 to test. Returns ``folder``. Test files that import the package in-process use distinct
    names, so that one worker's ``sys.modules`` never holds another file's."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(USER_MODELS)
    if data:
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 4, 480)
        images = rng.normal(0, 0.3, (480, 8, 8, 1)).astype(np.float32)
        rows, columns = np.indices((8, 8))
        for image, label, offset in zip(images, labels, rng.integers(2, 6, 480)):
            # A bar through the image: horizontal, vertical, diagonal or anti-diagonal (class 0 to 3).
            image[[rows == offset, columns == offset, rows == columns, rows == 7 - columns][label], 0] += 1.0
        np.savez(folder / "data.npz", x_train=images[:384], y_train=labels[:384], x_test=images[384:], y_test=labels[384:])
    return folder


def sweep_spec(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """A tiny sweep experiment (``tiny``: an mlp on 320 MNIST-1D samples, 4 trials a world size of
    1 and 2) whose results go under ``tmp_path``; ``changes`` replace whole sections."""
    spec = {
        "name": "tiny",
        "output_dir": str(tmp_path / "results"),
        "data": {"dataset": "mnist1d", "train_subset": 320, "validation_split": 0.25, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [16]}},
        "training": {"per_worker_batch": 16, "epochs": 2},
        "lr": {"base_batch": 16, "rule": "none"},
        "grid": {"world_sizes": [1, 2]},
        "search": {"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
                   "optimizer.name": {"type": "categorical", "choices": ["momentum", "adam"]}},
        "sweep": {"trials": 4, "pruner": "none"},
    }
    spec.update(changes)
    return spec


def write_spec(tmp_path: Path, spec: dict[str, Any]) -> Path:
    """``spec`` as ``tmp_path/sweep.yaml``."""
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60.0, interval: float = 0.05) -> Any:
    """``condition()``'s first truthy value, asked every ``interval`` seconds; fails the test
    (naming ``what`` it waited for) after ``timeout`` seconds. A wait for a state, never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(interval)
    return value


def running_trials_are_stale(storage: Any, study_name: str) -> bool:
    """Whether every RUNNING trial of ``study_name`` has a heartbeat that ``storage`` (an Optuna
    storage with heartbeats) finds older than its grace period, so that the next claim fails and
    retries them all and counts none as alive (True when none is RUNNING)."""
    study_id = storage.get_study_id_from_name(study_name)
    from optuna.trial import TrialState

    running = {trial._trial_id for trial in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))}
    return running <= set(storage._get_stale_trial_ids(study_id))


def snapshot(folder: Path, *, skip: Path | None = None) -> dict[str, tuple[str, str]]:
    """Every entry under ``folder`` (but ``skip``'s subtree): relative path -> (kind, content hash
    or link target), to assert that a refused command changed nothing outside its results.
    Symbolic links are recorded, not followed."""
    entries: dict[str, tuple[str, str]] = {}
    for parent, folders, files in os.walk(folder):
        if skip is not None and Path(parent).resolve().is_relative_to(skip.resolve()):
            continue
        for name in (*folders, *files):
            path = Path(parent) / name
            relative = str(path.relative_to(folder))
            if path.is_symlink():
                entries[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[relative] = ("folder", "")
            elif path.is_file():
                entries[relative] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                entries[relative] = ("other", "")
    return entries
