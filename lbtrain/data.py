"""Datasets and the tf.data input pipeline.

Every dataset lbtrain knows sits in one registry, ``DATASETS``; ``load_dataset`` is the
only way in. Real Fashion-MNIST/MNIST are read from IDX files on disk (``$LBTRAIN_DATA_DIR``,
then the Debian package's folder) and only then from Keras's download cache; MNIST-1D is
generated offline (Greydanus 2020) and cached; ``synthetic`` is random data for throughput.

The input pipeline shards one seeded stream of indices across ranks so that the union of
the ranks' batches at step k is exactly the global batch k a single process would take
(see ``make_input_pipeline``): this is what makes a simulated world equal a real one.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import io
import os
import zlib
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from lbtrain.files import write_atomic

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


class DatasetError(ValueError):
    """A dataset cannot be loaded: unknown name, bad option, missing or corrupt file."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Arrays of one dataset, split into train / validation / test.

    Inputs are float32 (images scaled to [0, 1], channel last), labels int32 in
    ``[0, num_classes)``. The validation split is empty when none was asked for.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_validation: np.ndarray
    y_validation: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    source: str


class RawData(NamedTuple):
    """What a loader returns: the official train/test split and where it came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """One registry entry: how to load a dataset and where it would come from here."""

    name: str
    description: str
    train_size: int
    test_size: int
    input_shape: tuple[int, ...]
    num_classes: int
    load: Callable[..., RawData]
    locate: Callable[[], str]


# ---------------------------------------------------------------- IDX files


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


def _load_idx_dataset(folder: str, keras_module: str) -> Callable[[], RawData]:
    def load() -> RawData:
        directory = find_idx_directory(folder)
        if directory is not None:
            arrays = {key: read_idx(_idx_path(directory, stem)) for key, stem in _IDX_FILES.items()}
            source = str(directory)
        else:
            arrays, source = _keras_download(keras_module, folder)
        images = {key: (arrays[key].astype(np.float32) / 255.0)[..., np.newaxis] for key in ("x_train", "x_test")}
        return RawData(
            images["x_train"],
            arrays["y_train"].astype(np.int32),
            images["x_test"],
            arrays["y_test"].astype(np.int32),
            10,
            source,
        )

    return load


def _keras_download(keras_module: str, folder: str) -> tuple[dict[str, np.ndarray], str]:
    import tensorflow as tf

    module = getattr(tf.keras.datasets, keras_module)
    searched = ", ".join(str(p) for p in idx_search_path(folder))
    try:
        (x_train, y_train), (x_test, y_test) = module.load_data()
    except Exception as error:  # the download raises whatever the network stack raises
        raise DatasetError(
            f"{keras_module}: no IDX files in [{searched}] and the Keras download failed "
            f"({type(error).__name__}); set LBTRAIN_DATA_DIR or install dataset-fashion-mnist"
        ) from None
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    return arrays, f"keras download cache (~/.keras/datasets/{folder})"


def _locate_idx(folder: str) -> Callable[[], str]:
    def locate() -> str:
        directory = find_idx_directory(folder)
        return str(directory) if directory else "keras download (~/.keras/datasets), needs internet"

    return locate


# ---------------------------------------------------------------- MNIST-1D


def cache_dir() -> Path:
    """lbtrain's cache folder: ``$XDG_CACHE_HOME/lbtrain`` (default ``~/.cache/lbtrain``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lbtrain"


def _mnist1d_cache_file(num_samples: int, generator_seed: int) -> Path:
    return cache_dir() / f"mnist1d-n{num_samples}-seed{generator_seed}.npz"


def _load_mnist1d(num_samples: int = 5000, generator_seed: int = 42) -> RawData:
    """MNIST-1D (Greydanus 2020), generated offline by ``mnist1d.data.make_dataset``.

    The package's default split (80% train) is kept; the arrays are cached as .npz.
    """
    if not isinstance(num_samples, int) or num_samples < 10:
        raise DatasetError(f"mnist1d: num_samples must be an integer >= 10, got {num_samples!r}")
    path = _mnist1d_cache_file(num_samples, generator_seed)
    if not path.is_file():
        _generate_mnist1d(num_samples, generator_seed, path)
    with np.load(path) as arrays:
        return RawData(
            arrays["x"].astype(np.float32),
            arrays["y"].astype(np.int32),
            arrays["x_test"].astype(np.float32),
            arrays["y_test"].astype(np.int32),
            10,
            str(path),
        )


