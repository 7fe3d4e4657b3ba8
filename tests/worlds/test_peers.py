"""The bounded wait for a tf.distribute job's peers (lbtrain.worlds.peers): a peer that never
comes ends ``lbtrain train`` in one line naming it, instead of TensorFlow's silent endless wait."""

import json
import socket
import time

import pytest
import yaml

from helpers import stderr_lines
from lbtrain._keras import KERAS_3
from lbtrain.config import ConfigError
from lbtrain.worlds.peers import wait_for_peers

needs_keras_2 = pytest.mark.skipif(KERAS_3, reason="multiworker and parameter_server run on tf.keras 2")


def closed_ports(count: int) -> list[int]:
    """Ports nothing listens on (free now; nothing in this test listens there)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def run_file(tmp_path) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "data": {"dataset": "mnist1d", "train_subset": 64, "options": {"num_samples": 200}},
        "model": {"name": "mlp", "options": {"widths": [8]}},
        "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"world_size": 2, "per_worker_batch": 16, "epochs": 1},
    }))
    return str(path)


def train_with(tmp_path, lbtrain_here, monkeypatch, mode: str, tf_config: dict, timeout: str = "2"):
    """``lbtrain train`` of a two-worker run in ``mode`` as the task ``tf_config`` says, in this
    test's process (``lbtrain_here``: ``$TF_CONFIG`` and ``$LBTRAIN_PEER_TIMEOUT`` are read when
    the world is built, and every case here ends before TensorFlow's strategy or server starts);
    how it ended and how long it took."""
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    monkeypatch.setenv("LBTRAIN_PEER_TIMEOUT", timeout)
    started = time.monotonic()
    completed = lbtrain_here("train", run_file(tmp_path), "--mode", mode, "--run-dir", str(tmp_path / "run"))
    return completed, time.monotonic() - started


@needs_keras_2
@pytest.mark.timeout(120)  # the bound the fresh process had; a wait that never ends fails, not hangs
def test_an_unreachable_multiworker_peer_is_one_line_naming_it_within_the_timeout(tmp_path, lbtrain_here, monkeypatch):
    ports = closed_ports(2)
    completed, seconds = train_with(tmp_path, lbtrain_here, monkeypatch, "multiworker", {
        "cluster": {"worker": [f"localhost:{port}" for port in ports]}, "task": {"type": "worker", "index": 0}})
    assert completed.returncode == 2 and seconds < 60, completed.stderr[-2000:]
    assert stderr_lines(completed.stderr) == [
        f"lbtrain: error: mode: multiworker: worker 0: worker 1 at localhost:{ports[1]} is unreachable after 2 s (nothing "
        "listens there, or the network drops it): start it or fix $TF_CONFIG; $LBTRAIN_PEER_TIMEOUT=SECONDS waits longer"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.yaml"]


@needs_keras_2
@pytest.mark.timeout(120)  # the bound the fresh process had; a wait that never ends fails, not hangs
def test_a_parameter_server_chief_without_its_tasks_is_one_line_naming_one(tmp_path, lbtrain_here, monkeypatch):
    chief, *others = closed_ports(4)
    completed, seconds = train_with(tmp_path, lbtrain_here, monkeypatch, "parameter_server", {
        "cluster": {"chief": [f"localhost:{chief}"], "worker": [f"localhost:{port}" for port in others[:2]],
                    "ps": [f"localhost:{others[2]}"]},
        "task": {"type": "chief", "index": 0}})
    assert completed.returncode == 2 and seconds < 60, completed.stderr[-2000:]
    [line] = stderr_lines(completed.stderr)
    assert line.startswith(f"lbtrain: error: mode: parameter_server: the chief: worker 0 at localhost:{others[0]} "
                           "(and 2 more) is unreachable after 2 s")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.yaml"]


@needs_keras_2
@pytest.mark.parametrize("value", ["soon", "0", "inf"])
def test_a_bad_peer_timeout_is_one_line_naming_the_variable(tmp_path, value, lbtrain_here, monkeypatch):
    completed, _ = train_with(tmp_path, lbtrain_here, monkeypatch, "multiworker", {
        "cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}, timeout=value)
    assert completed.returncode == 2
    assert stderr_lines(completed.stderr) == [
        f"lbtrain: error: $LBTRAIN_PEER_TIMEOUT is {value!r} (allowed: seconds, a number > 0; default 60)"]


def test_the_wait_ends_as_soon_as_every_peer_listens_and_names_a_missing_one_after_the_timeout():
    with socket.socket() as listening:
        listening.bind(("localhost", 0))
        listening.listen()
        started = time.monotonic()
        wait_for_peers({"worker 1": f"localhost:{listening.getsockname()[1]}"}, what="test", timeout=5)
        assert time.monotonic() - started < 2
        [missing] = closed_ports(1)
        with pytest.raises(ConfigError, match=rf"^test: ps 0 at localhost:{missing} is unreachable after 1 s "):
            wait_for_peers({"worker 1": f"localhost:{listening.getsockname()[1]}", "ps 0": f"localhost:{missing}"},
                           what="test", timeout=1)
