"""Every process lbtrain starts, and how it reports back: one launcher class per way a run's
processes start (``launchers``: a mode names its own, ``lbtrain.worlds.modes.Mode.launcher``),
the isolated child that trains simulated runs (``isolation``), ``horovodrun`` (``horovodrun``),
tf.distribute and parameter-server jobs on this machine (``cluster``), their ports (``ports``)
and the one error line a failed process is reported by (``error_line``); ``run_side_by_side``
the workers of a parallel sweep."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

from lbtrain.logs import child_environment

# Seconds processes started side by side get to end after an interrupt before they are killed.
INTERRUPT_GRACE_SECONDS = 30.0
OWN_INTERRUPT_SECONDS = 10.0  # first, the time they get to end on a SIGINT of their own
ERROR_PREFIX = "lbtrain: error: "  # how an lbtrain command's one-line error starts (lbtrain.cli)


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
