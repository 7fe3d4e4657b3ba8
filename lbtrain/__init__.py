"""lbtrain: large-batch training with TensorFlow/Keras and Horovod.

Learning-rate scaling rules, warmup and decay schedules, LARS/LAMB, a Horovod-backed trainer
that also simulates any world size, an experiment runner, Optuna sweeps and reports on the
generalization gap across world sizes. Importing lbtrain registers its schedules, optimizers
and layers with Keras, so saved models load without ``custom_objects``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from lbtrain.analysis import critical_batch, sharpness, steps_to_target, write_report  # noqa: E402
from lbtrain.callbacks import (  # noqa: E402
    DivergenceGuard,
    GeneralizationGap,
    GradientNoiseScale,
    LearningRateLogger,
    LearningRateWarmup,
    Throughput,
)
from lbtrain.config import (  # noqa: E402
    ConfigError,
    ExperimentConfig,
    RunConfig,
    load_experiment,
    load_run_config,
    run_config_from_dict,
)
from lbtrain.data import DATASETS, Dataset, DatasetError, load_dataset, make_input_pipeline, steps_per_epoch  # noqa: E402
from lbtrain.distributed import HorovodWorld, SimulatedWorld, World, current_world  # noqa: E402
from lbtrain.layers import GhostBatchNormalization  # noqa: E402
from lbtrain.models import MODELS, ModelError, build_model, set_virtual_batch_size  # noqa: E402
from lbtrain.optimizers import LAMB, LARS, OPTIMIZERS, build_optimizer  # noqa: E402
from lbtrain.runner import expand, run_experiment  # noqa: E402
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
from lbtrain.trainer import RunResult, train  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Constant",
    "DATASETS",
    "DECAYS",
    "Dataset",
    "DatasetError",
    "DivergenceGuard",
    "ExperimentConfig",
    "GeneralizationGap",
    "GhostBatchNormalization",
    "GradientNoiseScale",
    "HorovodWorld",
    "LAMB",
    "LARS",
    "LearningRateLogger",
    "LearningRateWarmup",
    "MODELS",
    "ModelError",
    "OPTIMIZERS",
    "RunConfig",
    "RunResult",
    "ScheduleError",
    "SimulatedWorld",
    "Throughput",
    "Warmup",
    "World",
    "build_decay",
    "build_model",
    "build_optimizer",
    "build_schedule",
    "critical_batch",
    "current_world",
    "epochs_to_steps",
    "expand",
    "global_batch_size",
    "load_dataset",
    "load_experiment",
    "load_run_config",
    "make_input_pipeline",
    "run_config_from_dict",
    "run_experiment",
    "scale_learning_rate",
    "schedule_values",
    "scaling_exponent",
    "scaling_factor",
    "set_virtual_batch_size",
    "sharpness",
    "steps_per_epoch",
    "steps_to_target",
    "train",
    "write_report",
]
