"""Optuna storage URLs as lbtrain takes them, without Optuna: ``sqlite:///PATH`` (the default,
a file in the results folder), ``journal://PATH`` (an Optuna journal file, for many processes on
one machine or a shared file system) and any SQLAlchemy URL of a database server, such as
``postgresql://user:password@host/db`` (psycopg 3 where psycopg2 is not installed). The sweep
opens them (``lbtrain.studies.storages``) and the reports read them (``lbtrain.reports.tuning``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

JOURNAL = "journal://"
SQLITE = "sqlite:///"


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
