"""An unknown key is answered with the key meant ("did you mean"), as unknown models, datasets
and options are: one line of at most 300 characters, exit 2, nothing created."""

import re

import pytest
import yaml

from helpers import snapshot

BASE = {"name": "typo", "data": {"dataset": "synthetic", "options": {"train_size": 64, "test_size": 16}},
        "training": {"epochs": 1}}


@pytest.mark.parametrize("changes, flags, message", [
    ({"trainig": {"epochs": 1}}, [], r"trainig: unknown key \(did you mean 'training'\?\)"),
    ({"training": {"epoch": 1}}, [], r"training.epoch: unknown key \(did you mean 'epochs'\?\) \(grid point base\)"),
    ({"epochs": 1}, [], r"epochs: unknown key \(did you mean 'training.epochs'\?\)"),
    ({"sweep": {"trails": 4}}, [], r"sweep.trails: unknown key \(did you mean 'trials'\?\)"),
    ({"optimizer": {"name": "momentum", "params": {"momentun": 0.9}}}, [],
     r"optimizer.params: optimizer 'momentum': unknown argument 'momentun' \(did you mean 'momentum'.*"),
    ({}, ["--set", "training.epoch=2"], r"--set training.epoch: no such field \(did you mean 'epochs'\?\)"),
    ({}, ["--set", "trainig.epochs=2"], r"--set trainig.epochs: no such field \(did you mean 'training'\?\)"),
    ({}, ["--set", "epochs=2"], r"--set epochs: no such field \(did you mean 'training.epochs'\?\)"),
    ({"training": {"zzzz": 1}}, [], r"training.zzzz: unknown key \(allowed: world_size, per_worker_batch, epochs, .*\.\.\.\) \(grid point base\)"),
])
def test_an_unknown_key_names_the_key_meant_in_one_bounded_line(tmp_path, lbtrain_here, changes, flags, message):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({**BASE, "output_dir": str(tmp_path / "results"), **changes}))
    before = snapshot(tmp_path)
    completed = lbtrain_here("run", "exp.yaml", *flags, cwd=tmp_path)
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 300, completed.stderr
    assert re.fullmatch(f"lbtrain: error: {message}", lines[0]), lines[0]
    assert snapshot(tmp_path) == before
