"""How a run's processes start: one launcher class per way, apart from what a world does once
started (as Lightning's ``strategies/launchers/``). A mode names its launcher
(``lbtrain.worlds.modes.Mode.launcher``); the plan, the runner and the bench ask it, and nothing
outside ``lbtrain.launch`` tells the ways apart.

- ``IsolatedChildLauncher``: the runs train one after another in one child process the runner
  keeps between them (``lbtrain.launch.isolation``): a simulated world.
- ``FreshProcessLauncher``: one new process per run, whose TensorFlow can still set its devices
  up (``tf.distribute.MirroredStrategy``).
- ``HorovodrunLauncher``: ``horovodrun`` starts one process per worker (``lbtrain.launch.horovodrun``).
- ``TfClusterLauncher``: a tf.distribute cluster of one process per worker on this machine
  (``lbtrain.launch.cluster``).
- ``ParameterServerLauncher``: a chief, W workers and parameter servers (``lbtrain.launch.cluster``).

Each says why it cannot start here (``problem``), what is wrong with the experiment's launch
settings (``settings_problem``: horovodrun's own parser on ``horovod.args``), what one run takes
of the machine (``footprint``), checks the fixed ports a run would listen on (``check_ports``), and starts one
run's job (``start``), or gives the child that trains the runs in turn (``child``).

Adding a way of starting processes: a subclass here, named by the modes that use it.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from lbtrain.launch.cluster import JobExit, launch_multiworker, launch_parameter_server
from lbtrain.launch.horovodrun import arguments_problem, horovod_launch_problem, launch_horovod
from lbtrain.launch.ports import job_ports
from lbtrain.logs import child_environment

if TYPE_CHECKING:
    from lbtrain.config import ElasticConfig, ExperimentConfig
    from lbtrain.launch.isolation import RunProcess


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What one run takes of this machine: its ``processes`` (each with TensorFlow's threads),
    the ``gpus`` it trains on where there are GPUs, and whether it listens on fixed ports
    (``fixed_ports``: two such runs at once would collide, so they run one at a time)."""

    processes: int
    gpus: int
    fixed_ports: bool = False


def run_fresh_process(program: Sequence[str], task: str, env: dict[str, str] | None = None) -> JobExit:
    """Runs ``program`` once in a fresh process (whose TensorFlow has not yet started, so it can
    set devices up), with ``env`` added to its environment, and waits for it; ``task`` names it
    in a failure."""
    completed = subprocess.run(list(program), capture_output=True, text=True, env={**child_environment(), **(env or {})})
    return JobExit(completed.returncode, output=completed.stdout + completed.stderr, task=task)


class Launcher:
    """How the processes of one run start. By default: nothing keeps it from starting here, it
    listens on no fixed port, and each run starts its own job (``start``)."""

    def problem(self) -> str | None:
        """Why runs cannot start this way here (naming the fix), or None."""
        return None

    def settings_problem(self, experiment: ExperimentConfig) -> str | None:
        """What is wrong with the experiment's launch settings for this way of starting (a
        one-line message naming the field), or None."""
        return None

    def footprint(self, world_size: int, experiment: ExperimentConfig) -> Footprint:
        """What one run of ``world_size`` workers takes of this machine."""
        raise NotImplementedError

    def check_ports(self, world_size: int, experiment: ExperimentConfig) -> None:
        """A ``ConfigError`` when the experiment's fixed ports cannot serve a run of
        ``world_size`` (above 65535, or in use)."""

    def child(self, threads: int, environment: dict[str, str]) -> RunProcess | None:
        """The process that trains the runs one after another, kept between them; None when
        each run starts its own job."""
        return None

    def start(self, program: Sequence[str], world_size: int, experiment: ExperimentConfig, run_dir: Path,
              elastic: ElasticConfig | None = None, env: dict[str, str] | None = None) -> JobExit:
        """Runs ``program`` (one run's ``lbtrain train ... --mode M``) for ``world_size`` workers
        with the experiment's launch settings (and the run's ``training.elastic``) and ``env``
        added to every process's environment (the GPUs it may see); returns how the job ended. A
        launch setting that cannot be met (a port in use, a discovery script that fails) is a
        ``ConfigError``."""
        raise NotImplementedError(f"{type(self).__name__} starts no job: its child() trains the runs")


