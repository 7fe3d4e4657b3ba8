"""The dataset registry and how each dataset is loaded.

Every dataset lbtrain knows sits in one registry, ``DATASETS``; ``load_dataset`` is the
only way in. Real Fashion-MNIST/MNIST are read from IDX files on disk (``$LBTRAIN_DATA_DIR``,
then the Debian package's folder) and only then from Keras's download cache; MNIST-1D is
generated offline (Greydanus 2020) and cached; ``synthetic`` is random data for throughput.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import math
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from lbtrain.config.limits import MAX_SEED, memory_problem, quote
from lbtrain.data.errors import DatasetError
from lbtrain.data.formats import find_idx_directory, idx_search_path, read_idx_directory
from lbtrain.data.sources import check_source_options, is_user_dataset, load_user_data, unseen_classes
from lbtrain.files import write_atomic
from lbtrain.spelling import did_you_mean

__all__ = ["DATASETS", "Dataset", "DatasetInfo", "RawData", "cache_dir", "check_dataset", "dataset_info", "load_dataset"]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Arrays of one dataset, split into train / validation / test.

    Inputs are float32 (images scaled to [0, 1], channel last); labels are int32 in
    ``[0, num_classes)`` for classification, float32 of shape ``[n, num_classes]`` for regression
    (``num_classes`` is then the number of targets). The validation split is empty when none was
    asked for.
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
    task: str = "classification"


class RawData(NamedTuple):
    """What a loader returns: the official train/test split and where it came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    source: str
    task: str = "classification"


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
    check: Callable[..., None] = lambda: None  # the options' values, before anything loads


# ---------------------------------------------------------------- Fashion-MNIST, MNIST


def _load_idx_dataset(folder: str, keras_module: str) -> Callable[[], RawData]:
    def load() -> RawData:
        directory = find_idx_directory(folder)
        if directory is not None:
            arrays = read_idx_directory(directory)
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


# Generated data is sized before it is made: MNIST-1D's generator makes samples one by one in
# Python (about 3,000 a second here: the cap is about a minute of it); the arrays a run holds are
# about COPIES times the generated ones (the loaded arrays, the split, the input pipeline's).
MAX_MNIST1D_SAMPLES = 200_000
COPIES = 3


def _check_seed(dataset: str, generator_seed: Any) -> None:
    if not isinstance(generator_seed, int) or isinstance(generator_seed, bool) or not 0 <= generator_seed <= MAX_SEED:
        raise DatasetError(f"{dataset}: generator_seed must be an integer from 0 to {MAX_SEED}, got {quote(generator_seed)}")


def _check_fits(dataset: str, values: int, bytes_per_value: int) -> None:
    problem = memory_problem(values * bytes_per_value * COPIES, f"{values:.3g} generated values")
    if problem is not None:
        raise DatasetError(f"{dataset}: {problem}; ask for fewer samples")


def _check_mnist1d(num_samples: int = 5000, generator_seed: int = 42) -> None:
    """``DatasetError`` for MNIST-1D options it cannot generate, before anything is made."""
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or not 10 <= num_samples <= MAX_MNIST1D_SAMPLES:
        raise DatasetError(f"mnist1d: num_samples must be an integer from 10 to {MAX_MNIST1D_SAMPLES}, got {quote(num_samples)}")
    _check_seed("mnist1d", generator_seed)
    _check_fits("mnist1d", num_samples * 40, 8)


def _load_mnist1d(num_samples: int = 5000, generator_seed: int = 42) -> RawData:
    """MNIST-1D (Greydanus 2020), generated offline by ``mnist1d.data.make_dataset``.

    The package's default split (80% train) is kept; the arrays are cached as .npz.
    """
    _check_mnist1d(num_samples, generator_seed)
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


