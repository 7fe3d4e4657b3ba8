"""Runs of a simulated experiment train in a child process, so one run's crash cannot take the
grid down.

A run can end its process in ways no ``except`` catches: a native library aborting (oneDNN on an
impossible layer, exit 134), the kernel's OOM killer, a stray signal. ``RunProcess`` keeps one
child (``python -m lbtrain.launch.isolation``) that trains the runs it is sent one after another, so
TensorFlow is imported once per experiment, not once per run. When the child dies mid-run, the
run is recorded ``failed`` with how it died (the signal, or the exit code, and the last line it
wrote to stderr), and the next run starts a fresh child.

The protocol is one JSON line per request on the child's stdin (``{"config": ..., "run_dir":
...}``) and one marker line per finished run on its stdout; everything else the child prints is
passed through to this process's stdout and stderr as it comes (its log records too: it logs to
stderr at this process's verbosity, ``lbtrain.logs.child_environment``). The child dies with this
process (``prctl(PR_SET_PDEATHSIG)`` on Linux), so a killed ``lbtrain run`` leaves no orphan
writing into the results. Ctrl-C is the parent's to handle: the child ignores SIGINT (a
terminal sends it to both), and the parent, interrupted, ends the child at once (its run resumes
from its last checkpoint on the rerun), so an interrupted ``lbtrain run`` prints one line.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from lbtrain.launch.error_line import error_line
from lbtrain.logs import child_environment
from lbtrain.results import RunResult, read_run, write_run

DONE = "@@lbtrain-run-done@@"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_STDERR_LINES_KEPT = 20


def death_reason(returncode: int, stderr_tail: list[str]) -> str:
    """How the child died, in one line: the signal (``returncode = -signal``) or the exit code,
    then the error line of its last stderr lines (``lbtrain.launch.error_line``).

    >>> death_reason(-6, ["terminate called after throwing an instance of 'dnnl::error'", "  what():  could not create a primitive"])
    'the run process was killed by SIGABRT: what():  could not create a primitive'
    >>> death_reason(3, [])
    'the run process exited with code 3'
    """
    if returncode < 0:
        try:
            how = f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"was killed by signal {-returncode}"
    else:
        how = f"exited with code {returncode}"
    last = error_line("\n".join(stderr_tail)) if any(line.strip() for line in stderr_tail) else None
    return f"the run process {how}" + (f": {last}" if last else "")


class RunProcess:
    """A child process that trains simulated runs (see the module doc), with ``threads``
    TensorFlow intra-op and inter-op threads (None: TensorFlow's default, every core) and
    ``environment`` added to its own (the GPUs it may see). Use as a context manager; ``train``
    starts the child when needed. ``kill`` may come from another thread: the run the child was
    training is then not recorded (it resumes on the rerun), and ``train`` raises ``RunEnded``."""

    def __init__(self, threads: int | None = None, environment: dict[str, str] | None = None) -> None:
        self._threads, self._environment = threads, dict(environment or {})
        self._process: subprocess.Popen | None = None
        self._done: queue.Queue[str] = queue.Queue()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES_KEPT)

    def __enter__(self) -> "RunProcess":
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()  # interrupted (Ctrl-C) or failed: the run in the child resumes on the rerun

    def kill(self) -> None:
        """Ends the child now: SIGTERM, then SIGKILL if it is still there after seconds."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs, else None."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def close(self) -> None:
        """Ends the child: EOF on its stdin, then a kill if it does not leave within seconds."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
            process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()

    def _start(self) -> subprocess.Popen:
        self._done, self._stderr_tail = queue.Queue(), collections.deque(maxlen=_STDERR_LINES_KEPT)
        process = subprocess.Popen(
            [sys.executable, "-m", "lbtrain.launch.isolation", str(os.getpid()), *([str(self._threads)] if self._threads else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env={**child_environment(), **self._environment},
        )
        threading.Thread(target=self._pass_stdout, args=(process.stdout, self._done), daemon=True).start()
        threading.Thread(target=self._pass_stderr, args=(process.stderr, self._stderr_tail), daemon=True).start()
        return process

    @staticmethod
    def _pass_stdout(stream: IO[str], done: queue.Queue) -> None:
        for line in stream:
            if line.rstrip("\n") == DONE:
                done.put(DONE)
            else:
                sys.stdout.write(line)
                sys.stdout.flush()

    @staticmethod
    def _pass_stderr(stream: IO[str], tail: collections.deque) -> None:
        for line in stream:
            tail.append(line.rstrip("\n"))
            sys.stderr.write(line)
            sys.stderr.flush()

    def train(self, config: Any, run_dir: Path) -> RunResult:
        """Trains (or resumes) the run of ``config`` (a ``RunConfig``) into ``run_dir`` in the
        child, and returns what it wrote; a run whose process died is written ``failed``, unless
        ``kill`` ended it (``RunEnded``)."""
        if self._process is None or self._process.poll() is not None:
            self._process = self._start()
        process = self._process
        try:
            process.stdin.write(json.dumps({"config": config.to_dict(), "run_dir": str(run_dir)}) + "\n")
            process.stdin.flush()
        except OSError:
            pass  # it died before reading: waited for and reported below
        while True:
            try:
                self._done.get(timeout=0.2)
                return read_run(run_dir)
            except queue.Empty:
                if process.poll() is not None:
                    break
        process.wait()
        if self._process is not process:
            raise RunEnded(f"the run in {run_dir} was stopped by lbtrain")
        time.sleep(0.1)  # let the reader threads take the child's last lines
        self._process = None
        result = RunResult.failed(config, death_reason(process.returncode, list(self._stderr_tail)))
        write_run(run_dir, result)
        return result


class RunEnded(Exception):
    """``RunProcess.train``'s run was ended by ``RunProcess.kill`` (an interrupted experiment)."""


def _die_with_parent(parent: int) -> None:
    """Ends this process as soon as ``parent`` is gone: on Linux the kernel sends SIGKILL the
    moment it dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a thread polls the parent id."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        linux = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) == 0
    except (OSError, AttributeError):
        linux = False
    if os.getppid() != parent:
        os._exit(1)
    if not linux:
        threading.Thread(target=_poll_parent, args=(parent,), daemon=True).start()


def _poll_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def serve(parent: int, threads: int | None = None) -> None:
    """The child's loop: train each requested run, write it, print ``DONE``; TensorFlow's pools
    get ``threads`` threads each (None: its default)."""
    from lbtrain.worlds.base import configure_threads

    configure_threads(threads, threads)  # before TensorFlow runs an op
    from lbtrain.config import run_config_from_dict
    from lbtrain.trainer import train
    from lbtrain.worlds.simulated import SimulatedWorld

    _die_with_parent(parent)
    for line in sys.stdin:
        request = json.loads(line)
        config, run_dir = run_config_from_dict(request["config"]), Path(request["run_dir"])
        settings = config.training
        try:
            result = train(config, SimulatedWorld(settings.world_size, settings.micro_batches), run_dir=run_dir, resume=True)
        except Exception as error:  # a failed run is recorded, the experiment goes on
            result = RunResult.failed(config, error)
        write_run(run_dir, result)
        print(DONE, flush=True)


if __name__ == "__main__":
    from lbtrain.logs import configure

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent ends this process (see the module doc)
    configure()
    serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None)
