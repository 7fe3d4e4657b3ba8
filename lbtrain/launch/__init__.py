"""Every process lbtrain starts, and how it reports back: the isolated child that trains simulated
runs (``isolation``), ``horovodrun`` (``horovodrun``), tf.distribute and parameter-server jobs
on this machine (``cluster``), their ports (``ports``) and the one error line a failed process
is reported by (``error_line``). ``start_run`` starts one run's processes for its mode's launch
kind (``lbtrain.modes.Mode.launch``), ``run_footprint`` says what one takes of the machine;
``run_side_by_side`` the workers of a parallel sweep."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Sequence

from lbtrain.config import ElasticConfig, ExperimentConfig
from lbtrain.launch.cluster import JobExit, launch_multiworker, launch_parameter_server
from lbtrain.launch.horovodrun import horovod_launch_problem, launch_horovod
from lbtrain.logs import child_environment

# Seconds processes started side by side get to end after an interrupt before they are killed.
INTERRUPT_GRACE_SECONDS = 30.0
OWN_INTERRUPT_SECONDS = 10.0  # first, the time they get to end on a SIGINT of their own
ERROR_PREFIX = "lbtrain: error: "  # how an lbtrain command's one-line error starts (lbtrain.cli)
LAUNCH_KINDS = ("isolated", "fresh_process", "horovodrun", "tf_cluster", "parameter_server_job")


def launch_problem(kind: str) -> str | None:
    """Why runs of this launch kind cannot start here (naming the fix), or None."""
    return horovod_launch_problem() if kind == "horovodrun" else None


def run_fresh_process(program: Sequence[str], task: str, env: dict[str, str] | None = None) -> JobExit:
    """Runs ``program`` once in a fresh process (whose TensorFlow has not yet started, so it can
    set devices up), with ``env`` added to its environment, and waits for it; ``task`` names it
    in a failure."""
    completed = subprocess.run(list(program), capture_output=True, text=True, env={**child_environment(), **(env or {})})
    return JobExit(completed.returncode, output=completed.stdout + completed.stderr, task=task)


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What one run takes of this machine: its ``processes`` (each with TensorFlow's threads),
    the ``gpus`` it trains on where there are GPUs, and whether it listens on fixed ports
    (``fixed_ports``: two such runs at once would collide, so they run one at a time)."""

    processes: int
    gpus: int
    fixed_ports: bool = False


def run_footprint(kind: str, world_size: int, experiment: ExperimentConfig) -> Footprint:
    """The ``Footprint`` of one run of launch ``kind`` at ``world_size``: an isolated child is one
    process on one GPU; a fresh process (``tf.distribute.MirroredStrategy``) one process over
    ``world_size`` devices; horovodrun and a tf.distribute cluster one process and one GPU per
    worker; a parameter-server job its chief, workers and parameter servers, a GPU per worker."""
    if kind in ("isolated", "fresh_process"):
        return Footprint(1, 1 if kind == "isolated" else world_size)
    if kind == "horovodrun":
        return Footprint(world_size, world_size)
    if kind == "tf_cluster":
        return Footprint(world_size, world_size, experiment.multiworker.base_port is not None)
    if kind == "parameter_server_job":
        settings = experiment.parameter_server
        return Footprint(1 + world_size + settings.ps_tasks, world_size, settings.base_port is not None)
    raise ValueError(f"unknown launch kind {kind!r} (allowed: {', '.join(LAUNCH_KINDS)})")


def start_run(kind: str, program: Sequence[str], world_size: int, experiment: ExperimentConfig, run_dir: Path,
              elastic: ElasticConfig | None = None, env: dict[str, str] | None = None) -> JobExit:
    """Runs ``program`` (one run's ``lbtrain train ... --mode M``) as launch ``kind`` says, for
    ``world_size`` workers, with the experiment's launch settings (and the run's
    ``training.elastic``, for Horovod's elastic launcher) and ``env`` added to every process's
    environment (the GPUs it may see); returns how the job ended. A launch setting that cannot
    be met (a port in use, a discovery script that fails) is a ``ConfigError``."""
    if kind == "horovodrun":
        return launch_horovod(experiment.horovod, world_size, program, run_dir, elastic=elastic, env=env)
    if kind == "fresh_process":
        return run_fresh_process(program, task=f"lbtrain train --mode {experiment.mode}", env=env)
    if kind == "tf_cluster":
        return launch_multiworker(world_size, program, base_port=experiment.multiworker.base_port, env=env)
    if kind == "parameter_server_job":
        return launch_parameter_server(world_size, experiment.parameter_server.ps_tasks, program,
                                       base_port=experiment.parameter_server.base_port, env=env)
    raise ValueError(f"launch kind {kind!r} starts no job here (allowed: {', '.join(LAUNCH_KINDS[1:])})")


@dataclasses.dataclass(frozen=True)
class SideExit:
    """How one of the processes ``run_side_by_side`` started ended: its exit code and the
    ``lbtrain: error: ...`` lines it printed (held back from the output, without the prefix)."""

    code: int
    errors: tuple[str, ...]


def _pass_stderr(stream: IO[str], held: list[str]) -> None:
    """Copies a child's stderr to this process's as it comes, except its ``ERROR_PREFIX`` lines,
    kept in ``held`` (the caller reports them once, however many children printed them)."""
    for line in stream:
        if line.startswith(ERROR_PREFIX):
            held.append(line.removeprefix(ERROR_PREFIX).strip())
        else:
            sys.stderr.write(line)
            sys.stderr.flush()


def run_side_by_side(commands: Sequence[Sequence[str]]) -> list[SideExit]:
    """Starts every command at once (their output goes where this process's goes, but for their
    one-line errors, returned) and waits for every one, even after one has failed (the others
    may still finish the work, and none is left running when this returns); returns how each
    ended, in order. Interrupted (Ctrl-C), it passes SIGINT on to those that did not get it and
    gives them ``INTERRUPT_GRACE_SECONDS`` to record how far they got (a sweep worker fails its
    trial, so the rerun does not wait for it to go stale), then kills the rest and re-raises:
    none is left running."""
    processes = [subprocess.Popen(list(command), env=child_environment(), stderr=subprocess.PIPE, text=True)
                 for command in commands]
    held: list[list[str]] = [[] for _ in processes]
    readers = [threading.Thread(target=_pass_stderr, args=(process.stderr, errors), daemon=True)
               for process, errors in zip(processes, held)]
    for reader in readers:
        reader.start()
    try:
        codes = [process.wait() for process in processes]
        for reader in readers:
            reader.join()
        return [SideExit(code, tuple(errors)) for code, errors in zip(codes, held)]
    except BaseException:
        # A terminal's Ctrl-C reached them too; a SIGINT sent to this process alone did not.
        for process in _running_after(processes, OWN_INTERRUPT_SECONDS):
            process.send_signal(signal.SIGINT)
        for process in _running_after(processes, INTERRUPT_GRACE_SECONDS):
            process.kill()
            process.wait()
        raise


def _running_after(processes: Sequence[subprocess.Popen], seconds: float) -> list[subprocess.Popen]:
    """Those of ``processes`` still running after waiting up to ``seconds`` in all for them to end."""
    deadline = time.monotonic() + seconds
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    return [process for process in processes if process.poll() is None]
