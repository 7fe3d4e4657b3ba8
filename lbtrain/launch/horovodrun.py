"""``mode: horovod``'s launcher: ``horovodrun -np W -H HOSTS ARGS... PROGRAM`` on this machine
(or the hosts given), the one place that finds ``horovodrun``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from lbtrain.config import HorovodLaunchConfig
from lbtrain.launch.cluster import JobExit
from lbtrain.logs import child_environment


def horovodrun_path() -> str | None:
    """The launcher: ``$HOROVODRUN`` if set (a wrapper script, say), else the ``horovodrun``
    beside this Python (the venv), else on PATH; None if there is none."""
    if os.environ.get("HOROVODRUN"):
        chosen = os.environ["HOROVODRUN"]
        return chosen if Path(chosen).is_file() or shutil.which(chosen) else None
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.is_file() else shutil.which("horovodrun")


def horovod_launch_problem() -> str | None:
    """Why ``mode: horovod`` cannot start here (naming the fix), or None. With ``$HOROVODRUN``
    (a wrapper that may start another environment) only the launcher itself is checked; else
    this stack must run Horovod (``lbtrain._keras.horovod_problem``: TensorFlow 2.15 with
    Horovod) and have its ``horovodrun``."""
    if os.environ.get("HOROVODRUN"):
        if horovodrun_path() is None:
            return f"$HOROVODRUN is {os.environ['HOROVODRUN']!r}, which is not a file or command (use mode: simulated)"
        return None
    from lbtrain._keras import HOROVOD_INSTALL, horovod_problem

    problem = horovod_problem()
    if problem is None and horovodrun_path() is None:
        problem = f"horovodrun is not installed here: {HOROVOD_INSTALL}, or use mode: simulated"
    return problem


def horovodrun_command(world_size: int, program: Sequence[str], hosts: str | None = None,
                       args: Sequence[str] = ()) -> list[str]:
    """``horovodrun -np W -H HOSTS ARGS... PROGRAM`` (``HOSTS`` defaults to ``localhost:W``)."""
    launcher = horovodrun_path()
    if launcher is None:
        raise FileNotFoundError("horovodrun is not installed here")
    return [launcher, "-np", str(world_size), "-H", hosts or f"localhost:{world_size}", *args, *program]


def launch_horovod(settings: HorovodLaunchConfig, world_size: int, program: Sequence[str], run_dir: str | Path) -> JobExit:
    """Runs ``program`` on ``world_size`` ranks (output captured), with the experiment's Horovod
    knobs in the environment the ranks inherit (``HorovodLaunchConfig.environment``: Horovod's
    own variables, which horovodrun's flags only set for it, and which a ``$HOROVODRUN`` wrapper
    or mpirun pass on as well)."""
    command = horovodrun_command(world_size, program, settings.hosts, settings.args)
    completed = subprocess.run(command, capture_output=True, text=True, env={**child_environment(), **settings.environment(run_dir)})
    return JobExit(completed.returncode, output=completed.stdout + completed.stderr, task="horovodrun")