def _check_synthetic(
    input_shape: tuple[int, ...] | list[int] = (28, 28, 1),
    num_classes: int = 10,
    train_size: int = 4096,
    test_size: int = 1024,
    generator_seed: int = 0,
) -> None:
    """``DatasetError`` for synthetic options it cannot generate, before anything is made."""
    if (not isinstance(input_shape, (list, tuple)) or not input_shape
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in input_shape)):
        raise DatasetError(f"synthetic: input_shape must be a list of positive integers, got {quote(input_shape)}")
    for option, value, low in (("num_classes", num_classes, 2), ("train_size", train_size, 1), ("test_size", test_size, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise DatasetError(f"synthetic: {option} must be an integer >= {low}, got {quote(value)}")
    _check_seed("synthetic", generator_seed)
    _check_fits("synthetic", (train_size + test_size) * math.prod(input_shape), 4)


def _load_synthetic(
    input_shape: tuple[int, ...] | list[int] = (28, 28, 1),
    num_classes: int = 10,
    train_size: int = 4096,
    test_size: int = 1024,
    generator_seed: int = 0,
) -> RawData:
    """Standard-normal inputs with uniform random labels, like tf_cnn_benchmarks' synthetic data."""
    _check_synthetic(input_shape, num_classes, train_size, test_size, generator_seed)
    shape = tuple(input_shape)
    rng = np.random.default_rng(generator_seed)
    return RawData(
        rng.standard_normal((train_size, *shape), dtype=np.float32),
        rng.integers(0, num_classes, train_size, dtype=np.int32),
        rng.standard_normal((test_size, *shape), dtype=np.float32),
        rng.integers(0, num_classes, test_size, dtype=np.int32),
        num_classes,
        f"random (seed {generator_seed})",
    )


# ---------------------------------------------------------------- registry


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
            4000, 1000, (40,), 10, _load_mnist1d, _locate_mnist1d, _check_mnist1d,
        ),
        DatasetInfo(
            "synthetic", "random normal inputs, random labels; options input_shape, num_classes, train_size, test_size",
            4096, 1024, (28, 28, 1), 10, _load_synthetic, lambda: "generated in memory", _check_synthetic,
        ),
    )
}


def dataset_info(name: str) -> DatasetInfo:
    """The registry entry for ``name``; an unknown name lists the valid ones.

    >>> info = dataset_info("mnist1d")
    >>> info.input_shape, info.train_size, info.test_size
    ((40,), 4000, 1000)
    >>> dataset_info("cifar10")
    Traceback (most recent call last):
      ...
    lbtrain.data.DatasetError: unknown dataset 'cifar10' (allowed: fashion_mnist, mnist, mnist1d, synthetic)
    """
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(f"unknown dataset {name!r} (allowed: {', '.join(DATASETS)})") from None


def check_dataset(name: str, options: dict[str, Any]) -> str:
    """``name`` if it names data lbtrain can load with ``options``: one of ``DATASETS`` or the
    user's (``lbtrain.data.sources``); else a one-line ``DatasetError`` with what is allowed."""
    if name in DATASETS:
        check_dataset_options(name, options)
    elif is_user_dataset(name):
        check_source_options(name, options)
    else:
        raise DatasetError(f"unknown dataset {name!r} ({did_you_mean(name, list(DATASETS))}allowed: {', '.join(DATASETS)}, "
                           "a registered name, a .npz path, package.module:function or tfds:<name>)")
    return name


def dataset_options(name: str) -> tuple[str, ...]:
    """The options dataset ``name`` takes: the arguments of its loader."""
    return tuple(inspect.signature(dataset_info(name).load).parameters)


def check_dataset_options(name: str, options: dict[str, Any]) -> None:
    """Raises ``DatasetError`` for an option dataset ``name`` does not take, naming the closest
    allowed one, or for a value it cannot load (generated data too large for this machine's
    memory, a seed out of range): checked without loading anything.

    >>> check_dataset_options("mnist1d", {"num_sample": 500})
    Traceback (most recent call last):
      ...
    lbtrain.data.DatasetError: unknown option 'num_sample' for dataset 'mnist1d' (did you mean 'num_samples'? allowed: num_samples, generator_seed)
    """
    allowed = dataset_options(name)
    for key in options:
        if key not in allowed:
            listed = ", ".join(allowed) or "none"
            raise DatasetError(f"unknown option {key!r} for dataset {name!r} ({did_you_mean(key, allowed)}allowed: {listed})")
    dataset_info(name).check(**options)


