"""Settings that were accepted and failed only inside the runs (or never): refused in one line,
exit 2, before anything is created."""

import re

import pytest
import yaml

from helpers import snapshot

BASE = {"name": "accepted", "data": {"dataset": "mnist1d", "train_subset": 128, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [8]}}, "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"per_worker_batch": 16, "epochs": 1}}


@pytest.mark.parametrize("changes, flags, message", [
    ({"optimizer": {"name": "momentum", "params": {"weight_decay": -1}}}, ["--dry-run"],
     r"optimizer.params: optimizer 'momentum': weight_decay must be >= 0, got -1 \(grid point base\)"),
    ({"optimizer": {"name": "adam", "params": {"weight_decay": -0.01}}}, [],
     r"optimizer.params: optimizer 'adam': weight_decay must be >= 0, got -0.01 \(grid point base\)"),
    ({"training": {**BASE["training"], "staleness": 10**15}}, [],
     r"training.staleness: 1000000000000000 delayed copies of the model's 418 gradients need about \d+\.\d GiB of memory, "
     r"more than the \d+\.\d GiB available here; a delay is a few updates \(run base, world size 1\)"),
])
def test_a_setting_that_cannot_work_is_refused_before_anything_is_created(tmp_path, lbtrain_here, changes, flags, message):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({**BASE, "output_dir": str(tmp_path / "results"), **changes}))
    before = snapshot(tmp_path)
    completed = lbtrain_here("run", "exp.yaml", *flags, cwd=tmp_path)
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 300 and re.fullmatch(f"lbtrain: error: {message}", lines[0]), completed.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("name, params, message", [
    ("adam", {"beta_1": 2}, "beta_1 must be >= 0 and < 1, got 2"),
    ("adam", {"epsilon": -1}, "epsilon must be >= 0, got -1"),
    ("momentum", {"clipnorm": -1}, "clipnorm must be > 0, got -1"),
    ("momentum", {"nesterov": "yes"}, "nesterov must be true or false, got 'yes'"),
])
def test_an_optimizer_parameter_keras_would_take_silently_is_refused(tmp_path, lbtrain_here, name, params, message):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({**BASE, "output_dir": str(tmp_path / "results"),
                                                       "optimizer": {"name": name, "params": params}}))
    completed = lbtrain_here("run", "exp.yaml", "--dry-run", cwd=tmp_path)
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.strip().splitlines() == [
        f"lbtrain: error: optimizer.params: optimizer {name!r}: {message} (grid point base)"]
    assert not (tmp_path / "results").exists()
