"""What a folder holds, to assert that a refused command changed nothing outside its results."""

import hashlib
import os
from pathlib import Path


def snapshot(folder: Path, *, skip: Path | None = None) -> dict[str, tuple[str, str]]:
    """Every entry under ``folder`` (but ``skip``'s subtree): relative path -> (kind, content hash
    or link target). Symbolic links are recorded, not followed."""
    entries: dict[str, tuple[str, str]] = {}
    for parent, folders, files in os.walk(folder):
        if skip is not None and Path(parent).resolve().is_relative_to(skip.resolve()):
            continue
        for name in (*folders, *files):
            path = Path(parent) / name
            relative = str(path.relative_to(folder))
            if path.is_symlink():
                entries[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[relative] = ("folder", "")
            elif path.is_file():
                entries[relative] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                entries[relative] = ("other", "")
    return entries
