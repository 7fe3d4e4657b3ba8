"""The error-line protocol: how a process that lbtrain started reports why it failed.

A child that fails prints one line ``lbtrain: error: ...`` (a user error, exit 2) or dies with
a Python traceback whose last line is ``KindError: ...``; under horovodrun each rank's lines are
prefixed ``[rank]<stderr>:``. The launcher reports a failed child by that one line.
"""

from __future__ import annotations

import re

_RANK_PREFIX = re.compile(r"^\[\d+\]<std(?:err|out)>:")
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)|lbtrain: error): ")


def error_line(output: str) -> str:
    """The last exception or ``lbtrain: error:`` line of a process's output (under horovodrun, the
    last of the ranks' own, without their prefix), else its last non-empty line, else ``no output``.

    >>> error_line("Traceback (most recent call last):\\n  ...\\nValueError: bad value\\nexiting")
    'ValueError: bad value'
    >>> error_line("[1]<stderr>:ValueError: subspace_dim is 0\\nRuntimeError: Horovod detected that one or more processes exited")
    'ValueError: subspace_dim is 0'
    >>> error_line("")
    'no output'
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    rank_lines = [_RANK_PREFIX.sub("", line).strip() for line in lines if _RANK_PREFIX.match(line)]
    # Under horovodrun the launcher's own exception (the job was terminated) follows the rank's.
    exceptions = [line for line in (rank_lines or lines) if _EXCEPTION_LINE.match(line)]
    return (exceptions or lines or ["no output"])[-1]
