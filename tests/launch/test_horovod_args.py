"""``horovod.args`` are checked by horovodrun's own parser before anything launches: a flag it does
not know is one line, exit 2, nothing created (it failed after the launch before)."""

import pytest
import yaml

from helpers import horovod_installed, snapshot

EXPERIMENT = {"name": "hvd", "mode": "horovod", "data": {"dataset": "mnist1d", "train_subset": 128, "options": {"num_samples": 500}},
              "model": {"name": "mlp", "options": {"widths": [8]}}, "training": {"per_worker_batch": 16, "epochs": 1},
              "grid": {"world_sizes": [2]}}


@pytest.mark.skipif(not horovod_installed(), reason="horovodrun is installed on the TensorFlow 2.15 stack only")
@pytest.mark.parametrize("args, said", [
    (["--no-such-flag"], "horovodrun: error: unrecognized arguments: --no-such-flag"),
    (["--fusion-threshold-mb", "lots"], "horovodrun: error: argument --fusion-threshold-mb: invalid int value: 'lots'"),
])
def test_an_argument_horovodrun_refuses_is_one_line_before_launch(tmp_path, lbtrain_here, monkeypatch, args, said):
    monkeypatch.delenv("HOROVODRUN", raising=False)
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({**EXPERIMENT, "output_dir": str(tmp_path / "results"),
                                                       "horovod": {"args": args}}))
    before = snapshot(tmp_path)
    completed = lbtrain_here("run", "exp.yaml", cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [f"lbtrain: error: horovod.args: {said}"]
    assert snapshot(tmp_path) == before
