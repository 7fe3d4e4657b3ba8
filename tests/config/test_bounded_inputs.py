"""Inputs that would hang or eat memory are one bounded line, exit 2, before anything is created:
an experiment (or a file it extends) that is a FIFO, a device or too large, a YAML list of
hundreds of thousands of items, a grid whose lists multiply past the limit."""

import os
import re
import threading
import time

import pytest

from helpers import snapshot
from lbtrain.config.limits import MAX_CONFIG_BYTES, MAX_GRID_RUNS, MAX_YAML_NODES

BASE = "data: {dataset: synthetic, options: {train_size: 64, test_size: 16}}\ntraining: {epochs: 1}\n"


def _refused(lbtrain_here, folder, *args, pattern):
    before = snapshot(folder)
    completed = lbtrain_here("run", *args, cwd=folder)
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 300, completed.stderr
    assert re.fullmatch(f"lbtrain: error: (/\\S*/)?{pattern}", lines[0]), lines[0]
    assert completed.stdout == "" and snapshot(folder) == before
    return lines[0]


@pytest.fixture
def fifo(tmp_path):
    """A FIFO that nobody writes: opening it to read blocks. Should lbtrain open it, a daemon
    thread opens the writing end after 30 s and closes it, so the test fails instead of hanging."""
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)

    def unblock():
        time.sleep(30)
        os.close(os.open(path, os.O_WRONLY))

    threading.Thread(target=unblock, daemon=True).start()
    return path


def test_a_fifo_as_the_experiment_or_in_extends_is_refused_without_opening_it(tmp_path, lbtrain_here, fifo):
    _refused(lbtrain_here, tmp_path, "pipe.yaml", "--dry-run",
             pattern=r"pipe.yaml: not a regular file \(a FIFO, a device or a socket\); an experiment is a YAML file")
    (tmp_path / "child.yaml").write_text(f"extends: pipe.yaml\n{BASE}")
    _refused(lbtrain_here, tmp_path, "child.yaml", pattern=rf"{tmp_path}/pipe.yaml: not a regular file .*")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused(tmp_path, lbtrain_here, device):
    (tmp_path / "child.yaml").write_text(f"extends: {device}\n{BASE}")
    _refused(lbtrain_here, tmp_path, device, pattern=f"{device}: not a regular file .*")
    _refused(lbtrain_here, tmp_path, "child.yaml", pattern=f"{device}: not a regular file .*")


def test_a_file_above_the_size_limit_is_refused_before_it_is_parsed(tmp_path, lbtrain_here):
    items = ", ".join(["1"] * (MAX_CONFIG_BYTES // 3 + 1))
    (tmp_path / "huge.yaml").write_text(f"{BASE}grid: {{seeds: [{items}]}}\n")
    _refused(lbtrain_here, tmp_path, "huge.yaml", pattern=r"huge.yaml: larger than 1024 KiB; an experiment is a few settings and lists")


def test_a_long_list_is_refused_while_composing_and_not_blamed_on_aliases(tmp_path, lbtrain_here):
    items = ",".join(["1"] * (MAX_YAML_NODES * 2))  # 400 kB: below the size limit
    (tmp_path / "long.yaml").write_text(f"{BASE}grid: {{seeds: [{items}]}}\n")
    line = _refused(lbtrain_here, tmp_path, "long.yaml", pattern=rf"long.yaml: holds more than {MAX_YAML_NODES} values; .*")
    assert "alias" not in line


def test_a_grid_past_the_limit_is_refused_from_its_list_sizes(tmp_path, lbtrain_here):
    axes = {"lr.base_lr": [0.1, 0.2, 0.4, 0.8, 1.6], "training.seed": list(range(10)), "lr.warmup_epochs": [0, 1, 2, 3, 4],
            "optimizer.name": ["sgd", "momentum", "adam", "lars"], "world_sizes": [1, 2, 4, 8, 16, 32, 64, 128],
            "lr.rule": ["linear", "sqrt", "none"], "training.per_worker_batch": [8, 16, 32, 64, 128],
            "data.validation_split": [0.1, 0.2, 0.3, 0.4, 0.5]}  # 5*10*5*4*8*3*5*5 = 600,000 runs
    grid = "\n".join(f"  {key}: {value}" for key, value in axes.items())
    (tmp_path / "grid.yaml").write_text(f"{BASE}grid:\n{grid}\n")
    _refused(lbtrain_here, tmp_path, "grid.yaml", "--dry-run",
             pattern=rf"grid: expands to 600000 runs \(lr.base_lr 5 x training.seed 10 x .*\), more than {MAX_GRID_RUNS}; "
                     "split the study into experiments")
    # One grid at the limit's side is fine: variants count as a list (a batch the 64 samples fill: the dry run prices it).
    (tmp_path / "ok.yaml").write_text(f"{BASE}grid:\n  seeds: [0, 1]\n  variants: [{{label: a}}, {{label: b}}]\n")
    completed = lbtrain_here("run", "ok.yaml", "--dry-run", "--set", "training.per_worker_batch=16", cwd=tmp_path)
    assert completed.returncode == 0 and "4 runs" in completed.stdout


def test_a_name_too_long_for_a_folder_is_refused_before_anything_is_created(tmp_path, lbtrain_here):
    (tmp_path / "long.yaml").write_text(f"name: {'n' * 300}\n{BASE}")
    _refused(lbtrain_here, tmp_path, "long.yaml", pattern=r"name: String should have at most 100 characters \(got 'n+\.\.\.n+'\)")


def test_a_grid_past_the_limit_is_refused_in_python_too():
    from pydantic import ValidationError

    from lbtrain.config import ExperimentConfig

    with pytest.raises(ValidationError, match=r"expands to 20000 runs \(lr.base_lr 200 x seeds 100\), more than 10000"):
        ExperimentConfig.model_validate({"name": "x", "grid": {"lr.base_lr": list(range(200)), "seeds": list(range(100))}})
