"""Datasets and the tf.data input pipeline.

- ``datasets``: the registry ``DATASETS`` and ``load_dataset``, the only way to a dataset's arrays.
- ``sources``: data of the user's (a ``.npz`` file, a loader by reference or registered name,
  TFDS from a local folder), checked and turned into arrays.
- ``formats``: IDX files on disk (Fashion-MNIST, MNIST): reading them and finding their folder.
- ``pipeline``: ``steps_per_epoch`` and ``make_input_pipeline``, which shards one seeded stream
  across ranks so that a simulated world takes exactly the batches of a real one.
- ``errors``: ``DatasetError``, raised by all of them.

Every public name is importable from ``lbtrain.data`` itself.
"""

from lbtrain.data.datasets import (
    DATASETS,
    Dataset,
    DatasetInfo,
    RawData,
    cache_dir,
    check_dataset,
    check_dataset_options,
    dataset_info,
    dataset_options,
    load_dataset,
)
from lbtrain.data.errors import DatasetError
from lbtrain.data.formats import (
    DEBIAN_DATASET_ROOT,
    find_idx_directory,
    idx_search_path,
    read_idx,
    read_idx_directory,
)
from lbtrain.data.pipeline import epoch_order, make_input_pipeline, sample_stream, steps_per_epoch
from lbtrain.data.sources import TASKS

__all__ = [
    "DATASETS",
    "DEBIAN_DATASET_ROOT",
    "Dataset",
    "DatasetError",
    "DatasetInfo",
    "RawData",
    "TASKS",
    "cache_dir",
    "check_dataset",
    "check_dataset_options",
    "dataset_info",
    "dataset_options",
    "epoch_order",
    "find_idx_directory",
    "idx_search_path",
    "load_dataset",
    "make_input_pipeline",
    "sample_stream",
    "read_idx",
    "read_idx_directory",
    "steps_per_epoch",
]
