"""lbtrain: large-batch training with TensorFlow/Keras and Horovod.

Learning-rate scaling rules, warmup and decay schedules, LARS/LAMB, a Horovod-backed trainer
that also simulates any world size, an experiment runner, Optuna sweeps and reports on the
generalization gap across world sizes.

``import lbtrain`` loads no TensorFlow and no matplotlib: public names load on first use, and
lbtrain's schedules, optimizers and layers are registered with Keras as soon as TensorFlow is
imported (``lbtrain._registration``), so saved models load without ``custom_objects``.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from lbtrain._lazy import lazy_exports  # noqa: E402
from lbtrain._registration import register_when_tensorflow_loads  # noqa: E402

_LOCATIONS = {
    **dict.fromkeys(("Advice", "advise"), "lbtrain.advisor"),
    **dict.fromkeys(("critical_batch", "hessian_top_eigenvalue", "pac_bayes_flatness", "sharpness", "steps_to_target",
                     "write_comparison", "write_report"), "lbtrain.analysis"),
    **dict.fromkeys(("matmul_peak_flops", "run_benchmark", "training_flops_per_sample"), "lbtrain.bench"),
    **dict.fromkeys(("BudgetStop", "DivergenceGuard", "GeneralizationGap", "GradientNoiseScale", "LearningRateLogger",
                     "LearningRateWarmup", "Throughput"), "lbtrain.callbacks"),
    **dict.fromkeys(("ConfigError", "ExperimentConfig", "RunConfig", "load_experiment", "load_run_config",
                     "run_config_from_dict"), "lbtrain.config"),
    **dict.fromkeys(("DATASETS", "Dataset", "DatasetError", "load_dataset", "make_input_pipeline", "steps_per_epoch"),
                    "lbtrain.data"),
    **dict.fromkeys(("HorovodWorld", "SimulatedWorld", "World", "current_world"), "lbtrain.distributed"),
    "GhostBatchNormalization": "lbtrain.layers",
    **dict.fromkeys(("MODELS", "ModelError", "build_model", "set_virtual_batch_size"), "lbtrain.models"),
    **dict.fromkeys(("LAMB", "LARS", "OPTIMIZERS", "build_optimizer"), "lbtrain.optimizers"),
    **dict.fromkeys(("PreciseBatchNorm", "recompute_batch_norm_statistics"), "lbtrain.precise_bn"),
    "RunResult": "lbtrain.results",
    **dict.fromkeys(("expand", "run_experiment"), "lbtrain.runner"),
    **dict.fromkeys(("global_batch_size", "scale_learning_rate", "scaling_exponent", "scaling_factor"), "lbtrain.scaling"),
    **dict.fromkeys(("DECAYS", "Constant", "ConstantLearningRate", "ScheduleError", "Warmup", "build_decay",
                     "build_schedule", "epochs_to_steps", "schedule_values", "warmup_lr"), "lbtrain.schedules"),
    **dict.fromkeys(("GradientStepModel", "NoiseScaleSettings", "StaleGradients"), "lbtrain.train_step"),
    **dict.fromkeys(("ParameterServerWorld", "UpdateClock", "launch_parameter_server"), "lbtrain.parameter_server"),
    **dict.fromkeys(("MirroredWorld", "MultiWorkerWorld", "launch_multiworker"), "lbtrain.tf_distribute"),
    "train": "lbtrain.trainer",
    **dict.fromkeys(("Verdict", "judge"), "lbtrain.verdict"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
__version__ = "0.1.0"

register_when_tensorflow_loads()
