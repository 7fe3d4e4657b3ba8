"""Every process lbtrain starts, and how it reports back: the isolated child that trains simulated
runs (``isolation``), ``horovodrun`` (``horovodrun``), tf.distribute and parameter-server jobs
on this machine (``cluster``), their ports (``ports``) and the one error line a failed process
is reported by (``error_line``). ``start_run`` starts one run's processes for its mode's launch
kind (``lbtrain.modes.Mode.launch``); ``run_side_by_side`` the workers of a parallel sweep."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

from lbtrain.config import ExperimentConfig
from lbtrain.launch.cluster import JobExit, launch_multiworker, launch_parameter_server
from lbtrain.launch.horovodrun import horovod_launch_problem, launch_horovod
from lbtrain.logs import child_environment

LAUNCH_KINDS = ("isolated", "fresh_process", "horovodrun", "tf_cluster", "parameter_server_job")


def launch_problem(kind: str) -> str | None:
    """Why runs of this launch kind cannot start here (naming the fix), or None."""
    return horovod_launch_problem() if kind == "horovodrun" else None


def run_fresh_process(program: Sequence[str], task: str) -> JobExit:
    """Runs ``program`` once in a fresh process (whose TensorFlow has not yet started, so it can
    set devices up) and waits for it; ``task`` names it in a failure."""
    completed = subprocess.run(list(program), capture_output=True, text=True, env=child_environment())
    return JobExit(completed.returncode, output=completed.stdout + completed.stderr, task=task)


def start_run(kind: str, program: Sequence[str], world_size: int, experiment: ExperimentConfig, run_dir: Path) -> JobExit:
    """Runs ``program`` (one run's ``lbtrain train ... --mode M``) as launch ``kind`` says, for
    ``world_size`` workers, with the experiment's launch settings; returns how the job ended. A
    launch setting that cannot be met (a port in use) is a ``ConfigError``."""
    if kind == "horovodrun":
        return launch_horovod(experiment.horovod, world_size, program, run_dir)
    if kind == "fresh_process":
        return run_fresh_process(program, task=f"lbtrain train --mode {experiment.mode}")
    if kind == "tf_cluster":
        return launch_multiworker(world_size, program, base_port=experiment.multiworker.base_port)
    if kind == "parameter_server_job":
        return launch_parameter_server(world_size, experiment.parameter_server.ps_tasks, program,
                                       base_port=experiment.parameter_server.base_port)
    raise ValueError(f"launch kind {kind!r} starts no job here (allowed: {', '.join(LAUNCH_KINDS[1:])})")


def run_side_by_side(commands: Sequence[Sequence[str]]) -> list[int]:
    """Starts every command at once (their output goes where this process's goes) and waits for
    every one, even after one has failed (the others may still finish the work, and none is left
    running when this returns); returns their exit codes in order."""
    processes = [subprocess.Popen(list(command), env=child_environment()) for command in commands]
    return [process.wait() for process in processes]
