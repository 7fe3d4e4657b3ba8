"""Shared test set-up: quiet TensorFlow, a private cache dir, helpers to run the CLI."""

import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own ``$XDG_CACHE_HOME`` so generated datasets never leak between tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


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
