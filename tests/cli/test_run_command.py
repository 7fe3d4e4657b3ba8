"""``lbtrain run``'s own options: ``--workers`` (auto or N) and ``--price`` (the runs left to
train, priced by a probe, nothing trained)."""

import re

import pytest
import yaml

EXPERIMENT = {
    "name": "priced",
    "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [16]}},
    "optimizer": {"name": "momentum"},
    "lr": {"base_lr": 0.1, "base_batch": 16},
    "training": {"per_worker_batch": 16, "epochs": 2},
    "grid": {"world_sizes": [1, 2], "variants": [{"label": "none", "lr.rule": "none"}, {"label": "linear", "lr.rule": "linear"}]},
}


def experiment_file(tmp_path):
    path = tmp_path / "priced.yaml"
    path.write_text(yaml.safe_dump({**EXPERIMENT, "output_dir": str(tmp_path / "results")}))
    return str(path)


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_bad_workers_are_one_line_errors_naming_what_is_allowed(tmp_path, lbtrain_here, value):
    completed = lbtrain_here("run", experiment_file(tmp_path), "--workers", value)
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [f"lbtrain: error: argument --workers: expected auto or a whole number >= 1, got '{value}'"]
    assert not (tmp_path / "results").exists()


def test_price_lists_the_runs_and_prices_them_from_a_probe_training_nothing(tmp_path, lbtrain_here, monkeypatch):
    monkeypatch.setenv("LBTRAIN_WORKERS", "2")
    completed = lbtrain_here("run", experiment_file(tmp_path), "--price")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == f"priced: 4 runs (simulated) -> {tmp_path / 'results' / 'priced'}" and len(lines) == 6
    price = re.fullmatch(r"price: about (\d+)s of machine time for 4 runs left to train, one after another on this machine "
                         r"\(from a probe of 10 steps at each of 2 global batches and a process start\); "
                         r"2 at a time here \((\d) TensorFlow threads? per process\): a wall time from about (\d+)s .*", lines[-1])
    assert price, lines[-1]
    assert int(price.group(3)) <= int(price.group(1))
    assert "price probe: 10 steps at global batch 16" in completed.stderr and "global batch 32" in completed.stderr
    assert not (tmp_path / "results").exists()
