"""Shapes: 16x16 grey images of four kinds of bars (horizontal, vertical, two diagonals) at
random positions with noise; ``python -m shapes.data shapes.npz`` writes them as ``.npz`` with
the keys lbtrain reads (``x_train``, ``y_train``, ``x_test``, ``y_test``)."""

import sys

import numpy as np

SIZE = 16


def make(num_samples, seed):
    """``num_samples`` images of shape (16, 16, 1) in [0, 1] and their labels 0..3."""
    rng = np.random.default_rng(seed)
    images = rng.normal(0.0, 0.7, (num_samples, SIZE, SIZE)).astype(np.float32)
    labels = rng.integers(0, 4, num_samples)
    rows, columns = np.indices((SIZE, SIZE))
    for image, label, offset in zip(images, labels, rng.integers(3, SIZE - 3, num_samples)):
        line = [rows == offset, columns == offset, rows == columns + offset - SIZE // 2,
                rows == SIZE - 1 - columns + offset - SIZE // 2][label]
        image[line] += 1.0
    return np.clip(images, 0.0, 1.0)[..., np.newaxis], labels.astype(np.int32)


def load(train_size=2048, test_size=512, seed=0):
    """The dataset as lbtrain's loaders return it: a mapping of arrays."""
    x_train, y_train = make(train_size, seed)
    x_test, y_test = make(test_size, seed + 1)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


if __name__ == "__main__":
    np.savez_compressed(sys.argv[1] if len(sys.argv) > 1 else "shapes.npz", **load())
