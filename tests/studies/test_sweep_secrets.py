"""A storage URL's password is a secret: never written under results/, never printed, never on a
sweep worker's command line (workers get the storage in ``LBTRAIN_STORAGE``)."""

import os

import pytest
import yaml

import lbtrain.launch
from lbtrain.cli import main
from lbtrain.reports.tuning import results_storage
from lbtrain.storage_urls import STORAGE_VARIABLE

SPEC = {
    "name": "secret",
    "data": {"dataset": "mnist1d", "train_subset": 128, "validation_split": 0.25, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [8]}},
    "training": {"per_worker_batch": 16, "epochs": 1},
    "lr": {"base_batch": 16, "rule": "none"},
    "grid": {"world_sizes": [1]},
    "search": {"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.2, "log": True}},
    "sweep": {"trials": 2, "pruner": "none"},
}


@pytest.fixture
def recorded_commands(monkeypatch):
    """The command lines and storage variable of every process ``run_side_by_side`` starts (it runs them for real)."""
    started: list[tuple[list[str], str | None]] = []
    real = lbtrain.launch.run_side_by_side

    def recording(commands):
        started.extend((list(command), os.environ.get(STORAGE_VARIABLE)) for command in commands)
        return real(commands)

    monkeypatch.setattr(lbtrain.launch, "run_side_by_side", recording)
    monkeypatch.delenv(STORAGE_VARIABLE, raising=False)
    return started


def _every_file_text(folder):
    for parent, _, files in os.walk(folder):
        for name in files:
            yield os.path.join(parent, name), open(os.path.join(parent, name), "rb").read()


@pytest.mark.slow
def test_a_storage_password_is_in_no_file_output_or_worker_command_line(tmp_path, capsys, postgres_server, recorded_commands):
    url = postgres_server.url(postgres_server.create_database())
    password = postgres_server.password
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "output_dir": str(tmp_path / "results")}))
    assert main(["sweep", str(path), "--workers", "2", "--set", f"sweep.storage={url}"]) == 0
    captured = capsys.readouterr()
    assert "world   1: 2 complete" in captured.out
    assert password not in captured.out and password not in captured.err
    assert f"(studies in postgresql://postgres:***@127.0.0.1:{postgres_server.port}/" in captured.out
    # The workers got the storage from their environment; their command lines never held it.
    assert len(recorded_commands) == 2
    for command, storage in recorded_commands:
        assert not any(password in item for item in command), command
        assert "--storage" not in command and storage == url
    assert os.environ.get(STORAGE_VARIABLE) is None  # set for the workers only
    results = tmp_path / "results" / "secret"
    leaked = [name for name, content in _every_file_text(results) if password.encode() in content]
    assert leaked == []
    recorded = yaml.safe_load((results / "experiment.yaml").read_text())
    assert recorded["sweep"]["storage"] == url.replace(f":{password}@", ":***@")
    # The report finds the storage again only where the user gives it (the variable).
    assert results_storage(results) is None
    os.environ[STORAGE_VARIABLE] = url
    try:
        assert results_storage(results) == url
    finally:
        del os.environ[STORAGE_VARIABLE]

