"""lbtrain: large-batch training with TensorFlow/Keras and Horovod.

Learning-rate scaling rules, warmup and decay schedules, LARS/LAMB, a Horovod-backed trainer
that also simulates any world size, an experiment runner, Optuna sweeps and reports on the
generalization gap across world sizes. Importing lbtrain registers its schedules and
optimizers with Keras, so saved models load without ``custom_objects``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from lbtrain.callbacks import LearningRateLogger, LearningRateWarmup  # noqa: E402
from lbtrain.data import DATASETS, Dataset, DatasetError, load_dataset, make_input_pipeline, steps_per_epoch  # noqa: E402
from lbtrain.models import MODELS, ModelError, build_model, set_virtual_batch_size  # noqa: E402
from lbtrain.optimizers import LAMB, LARS  # noqa: E402
from lbtrain.scaling import global_batch_size, scale_learning_rate, scaling_exponent, scaling_factor  # noqa: E402
from lbtrain.schedules import (  # noqa: E402
    DECAYS,
    Constant,
    ScheduleError,
    Warmup,
    build_decay,
    build_schedule,
    epochs_to_steps,
    schedule_values,
)

__version__ = "0.1.0"

__all__ = [
    "Constant",
    "DATASETS",
    "DECAYS",
    "Dataset",
    "DatasetError",
    "LAMB",
    "LARS",
    "LearningRateLogger",
    "LearningRateWarmup",
    "MODELS",
    "ModelError",
    "ScheduleError",
    "Warmup",
    "build_decay",
    "build_model",
    "build_schedule",
    "epochs_to_steps",
    "global_batch_size",
    "load_dataset",
    "make_input_pipeline",
    "scale_learning_rate",
    "schedule_values",
    "scaling_exponent",
    "scaling_factor",
    "set_virtual_batch_size",
    "steps_per_epoch",
]
