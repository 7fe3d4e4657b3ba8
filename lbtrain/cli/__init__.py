"""The ``lbtrain`` command line: one module per command (``lbtrain.cli.run``, ``sweep``, ...),
each with its ``add_parser`` and its ``run``.

Bad input never yields a traceback: a user error prints one line ``lbtrain: error: ...``
and exits with code 2 (argparse's convention for usage errors). Progress, warnings and
diagnostics are log records on stderr (``lbtrain.logs``): ``--quiet`` keeps the warnings only,
``--verbose`` adds the debug records; results go to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Callable, Sequence

from lbtrain.cli import advise, bench, compare, datasets, report, run, scale, sweep, train
from lbtrain.errors import TENSORFLOW_MISSING, WorkersFailed, tensorflow_missing

USAGE_ERROR = 2
# A command ended by Ctrl-C (SIGINT) exits as a shell reports a process SIGINT killed: 128 + 2.
INTERRUPTED = 130
INTERRUPTED_LINE = "lbtrain: interrupted; rerun the same command to resume"
# In the order ``lbtrain --help`` lists them.
COMMANDS = (datasets, run, scale, sweep, report, compare, advise, bench, train)


class _OneLineErrors(argparse.ArgumentParser):
    """Usage errors as one line, ``lbtrain: error: ...``, exit code 2 (argparse prints the usage too)."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"lbtrain: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrors(prog="lbtrain", description="Large-batch training studies with Keras and Horovod.")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const="quiet",
                           help="log warnings only, no progress (results still go to stdout)")
    verbosity.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const="verbose",
                           help="log debug records too")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    for subparser in commands.choices.values():
        subparser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                               help="import MODULE first (repeatable; as an experiment's imports:), so the models and "
                                    "datasets it registers with lbtrain.register_model/register_dataset can be named")
    return parser


def _import_modules(args: argparse.Namespace) -> None:
    """``--import MODULE``: each imported before the command runs (``lbtrain.references.import_modules``)."""
    from lbtrain.config import ConfigError
    from lbtrain.references import ReferenceError_, import_modules

    try:
        import_modules(getattr(args, "imports", []), "--import")
    except ReferenceError_ as error:
        raise ConfigError(str(error)) from None


def user_errors() -> tuple[type[Exception], ...]:
    """Exception types that mean bad input, reported in one line with exit code 2."""
    from lbtrain.bench import BenchError
    from lbtrain.config import ConfigError
    from lbtrain.data import DatasetError
    from lbtrain.models import ModelError
    from lbtrain.reports.report import ReportError
    from lbtrain.results import ResultsError
    from lbtrain.schedules import ScheduleError

    return (BenchError, ConfigError, DatasetError, ModelError, ReportError, ResultsError, ScheduleError)


# An error line is at most 300 characters, ``lbtrain: error: `` included: messages quote at most
# ~120 characters of the input (``lbtrain.config.limits.quote``); this bounds any that does not.
MAX_ERROR_LENGTH = 300 - len("lbtrain: error: ")


def one_line(message: str) -> str:
    """``message`` on one line of at most ``MAX_ERROR_LENGTH`` characters (its middle cut out:
    messages name what is wrong first and say what to do last).

    >>> one_line("two  spaces   and more")
    'two spaces and more'
    >>> len(one_line("x" * 5000)) <= MAX_ERROR_LENGTH
    True
    """
    message = " ".join(message.split())
    if len(message) <= MAX_ERROR_LENGTH:
        return message
    return f"{message[:MAX_ERROR_LENGTH // 2]} ... {message[-(MAX_ERROR_LENGTH // 2 - 5):]}"


def runtime_failure(error: Exception) -> str | None:
    """One line for a failure found while working that is no bug of lbtrain's (a storage damaged
    or full mid-sweep: ``lbtrain.studies.storages.storage_failure``), or None."""
    if "optuna" not in sys.modules:  # no storage was opened
        return None
    from lbtrain.studies.storages import storage_failure

    return storage_failure(error)


