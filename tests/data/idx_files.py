"""Writes small IDX files (LeCun's MNIST format) for the reader and loader tests."""

import gzip
import struct

import numpy as np


def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` as the bytes of an uncompressed uint8 IDX file."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx_set(directory, num_train=12, num_test=6, seed=0):
    """Four small IDX files as an MNIST-style dataset; returns the arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (num_train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, num_train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (num_test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, num_test),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        (directory / f"{stem}.gz").write_bytes(gzip.compress(idx_bytes(array)))
    return arrays
