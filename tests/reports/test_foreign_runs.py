"""A run another experiment wrote, copied into this experiment's folder (its row added to the
summary), is named and left out of the report rather than pooled into a recipe."""

import csv
import json
import shutil

import yaml

from lbtrain.results import read_run

BASE = {"data": {"dataset": "mnist1d", "train_subset": 128, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [8]}}, "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"per_worker_batch": 16, "epochs": 1}}


def test_a_run_of_another_experiment_is_named_and_left_out(tmp_path, lbtrain_here):
    for name, width in (("mine", 8), ("theirs", 16)):
        spec = {**BASE, "name": name, "output_dir": str(tmp_path / "results"), "model": {"name": "mlp", "options": {"widths": [width]}}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        assert lbtrain_here("run", f"{name}.yaml", cwd=tmp_path).returncode == 0
    mine, theirs = tmp_path / "results" / "mine", tmp_path / "results" / "theirs"
    [own] = (mine / "runs").iterdir()
    [foreign] = (theirs / "runs").iterdir()
    assert read_run(own).experiment == "mine" and read_run(foreign).experiment == "theirs"
    shutil.copytree(foreign, mine / "runs" / foreign.name)
    with open(theirs / "summary.csv") as handle:
        [row] = list(csv.DictReader(handle))
    with open(mine / "summary.csv", "a", newline="") as handle:
        csv.DictWriter(handle, fieldnames=list(row)).writerow(row)
    completed = lbtrain_here("report", str(mine), cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    warning = f"lbtrain: warning: run {foreign.name} is of experiment 'theirs', not 'mine': run left out"
    assert warning in completed.stderr.splitlines()
    report = json.loads((mine / "report.json").read_text())
    assert foreign.name not in json.dumps({key: value for key, value in report.items() if key != "damaged"})
    assert report["damaged"] == [warning.removeprefix("lbtrain: warning: ")]


def test_a_report_imports_none_of_the_users_code(tmp_path, lbtrain_here):
    """The learning-rate figure rebuilds each run's schedule from its config without its data
    and model: a report works where the user's module is gone, and imports nothing of theirs."""
    import sys
    import textwrap

    (tmp_path / "userdata.py").write_text(textwrap.dedent("""
        from pathlib import Path
        import numpy as np

        Path("IMPORTED").write_text("the module ran")

        def load(samples=96):
            rng = np.random.default_rng(0)
            return {"x_train": rng.normal(size=(samples, 4)), "y_train": np.arange(samples) % 2}
    """))
    spec = {**BASE, "name": "users", "output_dir": str(tmp_path / "results"), "data": {"dataset": "userdata:load"}}
    (tmp_path / "users.yaml").write_text(yaml.safe_dump(spec))
    assert lbtrain_here("run", "users.yaml", cwd=tmp_path).returncode == 0
    (tmp_path / "IMPORTED").unlink()
    (tmp_path / "userdata.py").unlink()
    sys.modules.pop("userdata", None)
    completed = lbtrain_here("report", str(tmp_path / "results" / "users"), cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert not (tmp_path / "IMPORTED").exists() and (tmp_path / "results" / "users" / "report.md").is_file()
