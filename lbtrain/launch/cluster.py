"""Jobs of several processes on this machine, as ``horovodrun`` starts ranks: the W workers of a
``tf.distribute.MultiWorkerMirroredStrategy`` job, and the chief, workers and parameter servers
of a parameter-server job, each with its ``$TF_CONFIG``. ``supervise`` watches them: the first
task that fails ends the others within seconds (their collectives, or the coordinator, would
otherwise wait for it) and names the failure (``JobExit.failure``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
import time
from typing import Sequence

from lbtrain.config import ConfigError
from lbtrain.launch.error_line import error_line
from lbtrain.launch.ports import job_ports
from lbtrain.logs import child_environment

# Seconds a launched task gets to exit after SIGTERM before it is killed.
TERMINATE_GRACE_SECONDS = 5.0


def tf_config(ports: Sequence[int], index: int) -> str:
    """``$TF_CONFIG`` of worker ``index`` in a job of workers on ``localhost:PORT``."""
    return json.dumps({"cluster": {"worker": [f"localhost:{port}" for port in ports]}, "task": {"type": "worker", "index": index}})


@dataclasses.dataclass(frozen=True)
class JobExit:
    """How a launched job ended: ``returncode`` 0 when every worker exited 0; else the first
    task that failed (``worker``, its index among the tasks launched, ``task``, its name such as
    ``worker 1`` or ``ps 0``, its exit code and its output; the others were ended)."""

    returncode: int
    worker: int | None = None
    output: str = ""
    task: str = ""

    @property
    def failure(self) -> str:
        """How the job failed, in one line: the task, its exit code and its error line."""
        return f"{self.task} exited with {self.returncode}: {error_line(self.output)}"


def launch_multiworker(world_size: int, program: Sequence[str], *, base_port: int | None = None,
                       env: dict[str, str] | None = None, poll_seconds: float = 0.2) -> JobExit:
    """Runs ``program`` as the ``world_size`` workers of one job on this machine, each with its
    ``TF_CONFIG`` (ports ``base_port .. base_port + W - 1``, or free ones), as horovodrun starts
    ranks. When a worker exits non-zero the others get SIGTERM (SIGKILL after
    ``TERMINATE_GRACE_SECONDS``), since their collectives would otherwise wait for it; so a dead
    worker ends the job within seconds. The workers' output goes to temporary files."""
    ports = job_ports(world_size, base_port, "multiworker.base_port")
    tasks = [(f"worker {index}", tf_config(ports, index)) for index in range(world_size)]
    return supervise(tasks, program, finishing=world_size, env=env, poll_seconds=poll_seconds)



def cluster(ports: Sequence[int], world_size: int) -> dict[str, list[str]]:
    """The cluster of a job on this machine: the chief on the first port, then W workers, then
    the parameter servers on the rest."""
    addresses = [f"localhost:{port}" for port in ports]
    return {"chief": addresses[:1], "worker": addresses[1:1 + world_size], "ps": addresses[1 + world_size:]}


def tf_configs(ports: Sequence[int], world_size: int) -> list[tuple[str, str]]:
    """``(task name, $TF_CONFIG)`` of every task of a job on ``ports``, the chief first."""
    spec = cluster(ports, world_size)
    return [(task if task == "chief" else f"{task} {index}",
             json.dumps({"cluster": spec, "task": {"type": task, "index": index}}))
            for task, addresses in spec.items() for index in range(len(addresses))]



def launch_parameter_server(world_size: int, ps_tasks: int, program: Sequence[str], *, base_port: int | None = None,
                            env: dict[str, str] | None = None, poll_seconds: float = 0.2) -> JobExit:
    """Runs ``program`` as every task of one job on this machine (the chief, ``world_size``
    workers, ``ps_tasks`` parameter servers), each with its ``$TF_CONFIG``. The job is done when
    the chief exits 0; then the servers are ended. A worker or parameter server that exits, or a
    chief that fails, ends the job within seconds (``supervise``): the
    coordinator would otherwise wait for a lost worker to come back."""
    if ps_tasks < 1 or world_size < 1:
        raise ConfigError(f"mode: parameter_server needs at least one worker and one parameter server, "
                          f"got {world_size} workers and {ps_tasks} parameter servers")
    tasks = tf_configs(job_ports(1 + world_size + ps_tasks, base_port, "parameter_server.base_port"), world_size)
    return supervise(tasks, program, finishing=1, env=env, poll_seconds=poll_seconds)



def supervise(tasks: Sequence[tuple[str, str]], program: Sequence[str], *, finishing: int,
              env: dict[str, str] | None = None, poll_seconds: float = 0.2) -> JobExit:
    """Runs ``program`` once per task ``(name, TF_CONFIG)`` on this machine and waits for the
    job: the first ``finishing`` tasks must exit 0, and the job is done when they have; the
    tasks after them are servers that never exit on their own (a parameter-server job's workers
    and parameter servers), ended once the job is done. A finishing task that exits non-zero,
    or a server that exits at all, fails the job: every other task gets SIGTERM (SIGKILL after
    ``TERMINATE_GRACE_SECONDS``), so nothing waits for it. Output goes to temporary files."""
    with tempfile.TemporaryDirectory(prefix="lbtrain-job-") as logs:
        paths = [os.path.join(logs, f"task-{index}.log") for index in range(len(tasks))]
        processes = []
        for path, (_, config) in zip(paths, tasks):
            with open(path, "w") as log:
                processes.append(subprocess.Popen(list(program), stdout=log, stderr=subprocess.STDOUT,
                                                  env={**child_environment(), **(env or {}), "TF_CONFIG": config}))
        try:
            while True:
                codes = [process.poll() for process in processes]
                failed = next((index for index, code in enumerate(codes)
                               if code is not None and (code != 0 or index >= finishing)), None)
                if failed is not None:
                    _end(processes)
                    with open(paths[failed]) as log:
                        return JobExit(codes[failed] or 1, failed, log.read(), tasks[failed][0])
                if all(code == 0 for code in codes[:finishing]):
                    return JobExit(0)
                time.sleep(poll_seconds)
        finally:
            _end(processes)


def _end(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to the processes still running, SIGKILL to those still there after the grace period."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