class IsolatedChildLauncher(Launcher):
    """One child process, one GPU, kept between runs (``lbtrain.launch.isolation.RunProcess``)."""

    def footprint(self, world_size: int, experiment: ExperimentConfig) -> Footprint:
        return Footprint(1, 1)

    def child(self, threads: int, environment: dict[str, str]) -> RunProcess:
        from lbtrain.launch.isolation import RunProcess

        return RunProcess(threads, environment)


class FreshProcessLauncher(Launcher):
    """One fresh process per run, over ``world_size`` devices."""

    def footprint(self, world_size: int, experiment: ExperimentConfig) -> Footprint:
        return Footprint(1, world_size)

    def start(self, program: Sequence[str], world_size: int, experiment: ExperimentConfig, run_dir: Path,
              elastic: ElasticConfig | None = None, env: dict[str, str] | None = None) -> JobExit:
        return run_fresh_process(program, task=f"lbtrain train --mode {experiment.mode}", env=env)


class HorovodrunLauncher(Launcher):
    """``horovodrun``: one process and one GPU per worker; an elastic job by Horovod's elastic launcher."""

    def problem(self) -> str | None:
        return horovod_launch_problem()

    def settings_problem(self, experiment: ExperimentConfig) -> str | None:
        problem = arguments_problem(experiment.horovod.args) if experiment.horovod.args else None
        return None if problem is None else f"horovod.args: {problem}"

    def footprint(self, world_size: int, experiment: ExperimentConfig) -> Footprint:
        return Footprint(world_size, world_size)

    def start(self, program: Sequence[str], world_size: int, experiment: ExperimentConfig, run_dir: Path,
              elastic: ElasticConfig | None = None, env: dict[str, str] | None = None) -> JobExit:
        return launch_horovod(experiment.horovod, world_size, program, run_dir, elastic=elastic, env=env)


class TfClusterLauncher(Launcher):
    """A tf.distribute cluster: one process and one GPU per worker, on ``multiworker.base_port``
    and up when it is set."""

    def footprint(self, world_size: int, experiment: ExperimentConfig) -> Footprint:
        return Footprint(world_size, world_size, experiment.multiworker.base_port is not None)

    def check_ports(self, world_size: int, experiment: ExperimentConfig) -> None:
        if experiment.multiworker.base_port is not None:
            job_ports(world_size, experiment.multiworker.base_port, "multiworker.base_port")

    def start(self, program: Sequence[str], world_size: int, experiment: ExperimentConfig, run_dir: Path,
              elastic: ElasticConfig | None = None, env: dict[str, str] | None = None) -> JobExit:
        return launch_multiworker(world_size, program, base_port=experiment.multiworker.base_port, env=env)


class ParameterServerLauncher(Launcher):
    """A parameter-server job: its chief, workers and parameter servers, a GPU per worker, on
    ``parameter_server.base_port`` and up when it is set."""

    def footprint(self, world_size: int, experiment: ExperimentConfig) -> Footprint:
        settings = experiment.parameter_server
        return Footprint(1 + world_size + settings.ps_tasks, world_size, settings.base_port is not None)

    def check_ports(self, world_size: int, experiment: ExperimentConfig) -> None:
        settings = experiment.parameter_server
        if settings.base_port is not None:
            job_ports(1 + world_size + settings.ps_tasks, settings.base_port, "parameter_server.base_port")

    def start(self, program: Sequence[str], world_size: int, experiment: ExperimentConfig, run_dir: Path,
              elastic: ElasticConfig | None = None, env: dict[str, str] | None = None) -> JobExit:
        settings = experiment.parameter_server
        return launch_parameter_server(world_size, settings.ps_tasks, program, base_port=settings.base_port, env=env)


__all__ = ["FreshProcessLauncher", "Footprint", "HorovodrunLauncher", "IsolatedChildLauncher", "Launcher", "ParameterServerLauncher",
           "TfClusterLauncher", "run_fresh_process"]
