"""IDX files (LeCun's MNIST format) on disk: reading them and finding the folder that holds a
dataset's four files (``$LBTRAIN_DATA_DIR``, then the Debian package's folder)."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from lbtrain.data.errors import DatasetError

__all__ = ["DEBIAN_DATASET_ROOT", "find_idx_directory", "idx_search_path", "read_idx", "read_idx_directory"]

DEBIAN_DATASET_ROOT = Path("/usr/share/datasets")

_IDX_DTYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Reads one IDX file (LeCun's MNIST format), gzipped or not.

    Layout: two zero bytes, a type code, the number of dimensions n, n big-endian
    uint32 sizes, then exactly prod(sizes) items. Anything else is a ``DatasetError``
    naming the file and what is wrong.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise DatasetError(f"{path}: corrupt or truncated gzip stream ({error})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DatasetError(f"{path}: not an IDX file (bad magic number {raw[:4].hex() or 'empty'})")
    type_code, ndim = raw[2], raw[3]
    if type_code not in _IDX_DTYPES:
        allowed = ", ".join(f"0x{code:02x}" for code in _IDX_DTYPES)
        raise DatasetError(f"{path}: unknown IDX type code 0x{type_code:02x} (allowed: {allowed})")
    header_size = 4 + 4 * ndim
    if len(raw) < header_size:
        raise DatasetError(f"{path}: truncated header ({len(raw)} bytes, need {header_size})")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[type_code])
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    found = len(raw) - header_size
    if found != expected:
        problem = "truncated" if found < expected else "trailing bytes"
        raise DatasetError(
            f"{path}: {problem}: dims {dims} need {expected} bytes of data, found {found}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header_size).reshape(dims).astype(dtype.newbyteorder("="))


def _idx_path(directory: Path, stem: str) -> Path | None:
    for candidate in (directory / f"{stem}.gz", directory / stem):
        if candidate.is_file():
            return candidate
    return None


def idx_search_path(folder: str) -> list[Path]:
    """Folders searched for a dataset's IDX files, in order: ``$LBTRAIN_DATA_DIR/<folder>``,
    ``$LBTRAIN_DATA_DIR``, then Debian's ``/usr/share/datasets/<folder>``."""
    folders = []
    if os.environ.get("LBTRAIN_DATA_DIR"):
        root = Path(os.environ["LBTRAIN_DATA_DIR"])
        folders += [root / folder, root]
    folders.append(DEBIAN_DATASET_ROOT / folder)
    return folders


def find_idx_directory(folder: str) -> Path | None:
    """The first folder of ``idx_search_path`` that holds all four IDX files, if any."""
    for directory in idx_search_path(folder):
        if all(_idx_path(directory, stem) for stem in _IDX_FILES.values()):
            return directory
    return None


def read_idx_directory(directory: Path) -> dict[str, np.ndarray]:
    """The four IDX files of ``directory`` (a folder ``find_idx_directory`` returned) as raw
    arrays, keyed ``x_train``, ``y_train``, ``x_test``, ``y_test``; each file gzipped or not."""
    arrays = {}
    for key, stem in _IDX_FILES.items():
        path = _idx_path(directory, stem)
        if path is None:
            raise DatasetError(f"{directory}: neither {stem} nor {stem}.gz found")
        arrays[key] = read_idx(path)
    return arrays
