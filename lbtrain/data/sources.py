"""Data of one's own: a ``.npz`` file, a loader by reference or registered name, TFDS from a
local folder; checked and turned into the arrays every lbtrain dataset is.

``data.dataset`` names, besides lbtrain's datasets (``lbtrain.data.datasets``):

- ``path/to/file.npz``: arrays ``x_train``, ``y_train`` and optionally ``x_test``, ``y_test``
  (a relative path is read from the current folder);
- ``"package.module:load"`` or a name registered with ``@lbtrain.register_dataset`` (or the
  entry-point group ``lbtrain.datasets``): ``load(**data.options)`` returns the same arrays as a
  mapping with those keys, Keras's ``((x_train, y_train), (x_test, y_test))``, or ``tf.data``
  datasets of ``(features, label)`` pairs in their place (one dataset: train only; a pair or a
  mapping ``{"train": ..., "test": ...}``);
- ``tfds:<name>``: a TensorFlow Datasets dataset already prepared in ``data.options.data_dir``
  (default ``~/tensorflow_datasets``), splits ``train_split`` / ``test_split`` (default
  ``train`` / ``test``); lbtrain never downloads it.

What lbtrain guarantees, for every source alike: the data is materialized once into NumPy arrays
(a ``tf.data`` dataset is iterated once to its end, unbatched if its elements are batches; an
infinite one is refused), then sharded, shuffled and batched by ``lbtrain.data.pipeline`` from one
seeded stream, so a simulated world takes exactly the batches of a real one. Checked before
anything trains: equal lengths of features and labels, finite numbers, class labels that are
non-negative integers (one-hot rows become class indices). ``uint8`` features are scaled to
[0, 1] as lbtrain's image datasets are; others are cast to float32 as they are.

The task: ``classification`` (integer labels, or one-hot rows) or ``regression`` (any other
numeric targets, mean squared error); ``data.task: auto`` (the default) decides from the labels,
so integer-valued float labels count as classes: set ``task: regression`` for integer targets.
Without a test split, ``test_split`` (default 0.2) of the training arrays, drawn with a fixed
seed (0) whatever the run's seed, is held out as the test set.
"""

from __future__ import annotations

import logging
import math
import os
import zipfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from lbtrain.config.limits import memory_problem, quote
from lbtrain.data.errors import DatasetError
from lbtrain.references import DATASET_REGISTRY, ReferenceError_, check_options, import_reference, is_reference, process_local

__all__ = ["TASKS", "check_source_options", "is_user_dataset", "load_user_data", "source_process_local"]

logger = logging.getLogger(__name__)

TASKS = ("auto", "classification", "regression")
TFDS_PREFIX = "tfds:"
TFDS_OPTIONS = ("data_dir", "train_split", "test_split")
_SPLITS = ("x_train", "y_train", "x_test", "y_test")


def is_user_dataset(name: str) -> bool:
    """Whether ``name`` names data of the user's (not one of lbtrain's datasets)."""
    return name.endswith(".npz") or name.startswith(TFDS_PREFIX) or is_reference(name) or process_local(name) or (
        DATASET_REGISTRY.get(name) is not None)


def source_process_local(name: str) -> bool:
    """Whether only this process can load dataset ``name`` (a lambda, a closure, ``__main__``)."""
    return process_local(name) or DATASET_REGISTRY.is_local(name)


def _loader(name: str) -> Callable[..., Any]:
    try:
        if is_reference(name) or process_local(name):
            return import_reference(name, "dataset")
        registered = DATASET_REGISTRY.get(name)
    except ReferenceError_ as error:
        raise DatasetError(str(error)) from None
    if registered is None:
        raise DatasetError(f"unknown dataset {name!r}")
    return registered