def _interrupt_again(previous_hook):
    """An ``sys.unraisablehook``: Python cannot raise a KeyboardInterrupt out of a callback (JAX's
    garbage-collector callback, say) and prints it as ``Exception ignored in ...``, dropping the
    Ctrl-C; this sends SIGINT again a moment later instead, so the interrupt reaches ``main``
    (one line)."""

    def hook(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            # A moment later, once Python is out of the callback (raised here, it would be dropped again).
            again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
            again.daemon = True
            again.start()
            return
        previous_hook(unraisable)

    return hook


class _QuietAfterInterrupt(logging.Filter):
    """Once Ctrl-C has arrived, drops the records of other libraries' loggers: the interrupt
    unwinds through whatever was running, and a library cleaning up after it logs that as an
    error with its traceback (SQLAlchemy's "Error closing cursor" in a sweep worker stopped
    mid-query). ``lbtrain``'s own records pass, and everything passes before the interrupt."""

    def __init__(self):
        from lbtrain.logs import LOGGER_NAME

        super().__init__()
        self.interrupted = False
        self.own = LOGGER_NAME

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.interrupted or record.name == self.own or record.name.startswith(self.own + ".")


@contextlib.contextmanager
def _other_logs_quiet_after_interrupt():
    """While the command runs, SIGINT marks ``_QuietAfterInterrupt`` on the handlers that print
    to the terminal (Python's last-resort handler and the root logger's) before raising
    ``KeyboardInterrupt`` as Python's default handler does; both are restored afterwards. Only
    where SIGINT has Python's default handler and this is the main thread. Yields the filter,
    whose ``interrupted`` says whether Ctrl-C has arrived."""
    quiet = _QuietAfterInterrupt()
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield quiet
        return

    def on_interrupt(signum, frame):
        quiet.interrupted = True
        signal.default_int_handler(signum, frame)

    handlers = [handler for handler in (logging.lastResort, *logging.getLogger().handlers) if handler is not None]
    for handler in handlers:
        handler.addFilter(quiet)
    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield quiet
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for handler in handlers:
            handler.removeFilter(quiet)


def main(argv: Sequence[str] | None = None) -> int:
    from lbtrain.logs import configure

    args = build_parser().parse_args(argv)
    configure(args.verbosity)
    sys.unraisablehook = _interrupt_again(sys.unraisablehook)
    with _other_logs_quiet_after_interrupt() as quiet:
        return _run(args, lambda: quiet.interrupted)


def _run(args: argparse.Namespace, interrupted: Callable[[], bool] = lambda: False) -> int:
    """Runs the command ``args`` names; what any failure prints and the exit code it gives.
    ``interrupted()`` says whether Ctrl-C arrived (``_other_logs_quiet_after_interrupt``): any
    error after it is the interrupt, since native code that calls back into Python may turn the
    ``KeyboardInterrupt`` into an error of its own (Ctrl-C while Keras builds a metric:
    TensorFlow's ``nest.flatten`` raises a bare ``TypeError``)."""
    try:
        try:
            _import_modules(args)
            return args.handler(args)
        except Exception as error:
            if interrupted():
                logging.getLogger("lbtrain").debug("after Ctrl-C, taken as the interrupt: %s", error, exc_info=True)
                raise KeyboardInterrupt from error
            raise
    except KeyboardInterrupt:
        # What was written stays (every file is written atomically; a run resumes from its last
        # checkpoint), so Ctrl-C is a normal way to stop: one line, no traceback. A sweep worker
        # this command started (``--worker``) leaves the line to its parent, which a terminal
        # interrupts too.
        if "optuna" in sys.modules:  # a sweep: its unfinished trials are failed, the rerun tops the studies up
            from lbtrain.studies.storages import fail_claimed_trials

            fail_claimed_trials()
        if getattr(args, "worker", None) is None:
            print(INTERRUPTED_LINE, file=sys.stderr)
        return INTERRUPTED
    except ModuleNotFoundError as error:
        # Before user_errors(), whose modules import TensorFlow.
        if not tensorflow_missing(error):
            raise
        print(f"lbtrain: error: {TENSORFLOW_MISSING}", file=sys.stderr)
        return USAGE_ERROR
    except user_errors() as error:
        print(f"lbtrain: error: {one_line(str(error))}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:
        # The reader went away (`lbtrain run x.yaml --dry-run | head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:
        # A disk that filled up or a folder that became unwritable while working: what was
        # written before stays (every file is written atomically); say which file, no traceback.
        where = f" ({error.filename})" if error.filename else ""
        print(f"lbtrain: error: {one_line(f'{error.strerror or error}{where}')}", file=sys.stderr)
        return 1
    except WorkersFailed as error:
        print(f"lbtrain: error: {one_line(str(error))}", file=sys.stderr)
        return error.exit_code
    except Exception as error:
        failure = runtime_failure(error)
        if failure is None:
            raise
        print(f"lbtrain: error: {one_line(failure)}", file=sys.stderr)
        return 1
