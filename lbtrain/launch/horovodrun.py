"""``mode: horovod``'s launcher: ``horovodrun -np W -H HOSTS ARGS... PROGRAM`` on this machine
(or the hosts given), the one place that finds ``horovodrun``; for a run with
``training.elastic`` (real workers coming and going), Horovod's elastic launcher
``horovodrun -np W --min-np --max-np --host-discovery-script ...`` (``elastic_arguments``)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from lbtrain.config import ConfigError, ElasticConfig, HorovodLaunchConfig, parse_hosts
from lbtrain.files import write_atomic
from lbtrain.launch.cluster import JobExit
from lbtrain.logs import child_environment
from lbtrain.results import CHECKPOINT_FOLDER, ELASTIC_DISCOVERY_FILE

# How long a discovery script may take to print its hosts (Horovod runs it every second or so).
DISCOVERY_TIMEOUT_SECONDS = 30
# What Horovod's elastic driver says when fewer than --min-np workers remain for --elastic-timeout.
ELASTIC_TIMEOUT_MESSAGE = "Timed out waiting for"
# horovodrun's flags that choose how ranks are started (its "controller"), and its file of flags.
CONTROLLER_FLAGS = ("--gloo", "--mpi", "--jsrun", "--config-file")


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
                       args: Sequence[str] = (), elastic: Sequence[str] = ()) -> list[str]:
    """``horovodrun -np W -H HOSTS ARGS... PROGRAM`` (``HOSTS`` defaults to ``localhost:W``); with
    ``elastic`` (``elastic_arguments``), those flags instead of ``-H``."""
    launcher = horovodrun_path()
    if launcher is None:
        raise FileNotFoundError("horovodrun is not installed here")
    placement = list(elastic) if elastic else ["-H", hosts or f"localhost:{world_size}"]
    return [launcher, "-np", str(world_size), *placement, *args, *program]


def _names_a_controller(arg: str) -> bool:
    """Whether ``arg`` is one of ``CONTROLLER_FLAGS``, or an abbreviation horovodrun's parser
    accepts for one (``--js`` for ``--jsrun``), with or without ``=value``."""
    name = arg.split("=")[0]
    return len(name) > 2 and name.startswith("--") and any(flag.startswith(name) for flag in CONTROLLER_FLAGS)


def controller_arguments(args: Sequence[str]) -> list[str]:
    """``["--gloo"]`` when this Horovod has no MPI and ``args`` choose no controller, else ``[]``.

    Without a controller flag, horovodrun takes MPI if Horovod was built with it, else Gloo; to
    find out, it imports Horovod's TensorFlow extension (and so TensorFlow) in a forked process
    for each question, about 2 CPU-seconds apiece. lbtrain asks the extension in its own process,
    where TensorFlow is already loaded, and passes the answer: the same controller, one fork
    fewer per job. Not with ``$HOROVODRUN`` (a wrapper may start another Horovod)."""
    if os.environ.get("HOROVODRUN") or any(_names_a_controller(arg) for arg in args):
        return []
    import horovod.tensorflow as hvd

    return [] if hvd.mpi_built() else ["--gloo"]


def job_command(settings: HorovodLaunchConfig, world_size: int, program: Sequence[str], run_dir: str | Path,
                elastic: ElasticConfig | None = None) -> list[str]:
    """The horovodrun command ``launch_horovod`` runs: ``horovod.hosts`` and ``horovod.args``,
    then ``controller_arguments`` for a static job; with ``elastic``, the elastic flags
    (``elastic_arguments``) and no controller flag, since the elastic launcher asks only whether
    Horovod has Gloo, which it needs."""
    if elastic is not None:
        return horovodrun_command(world_size, program, settings.hosts, settings.args, elastic=elastic_arguments(elastic, run_dir))
    return horovodrun_command(world_size, program, settings.hosts, [*settings.args, *controller_arguments(settings.args)])


def arguments_problem(args: Sequence[str]) -> str | None:
    """What horovodrun's own parser says of ``horovod.args`` (an unknown flag, a value it cannot
    take), asked before anything launches (``horovodrun ARGS --check-build``: parses, prints the
    build and exits, in a fraction of a second); None when it takes them or there is no horovodrun
    (the mode's own check says so) or it is a ``$HOROVODRUN`` wrapper."""
    launcher = horovodrun_path()
    if not args or launcher is None or os.environ.get("HOROVODRUN"):  # a wrapper may not take --check-build
        return None
    try:
        completed = subprocess.run([launcher, *args, "--check-build"], capture_output=True, text=True, timeout=60,
                                   env=child_environment())
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"horovodrun could not check them ({type(error).__name__})"
    if completed.returncode == 0:
        return None
    said = [line.strip() for line in completed.stderr.splitlines() if line.strip()]
    return (said[-1] if said else f"horovodrun exited with {completed.returncode}")[:200]


def discovered_hosts(discovery: str | list[str]) -> dict[str, int]:
    """``{host: slots}`` that ``training.elastic.discovery`` gives now: the list itself, or what the
    script prints (one ``host:slots`` line per host, Horovod's format). A script that is missing,
    not executable, fails, hangs or prints anything else is a one-line ``ConfigError``."""
    field = "training.elastic.discovery"
    if isinstance(discovery, list):
        return parse_hosts(discovery, field)
    script = Path(discovery).expanduser()
    if not script.is_file():
        raise ConfigError(f"{field}: {discovery} is not a file (give an executable script printing host:slots lines, "
                          "or the list of host:slots)")
    if not os.access(script, os.X_OK):
        raise ConfigError(f"{field}: {discovery} is not executable (chmod +x it)")
    # In a session of its own, so a script that hangs is killed with everything it started (a
    # `sleep` it waits on would otherwise outlive lbtrain).
    process = subprocess.Popen([str(script.resolve())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=DISCOVERY_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise ConfigError(f"{field}: {discovery} did not finish within {DISCOVERY_TIMEOUT_SECONDS} s") from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    completed = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if completed.returncode != 0:
        said = next((line.strip() for line in completed.stderr.splitlines() if line.strip()), "no message")
        raise ConfigError(f"{field}: {discovery} failed (exit {completed.returncode}): {said[:200]}")
    try:
        hosts = parse_hosts(completed.stdout.splitlines(), f"{field}: {discovery}")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if not hosts:
        raise ConfigError(f"{field}: {discovery} printed no host (one host:slots line per host)")
    return hosts


def elastic_arguments(elastic: ElasticConfig, run_dir: str | Path) -> list[str]:
    """horovodrun's elastic flags for ``elastic``: ``--min-np``, ``--max-np``, the discovery script
    (a listed discovery is written to ``run_dir``'s ``discover_hosts.sh``), ``--elastic-timeout`` and,
    if set, ``--blacklist-cooldown-range``. The discovery is checked first (``discovered_hosts``)."""
    discovered_hosts(elastic.discovery)
    if isinstance(elastic.discovery, list):
        lines = "".join(f"echo {shlex.quote(host)}\n" for host in elastic.discovery if host.strip())
        script = write_atomic(Path(run_dir) / ELASTIC_DISCOVERY_FILE, f"#!/bin/sh\n{lines}")
        script.chmod(0o755)
    else:
        script = Path(elastic.discovery).expanduser().resolve()
    arguments = ["--min-np", str(elastic.min_workers), "--max-np", str(elastic.max_workers),
                 "--host-discovery-script", str(script), "--elastic-timeout", str(elastic.timeout_seconds)]
    if elastic.cooldown_seconds is not None:
        arguments += ["--blacklist-cooldown-range", *map(str, elastic.cooldown_seconds)]
    return arguments


def launch_horovod(settings: HorovodLaunchConfig, world_size: int, program: Sequence[str], run_dir: str | Path,
                   elastic: ElasticConfig | None = None, env: dict[str, str] | None = None) -> JobExit:
    """Runs ``program`` on ``world_size`` ranks (output captured), with the experiment's Horovod
    knobs in the environment the ranks inherit (``HorovodLaunchConfig.environment``: Horovod's
    own variables, which horovodrun's flags only set for it, and which a ``$HOROVODRUN`` wrapper
    or mpirun pass on as well), as ``job_command`` says: with ``--gloo`` when that is what
    horovodrun would choose (``controller_arguments``); with ``elastic`` (real workers coming and
    going), under Horovod's elastic launcher (``elastic_arguments``); ``env`` is added to what
    the ranks inherit (the GPUs they may see)."""
    command = job_command(settings, world_size, program, run_dir, elastic)
    completed = subprocess.run(command, capture_output=True, text=True,
                               env={**child_environment(), **settings.environment(run_dir), **(env or {})})
    output = completed.stdout + completed.stderr
    if elastic is not None and completed.returncode != 0 and ELASTIC_TIMEOUT_MESSAGE in output:
        output = (f"lbtrain: error: fewer than training.elastic.min_workers ({elastic.min_workers}) workers were left for "
                  f"{elastic.timeout_seconds} s (training.elastic.timeout_seconds), so the job stopped; its last checkpoint is "
                  f"in {Path(run_dir) / CHECKPOINT_FOLDER} and a rerun resumes from it")
    return JobExit(completed.returncode, output=output, task="horovodrun")
