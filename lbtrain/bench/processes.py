"""How the bench starts a configuration's processes, and reads their one result line.

Every configuration runs in processes of its own (``python -m lbtrain.bench JOB_JSON``: fresh
TensorFlow thread pools and devices each), which print one ``RESULT_PREFIX`` line. A world kind
names how its processes start (``lbtrain.bench.worlds.WorldKind.starter``), one class per way:

- ``OneProcess``: one process computes the whole world (``single``, ``simulated:W``, ``mirrored:N``);
- ``SideBySide``: N single-worker processes at once, started together at a barrier, nothing
  exchanged (``independent:N``, the machine's own limit for ``horovod:N``);
- ``HorovodRanks``: ``horovodrun -np N --gloo`` (``lbtrain.launch.horovodrun``), the bench in every rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lbtrain.bench.settings import Settings
from lbtrain.bench.timeline import allreduce_seconds, read_timeline
from lbtrain.launch.error_line import error_line
from lbtrain.launch.horovodrun import horovodrun_command

RESULT_PREFIX = "lbtrain-bench-result "


class CaseFailed(RuntimeError):
    """A configuration's process failed; the message is its last words."""


def child_command(*arguments: str) -> list[str]:
    """The command that runs this module's ``_child_main`` with ``arguments``."""
    return [sys.executable, "-m", "lbtrain.bench", *arguments]


def result_of(process: subprocess.CompletedProcess) -> dict:
    """The result line of a finished child, or ``CaseFailed`` with its error line
    (``lbtrain.launch.error_line``: a rank's own under horovodrun)."""
    for line in process.stdout.splitlines():
        _, marker, payload = line.partition(RESULT_PREFIX)
        if marker:
            return json.loads(payload)
    raise CaseFailed(f"exit code {process.returncode}: {error_line(process.stderr + process.stdout)}")


def run_child(command: list[str], env: dict[str, str] | None = None) -> dict:
    """Runs ``command`` to its end; its result line (``result_of``)."""
    return result_of(subprocess.run(command, capture_output=True, text=True, env=env))


def wait_for_children(children: list[subprocess.Popen]) -> None:
    """Waits for every child; once one fails, ends the others (they would wait at the barrier)."""
    while any(child.poll() is None for child in children):
        if any(child.returncode for child in children):
            for child in children:
                if child.poll() is None:
                    child.terminate()
        time.sleep(0.05)


class Starter:
    """How a kind of world's processes start: ``processes(size)`` of them compute side by side;
    ``barrier``: they wait for each other before each measurement (and each takes its own GPU);
    ``horovod_ranks``: they are the ranks of one Horovod world, whose result counts every rank's
    images; ``run(job, settings)``: the result of one configuration."""

    barrier = False
    horovod_ranks = False

    def processes(self, size: int) -> int:
        return 1

    def run(self, job: dict, settings: Settings) -> dict:
        return run_child(child_command(json.dumps(job)))


class OneProcess(Starter):
    """One process feeds the world's every worker."""


class SideBySide(Starter):
    """``size`` single-worker processes at once; images/s = all their images / the longest
    measured time (as a synchronous world, the group is done when its slowest process is)."""

    barrier = True

    def processes(self, size: int) -> int:
        return size

    def run(self, job: dict, settings: Settings) -> dict:
        with tempfile.TemporaryDirectory(prefix="lbtrain-bench-") as barrier:
            outputs = [(Path(barrier, f"out-{index}"), Path(barrier, f"err-{index}")) for index in range(job["size"])]
            children = []
            for index, (out, err) in enumerate(outputs):
                with out.open("w") as stdout, err.open("w") as stderr:
                    command = child_command(json.dumps({**job, "barrier": barrier, "index": index}))
                    children.append(subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True))
            wait_for_children(children)
            # A child that failed comes first, so that its error is reported rather than a terminated one's.
            results = [result_of(subprocess.CompletedProcess(child.args, child.returncode, out.read_text(), err.read_text()))
                       for child, (out, err) in sorted(zip(children, outputs), key=lambda pair: pair[0].returncode <= 0)]
        return {**results[0], "images": sum(r["images"] for r in results), "seconds": max(r["seconds"] for r in results),
                "process_seconds": [r["seconds"] for r in results],
                **{key: max(r[key] for r in results) for key in ("pipeline_seconds", "fed_seconds") if key in results[0]}}


class HorovodRanks(Starter):
    """``horovodrun -np N --gloo`` on this machine; with ``settings.timeline`` also the share
    of the measured time that Horovod spent in allreduce (its timeline)."""

    horovod_ranks = True

    def processes(self, size: int) -> int:
        return size

    def run(self, job: dict, settings: Settings) -> dict:
        size = job["size"]
        with tempfile.TemporaryDirectory(prefix="lbtrain-bench-") as folder:
            env = {**os.environ, **settings.horovod_env}
            if settings.timeline:
                env["HOROVOD_TIMELINE"] = "DYNAMIC"
                job = {**job, "timeline": str(Path(folder) / "timeline.json")}
            command = horovodrun_command(size, child_command(json.dumps(job)), args=["--gloo"])
            result = run_child(command, env)
            if settings.timeline:
                result["allreduce_share"] = allreduce_seconds(read_timeline(job["timeline"])) / result["seconds"]
        return result
