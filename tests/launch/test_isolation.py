"""Runs of a simulated experiment train in a child process: a run whose process dies is
recorded failed with how it died, and the next run trains in a fresh child."""

import os
import signal
import threading

from helpers import wait_until
from lbtrain.config import run_config_from_dict
from lbtrain.launch.isolation import RunProcess
from lbtrain.results import read_run


def tiny(seed):
    return run_config_from_dict({
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [16]}},
        "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"per_worker_batch": 16, "epochs": 1, "seed": seed},
    })


def test_a_run_whose_process_aborts_is_failed_with_the_signal_and_the_next_run_trains(tmp_path):
    with RunProcess() as runs:
        outcome = {}
        worker = threading.Thread(target=lambda: outcome.setdefault("result", runs.train(tiny(0), tmp_path / "killed")))
        worker.start()
        wait_until(lambda: runs.pid, "the run process to start")
        # SIGABRT, as a native library aborting (oneDNN on an impossible layer) would send it.
        os.kill(runs.pid, signal.SIGABRT)
        worker.join(timeout=60)
        killed = outcome["result"]
        assert killed.status == "failed" and killed.reason.startswith("the run process was killed by SIGABRT")
        assert read_run(tmp_path / "killed").reason == killed.reason

        after = runs.train(tiny(1), tmp_path / "after")
        assert after.status == "ok" and read_run(tmp_path / "after").metrics == after.metrics
        first_child = runs.pid
        again = runs.train(tiny(2), tmp_path / "again")
        assert again.status == "ok" and runs.pid == first_child  # one child trains run after run
    assert runs.pid is None
