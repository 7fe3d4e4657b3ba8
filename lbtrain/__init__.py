"""lbtrain: large-batch training with TensorFlow/Keras and Horovod.

Learning-rate scaling rules, warmup and decay schedules, LARS/LAMB, a Horovod-backed trainer
that also simulates any world size, an experiment runner, Optuna sweeps and reports on the
generalization gap across world sizes.

``import lbtrain`` loads no TensorFlow and no matplotlib: public names load on first use, and
lbtrain's schedules, optimizers and layers are registered with Keras as soon as TensorFlow is
imported (``lbtrain._registration``), so saved models load without ``custom_objects``.
"""

import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A library's convention: its records go nowhere until the program configures logging
# (``lbtrain.logs.configure`` does it for the command line).
logging.getLogger(__name__).addHandler(logging.NullHandler())

from lbtrain._lazy import lazy_exports  # noqa: E402
from lbtrain._registration import register_when_tensorflow_loads  # noqa: E402

_LOCATIONS = {
    **dict.fromkeys(("Advice", "advise"), "lbtrain.studies.advisor"),
    **dict.fromkeys(("critical_batch", "write_comparison", "write_report"), "lbtrain.reports"),
    **dict.fromkeys(("NoiseScaleSettings", "hessian_top_eigenvalue", "pac_bayes_flatness", "sharpness", "simple_noise_scale",
                     "steps_to_target"), "lbtrain.measures"),
    **dict.fromkeys(("matmul_peak_flops", "run_benchmark", "training_flops_per_sample"), "lbtrain.bench"),
    **dict.fromkeys(("BudgetStop", "DivergenceGuard", "GeneralizationGap", "GradientNoiseScale", "LearningRateLogger",
                     "LearningRateWarmup", "Throughput"), "lbtrain.callbacks"),
    **dict.fromkeys(("ConfigError", "ExperimentConfig", "RunConfig", "load_experiment", "load_run_config",
                     "run_config_from_dict"), "lbtrain.config"),
    **dict.fromkeys(("DATASETS", "Dataset", "DatasetError", "load_dataset", "make_input_pipeline", "steps_per_epoch"),
                    "lbtrain.data"),
    **dict.fromkeys(("HorovodWorld", "MirroredWorld", "MultiWorkerWorld", "ParameterServerWorld", "SimulatedWorld", "UpdateClock",
                     "World"), "lbtrain.worlds"),
    **dict.fromkeys(("MODES", "Mode", "get_mode"), "lbtrain.worlds.modes"),
    **dict.fromkeys(("current_world", "prepare_run"), "lbtrain.worlds.build"),
    **dict.fromkeys(("launch_multiworker", "launch_parameter_server"), "lbtrain.launch.cluster"),
    "GhostBatchNormalization": "lbtrain.layers",
    **dict.fromkeys(("MODELS", "ModelError", "build_model", "set_virtual_batch_size"), "lbtrain.models"),
    **dict.fromkeys(("register_dataset", "register_model"), "lbtrain.references"),
    **dict.fromkeys(("LAMB", "LARS", "OPTIMIZERS", "build_optimizer"), "lbtrain.optimizers"),
    **dict.fromkeys(("PreciseBatchNorm", "recompute_batch_norm_statistics"), "lbtrain.precise_bn"),
    "RunResult": "lbtrain.results",
    "expand": "lbtrain.studies.plan",
    "run_experiment": "lbtrain.studies.runner",
    **dict.fromkeys(("ScaleDesign", "design_study", "run_scale"), "lbtrain.studies.scale"),
    **dict.fromkeys(("global_batch_size", "scale_learning_rate", "scaling_exponent", "scaling_factor"), "lbtrain.scaling"),
    **dict.fromkeys(("DECAYS", "Constant", "ConstantLearningRate", "PerUpdate", "ScheduleError", "Warmup", "build_decay",
                     "build_schedule", "epochs_to_steps", "schedule_values", "warmup_lr"), "lbtrain.schedules"),
    **dict.fromkeys(("GradientStepModel", "StaleGradients"), "lbtrain.train_step"),
    "train": "lbtrain.trainer",
    **dict.fromkeys(("Verdict", "judge"), "lbtrain.verdict"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
__version__ = "0.1.0"

register_when_tensorflow_loads()
