"""lbtrain: large-batch training with TensorFlow/Keras and Horovod.

Learning-rate scaling rules, warmup and decay schedules, LARS/LAMB, a Horovod-backed trainer
that also simulates any world size, an experiment runner, Optuna sweeps and reports on the
generalization gap across world sizes.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from lbtrain.data import DATASETS, Dataset, DatasetError, load_dataset, make_input_pipeline, steps_per_epoch
from lbtrain.models import MODELS, ModelError, build_model, set_virtual_batch_size

__version__ = "0.1.0"

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetError",
    "MODELS",
    "ModelError",
    "build_model",
    "load_dataset",
    "make_input_pipeline",
    "set_virtual_batch_size",
    "steps_per_epoch",
]