def _generate_mnist1d(num_samples: int, generator_seed: int, path: Path) -> None:
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = num_samples
    args.seed = generator_seed
    # make_dataset reseeds NumPy's global generator; give the caller theirs back.
    state = np.random.get_state()
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(state)
    arrays = io.BytesIO()
    np.savez(arrays, x=data["x"], y=data["y"], x_test=data["x_test"], y_test=data["y_test"])
    write_atomic(path, arrays.getvalue())


def _locate_mnist1d() -> str:
    return f"generated offline by the mnist1d package, cached in {cache_dir()}"


# ---------------------------------------------------------------- synthetic


def _load_synthetic(
    input_shape: tuple[int, ...] | list[int] = (28, 28, 1),
    num_classes: int = 10,
    train_size: int = 4096,
    test_size: int = 1024,
    generator_seed: int = 0,
) -> RawData:
    """Standard-normal inputs with uniform random labels, like tf_cnn_benchmarks' synthetic data."""
    shape = tuple(int(d) for d in input_shape)
    if not shape or min(shape) < 1:
        raise DatasetError(f"synthetic: input_shape must be positive integers, got {input_shape!r}")
    for option, value, low in (("num_classes", num_classes, 2), ("train_size", train_size, 1), ("test_size", test_size, 1)):
        if not isinstance(value, int) or value < low:
            raise DatasetError(f"synthetic: {option} must be an integer >= {low}, got {value!r}")
    rng = np.random.default_rng(generator_seed)
    return RawData(
        rng.standard_normal((train_size, *shape), dtype=np.float32),
        rng.integers(0, num_classes, train_size, dtype=np.int32),
        rng.standard_normal((test_size, *shape), dtype=np.float32),
        rng.integers(0, num_classes, test_size, dtype=np.int32),
        num_classes,
        f"random (seed {generator_seed})",
    )


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            "fashion_mnist", "Zalando's Fashion-MNIST: 28x28 grey images, 10 classes",
            60000, 10000, (28, 28, 1), 10,
            _load_idx_dataset("fashion-mnist", "fashion_mnist"), _locate_idx("fashion-mnist"),
        ),
        DatasetInfo(
            "mnist", "LeCun's MNIST digits: 28x28 grey images, 10 classes",
            60000, 10000, (28, 28, 1), 10,
            _load_idx_dataset("mnist", "mnist"), _locate_idx("mnist"),
        ),
        DatasetInfo(
            "mnist1d", "MNIST-1D (Greydanus 2020): length-40 signals, 10 classes; options num_samples, generator_seed",
            4000, 1000, (40,), 10, _load_mnist1d, _locate_mnist1d,
        ),
        DatasetInfo(
            "synthetic", "random normal inputs, random labels; options input_shape, num_classes, train_size, test_size",
            4096, 1024, (28, 28, 1), 10, _load_synthetic, lambda: "generated in memory",
        ),
    )
}


def dataset_info(name: str) -> DatasetInfo:
    """The registry entry for ``name``; an unknown name lists the valid ones."""
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r} (allowed: {', '.join(DATASETS)})") from None


@functools.lru_cache(maxsize=8)
def _load_raw(name: str, options: tuple) -> RawData:
    return dataset_info(name).load(**dict(options))