def check_source_options(name: str, options: dict[str, Any]) -> None:
    """``DatasetError`` for an option the source does not take."""
    if name.endswith(".npz"):
        if options:
            raise DatasetError(f"dataset {name!r}: a .npz file takes no options, got {', '.join(options)}")
    elif name.startswith(TFDS_PREFIX):
        unknown = [key for key in options if key not in TFDS_OPTIONS]
        if unknown:
            raise DatasetError(f"unknown option {unknown[0]!r} for dataset {name!r} (allowed: {', '.join(TFDS_OPTIONS)})")
    else:
        try:
            check_options(_loader(name), 0, options, f"dataset {name!r}")
        except ReferenceError_ as error:
            raise DatasetError(str(error)) from None


# ---------------------------------------------------------------- reading each kind of source


# Deflate shrinks data at most about 1032:1; a member claiming more than this is not a real .npz.
MAX_COMPRESSION_RATIO = 1100
# More classes than any dataset lbtrain trains has; a label beyond it is an id, not a class index.
MAX_CLASSES = 1_000_000


def _check_npz_headers(path: Path, name: str) -> None:
    """``DatasetError`` unless every array of the ``.npz`` at ``path`` holds what its header
    promises: its shape times its item size within the member's size, a member no larger than
    its compressed bytes can hold, and all of them within memory. Read from the headers alone
    (NumPy allocates the promised array before reading a member: a 400-byte file promising
    10^12 values would ask for terabytes)."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise DatasetError(f"dataset {name!r}: not a readable .npz file ({type(error).__name__}: {error})") from None
    total = 0
    with archive:
        for member in archive.infolist():
            if not member.filename.endswith(".npy"):
                continue
            key = member.filename.removesuffix(".npy")
            if member.compress_type != zipfile.ZIP_STORED and member.file_size > MAX_COMPRESSION_RATIO * member.compress_size + 4096:
                raise DatasetError(f"dataset {name!r}: {key} claims {member.file_size} bytes from {member.compress_size} "
                                   "compressed ones; the file is damaged or not a .npz of NumPy's")
            try:
                with archive.open(member) as handle:
                    version = np.lib.format.read_magic(handle)
                    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                    shape, _, dtype = read_header(handle)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
                raise DatasetError(f"dataset {name!r}: {key} is not a readable array ({type(error).__name__}: "
                                   f"{' '.join(str(error).split())[:120]})") from None
            promised = math.prod(shape) * dtype.itemsize
            if promised > member.file_size:
                raise DatasetError(f"dataset {name!r}: {key}'s header promises shape {quote(shape)} of {dtype} "
                                   f"({promised} bytes) but it holds {member.file_size}; the file is damaged")
            total += promised
    problem = memory_problem(2 * total, f"its arrays ({total} bytes, read and converted)")
    if problem is not None:
        raise DatasetError(f"dataset {name!r}: {problem}")


def _read_npz(name: str) -> dict[str, Any]:
    path = Path(name)
    if not path.is_file():
        raise DatasetError(f"dataset {name!r}: no such file (relative paths are read from {os.getcwd()})")
    _check_npz_headers(path, name)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as error:
        raise DatasetError(f"dataset {name!r}: not a readable .npz file ({error})") from None
    missing = [key for key in ("x_train", "y_train") if key not in arrays]
    if missing or ("x_test" in arrays) != ("y_test" in arrays):
        missing = missing or [key for key in ("x_test", "y_test") if key not in arrays]
        raise DatasetError(f"dataset {name!r} has no {missing[0]!r} (it holds: {', '.join(sorted(arrays)) or 'nothing'}; "
                           "needs x_train and y_train, optionally x_test and y_test)")
    return arrays


def _materialize(dataset: Any, name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """A finite ``tf.data`` dataset of ``(features, label)`` pairs as two arrays."""
    import tensorflow as tf

    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise DatasetError(f"dataset {name!r}: its {split} tf.data dataset is infinite (remove .repeat())")
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise DatasetError(f"dataset {name!r}: its {split} tf.data elements must be (features, label) pairs, got {spec}")
    if spec[0].shape.rank and spec[0].shape[0] is None:
        dataset = dataset.unbatch()
    features, labels = [], []
    for x, y in dataset.as_numpy_iterator():
        features.append(x)
        labels.append(y)
    if not features:
        raise DatasetError(f"dataset {name!r}: its {split} tf.data dataset is empty")
    return np.stack(features), np.stack(labels)


def _is_tf_data(value: Any) -> bool:
    return type(value).__module__.startswith("tensorflow") and hasattr(value, "element_spec")


def _arrays_from_loader(name: str, returned: Any) -> dict[str, Any]:
    """What a loader returned, as the arrays of ``_SPLITS`` (see the module doc)."""
    if _is_tf_data(returned):
        returned = {"train": returned}
    elif isinstance(returned, tuple) and len(returned) == 2 and all(_is_tf_data(item) for item in returned):
        returned = {"train": returned[0], "test": returned[1]}
    elif isinstance(returned, tuple) and len(returned) == 2 and all(isinstance(item, tuple) and len(item) == 2 for item in returned):
        (x_train, y_train), (x_test, y_test) = returned
        returned = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    if not isinstance(returned, Mapping):
        raise DatasetError(f"dataset {name!r} returned a {type(returned).__name__}; return a mapping with x_train, y_train "
                           "(and x_test, y_test), ((x_train, y_train), (x_test, y_test)) or tf.data datasets")
    arrays = dict(returned)
    for split in ("train", "test"):
        if split in arrays:
            if not _is_tf_data(arrays[split]):
                raise DatasetError(f"dataset {name!r}: {split!r} must be a tf.data dataset, got {type(arrays[split]).__name__}")
            arrays[f"x_{split}"], arrays[f"y_{split}"] = _materialize(arrays.pop(split), name, split)
    missing = [key for key in ("x_train", "y_train") if arrays.get(key) is None]
    if missing or (arrays.get("x_test") is None) != (arrays.get("y_test") is None):
        missing = missing or [key for key in ("x_test", "y_test") if arrays.get(key) is None]
        raise DatasetError(f"dataset {name!r} returned no {missing[0]!r} (it returned: {', '.join(sorted(arrays))})")
    return {key: arrays[key] for key in _SPLITS if arrays.get(key) is not None}


def _read_tfds(name: str, data_dir: str = "~/tensorflow_datasets", train_split: str = "train",
               test_split: str = "test") -> dict[str, Any]:
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DatasetError(f"dataset {name!r} needs TensorFlow Datasets: pip install tensorflow-datasets") from None
    folder = Path(data_dir).expanduser()
    tfds_name = name[len(TFDS_PREFIX):]
    try:
        train, test = tfds.load(tfds_name, split=[train_split, test_split], data_dir=str(folder), download=False,
                                as_supervised=True, try_gcs=False)
    except Exception as error:  # TFDS raises its own and assertion errors for data it cannot find
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise DatasetError(f"dataset {name!r} is not prepared in {folder} ({type(error).__name__}: {first_line}); "
                           "lbtrain never downloads: prepare it with tfds build or set data.options.data_dir") from None
    arrays = {}
    for split, dataset in (("train", train), ("test", test)):
        arrays[f"x_{split}"], arrays[f"y_{split}"] = _materialize(dataset, name, split)
    return arrays


# ---------------------------------------------------------------- checking the arrays


def _features(name: str, key: str, values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        raise DatasetError(f"dataset {name!r}: {key} must hold numbers, got dtype {array.dtype}")
    if array.ndim < 2:
        array = array.reshape(len(array), 1) if array.ndim == 1 else array
    if array.ndim < 2 or len(array) == 0:
        raise DatasetError(f"dataset {name!r}: {key} must be an array of samples, got shape {array.shape}")
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)
        if bad.any():
            raise DatasetError(f"dataset {name!r}: {key} holds NaN or infinite values in {int(bad.sum())} samples "
                               f"(first: sample {int(np.argmax(bad))})")
    return (array / 255.0).astype(np.float32) if array.dtype == np.uint8 else array.astype(np.float32)


def _task_of(name: str, labels: list[np.ndarray], task: str) -> str:
    every = np.concatenate([y.reshape(len(y), -1) for y in labels])
    if every.dtype.kind not in "biuf":
        raise DatasetError(f"dataset {name!r}: labels must be numbers, got dtype {every.dtype}")
    if every.dtype.kind == "f" and not np.isfinite(every).all():
        raise DatasetError(f"dataset {name!r}: labels hold NaN or infinite values")
    one_hot = every.shape[1] > 1 and np.isin(every, (0, 1)).all() and (every.sum(axis=1) == 1).all()
    integral = every.shape[1] == 1 and (every.dtype.kind in "biu" or bool((every == np.round(every)).all()))
    if task == "auto":
        return "classification" if one_hot or integral else "regression"
    if task == "classification" and not (one_hot or integral):
        raise DatasetError(f"dataset {name!r}: task classification needs integer class labels or one-hot rows, got "
                           f"labels of shape {every.shape[1:]} with fractional values")
    return task


def _class_labels(name: str, key: str, values: np.ndarray) -> np.ndarray:
    labels = values.argmax(axis=1) if values.ndim == 2 and values.shape[1] > 1 else values.reshape(len(values))
    if labels.min() < 0:
        raise DatasetError(f"dataset {name!r}: {key} holds the label {labels.min():g}; class labels are 0 to num_classes - 1")
    if labels.max() >= MAX_CLASSES:
        raise DatasetError(f"dataset {name!r}: {key} holds the label {int(labels.max())}; class labels are 0 to num_classes - 1, "
                           f"at most {MAX_CLASSES} classes (relabel ids with np.unique(y, return_inverse=True))")
    return labels.astype(np.int32)


def _listed(values) -> str:
    values = [int(value) for value in values]
    return ", ".join(map(str, values[:5])) + (f" and {len(values) - 5} more" if len(values) > 5 else "")


def number_of_classes(name: str, y_train: np.ndarray, y_test: np.ndarray, declared: int | None) -> int:
    """The output width of a classifier of ``name``'s labels: ``declared`` (``data.num_classes``)
    when given, every label below it; else the largest training label + 1, where the training
    labels must hold every class below it (a gap, or one stray label 57, would silently widen the
    model) and the test labels no class the training labels lack."""
    if declared is not None:
        for key, labels in (("y_train", y_train), ("y_test", y_test)):
            if labels.max() >= declared:
                raise DatasetError(f"dataset {name!r}: {key} holds the label {int(labels.max())}, but data.num_classes is "
                                   f"{declared} (labels 0 to {declared - 1})")
        return declared
    seen = np.unique(y_train)
    count = int(seen[-1]) + 1
    if len(seen) < count:
        missing = np.setdiff1d(np.arange(count), seen)
        raise DatasetError(f"dataset {name!r}: the training labels skip class {_listed(missing)} of 0 to {count - 1}: "
                           f"set data.num_classes: {count} to keep them, or relabel with np.unique(y, return_inverse=True)")
    unseen_classes(name, seen, "y_test", y_test)
    return count


def unseen_classes(name: str, seen: np.ndarray, key: str, labels: np.ndarray) -> None:
    """Refuses ``labels`` (of split ``key``) holding a class no training label (``seen``) has."""
    unseen = np.setdiff1d(np.unique(labels), seen)
    if len(unseen):
        raise DatasetError(f"dataset {name!r}: {key} holds class {_listed(unseen)}, which no training label has "
                           f"({len(seen)} classes, 0 to {int(seen[-1])}): set data.num_classes to train a wider model, or "
                           "fix the labels")


def load_user_data(name: str, options: dict[str, Any], task: str = "auto", test_split: float = 0.2,
                   num_classes: int | None = None) -> tuple:
    """Reads and checks data source ``name``; returns ``(x_train, y_train, x_test, y_test,
    num_classes, task, source)``, ``num_classes`` being the output width a model needs (classes,
    or regression targets): for classification, ``number_of_classes`` with the declared
    ``num_classes`` (``data.num_classes``) if given."""
    if task not in TASKS:
        raise DatasetError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    check_source_options(name, options)
    if name.endswith(".npz"):
        arrays, source = _read_npz(name), str(Path(name).resolve())
    elif name.startswith(TFDS_PREFIX):
        arrays, source = _read_tfds(name, **options), f"TFDS {name[len(TFDS_PREFIX):]} in {options.get('data_dir', '~/tensorflow_datasets')}"
    else:
        loader = _loader(name)
        try:
            returned = loader(**options)
        except DatasetError:
            raise
        except Exception as error:  # the user's loader raises what it raises
            first_line = (str(error).strip().splitlines() or [""])[0]
            raise DatasetError(f"dataset {name!r} raised {type(error).__name__}: {first_line}") from None
        arrays, source = _arrays_from_loader(name, returned), name
    for split in ("train", "test"):
        x_key, y_key = f"x_{split}", f"y_{split}"
        if x_key in arrays:
            arrays[y_key] = np.asarray(arrays[y_key])
            if len(np.asarray(arrays[x_key])) != len(arrays[y_key]):
                raise DatasetError(f"dataset {name!r}: {x_key} has {len(np.asarray(arrays[x_key]))} samples but "
                                   f"{y_key} has {len(arrays[y_key])}")
            arrays[x_key] = _features(name, x_key, arrays[x_key])
    if "x_test" in arrays and arrays["x_test"].shape[1:] != arrays["x_train"].shape[1:]:
        raise DatasetError(f"dataset {name!r}: x_test samples have shape {arrays['x_test'].shape[1:]} but x_train's "
                           f"have {arrays['x_train'].shape[1:]}")
    if "x_test" not in arrays:
        arrays = _hold_out_test(name, arrays, test_split)
    task = _task_of(name, [arrays["y_train"], arrays["y_test"]], task)
    if task == "classification":
        y_train, y_test = (_class_labels(name, key, arrays[key]) for key in ("y_train", "y_test"))
        if len(np.unique(y_train)) < 2:
            raise DatasetError(f"dataset {name!r}: every training label is {y_train[0]}; classification needs at least two "
                               "classes (for regression targets set data.task: regression)")
        num_classes = number_of_classes(name, y_train, y_test, num_classes)
    else:
        if num_classes is not None:
            raise DatasetError(f"dataset {name!r}: data.num_classes is for classification, and these labels are regression "
                               "targets: leave it unset (or set data.task: classification for integer class labels)")
        y_train, y_test = (arrays[key].reshape(len(arrays[key]), -1).astype(np.float32) for key in ("y_train", "y_test"))
        num_classes = y_train.shape[1]
        if not np.var(y_train, axis=0).max() > 0:
            raise DatasetError(f"dataset {name!r}: the regression targets are constant over the training set")
    return arrays["x_train"], y_train, arrays["x_test"], y_test, num_classes, task, source


def _hold_out_test(name: str, arrays: dict[str, np.ndarray], test_split: float) -> dict[str, np.ndarray]:
    """The last ``test_split`` of a fixed (seed 0) permutation of the training arrays as the test set."""
    count = len(arrays["x_train"])
    held = int(round(test_split * count))
    if not 0 < held < count:
        raise DatasetError(f"dataset {name!r} has no test split and data.test_split {test_split:g} of {count} samples "
                           "leaves no train or no test set")
    order = np.random.default_rng(0).permutation(count)
    train, test = np.sort(order[held:]), np.sort(order[:held])
    logger.debug("%s: no test split; holding out %d of %d training samples as the test set", name, held, count)
    return {"x_train": arrays["x_train"][train], "y_train": arrays["y_train"][train],
            "x_test": arrays["x_train"][test], "y_test": arrays["y_train"][test]}
