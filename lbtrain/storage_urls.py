"""Optuna storage URLs as lbtrain takes them, without Optuna: ``sqlite:///PATH`` (the default,
a file in the results folder), ``journal://PATH`` (an Optuna journal file, for many processes on
one machine or a shared file system) and any SQLAlchemy URL of a database server, such as
``postgresql://user:password@host/db`` (psycopg 3 where psycopg2 is not installed). The sweep
opens them (``lbtrain.studies.storages``) and the reports read them (``lbtrain.reports.tuning``).

A password is a secret: lbtrain writes and prints a URL only through ``describe`` (the password
as ``***``), and gives the processes it starts their storage in the environment variable
``STORAGE_VARIABLE``, never on a command line (which any local user sees in ``ps``). A user may
set that variable too, instead of ``--storage``; ``lbtrain report`` reads it for a folder whose
recorded URL has its password masked."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

JOURNAL = "journal://"
SQLITE = "sqlite:///"
STORAGE_VARIABLE = "LBTRAIN_STORAGE"
MASK = "***"


def describe(url: str) -> str:
    """The URL as messages show it: a password is replaced by ``***``.

    >>> describe("postgresql://lb:secret@db:5432/sweeps")
    'postgresql://lb:***@db:5432/sweeps'
    """
    if url.startswith(JOURNAL):
        return url
    import sqlalchemy

    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # not an SQLAlchemy URL: nothing to hide
        return url


def masked(url: str) -> bool:
    """Whether ``url`` is one ``describe`` masked (its password is ``***``), so cannot open a storage.

    >>> masked(describe("postgresql://lb:secret@db/sweeps")), masked("postgresql://lb:secret@db/sweeps")
    (True, False)
    """
    return describe(url) == url and f":{MASK}@" in url


def environment_storage() -> str | None:
    """The storage URL of ``STORAGE_VARIABLE``, or None when it is unset or empty."""
    return os.environ.get(STORAGE_VARIABLE) or None


def local_path(url: str) -> Path | None:
    """The file a SQLite or journal storage lives in (absolute), or None for a server."""
    if url.startswith(JOURNAL):
        return Path(url.removeprefix(JOURNAL)).resolve()
    if url.startswith(SQLITE):
        return Path(url.removeprefix(SQLITE)).resolve()
    return None


def sqlalchemy_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 when psycopg2, SQLAlchemy's default, is not installed;
    any other URL as it is."""
    if (url.startswith(("postgresql://", "postgres://")) and importlib.util.find_spec("psycopg2") is None
            and importlib.util.find_spec("psycopg") is not None):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url
