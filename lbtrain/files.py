"""Atomic file writes: a reader (or a rerun after a kill) sees the old file or the new one,
never half of one."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence


def write_atomic(path: str | os.PathLike, content: str | bytes) -> Path:
    """Writes ``content`` to a temporary file beside ``path``, flushes it, then renames it over
    ``path`` (``os.replace`` is atomic on POSIX). Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(content, bytes) else "w"
    with tempfile.NamedTemporaryFile(mode, dir=path.parent, prefix=f".{path.name}.", suffix=".partial", delete=False) as handle:
        try:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:
            # A full disk or an interrupt: the old file stays as it was, and no half file is left.
            os.unlink(handle.name)
            raise
    # Temporary files are created 0600; a result file gets the mode any new file would.
    os.chmod(handle.name, 0o666 & ~_umask())
    os.replace(handle.name, path)
    return path


def _umask() -> int:
    """The process's umask (reading it means setting it; it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """``data`` as indented JSON, written atomically (NaN/inf must already be replaced)."""
    return write_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def csv_text(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """``rows`` as CSV text; columns as given, else in the order keys first appear. None is ''.

    >>> print(csv_text([{"epoch": 0, "loss": 2.3}, {"epoch": 1, "accuracy": None, "loss": 1.9}]), end="")
    epoch,loss,accuracy
    0,2.3,
    1,1.9,
    >>> print(csv_text([{"epoch": 0, "loss": 2.3}], columns=["loss", "epoch"]), end="")
    loss,epoch
    2.3,0
    """
    if columns is None:
        columns = []
        for row in rows:
            columns += [key for key in row if key not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: ("" if value is None else value) for key, value in row.items()} for row in rows)
    return buffer.getvalue()
