"""lbtrain's log: progress, warnings and diagnostics as records of the ``lbtrain`` logger tree.

Every module logs to ``logging.getLogger(__name__)``; the library installs no handler but a
``NullHandler`` on ``lbtrain`` (so a program that imports lbtrain decides where its records go,
the ``logging`` convention for libraries). Results a command was asked for (tables, reports,
the ``wrote ...`` lines) are not records: they go to stdout.

The command line calls ``configure`` once: one handler on stderr, one line per record::

    lbtrain: [1/4] none w1 x 16 seed 0: ok, test acc 0.7812, gap 0.012 (9s, ...)
    lbtrain: warning: results/a/runs/x/metrics.json is damaged (...)
    lbtrain[rank 1]: warning: ...        (one process of several: horovodrun, mpirun, TF_CONFIG)

``RankFilter`` gives every record the process's place in its job (``record.rank``), for this
handler and for any a user installs. Only rank 0 logs progress (the code asks ``World.is_root``);
every rank logs its warnings.

This module imports no TensorFlow.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from lbtrain.worlds.modes import LAUNCHER_VARIABLES

LOGGER_NAME = "lbtrain"
# The command line's --quiet, (default), --verbose.
VERBOSITY_LEVELS = {"quiet": logging.WARNING, "normal": logging.INFO, "verbose": logging.DEBUG}
# The verbosity of a process that gives none: the processes lbtrain starts (an isolated run's
# child, sweep workers) find their parent's here (``child_environment``).
VERBOSITY_VARIABLE = "LBTRAIN_VERBOSITY"


def process_rank() -> str:
    """This process's place in a job of several, as a log line shows it: ``rank 1`` under
    horovodrun/mpirun (``lbtrain.worlds.modes.LAUNCHER_VARIABLES``), ``worker 1`` (the task type and
    index of ``$TF_CONFIG``) in a tf.distribute job; ``""`` in a process of its own."""
    for name in LAUNCHER_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return f"rank {value}"
    try:
        task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    except (ValueError, AttributeError):  # not JSON, or not an object: no task to name
        return ""
    if isinstance(task, dict) and task.get("type") is not None:
        return f"{task['type']} {task.get('index', 0)}"
    return ""


class RankFilter(logging.Filter):
    """Sets ``record.rank`` (``process_rank()``) on every record it sees; never drops one.
    Add it to a handler: a logger's own filters do not see the records of its children."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = process_rank()
        return True


class LineFormatter(logging.Formatter):
    """``lbtrain: MESSAGE`` for INFO, ``lbtrain: warning: MESSAGE`` (``debug:``, ``error:``)
    for the other levels; ``lbtrain[rank 1]: ...`` when the record has a rank (``RankFilter``)."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        rank = getattr(record, "rank", "")
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"{LOGGER_NAME}[{rank}]: {level}{message}" if rank else f"{LOGGER_NAME}: {level}{message}"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (a test's capture, a redirect)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure(verbosity: str | None = None) -> logging.Handler:
    """Logs the ``lbtrain`` tree to stderr, one ``LineFormatter`` line per record with its rank,
    at INFO (``"normal"``), WARNING (``"quiet"``) or DEBUG (``"verbose"``); None takes
    ``$LBTRAIN_VERBOSITY`` (set by the lbtrain process that started this one, or the user),
    else ``"normal"``. Calling it again replaces the handler it installed. Returns the handler."""
    if verbosity is None:
        verbosity = os.environ.get(VERBOSITY_VARIABLE, "normal")
        verbosity = verbosity if verbosity in VERBOSITY_LEVELS else "normal"
    if verbosity not in VERBOSITY_LEVELS:
        raise ValueError(f"verbosity must be one of {', '.join(VERBOSITY_LEVELS)}, got {verbosity!r}")
    logger = logging.getLogger(LOGGER_NAME)
    for old in [handler for handler in logger.handlers if isinstance(handler, _StderrHandler)]:
        logger.removeHandler(old)
    handler = _StderrHandler()
    handler.addFilter(RankFilter())
    handler.setFormatter(LineFormatter())
    logger.addHandler(handler)
    logger.setLevel(VERBOSITY_LEVELS[verbosity])
    return handler


def current_verbosity() -> str:
    """The verbosity the ``lbtrain`` logger has now (from its effective level): ``"quiet"``
    where it takes no INFO records, as in a program that never configured logging."""
    level = logging.getLogger(LOGGER_NAME).getEffectiveLevel()
    return "verbose" if level <= logging.DEBUG else "normal" if level <= logging.INFO else "quiet"


def child_environment() -> dict[str, str]:
    """This process's environment with its verbosity (``current_verbosity``), for a child
    process that calls ``configure()`` to log as this one does."""
    return {**os.environ, VERBOSITY_VARIABLE: current_verbosity()}
