"""A results folder damaged between runs: a run record that is not a run is trained again, a file
where a run's folder or the lock should be is one line (exit 2) with nothing changed, and a label
too long for a file name still names its run's folder."""

import json
import re

import pytest
import yaml

from helpers import snapshot
from lbtrain.studies.plan import MAX_SLUG

EXPERIMENT = {
    "name": "damaged",
    "data": {"dataset": "mnist1d", "train_subset": 128, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [8]}},
    "lr": {"base_lr": 0.1, "base_batch": 16},
    "training": {"per_worker_batch": 16, "epochs": 1},
}


def _write(tmp_path, **changes):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({**EXPERIMENT, "output_dir": str(tmp_path / "results"), **changes}))
    return tmp_path / "results" / "damaged"


def _one_line(completed, pattern):
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 300 and re.fullmatch(f"lbtrain: error: {pattern}", lines[0]), completed.stderr


def test_a_run_record_that_is_not_a_mapping_is_trained_again(tmp_path, lbtrain_here):
    folder = _write(tmp_path)
    assert lbtrain_here("run", "exp.yaml", cwd=tmp_path).returncode == 0
    [run] = (folder / "runs").iterdir()
    (run / "metrics.json").write_text("[]")
    completed = lbtrain_here("run", "exp.yaml", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert f"lbtrain: warning: {run / 'metrics.json'} is damaged (TypeError: a JSON list, not the mapping of a run): " \
           "training the run again" in completed.stderr
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "ok" and record["config"]["training"]["epochs"] == 1


@pytest.mark.parametrize("damage", ["run folder is a file", "runs folder is a file", "lock is a folder", "summary is a folder",
                                    "a run's metrics.json is a folder", "a run's checkpoints are a file"])
def test_a_file_or_folder_where_lbtrain_writes_is_one_line_and_nothing_changes(tmp_path, lbtrain_here, damage):
    folder = _write(tmp_path)
    folder.mkdir(parents=True)
    if damage == "run folder is a file":
        (folder / "runs").mkdir()
        # The listing: the experiment's line, a line per run, the price's line.
        [planned] = [line.split()[0] for line in lbtrain_here("run", "exp.yaml", "--dry-run", cwd=tmp_path).stdout.splitlines()[1:-1]]
        (folder / "runs" / planned).write_text("mine")
        pattern = re.escape(f"{folder / 'runs' / planned} is a file where a run's folder would be (runs/ holds one folder per "
                            "run): move it away")
    elif damage == "runs folder is a file":
        (folder / "runs").write_text("mine")
        pattern = re.escape(f"{folder / 'runs'} is a file where the runs' folder should be: move it away")
    elif damage == "lock is a folder":
        (folder / ".lock").mkdir()
        pattern = re.escape(f"{folder / '.lock'} is a folder where lbtrain writes a file: move it away")
    elif damage == "summary is a folder":
        (folder / "summary.csv").mkdir()
        pattern = re.escape(f"{folder / 'summary.csv'} is a folder where lbtrain writes a file: move it away")
    elif damage == "a run's metrics.json is a folder":
        (folder / "runs" / "base-w1-s0-0123456789" / "metrics.json").mkdir(parents=True)
        pattern = re.escape(f"{folder / 'runs' / 'base-w1-s0-0123456789' / 'metrics.json'} is a folder where lbtrain writes a "
                            "file: move it away")
    else:
        (folder / "runs" / "base-w1-s0-0123456789").mkdir(parents=True)
        (folder / "runs" / "base-w1-s0-0123456789" / "checkpoints").write_text("mine")
        pattern = re.escape(f"{folder / 'runs' / 'base-w1-s0-0123456789' / 'checkpoints'} is a file where the run's checkpoints "
                            "folder should be: move it away")
    before = snapshot(tmp_path)
    _one_line(lbtrain_here("run", "exp.yaml", cwd=tmp_path), pattern)
    assert snapshot(tmp_path) == before


def test_a_label_longer_than_a_file_name_is_cut_in_the_run_id(tmp_path, lbtrain_here):
    _write(tmp_path, grid={"variants": [{"label": "x" * 300, "lr.base_lr": 0.2}, {"label": "y" * 300}]})
    completed = lbtrain_here("run", "exp.yaml", "--dry-run", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    ids = [line.split()[0] for line in completed.stdout.splitlines()[1:-1]]
    assert [identifier[:MAX_SLUG] for identifier in ids] == ["x" * MAX_SLUG, "y" * MAX_SLUG]
    assert all(len(identifier) <= MAX_SLUG + 30 for identifier in ids)


def test_a_run_record_larger_than_any_run_writes_is_damaged_not_read(tmp_path):
    from lbtrain.results import MAX_RECORD_BYTES, ResultsError, read_run

    with open(tmp_path / "metrics.json", "wb") as record:
        record.truncate(MAX_RECORD_BYTES + 1)  # sparse: no disk, but reading it would take the memory
    with pytest.raises(ResultsError, match=rf"metrics.json is damaged \(ValueError: {MAX_RECORD_BYTES + 1} bytes, more than a "
                                           rf"run's record of at most {MAX_RECORD_BYTES}\)"):
        read_run(tmp_path)
