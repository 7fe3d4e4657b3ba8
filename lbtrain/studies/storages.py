"""Where sweeps keep their Optuna studies, and how processes on many machines share them.

``open_storage(url, ...)`` takes three kinds of URL:

- ``sqlite:///path/optuna.db`` (the default, in the results folder): processes on one machine.
  SQLite's file locks are unreliable on network filesystems (NFS, Lustre).
- ``journal:///abs/path/sweep.log``: Optuna's ``JournalStorage`` on an append-only file with a
  symlink lock (``JournalFileSymlinkLock``: NFSv2 or later, Lustre), for a shared filesystem and
  no database server.
- ``postgresql://user:password@host:port/database`` or any other SQLAlchemy URL: a database
  server. ``postgresql://`` uses psycopg 3 (``pip install 'lbtrain[postgres]'``) unless psycopg2
  is installed; ``postgresql+psycopg://`` names it explicitly (the form ``optuna-dashboard`` needs).

Heartbeats: every running trial records one every ``heartbeat_seconds``; a RUNNING trial whose
last one is older than ``grace_seconds`` belonged to a process that died, and the next worker to
look fails it and queues a retry with the same parameters (at most 3 retries per trial). Optuna's
RDB storages keep heartbeats in a table stamped with the database's clock. Optuna's journal
storage has none, so ``HeartbeatJournalStorage`` adds them as a trial system attribute stamped
with the writing node's clock (keep the nodes' clocks in sync, as NTP does).

Exact budgets: ``claim_trial`` hands a process the next trial only while the study has fewer
finished (complete or pruned) plus running trials than asked for, so any number of processes,
started together or one by one, on one machine or many, finish exactly that many trials.

Damage: a storage that is not one (a file that is not a database, a journal whose last line a
killed process tore) is a one-line ``ConfigError`` when it is opened, naming the file and how to
recover; one that fails later (a disk that filled up, a file damaged meanwhile) is a one-line
``StorageError`` (``storage_failure`` turns Optuna's and SQLAlchemy's errors into one). Nothing
here repairs or deletes a storage: the recovery is the user's.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages import BaseStorage, JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat  # the interface Optuna's fail_stale_trials reads
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.storages.journal._file import get_lock_file  # how Optuna's own appends hold the lock
from optuna.trial import FrozenTrial, TrialState

from lbtrain.results import file_lock
from lbtrain.storage_urls import JOURNAL, SQLITE, describe, local_path, sqlalchemy_url

MAX_RETRIES = 3
# Beside a SQLite database: held while a process takes a trial (``_pop``).
CLAIM_LOCK = ".{database}.claims.lock"
TAKEN = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
# libpq waits for the operating system's TCP timeout (minutes) on a host that does not answer.
POSTGRES_CONNECT_TIMEOUT = 10
# The storages this process opened, in order: an error found mid-way carries no URL.
_OPENED: list[str] = []
# Trials this process claimed and has not finished, by id (``fail_claimed_trials``).
_CLAIMED: dict[int, optuna.Study] = {}


class StorageError(RuntimeError):
    """A storage that failed or was found damaged after it was opened; the message is one line
    naming it and how to recover."""


class _Damaged(Exception):
    """A storage file found damaged while opening it; the message says how to recover."""


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal storage plus heartbeats: each one is the trial's system attribute
    ``lbtrain:heartbeat`` (seconds since the epoch on the writing node), one journal line per
    ``heartbeat_interval`` per running trial; a RUNNING trial whose last heartbeat is older than
    ``grace_period`` is stale. A trial that never recorded one is never stale (as in Optuna's
    RDB storages); ``claim_trial`` records the first before the trial starts running."""

    KEY = "lbtrain:heartbeat"

    def __init__(self, backend: JournalFileBackend, heartbeat_interval: int, grace_period: int,
                 stale_trial_callback: Callable[[optuna.Study, FrozenTrial], None] | None = None) -> None:
        super().__init__(backend)
        self.heartbeat_interval, self.grace_period, self.stale_trial_callback = heartbeat_interval, grace_period, stale_trial_callback

    def record_heartbeat(self, trial_id: int) -> None:
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            self.set_trial_system_attr(trial_id, self.KEY, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        return [trial._trial_id for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
                if self.KEY in trial.system_attrs and now - trial.system_attrs[self.KEY] > self.grace_period]

    def get_heartbeat_interval(self) -> int | None:
        return self.heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> Callable[[optuna.Study, FrozenTrial], None] | None:
        return self.stale_trial_callback


class _CheckedJournalFile(JournalFileBackend):
    """Optuna's journal file, whose damaged lines (found while reading, by any process) are a
    ``StorageError`` naming the file instead of a JSON decoding traceback."""

    def read_logs(self, log_number_from: int):
        try:
            yield from super().read_logs(log_number_from)
        except ValueError as error:  # json.JSONDecodeError, or Optuna's "Invalid log format."
            reason = " ".join(str(error).split())[:80]
            raise StorageError(f"a line of journal file {Path(self._file_path).name} is damaged ({type(error).__name__}: "
                               f"{reason}); {_damaged_hint(self._file_path)}") from None


def _damaged_hint(path: str | Path) -> str:
    # The message names the storage (its path) already: the file once more would pass the CLI's length cap.
    return (f"move it aside (to {Path(path).name}.damaged) and rerun to start its studies over, "
            "or restore it from a backup")


def _torn_tail(path: str, lock: JournalFileSymlinkLock) -> int | None:
    """The size of ``path`` without its torn last line (one a killed or starved writer left
    without its newline), or None when it has none. Read under the journal's lock, so a line
    another process is appending right now is not taken for a torn one."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    with get_lock_file(lock), open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return None
        handle.seek(0)
        return handle.read().rfind(b"\n") + 1


def _make_parents(path: Path) -> list[Path]:
    """Creates the missing folders above ``path``; returns them, deepest last."""
    missing = [folder for folder in reversed(path.parents) if not folder.exists()]
    for folder in missing:
        folder.mkdir()
    return missing


def _open_journal(path: str, heartbeat_seconds: int, grace_seconds: int) -> HeartbeatJournalStorage:
    if not path.startswith("/"):
        raise ValueError(f"a journal needs an absolute path, as in {JOURNAL}/shared/sweeps/name.log")
    lock = JournalFileSymlinkLock(path)
    kept = _torn_tail(path, lock)
    if kept is not None:
        # The next append would join the torn line and the new one into a line no process can read.
        # The command last: a message past the CLI's length cap loses its middle, never its end.
        raise _Damaged(f"its last line is torn (a writer was killed or the disk filled): move it aside or restore a backup to "
                       f"start over, or keep the trials before it (truncate -s {kept} {path}), then rerun")
    return HeartbeatJournalStorage(_CheckedJournalFile(path, lock_obj=lock), heartbeat_seconds,
                                   grace_seconds, RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES))


def _open_rdb(url: str, heartbeat_seconds: int, grace_seconds: int) -> RDBStorage:
    engine_kwargs: dict[str, Any] = {}
    if not url.startswith("sqlite"):
        engine_kwargs["pool_pre_ping"] = True  # a server may have dropped a connection left idle through a long trial
    if url.startswith("postgresql") and "connect_timeout" not in url:
        engine_kwargs["connect_args"] = {"connect_timeout": POSTGRES_CONNECT_TIMEOUT}
    for attempt in range(4):
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=heartbeat_seconds, grace_period=grace_seconds,
                              heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES))
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            # Workers started together on an empty database race to create Optuna's tables.
            if attempt == 3:
                raise
            time.sleep(random.uniform(0.2, 1.0))
    raise AssertionError("unreachable")


def _names_damaged_file(reason: str) -> bool:
    """Whether SQLite's error says the file is no database, or a damaged one."""
    return "not a database" in reason or "malformed" in reason


def _hint(url: str, error: BaseException) -> str:
    path = local_path(url)
    if isinstance(error, (sqlalchemy.exc.DatabaseError, optuna.exceptions.StorageInternalError)) and path is not None \
            and path.is_file() and path.stat().st_size:
        reason = str(getattr(error, "orig", None) or error.__cause__ or error)
        if _names_damaged_file(reason):
            return f"the file is not an Optuna database or is damaged: {_damaged_hint(path)}"
    if isinstance(error, ImportError):
        return ("install the PostgreSQL driver: pip install 'lbtrain[postgres]' (psycopg 3, for postgresql:// "
                "and postgresql+psycopg://)" if url.startswith("postgres") else "install the database driver that URL names")
    if isinstance(error, (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError)):
        return ("give sqlite:///path/optuna.db, journal:///absolute/path/file.log or a database URL such as "
                "postgresql://user:password@host:5432/database")
    if url.startswith(JOURNAL):
        return f"give {JOURNAL}/absolute/path/file.log in a writable folder (an Optuna journal file or a new one)"
    if url.startswith("sqlite"):
        return "give an SQLAlchemy URL such as sqlite:///path/optuna.db in a writable folder"
    return "check that the server is reachable, and the user, password and database"


def _quiet_optuna() -> None:
    """Optuna's own log at warnings only, and its experimental warnings off: heartbeats and the
    matplotlib plots are marked experimental, and lbtrain relies on them. Set when a storage is
    opened (not when lbtrain is imported)."""
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def open_storage(url: str, heartbeat_seconds: int, grace_seconds: int) -> BaseStorage:
    """The Optuna storage behind ``url`` (see the module's docstring), with heartbeats every
    ``heartbeat_seconds`` and stale trials failed after ``grace_seconds`` and retried. A URL it
    cannot open (malformed, no driver, a server it cannot reach or log in to, a file in a folder
    it cannot write) is a one-line ``ConfigError`` naming the storage, and leaves nothing behind:
    no file, no folder."""
    _quiet_optuna()
    created: list[Path] = []
    try:
        path = local_path(url)
        if path is not None:
            created = _make_parents(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if url.startswith(JOURNAL):
                return _opened(url, _open_journal(url.removeprefix(JOURNAL), heartbeat_seconds, grace_seconds))
            return _opened(url, _open_rdb(sqlalchemy_url(url), heartbeat_seconds, grace_seconds))
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.DatabaseError, sqlalchemy.exc.NoSuchModuleError,
            sqlalchemy.exc.InterfaceError, optuna.exceptions.StorageInternalError, ImportError, OSError, ValueError,
            _Damaged, StorageError) as error:
        from lbtrain.config import ConfigError  # here: lbtrain.config loads TensorFlow, this module need not
        from lbtrain.config.limits import quote

        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(error, (StorageError, _Damaged)):
            raise ConfigError(f"storage {quote(describe(url))} cannot be opened: {error}") from None
        if isinstance(error, (ImportError, optuna.exceptions.StorageInternalError)) and error.__cause__ is not None:
            error = error.__cause__  # Optuna's "Failed to import DB access module" hides which one
        reason = _short_reason(getattr(error, "orig", None) or getattr(error, "strerror", None) or error)
        raise ConfigError(f"storage {quote(describe(url))} cannot be opened ({type(error).__name__}: {reason}); {_hint(url, error)}") from None


def _short_reason(error: Any) -> str:
    """A driver's error as an error line quotes it: its first line, from after its last
    ``failed:`` (psycopg's "connection failed: connection to server at ..., port ... failed:
    Connection refused"), at most 120 characters.

    >>> _short_reason('connection failed: connection to server at "db", port 5 failed: Connection refused\\n\\tIs it up?')
    'Connection refused'
    """
    text = (str(error).strip().splitlines() or [""])[0]
    text = " ".join(text.rsplit("failed: ", 1)[-1].split()) or " ".join(str(error).split())
    return text if len(text) <= 120 else text[:117] + "..."


def _opened(url: str, storage: BaseStorage) -> BaseStorage:
    if url not in _OPENED:
        _OPENED.append(url)
    return storage


def storage_failure(error: BaseException) -> str | None:
    """One line for an error a storage this process opened raised after opening it (naming the
    storage and how to recover), or None when ``error`` is no storage's: Optuna's
    ``StorageInternalError`` (which wraps the database's own), SQLAlchemy's ``DatabaseError``
    (a file damaged meanwhile, a disk that filled up) and ``StorageError``."""
    if isinstance(error, StorageError):
        return str(error)
    if not isinstance(error, (optuna.exceptions.StorageInternalError, sqlalchemy.exc.DatabaseError)) or not _OPENED:
        return None
    cause = error.__cause__ if isinstance(error, optuna.exceptions.StorageInternalError) and error.__cause__ else error
    reason = _short_reason(getattr(cause, "orig", None) or cause)
    url = _OPENED[-1]
    path = local_path(url)
    if "full" in reason or "I/O" in reason or "readonly" in reason:
        hint = "free space on its disk (or make it writable) and rerun: the finished trials are kept"
    elif path is not None and _names_damaged_file(reason):
        hint = _damaged_hint(path)
    else:
        hint = "check the storage and rerun: the finished trials are kept"
    return f"storage {describe(url)!r} failed while in use ({type(cause).__name__}: {reason}); {hint}"


def heartbeats(storage: BaseStorage) -> bool:
    return isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval() is not None


def _storage_of(study: optuna.Study) -> BaseStorage:
    # The storage the study writes through (Optuna wraps an RDBStorage in a cache of finished
    # trials); every call below is BaseStorage's public interface.
    return study._storage


def _sqlite_file(storage: BaseStorage) -> Path | None:
    """The database file of a SQLite storage (Optuna caches an RDBStorage in ``_backend``), or
    None for any other storage and for a database in memory (one process's alone)."""
    backend = getattr(storage, "_backend", storage)
    if not isinstance(backend, RDBStorage) or not backend.url.startswith(SQLITE) or backend.url == f"{SQLITE}:memory:":
        return None
    return local_path(backend.url)


def _claim_lock(storage: BaseStorage) -> contextlib.AbstractContextManager:
    """Held around a ``_pop``: SQLite takes no row lock, so two processes can both read a trial
    WAITING and both set it RUNNING (Optuna issue #4002); a ``flock`` on a file beside the
    database (``CLAIM_LOCK``) makes each read-then-write whole. Nothing for other storages,
    whose row lock or journal order decides."""
    database = _sqlite_file(storage)
    if database is None:
        return contextlib.nullcontext()
    return file_lock(database.with_name(CLAIM_LOCK.format(database=database.name)), "the storage's claim lock file")


def _pop(storage: BaseStorage, trial_id: int) -> bool:
    """WAITING -> RUNNING; False when another process took the trial first (the storage
    decides: a row lock in a database server, the order of the journal's lines, ``_claim_lock``
    held around it for SQLite)."""
    try:
        return storage.set_trial_state_values(trial_id, state=TrialState.RUNNING)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False


@contextlib.contextmanager
def _interrupt_after() -> Iterator[None]:
    """Holds back Ctrl-C (SIGINT) until the block is done, then delivers it to the handler that
    was in place, so a write and the record of it happen both or neither. Only in the main
    thread, the one Python runs signal handlers in; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield  # (None: a handler set outside Python, which signal.signal could not put back)
        return
    arrived: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if arrived:
            signal.raise_signal(signal.SIGINT)


def claim_trial(study: optuna.Study, trials: int | None) -> optuna.Trial | None:
    """The next trial this process runs, or None once the study has ``trials`` finished
    (complete or pruned) plus running trials. ``trials`` None: a study whose every trial is
    queued with its parameters (a grid's points: ``lbtrain.studies.protocol``), so the next
    WAITING trial, or None when none waits; nothing is ever queued here.

    Stale trials are failed first (their retries queued). The process takes a WAITING trial
    (a retry, or one it queues itself) the way ``Study.ask`` does, recording its heartbeat
    first so a kill at any instant leaves a trial that goes stale, then counts again: when
    another process's trial took the last slot meanwhile, it puts its trial back (WAITING) and
    looks again after a random pause. Of two processes racing for one slot, the one that took
    its trial later sees the other's and backs off, so finished trials never exceed ``trials``.
    (Two processes that both find the queue empty both queue a trial; the one left over waits,
    without parameters, for the next top-up.) Ctrl-C while the storage takes a trial is held
    until this process has recorded the claim, so ``fail_claimed_trials`` fails that trial."""
    storage = _storage_of(study)
    study_id = storage.get_study_id_from_name(study.study_name)
    beating = heartbeats(storage)
    # Trials this process put back: it never takes them again (a journal remembers the last
    # trial a process took, so racing for one it took before could look like winning).
    put_back: set[int] = set()
    while True:
        if beating:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
        current = study.get_trials(deepcopy=False)
        if trials is not None and sum(trial.state in TAKEN for trial in current) >= trials:
            return None
        waiting = [trial for trial in current if trial.state == TrialState.WAITING and trial.number not in put_back]
        if not waiting and trials is None:
            return None
        if not waiting:
            study.enqueue_trial({})
            continue
        claimed = None
        for candidate in waiting:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, candidate.number)
            if beating:
                storage.record_heartbeat(trial_id)
            # Ctrl-C waits for the claim to be recorded: one arriving after the storage wrote
            # RUNNING but before _CLAIMED held the trial would leave it RUNNING until it went stale.
            # The wait for the claim lock comes first, so Ctrl-C still ends a process waiting there.
            with _claim_lock(storage), _interrupt_after():
                if _pop(storage, trial_id):
                    claimed = trial_id
                    _CLAIMED[claimed] = study  # Ctrl-C from here on fails it (fail_claimed_trials)
            if claimed is not None:
                break
        if claimed is None:
            continue
        if trials is None or len(study.get_trials(deepcopy=False, states=TAKEN)) <= trials:
            return optuna.Trial(study, claimed)
        with _interrupt_after():  # put back and no longer claimed, both or neither
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                storage.set_trial_state_values(claimed, state=TrialState.WAITING)
            _CLAIMED.pop(claimed, None)
        put_back.add(storage.get_trial(claimed).number)
        time.sleep(random.uniform(0.05, 0.5))


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Records the trial's heartbeat every interval while the block runs (nothing when the
    storage has no heartbeats). A failed write (a database that blinked) is retried at the next
    beat rather than ending the beats."""
    storage = _storage_of(study)
    if not heartbeats(storage):
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(storage.get_heartbeat_interval()):
            with contextlib.suppress(Exception):
                storage.record_heartbeat(trial._trial_id)

    thread = threading.Thread(target=beat, name=f"heartbeat-trial-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def _claimed_until_done(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Keeps ``trial`` in ``_CLAIMED`` until it is finished: after the block, or after an
    exception only if the storage holds it finished. A Ctrl-C whose FAIL the storage refused (a
    database locked by another process) or that a second Ctrl-C cut short leaves it claimed, for
    ``fail_claimed_trials`` to fail."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            if _stored(study, trial).state.is_finished():
                _CLAIMED.pop(trial._trial_id, None)
        raise
    _CLAIMED.pop(trial._trial_id, None)


def fail_claimed_trials() -> None:
    """Fails the trials this process claimed and did not finish (Ctrl-C between a claim and its
    run, or in the middle of one), so the rerun tops the study up at once instead of waiting for
    their heartbeats to go stale. Each is tried twice: Ctrl-C in the middle of a query leaves this
    thread's database session in a transaction only a failed call rolls back. Best effort beyond
    that: a storage that still fails is left as it is."""
    for trial_id, study in list(_CLAIMED.items()):
        storage = _storage_of(study)
        for _attempt in range(2):
            try:
                if not storage.get_trial(trial_id).state.is_finished():
                    storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
                break
            except Exception:
                continue
        _CLAIMED.pop(trial_id, None)


def _stored(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial:
    """The trial as the storage holds it now (another process may have finished it)."""
    return _storage_of(study).get_trial(trial._trial_id)


def run_claimed(study: optuna.Study, trial: optuna.Trial, objective: Callable[[optuna.Trial], float]) -> FrozenTrial:
    """Runs ``objective`` on a claimed trial with its heartbeat and tells the study the outcome:
    its value, PRUNED on ``optuna.TrialPruned``, FAIL on any other exception (re-raised). A trial
    another process finished meanwhile (failed it when its heartbeats stopped for longer than the
    grace period, as on a machine too loaded to run the heartbeat thread) keeps that state: the
    objective's own writes to it then fail, which is no error of this process, and its retry
    runs it again."""
    state, value = TrialState.COMPLETE, None
    # Telling a trial another process finished raises one of these (Optuna's tell: ValueError).
    finished_elsewhere = (optuna.exceptions.UpdateFinishedTrialError, ValueError)
    with heartbeat(study, trial), _claimed_until_done(study, trial):
        try:
            value = objective(trial)
        except optuna.TrialPruned:
            state = TrialState.PRUNED
        except optuna.exceptions.UpdateFinishedTrialError:
            return _stored(study, trial)
        except BaseException as error:
            # Interrupted (Ctrl-C), the FAIL is best effort: a storage busy with the other workers'
            # FAILs must not turn the interrupt into a storage error (a trial left RUNNING goes stale).
            quiet = (Exception,) if isinstance(error, KeyboardInterrupt) else finished_elsewhere
            with contextlib.suppress(*quiet):
                if not _stored(study, trial).state.is_finished():
                    study.tell(trial, state=TrialState.FAIL)
            raise
    if _stored(study, trial).state.is_finished():
        return _stored(study, trial)
    try:
        return study.tell(trial, value) if state == TrialState.COMPLETE else study.tell(trial, state=state)
    except finished_elsewhere:
        return _stored(study, trial)


__all__ = ["HeartbeatJournalStorage", "StorageError", "claim_trial", "describe", "fail_claimed_trials", "heartbeat", "local_path",
           "open_storage", "run_claimed", "storage_failure"]
