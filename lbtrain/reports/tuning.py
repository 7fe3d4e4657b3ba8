"""The tuning trials of a results folder, read through Optuna's storage API.

A sweep keeps its trials in the storage its experiment names (``sweep.storage``: SQLite, an
Optuna journal file or a database server, as ``lbtrain.studies.storages`` opens them), by default
``optuna.db`` in its results folder. Reports only read them: a SQLite file is opened read-only,
and no storage is created, migrated or stamped with a schema version. Optuna is imported only
when a folder has a storage; storage URLs are read as ``lbtrain.storage_urls`` reads them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from lbtrain.reports.tables import experiment_record
from lbtrain.results import EXPERIMENT_FILE, OPTUNA_DATABASE
from lbtrain.storage_urls import (
    JOURNAL,
    SQLITE,
    STORAGE_VARIABLE,
    describe,
    environment_storage,
    local_path,
    masked,
    sqlalchemy_url,
)

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

logger = logging.getLogger(__name__)

class StorageReadError(Exception):
    """A storage that cannot be opened or read: a server that does not answer, a file that is
    not an Optuna storage, a missing database driver."""


def results_storage(results_dir: Path) -> str | None:
    """The storage URL of ``results_dir``'s tuning trials: its ``experiment.yaml``'s
    ``sweep.storage`` when set, else its own ``optuna.db``; None when there is none (no URL, or
    a SQLite or journal file that does not exist)."""
    experiment_file = results_dir / EXPERIMENT_FILE
    experiment = experiment_record(results_dir)
    url = (experiment.get("sweep") or {}).get("storage") or f"sqlite:///{(results_dir / OPTUNA_DATABASE).resolve()}"
    if masked(url):  # recorded without its password (lbtrain.storage_urls)
        url = environment_storage() or ""
        if not url:
            logger.warning("%s: the sweep storage's password is not recorded; set %s to its URL to include the tuning trials",
                           experiment_file, STORAGE_VARIABLE)
            return None
    path = local_path(url)
    if path is not None and not path.is_file():
        return None
    return url


def _read_only_url(url: str) -> str:
    """A ``sqlite:///`` URL as SQLite's read-only URI (the file is never written, no journal is
    created next to it); ``postgresql://`` with psycopg 3 when psycopg2 is not installed (as
    ``lbtrain sweep`` opens it); any other URL as it is."""
    if url.startswith(SQLITE):
        return f"{SQLITE}file:{quote(str(local_path(url)))}?mode=ro&uri=true"
    return sqlalchemy_url(url)


def read_only_storage(url: str) -> BaseStorage:
    """The Optuna storage behind ``url``, opened to be read: no table is created and the schema
    version is not checked (which could write it). A journal file is read, never appended to."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend

    if url.startswith(JOURNAL):
        return JournalStorage(JournalFileBackend(url.removeprefix(JOURNAL)))
    return RDBStorage(_read_only_url(url), skip_compatibility_check=True, skip_table_creation=True)


def trial_seconds(url: str) -> float:
    """The summed start-to-completion seconds of every finished trial of every study in the
    storage behind ``url`` (trials never started or still running count nothing).

    Raises:
      StorageReadError: the storage cannot be opened or read.
    """
    import optuna
    import sqlalchemy.exc

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = read_only_storage(url)
        seconds = 0.0
        for name in optuna.study.get_all_study_names(storage):
            for trial in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False):
                if trial.datetime_start is not None and trial.datetime_complete is not None:
                    seconds += (trial.datetime_complete - trial.datetime_start).total_seconds()
    except (optuna.exceptions.OptunaError, sqlalchemy.exc.SQLAlchemyError, ImportError, OSError, ValueError) as error:
        cause = error.__cause__ or error  # Optuna's StorageInternalError wraps the database's own
        reason = " ".join(str(getattr(cause, "orig", None) or cause).split())
        raise StorageReadError(f"the tuning trials in {describe(url)!r} cannot be read ({type(cause).__name__}: {reason})") from error
    logger.debug("%.1f s of tuning trials in %s", seconds, describe(url))
    return seconds
