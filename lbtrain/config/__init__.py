"""The config of lbtrain: the schema of a run (``run``) and of an experiment (``experiment``),
reading YAML with ``extends`` and ``--set`` overrides (``loading``), and one-line errors
(``errors``). Importing it loads no TensorFlow; validating a run checks its optimizer, schedule,
model and dataset against the library (which loads TensorFlow on first use)."""

from lbtrain.config.errors import ConfigError, format_validation_error
from lbtrain.config.experiment import (
    GRID_SHORTHANDS,
    HOROVOD_COMPRESSION_VARIABLE,
    HOROVOD_IDLE_THREADS_VARIABLE,
    HOROVOD_PIN_CORES_VARIABLE,
    MIN_PROTOCOL_SEEDS,
    RUN_SECTION_SCHEMAS,
    RUN_SECTIONS,
    ExperimentConfig,
    HorovodLaunchConfig,
    MultiWorkerLaunchConfig,
    ParameterServerLaunchConfig,
    ProtocolConfig,
    SearchParam,
    SweepConfig,
    TrainLongerConfig,
    check_search_paths,
    known_field_path,
)
from lbtrain.config.loading import (
    apply_overrides,
    deep_merge,
    load_experiment,
    load_run_config,
    nested,
    parse_yaml,
    read_yaml_mapping,
    with_overrides,
)
from lbtrain.config.run import (
    BUDGET_KINDS,
    DEFAULT_EPOCHS,
    JUDGING_FIELDS,
    LATER_FIELD_DEFAULTS,
    AnalysisConfig,
    DataConfig,
    ElasticConfig,
    LRConfig,
    ModelConfig,
    OptimizerConfig,
    RunConfig,
    StopAtConfig,
    TrainingConfig,
    describe_budget,
    parse_hosts,
    run_config_from_dict,
)

__all__ = [
    "AnalysisConfig", "BUDGET_KINDS", "ConfigError", "DEFAULT_EPOCHS", "DataConfig", "ElasticConfig", "ExperimentConfig", "GRID_SHORTHANDS",
    "HOROVOD_COMPRESSION_VARIABLE", "HOROVOD_IDLE_THREADS_VARIABLE", "HOROVOD_PIN_CORES_VARIABLE", "MIN_PROTOCOL_SEEDS",
    "HorovodLaunchConfig", "JUDGING_FIELDS", "LATER_FIELD_DEFAULTS", "LRConfig", "ModelConfig", "MultiWorkerLaunchConfig", "OptimizerConfig",
    "ParameterServerLaunchConfig", "ProtocolConfig", "RUN_SECTIONS", "RUN_SECTION_SCHEMAS", "RunConfig", "SearchParam",
    "StopAtConfig", "SweepConfig", "TrainLongerConfig", "TrainingConfig", "apply_overrides", "check_search_paths", "deep_merge",
    "describe_budget", "format_validation_error", "known_field_path", "load_experiment", "load_run_config", "nested",
    "parse_hosts", "parse_yaml", "read_yaml_mapping", "run_config_from_dict", "with_overrides",
]