def load_dataset(
    name: str,
    *,
    train_subset: int | None = None,
    validation_split: float = 0.0,
    seed: int = 0,
    **options,
) -> Dataset:
    """Loads dataset ``name`` and splits it.

    Args:
      name: a key of ``DATASETS``.
      train_subset: keep this many training samples, drawn at random with ``seed``.
      validation_split: fraction in [0, 1) of the (subset) training set held out for
        validation, drawn with ``seed``; the test set is never touched.
      seed: seeds the subset and the split.
      **options: dataset-specific options (``mnist1d``: num_samples, generator_seed;
        ``synthetic``: input_shape, num_classes, train_size, test_size, generator_seed).

    Returns:
      A ``Dataset``. Raw arrays are cached per process, so repeated loads are cheap.
    """
    info = dataset_info(name)
    if not 0.0 <= validation_split < 1.0:
        raise DatasetError(f"validation_split must be in [0, 1), got {validation_split!r}")
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))
    try:
        raw = _load_raw(name, frozen)
    except TypeError as error:
        raise DatasetError(f"{name}: bad option ({error})") from None
    if train_subset is not None:
        if not isinstance(train_subset, int) or not 0 < train_subset <= len(raw.x_train):
            raise DatasetError(
                f"train_subset must be an integer in [1, {len(raw.x_train)}] for {name}, got {train_subset!r}"
            )
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(raw.x_train))[: train_subset or len(raw.x_train)]
    num_validation = int(round(validation_split * len(order)))
    if validation_split > 0 and not 0 < num_validation < len(order):
        raise DatasetError(f"validation_split {validation_split} leaves an empty train or validation set")
    train_index, validation_index = np.sort(order[num_validation:]), np.sort(order[:num_validation])
    return Dataset(
        name=name,
        x_train=raw.x_train[train_index],
        y_train=raw.y_train[train_index],
        x_validation=raw.x_train[validation_index],
        y_validation=raw.y_train[validation_index],
        x_test=raw.x_test,
        y_test=raw.y_test,
        input_shape=tuple(raw.x_train.shape[1:]),
        num_classes=raw.num_classes,
        source=raw.source,
    )


# ---------------------------------------------------------------- input pipeline


def steps_per_epoch(num_samples: int, per_worker_batch: int, world_size: int) -> int:
    """Optimizer steps in one epoch: ``num_samples // (world_size * per_worker_batch)``.

    The remainder of the epoch's shuffled stream is dropped so that every rank takes the
    same number of steps (a rank with one step more would hang an allreduce). This is the
    one place where epochs become steps.
    """
    global_batch = world_size * per_worker_batch
    steps = num_samples // global_batch
    if steps < 1:
        raise DatasetError(
            f"{num_samples} training samples are fewer than one global batch "
            f"({world_size} workers x {per_worker_batch}); use a larger dataset or smaller batch"
        )
    return steps


def epoch_order(num_samples: int, seed: int, epoch):
    """The shuffled sample order of one epoch: a stateless function of (seed, epoch), so
    every rank, a resumed run and a simulated world all see the same stream."""
    import tensorflow as tf

    seed_pair = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_shuffle(tf.range(num_samples, dtype=tf.int64), seed=seed_pair)


def make_input_pipeline(
    x: np.ndarray,
    y: np.ndarray,
    *,
    per_worker_batch: int,
    rank: int,
    world_size: int,
    seed: int,
    training: bool,
    initial_epoch: int = 0,
):
    """A tf.data pipeline of one rank's batches.

    Training: an endless stream of epochs (pass ``steps_per_epoch`` to ``fit``). Epoch e is
    ``epoch_order(n, seed, e)`` cut to ``steps * world_size * per_worker_batch`` indices;
    rank r takes every ``world_size``-th index starting at r and batches them by
    ``per_worker_batch``. The ranks' step-k batches together are positions
    ``[k*W*b, (k+1)*W*b)`` of the stream, the global batch of one process with batch W*b,
    and rank r's samples are exactly ghost batch r of Keras's ``virtual_batch_size=b``
    batch norm, which reshapes the global batch to ``[b, W, ...]``.

    Evaluation: rank r's shard in order, last batch kept.
    """
    import tensorflow as tf

    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    if per_worker_batch < 1:
        raise ValueError(f"per_worker_batch must be a positive integer, got {per_worker_batch}")
    features, labels = tf.constant(x), tf.constant(y)
    num_samples = len(x)

    def gather(index):
        return tf.gather(features, index), tf.gather(labels, index)

    if training:
        usable = steps_per_epoch(num_samples, per_worker_batch, world_size) * world_size * per_worker_batch
        epochs = tf.data.Dataset.counter(start=initial_epoch)
        indices = epochs.flat_map(
            lambda epoch: tf.data.Dataset.from_tensor_slices(epoch_order(num_samples, seed, epoch)[:usable])
        )
        indices = indices.shard(world_size, rank).batch(per_worker_batch, drop_remainder=True)
    else:
        indices = tf.data.Dataset.range(num_samples).shard(world_size, rank).batch(per_worker_batch)
    return indices.map(gather, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