@functools.lru_cache(maxsize=8)
def _load_raw(name: str, options: tuple, task: str, test_split: float, classes: int | None = None) -> RawData:
    if name in DATASETS:
        if task == "regression":
            raise DatasetError(f"dataset {name!r} is a classification dataset; data.task regression needs data of your own")
        raw = dataset_info(name).load(**_thawed(dict(options)))
        if classes is not None and classes != raw.num_classes:
            raise DatasetError(f"dataset {name!r} has {raw.num_classes} classes, but data.num_classes is {classes}: "
                               "leave it unset for lbtrain's datasets")
        return raw
    x_train, y_train, x_test, y_test, num_classes, task, source = load_user_data(name, _thawed(dict(options)), task,
                                                                                 test_split, classes)
    return RawData(x_train, y_train, x_test, y_test, num_classes, source, task)


def _frozen(value: Any) -> Any:
    """A hashable copy of an option value (lists become tuples, mappings sorted tuples)."""
    if isinstance(value, dict):
        return ("__mapping__", tuple(sorted((key, _frozen(item)) for key, item in value.items())))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(item) for item in value)
    return value


def _thawed(options: dict[str, Any]) -> dict[str, Any]:
    def thaw(value: Any) -> Any:
        if isinstance(value, tuple) and value[:1] == ("__mapping__",):
            return {key: thaw(item) for key, item in value[1]}
        return [thaw(item) for item in value] if isinstance(value, tuple) else value

    return {key: thaw(value) for key, value in options.items()}


def load_dataset(
    name: str,
    *,
    train_subset: int | None = None,
    validation_split: float = 0.0,
    seed: int = 0,
    task: str = "auto",
    test_split: float = 0.2,
    classes: int | None = None,
    **options,
) -> Dataset:
    """Loads dataset ``name`` and splits it.

    Args:
      name: a key of ``DATASETS``, or data of the user's (``lbtrain.data.sources``): a ``.npz``
        path, ``package.module:function``, a registered name or ``tfds:<name>``.
      train_subset: keep this many training samples, drawn at random with ``seed``.
      validation_split: fraction in [0, 1) of the (subset) training set held out for
        validation, drawn with ``seed``; the test set is never touched.
      seed: seeds the subset and the split.
      task: ``auto``, ``classification`` or ``regression`` (data of the user's; see
        ``lbtrain.data.sources``).
      test_split: the share of the user's training arrays held out as the test set when the
        source has no test split.
      classes: the number of classes (``data.num_classes``) of the user's classification data;
        None infers it from the training labels, which must then hold every class from 0 to
        their largest, and the validation and test labels no class the (subset's) training
        labels lack (``lbtrain.data.sources.number_of_classes``).
      **options: dataset-specific options (``mnist1d``: num_samples, generator_seed;
        ``synthetic``: input_shape, num_classes, train_size, test_size, generator_seed; a
        loader's keyword arguments).

    Returns:
      A ``Dataset``. Raw arrays are cached per process, so repeated loads are cheap.

    Example:
      >>> dataset = load_dataset("synthetic", input_shape=[8], train_size=100, test_size=10,
      ...                        train_subset=50, validation_split=0.2)
      >>> dataset.x_train.shape, dataset.x_validation.shape, dataset.x_test.shape
      ((40, 8), (10, 8), (10, 8))
    """
    check_dataset(name, options)  # an unknown name or option is a DatasetError before anything loads
    if not 0.0 <= validation_split < 1.0:
        raise DatasetError(f"validation_split must be in [0, 1), got {validation_split!r}")
    frozen = tuple(sorted((key, _frozen(value)) for key, value in options.items()))
    if classes is not None and (isinstance(classes, bool) or not isinstance(classes, int) or classes < 2):
        raise DatasetError(f"data.num_classes must be an integer >= 2, got {classes!r}")
    raw = _load_raw(name, frozen, task, test_split, classes)
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
    if raw.task == "classification" and name not in DATASETS and classes is None:
        seen = np.unique(raw.y_train[train_index])
        for key, labels in (("y_validation", raw.y_train[validation_index]), ("y_test", raw.y_test)):
            unseen_classes(name, seen, key, labels)
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
        task=raw.task,
    )
