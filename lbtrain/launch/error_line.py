"""The error-line protocol: how a process that lbtrain started reports why it failed.

A child that fails prints one line ``lbtrain: error: ...`` (a user error, exit 2) or dies with
a Python traceback whose last line is ``KindError: ...``; under horovodrun each rank's lines are
prefixed ``[rank]<stderr>:``, and horovodrun names the rank that failed first. The launcher
reports a failed child by that one line (under horovodrun: that rank, how it ended, and its line).
"""

from __future__ import annotations

import re
import signal

_RANK_PREFIX = re.compile(r"^\[(\d+)\]<std(?:err|out)>:")
# How horovodrun names the rank that failed first: its Gloo launcher's error, or mpirun's notice.
_FIRST_FAILED_RANK = (
    re.compile(r"The first process to do so was:\s*Process name: (?P<rank>\d+)\s*Exit code: (?P<code>-?\d+)"),
    re.compile(r"process rank (?P<rank>\d+) with PID \d+ on node \S+ exited on signal (?P<signal>\d+)"),
    re.compile(r"^Process (?P<rank>\d+) exit with status code (?P<code>-?\d+)\.", re.MULTILINE),
)
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)|lbtrain: error): ")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def ended_by(returncode: int) -> str:
    """How a process ended, from its return code (``-signal`` when a signal killed it).

    >>> ended_by(-9), ended_by(3)
    ('was killed by SIGKILL', 'exited with code 3')
    """
    return f"was killed by {_signal_name(-returncode)}" if returncode < 0 else f"exited with code {returncode}"


def failed_rank(output: str) -> tuple[int, str] | None:
    """The rank horovodrun (or mpirun) reports failed first, and how it ended (``exited with code
    137 (SIGKILL)``), or None when the output names none.

    >>> failed_rank("Process 1 exit with status code 137.\\nThe first process to do so was:\\nProcess name: 1\\nExit code: 137")
    (1, 'exited with code 137 (SIGKILL)')
    """
    for pattern in _FIRST_FAILED_RANK:
        found = pattern.search(output)
        if found is None:
            continue
        if "signal" in pattern.groupindex:
            return int(found["rank"]), f"was killed by {_signal_name(int(found['signal']))}"
        code = int(found["code"])
        killed = f" ({_signal_name(code - 128)})" if code > 128 else f" ({_signal_name(-code)})" if code < 0 else ""
        return int(found["rank"]), f"exited with code {code}{killed}"
    return None


def error_line(output: str) -> str:
    """The last exception or ``lbtrain: error:`` line of a process's output (under horovodrun, the
    last of the ranks' own, without their prefix), else its last non-empty line, else ``no output``.

    >>> error_line("Traceback (most recent call last):\\n  ...\\nValueError: bad value\\nexiting")
    'ValueError: bad value'
    >>> error_line("[1]<stderr>:ValueError: subspace_dim is 0\\nRuntimeError: Horovod detected that one or more processes exited")
    'ValueError: subspace_dim is 0'
    >>> error_line("")
    'no output'

    When horovodrun names the rank that failed first (``failed_rank``), the line names it and
    shows that rank's own last line (a rank killed by a signal raises nothing):

    >>> error_line("[1]<stderr>:Killed\\n[0]<stderr>:Terminated\\nThe first process to do so was:\\nProcess name: 1\\nExit code: 137")
    'rank 1 exited with code 137 (SIGKILL): Killed'
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    first = failed_rank(output)
    prefixed = [(_RANK_PREFIX.match(line), line) for line in lines]
    rank_lines = [line[found.end():].strip() for found, line in prefixed
                  if found and (first is None or int(found[1]) == first[0]) and line[found.end():].strip()]
    if first is not None:
        own = [line for line in rank_lines if _EXCEPTION_LINE.match(line)] or rank_lines
        return f"rank {first[0]} {first[1]}" + (f": {own[-1]}" if own else "")
    # Under horovodrun the launcher's own exception (the job was terminated) follows the rank's.
    exceptions = [line for line in (rank_lines or lines) if _EXCEPTION_LINE.match(line)]
    return (exceptions or lines or ["no output"])[-1]
