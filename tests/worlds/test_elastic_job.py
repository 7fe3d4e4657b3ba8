"""A real elastic Horovod job on this machine (``mode: horovod`` with ``training.elastic``): a
rank killed mid-run, the job continuing with one worker and growing back to two when the
discovery script's host returns from Horovod's blacklist; the LR following the rule at each
change, as a simulated world-size schedule gives it; a job left below ``min_workers`` stopping
with its checkpoint on disk; discovery scripts that fail or print garbage refused in one line."""

import glob
import json
import os
import signal
import stat
import threading
import time
from pathlib import Path

import pytest
import yaml

from helpers import run_cli
from lbtrain.config import ConfigError

# localhost and 127.0.0.1 are two hosts to Horovod's driver, and both are this machine (no ssh).
HOSTS = ["localhost:1", "127.0.0.1:1"]
# MNIST-1D's 520 test samples, not Fashion-MNIST's 10,000: every epoch ends with an evaluation.
RUN = {"data": {"dataset": "mnist1d", "train_subset": 2048, "options": {"num_samples": 2600}}, "model": {"name": "mlp"},
       "lr": {"base_lr": 0.05, "base_batch": 32, "rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}},
       "training": {"world_size": 2, "per_worker_batch": 32}}
# The second rank returns after about 9 of the 24 epochs (its blacklist cooldown, Horovod's
# shortest, 1 s, and its start, while the surviving rank trains alone), idle or loaded alike,
# since the surviving rank is slowed as much as the new one starts. (With a 3 s cooldown it
# returned after 17 epochs, and the job trained 48.)
ELASTIC_EPOCHS = 24


def _experiment(folder: Path, name: str, epochs: int, **elastic) -> Path:
    experiment = {"name": name, "mode": "horovod", "output_dir": str(folder / "results"), **RUN,
                  "training": {**RUN["training"], "epochs": epochs, "elastic": {"commit_steps": 5, **elastic}}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


def _rank_on(host: str) -> int | None:
    """The pid of a running ``lbtrain train`` whose Horovod host is ``host``, or None."""
    for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"train" in command and any(part.endswith(b"lbtrain") for part in command) \
                and f"HOROVOD_HOSTNAME={host}".encode() in environment:
            return pid
    return None


def _kill_after_first_checkpoint(runs: Path, host: str, killed: list[int]) -> threading.Thread:
    """Kills (SIGKILL) the rank on ``host`` once a run under ``runs`` has saved its first checkpoint."""
    def watch():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if glob.glob(str(runs / "*" / "checkpoints" / "checkpoint")):
                pid = _rank_on(host)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.2)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _only_run(folder: Path, name: str) -> tuple[Path, dict]:
    (run_dir,) = (folder / "results" / name / "runs").iterdir()
    return run_dir, json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow
@pytest.mark.horovod
def test_a_killed_rank_shrinks_the_job_which_grows_back_with_the_lr_following_the_rule(tmp_path):
    # Horovod's shortest blacklist cooldown (1 s): the killed host is tried again as soon as it may be.
    path = _experiment(tmp_path, "elastic_kill", epochs=ELASTIC_EPOCHS, min_workers=1, max_workers=2, discovery=HOSTS,
                       cooldown_seconds=[1, 1], timeout_seconds=60)
    killed: list[int] = []
    watcher = _kill_after_first_checkpoint(tmp_path / "results" / "elastic_kill" / "runs", "127.0.0.1", killed)
    completed = run_cli("run", str(path), timeout=600)
    watcher.join(timeout=1)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert len(killed) == 1
    run_dir, result = _only_run(tmp_path, "elastic_kill")
    assert result["status"] == "ok", result["reason"]
    changes = result["world_changes"]
    assert [(c["old_world_size"], c["new_world_size"]) for c in changes] == [(2, 1), (1, 2)]
    # Only committed progress counts: the budget of samples is trained once (up to the last
    # global batch that fits), and the steps are those of the committed samples at each world size.
    budget, (shrunk, grown) = ELASTIC_EPOCHS * (2048 // 64) * 64, (change["samples"] for change in changes)
    assert result["metrics"]["samples_trained"] == grown + (budget - grown) // 64 * 64
    assert result["total_steps"] == shrunk // 64 + (grown - shrunk) // 32 + (budget - grown) // 64
    assert [c["step"] for c in changes] == [changes[0]["samples"] // 64, changes[0]["samples"] // 64
                                            + (changes[1]["samples"] - changes[0]["samples"]) // 32]
    # The LR follows the rule: linear scaling halves it on the shrink and doubles it on the
    # growth, at the same point of the cosine (the decay counts samples).
    for change in changes:
        assert change["new_lr"] == pytest.approx(change["old_lr"] * change["new_world_size"] / change["old_world_size"], rel=1e-5)
    # The simulated counterpart: the same world-size schedule in samples gives the same changes.
    from lbtrain.config import run_config_from_dict
    from lbtrain.trainer import train
    from lbtrain.worlds.simulated import SimulatedWorld

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["training"]["elastic"] = {"world_sizes": {0: 2, **{c["samples"]: c["new_world_size"] for c in changes}}, "unit": "samples"}
    simulated = train(run_config_from_dict(config), SimulatedWorld(2))
    assert simulated.total_steps == result["total_steps"]
    assert [(c["step"], c["samples"], c["old_world_size"], c["new_world_size"]) for c in simulated.world_changes] == \
        [(c["step"], c["samples"], c["old_world_size"], c["new_world_size"]) for c in changes]
    for real, exact in zip(changes, simulated.world_changes):
        assert (real["old_lr"], real["new_lr"]) == pytest.approx((exact["old_lr"], exact["new_lr"]), rel=1e-6)


@pytest.mark.slow
@pytest.mark.horovod
def test_below_min_workers_the_job_stops_with_its_last_checkpoint_on_disk(tmp_path):
    path = _experiment(tmp_path, "elastic_min", epochs=80, min_workers=2, max_workers=2, discovery=HOSTS, timeout_seconds=5)
    killed: list[int] = []
    watcher = _kill_after_first_checkpoint(tmp_path / "results" / "elastic_min" / "runs", "127.0.0.1", killed)
    completed = run_cli("run", str(path), timeout=600)
    watcher.join(timeout=1)
    assert completed.returncode == 1 and len(killed) == 1
    run_dir, result = _only_run(tmp_path, "elastic_min")
    assert result["status"] == "failed"
    assert "fewer than training.elastic.min_workers (2) workers were left for 5 s" in result["reason"]
    assert (run_dir / "checkpoints" / "checkpoint").is_file()


def _script(folder: Path, body: str, executable: bool = True) -> str:
    script = folder / "discover.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    if executable:
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.parametrize("body, executable, message", [
    ("echo localhost:2", False, "is not executable (chmod +x it)"),
    ("echo no hosts today >&2; exit 3", True, "failed (exit 3): no hosts today"),
    ("echo localhost:2; echo 'garbage here'", True, "gave 'garbage here', not host:slots"),
    ("echo localhost:0", True, "gave 'localhost:0', not host:slots"),
    ("true", True, "printed no host"),
])
def test_a_discovery_script_that_fails_or_prints_garbage_is_one_line(tmp_path, body, executable, message):
    from lbtrain.launch.horovodrun import discovered_hosts

    script = _script(tmp_path, body, executable)
    with pytest.raises(ConfigError) as error:
        discovered_hosts(script)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_discovery_reads_hosts_from_a_script_or_a_list(tmp_path):
    from lbtrain.launch.horovodrun import discovered_hosts

    assert discovered_hosts(_script(tmp_path, "echo localhost:2; echo; echo 10.0.0.7:4")) == {"localhost": 2, "10.0.0.7": 4}
    assert discovered_hosts(HOSTS) == {"localhost": 1, "127.0.0.1": 1}
    with pytest.raises(ConfigError, match="is not a file"):
        discovered_hosts(str(tmp_path / "missing.sh"))


@pytest.mark.horovod
def test_lbtrain_run_refuses_a_failing_discovery_script_before_anything_trains(tmp_path, lbtrain_here):
    script = _script(tmp_path, "echo cannot reach the scheduler >&2; exit 1")
    path = _experiment(tmp_path, "elastic_bad", epochs=1, min_workers=1, max_workers=2, discovery=script)
    completed = lbtrain_here("run", str(path))
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[-1].endswith("failed (exit 1): cannot reach the scheduler")
    assert "Traceback" not in completed.stderr
    assert not (tmp_path / "results" / "elastic_bad" / "runs").exists()
