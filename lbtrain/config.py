"""The schema of one training run (pydantic v2), and its one-line error messages.

A ``RunConfig`` is everything ``trainer.train`` needs: data, model, optimizer, learning-rate
recipe and training settings. Unknown keys are errors (a typo is never silently ignored),
values are checked strictly (no "2" for 2), and cross-field checks (the LR recipe against the
number of epochs, optimizer parameters against the optimizer) run when the config is built,
before any training starts.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from lbtrain.schedules import DECAY_CLOCKS, SCHEDULE_KEYS, WARMUP_TYPES


class ConfigError(ValueError):
    """A config that cannot be used; the message is one line naming the field path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class DataConfig(_Strict):
    """Which dataset and which part of it (see ``lbtrain.data.load_dataset``)."""

    dataset: str = "fashion_mnist"
    train_subset: int | None = Field(default=None, gt=0)
    validation_split: float = Field(default=0.0, ge=0.0, lt=1.0)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, name: str) -> str:
        from lbtrain.data import dataset_info

        return dataset_info(name).name

    @field_validator("options")
    @classmethod
    def _known_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from lbtrain.data import check_dataset_options

        if "dataset" in info.data:
            check_dataset_options(info.data["dataset"], options)
        return options


class ModelConfig(_Strict):
    """A model of the zoo and its options (see ``lbtrain.models.build_model``)."""

    name: str = "mlp"
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known_model(cls, name: str) -> str:
        from lbtrain.models import model_info

        return model_info(name).name

    @field_validator("options")
    @classmethod
    def _options_build(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from lbtrain.models import check_model_options

        if "name" in info.data:
            check_model_options(info.data["name"], options)
        return options


class OptimizerConfig(_Strict):
    """An optimizer of ``lbtrain.optimizers.OPTIMIZERS`` (the registry is the list of names)
    and its keyword parameters."""

    name: str = "momentum"
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        from lbtrain.optimizers import OPTIMIZERS

        if name not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {name!r} (allowed: {', '.join(OPTIMIZERS)})")
        return name

    @field_validator("params")
    @classmethod
    def _parameters_build(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from lbtrain.optimizers import build_optimizer

        if "name" in info.data:
            build_optimizer(info.data["name"], 0.1, **params)
        return params


class LRConfig(_Strict):
    """The learning-rate recipe (see ``lbtrain.schedules.build_schedule``; the defaults of the
    schedule keys are the schedule registry's ``SCHEDULE_KEYS``). ``decay_clock``:
    ``from_step_0`` (Goyal et al. 2017: after warmup the LR is what the schedule without warmup
    gives at that step) or ``after_warmup`` (the decay starts counting when warmup ends)."""

    base_lr: float = Field(default=0.1, gt=0)
    base_batch: int = Field(default=128, gt=0)
    rule: str | float = SCHEDULE_KEYS["rule"]
    warmup_epochs: float = Field(default=SCHEDULE_KEYS["warmup_epochs"], ge=0)
    warmup_start: float | None = Field(default=SCHEDULE_KEYS["warmup_start"], ge=0)
    warmup_type: Literal[WARMUP_TYPES] = SCHEDULE_KEYS["warmup_type"]
    decay: dict[str, Any] | None = SCHEDULE_KEYS["decay"]
    decay_clock: Literal[DECAY_CLOCKS] = SCHEDULE_KEYS["decay_clock"]

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, rule: str | float) -> str | float:
        from lbtrain.scaling import scaling_exponent

        scaling_exponent(rule)
        return rule

    def schedule_spec(self) -> dict[str, Any]:
        """The mapping ``build_schedule`` takes."""
        return {
            "rule": self.rule,
            "warmup_epochs": self.warmup_epochs,
            "warmup_start": self.warmup_start,
            "warmup_type": self.warmup_type,
            "decay": self.decay,
            "decay_clock": self.decay_clock,
        }


class StopAtConfig(_Strict):
    """Stop when the epoch's training loss is at most ``train_loss``, or its training accuracy
    at least ``train_accuracy`` (one of the two; Keskar et al. 2017 compare batches at equal
    training loss). The run's budget is then the cap."""

    train_loss: float | None = Field(default=None, gt=0)
    train_accuracy: float | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="after")
    def _one_target(self) -> "StopAtConfig":
        if (self.train_loss is None) == (self.train_accuracy is None):
            raise ValueError("give one target: train_loss (stop when the loss is at most it) or train_accuracy (at least it)")
        return self

    @property
    def metric(self) -> str:
        """The training metric compared, as Keras logs it (``loss`` or ``accuracy``)."""
        return "loss" if self.train_loss is not None else "accuracy"

    @property
    def target(self) -> float:
        return self.train_loss if self.train_loss is not None else self.train_accuracy

    def reached(self, value: float) -> bool:
        """Whether an epoch's ``metric`` value meets the target."""
        return value <= self.target if self.metric == "loss" else value >= self.target

    def describe(self) -> str:
        return f"train {self.metric} {'<=' if self.metric == 'loss' else '>='} {self.target:g}"


BUDGET_KINDS = ("epochs", "steps", "samples")
DEFAULT_EPOCHS = 3


class TrainingConfig(_Strict):
    """How one run trains. ``world_size`` workers each take ``per_worker_batch`` samples a step.

    The budget is one of ``epochs`` (default 3), ``steps`` (the same number of updates at every
    batch size: Hoffer et al. 2017's regime adaptation) or ``samples`` (``samples //
    global_batch`` steps); the decay length follows it. ``stop_at`` ends a run early at a
    training target, the budget capping it. The verdict (``lbtrain.verdict``): a step loss above
    ``divergence_factor`` x the step-0 loss is divergence; a final train accuracy within
    ``collapse_margin`` of chance is a collapse.

    ``accumulation_steps: k`` makes every worker take k batches per update (gradient
    accumulation, Goyal et al. 2017 sec. 2), so one update averages the gradient over the
    global batch ``world_size * per_worker_batch * k``; LR scaling, warmup, decay, steps per
    epoch and the recorded global batch all count that batch and its updates. ``staleness: tau``
    (``mode: simulated`` only) applies each update's gradient tau updates late, as asynchronous
    SGD with a constant delay (Lian et al. 2015; ``lbtrain.train_step.StaleGradients``).
    ``precise_bn_samples: n`` sets every batch-norm layer's moving statistics from the first n
    training samples with the current weights before each evaluation (``lbtrain.precise_bn``,
    Wu & Johnson 2021): runs with few steps otherwise evaluate with moving averages that have
    not caught up with their weights.
    """

    world_size: int = Field(default=1, gt=0)
    per_worker_batch: int = Field(default=128, gt=0)
    epochs: int | None = Field(default=None, gt=0)
    steps: int | None = Field(default=None, gt=0)
    samples: int | None = Field(default=None, gt=0)
    stop_at: StopAtConfig | None = None
    seed: int = 0
    micro_batches: int = Field(default=1, gt=0)
    accumulation_steps: int = Field(default=1, gt=0)
    staleness: int = Field(default=0, ge=0)
    eval_batch: int = Field(default=1024, gt=0)
    precise_bn_samples: int | None = Field(default=None, gt=0)
    divergence_factor: float = Field(default=10.0, gt=1.0)
    collapse_margin: float = Field(default=0.05, ge=0, lt=1)
    checkpoint: bool = True
    tensorboard: bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_budget(cls, data: Any) -> Any:
        if isinstance(data, dict) and all(data.get(kind) is None for kind in BUDGET_KINDS):
            data = {**data, "epochs": DEFAULT_EPOCHS}
        return data

    @model_validator(mode="after")
    def _one_budget(self) -> "TrainingConfig":
        given = [f"{kind}={getattr(self, kind)}" for kind in BUDGET_KINDS if getattr(self, kind) is not None]
        if len(given) > 1:
            raise ValueError(f"give one budget, epochs, steps or samples, not {' and '.join(given)} (set the others to null)")
        return self

    @property
    def update_batch(self) -> int:
        """``per_worker_batch * accumulation_steps``: the samples one worker contributes to one update."""
        return self.per_worker_batch * self.accumulation_steps

    @property
    def world_text(self) -> str:
        """``world W x b``, with `` x k accumulated`` when it accumulates, for progress lines."""
        accumulated = f" x {self.accumulation_steps} accumulated" if self.accumulation_steps > 1 else ""
        return f"world {self.world_size} x {self.per_worker_batch}{accumulated}"

    @property
    def budget(self) -> dict[str, Any]:
        """``{kind: amount}``, plus ``stop_at`` when the run stops at a target."""
        kind = next(kind for kind in BUDGET_KINDS if getattr(self, kind) is not None)
        budget: dict[str, Any] = {kind: getattr(self, kind)}
        if self.stop_at is not None:
            budget["stop_at"] = self.stop_at.model_dump(exclude_none=True)
        return budget


class AnalysisConfig(_Strict):
    """Measurements a run takes besides its metrics (see ``lbtrain.analysis``).

    ``sharpness``: Keskar et al. 2017's sharpness of the final weights on the training set
    (or its first ``sharpness_samples`` samples), box ``sharpness_epsilon``, full space or a
    random subspace of ``sharpness_subspace`` dimensions. ``noise_scale``: McCandlish et al.
    2018's gradient noise scale B_simple, measured inside every train step from
    ``noise_scale_pieces`` pieces of the global batch (``lbtrain.train_step``; default 2, or the
    micro-batches), averaged with ``noise_scale_decay`` per step. A simulated single worker with
    batch norm cannot split its batch: it measures on fresh batches every ``noise_scale_every``
    steps instead (``lbtrain.callbacks.GradientNoiseScale``, decay ``noise_scale_decay ** every``).
    ``hessian``: the Hessian's top eigenvalue of the final weights by power iteration (Yao et al.
    2020), ``pac_bayes``: Jiang et al. 2020's magnitude-aware PAC-Bayes flatness ``1 / sigma'^2``;
    each on a fixed subset of ``hessian_samples`` / ``pac_bayes_samples`` training samples
    (seeded by ``training.seed``; null for all), with ``lbtrain.analysis.flatness``'s defaults.
    """

    sharpness: bool = False
    sharpness_epsilon: float = Field(default=1e-3, gt=0)
    sharpness_subspace: int | None = Field(default=None, gt=0)
    sharpness_samples: int | None = Field(default=None, gt=0)
    hessian: bool = False
    hessian_samples: int | None = Field(default=500, gt=0)
    pac_bayes: bool = False
    pac_bayes_samples: int | None = Field(default=500, gt=0)
    noise_scale: bool = False
    noise_scale_every: int = Field(default=10, gt=0)
    noise_scale_decay: float = Field(default=0.99, ge=0, lt=1)
    noise_scale_pieces: int | None = Field(default=None, ge=2)


# Fields added to runs after studies were committed, with their defaults: a run id hashes such a
# field only when it is set away from its default (``RunConfig.identity``), so a rerun of a study
# configured before the field existed finds its runs done.
LATER_FIELD_DEFAULTS = {"lr.warmup_type": "gradual", "training.accumulation_steps": 1, "training.staleness": 0,
                        "training.precise_bn_samples": None}


class RunConfig(_Strict):
    """One fully resolved run: what ``trainer.train`` takes and what a run directory records."""

    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    lr: LRConfig = Field(default_factory=LRConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)

    @model_validator(mode="after")
    def _recipe_builds(self) -> "RunConfig":
        from lbtrain.schedules import build_schedule

        settings = self.training
        if settings.world_size % settings.micro_batches:
            raise ValueError(
                f"training.micro_batches ({settings.micro_batches}) must divide training.world_size "
                f"({settings.world_size}): each micro-batch holds whole workers' batches"
            )
        pieces_requested = self.analysis.noise_scale and self.analysis.noise_scale_pieces is not None
        if pieces_requested and settings.micro_batches == settings.accumulation_steps == 1:
            from lbtrain.train_step import measurement_pieces

            measurement_pieces(settings.world_size, settings.per_worker_batch, self.analysis.noise_scale_pieces)
        if settings.samples is not None and settings.samples < self.global_batch:
            raise ValueError(f"training.samples ({settings.samples}) is less than one global batch ({self.global_batch})")
        if settings.epochs is not None and self.lr.warmup_epochs > settings.epochs:
            raise ValueError(f"lr.warmup_epochs ({self.lr.warmup_epochs:g}) is longer than the budget (training.epochs {settings.epochs})")
        # A nominal long epoch: the checks here are about structure, not about step counts
        # (step and sample budgets are checked against the dataset by ``schedule``).
        nominal_epochs = settings.epochs if settings.epochs is not None else self.lr.warmup_epochs + 1
        build_schedule(
            self.lr.schedule_spec(), steps_per_epoch=10**6, base_lr=self.lr.base_lr,
            base_batch=self.lr.base_batch, global_batch=self.global_batch, total_epochs=nominal_epochs,
        )
        return self

    @property
    def global_batch(self) -> int:
        """``world_size * per_worker_batch * accumulation_steps``: the batch one synchronous
        update averages over."""
        from lbtrain.scaling import global_batch_size

        return global_batch_size(self.training.world_size, self.training.update_batch)

    def total_steps(self, steps_per_epoch: int) -> int:
        """The budget in optimizer steps: ``epochs * steps_per_epoch``, ``steps``, or
        ``samples // global_batch``; the decay length and the step at which training stops."""
        settings = self.training
        if settings.epochs is not None:
            return settings.epochs * steps_per_epoch
        if settings.steps is not None:
            return settings.steps
        return settings.samples // self.global_batch

    def epochs_to_run(self, steps_per_epoch: int) -> int:
        """Data epochs ``fit`` is asked for; the last one may stop early at the step budget."""
        return math.ceil(self.total_steps(steps_per_epoch) / steps_per_epoch)

    def schedule(self, steps_per_epoch: int):
        """The run's learning-rate schedule (``lbtrain.schedules.build_schedule``) at
        ``steps_per_epoch``, decaying over the whole budget. A warmup longer than the budget is
        a ``ConfigError``."""
        from lbtrain.schedules import build_schedule, epochs_to_steps

        total = self.total_steps(steps_per_epoch)
        warmup = epochs_to_steps(self.lr.warmup_epochs, steps_per_epoch)
        if warmup > total:
            raise ConfigError(
                f"lr.warmup_epochs ({self.lr.warmup_epochs:g} = {warmup} steps) is longer than the budget "
                f"({describe_budget(self.training.budget)} = {total} steps at {steps_per_epoch} steps per epoch)"
            )
        return build_schedule(
            self.lr.schedule_spec(), steps_per_epoch=steps_per_epoch, base_lr=self.lr.base_lr, base_batch=self.lr.base_batch,
            global_batch=self.global_batch, total_epochs=total / steps_per_epoch,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as written to ``config.yaml``."""
        return self.model_dump(mode="json")

    def identity(self) -> dict[str, Any]:
        """``to_dict`` without the fields of ``LATER_FIELD_DEFAULTS`` that are at their default:
        what a run's id hashes, so runs configured before such a field existed keep their ids."""
        data = self.to_dict()
        for path, default in LATER_FIELD_DEFAULTS.items():
            section, field = path.split(".")
            if data[section].get(field) == default:
                del data[section][field]
        return data


def describe_budget(budget: dict[str, Any]) -> str:
    """``{"steps": 600, "stop_at": {"train_loss": 0.3}}`` -> ``600 steps, until train loss <= 0.3``.

    >>> describe_budget({"epochs": 3})
    '3 epochs'
    """
    kind = next(kind for kind in BUDGET_KINDS if kind in budget)
    text = f"{budget[kind]} {kind}"
    if budget.get("stop_at"):
        text += f", until {StopAtConfig(**budget['stop_at']).describe()}"
    return text


_TYPE_TAGS = {"str", "float", "int", "bool", "dict", "list", "none", "__root__"}


def format_validation_error(error: ValidationError, prefix: str = "") -> str:
    """The first problem of a pydantic error as one line: ``path: what is wrong (got X)``."""
    first = error.errors(include_url=False)[0]
    parts = [str(part) for part in (*([prefix] if prefix else []), *first["loc"])]
    # Union members show up in the location as type tags ("str", "literal['a','b']"): not fields.
    path = ".".join(part for part in parts if part not in _TYPE_TAGS and "[" not in part)
    kind, message = first["type"], first["msg"]
    if kind == "extra_forbidden":
        return f"{path}: unknown key"
    message = message.removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if kind == "value_error" or isinstance(got, (dict, BaseModel)) else f" (got {got!r})"
    return f"{path}: {message}{shown}" if path else f"{message}{shown}"


def run_config_from_dict(data: dict[str, Any]) -> RunConfig:
    """A ``RunConfig`` from plain data; any problem is a one-line ``ConfigError``."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from None


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter where users get bitten: a key given twice in one mapping
    is an error (not "the later wins"), and ``1e-1`` is a float as users write it (YAML 1.2;
    YAML 1.1 wants ``1.0e-1`` and reads ``1e-1`` as a string)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """``text`` read by the strict loader (see ``_StrictLoader``).

    >>> parse_yaml("lr: 1e-1")
    {'lr': 0.1}
    """
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML file holds; anything else (no file, a folder, binary or non-UTF-8
    bytes, invalid YAML, a duplicate key, an empty file, a list) is a one-line ``ConfigError``."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    except PermissionError:
        raise ConfigError(f"{path}: not readable (permission denied)") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start}); expected a YAML file") from None
    if "\x00" in text:
        raise ConfigError(f"{path}: a binary file, not YAML")
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML ({' '.join(str(error).split())})") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; expected a mapping of config sections")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_run_config(path: str | Path) -> RunConfig:
    """Reads a resolved run config (YAML), as the runner writes into each run directory."""
    return run_config_from_dict(read_yaml_mapping(path))


# ---------------------------------------------------------------- experiments

RUN_SECTION_SCHEMAS: dict[str, type[BaseModel]] = {
    "data": DataConfig, "model": ModelConfig, "optimizer": OptimizerConfig, "lr": LRConfig, "training": TrainingConfig,
    "analysis": AnalysisConfig,
}
RUN_SECTIONS = tuple(RUN_SECTION_SCHEMAS)
# Grid shorthands: the lists most studies sweep, under short names.
GRID_SHORTHANDS = {"world_sizes": "training.world_size", "seeds": "training.seed"}


# Horovod takes gradient compression only as an argument (``DistributedOptimizer(compression=)``),
# not from its environment: lbtrain passes it to the ranks in this variable (``HorovodWorld``).
HOROVOD_COMPRESSION_VARIABLE = "LBTRAIN_HOROVOD_COMPRESSION"
# Likewise the opt-in scheduling of a rank's threads (``HorovodWorld``), 1 or 0.
HOROVOD_IDLE_THREADS_VARIABLE = "LBTRAIN_HOROVOD_IDLE_THREADS"
HOROVOD_PIN_CORES_VARIABLE = "LBTRAIN_HOROVOD_PIN_CORES"
# Where rank 0 records the Horovod timeline, inside the run folder.
HOROVOD_TIMELINE_FILE = "horovod_timeline.json"
# The horovodrun flags that set the same variables as a knob (the flag would win).
_HOROVODRUN_FLAGS = {
    "fusion_threshold_mb": ("--fusion-threshold-mb",), "cycle_time_ms": ("--cycle-time-ms",),
    "timeline": ("--timeline-filename",), "hierarchical_allreduce": ("--hierarchical-allreduce", "--no-hierarchical-allreduce"),
}
_KNOB_OFF = {"timeline": False}  # the value that sets nothing, where it is not None


class HorovodLaunchConfig(_Strict):
    """How ``mode: horovod`` starts each run: ``horovodrun -np W -H HOSTS ARGS... lbtrain train``.
    ``hosts`` defaults to ``localhost:W``; ``args`` go to horovodrun as they are.

    Horovod's knobs reach every rank as Horovod's own environment variables (``environment``);
    one left unset keeps Horovod's default (or the launching shell's variable):
    ``fusion_threshold_mb`` (tensor fusion buffer, MiB; 0 turns fusion off), ``cycle_time_ms``
    (the background thread's cycle), ``timeline`` (rank 0 records a Horovod timeline in the run
    folder), ``compression`` (``fp16``: gradients cross the allreduce as float16) and
    ``hierarchical_allreduce`` (with MPI or NCCL builds). Two of lbtrain's own act in each rank
    (``HorovodWorld``; Linux; off by default): ``idle_threads`` runs Horovod's threads at
    ``SCHED_IDLE`` and ``pin_cores`` binds each rank to one core, which together lift np=2 on
    two cores from 0.76 to 0.94 of two independent processes (README, Performance)."""

    hosts: str | None = None
    args: list[str] = Field(default_factory=list)
    fusion_threshold_mb: float | None = Field(default=None, ge=0)
    cycle_time_ms: float | None = Field(default=None, gt=0)
    timeline: bool = False
    compression: Literal["none", "fp16"] = "none"
    hierarchical_allreduce: bool | None = None
    idle_threads: bool = False
    pin_cores: bool = False

    @model_validator(mode="after")
    def _knob_not_also_in_args(self) -> "HorovodLaunchConfig":
        given = {arg.split("=")[0] for arg in self.args}
        for field, flags in _HOROVODRUN_FLAGS.items():
            clash = sorted(given.intersection(flags))
            if clash and getattr(self, field) not in (None, _KNOB_OFF.get(field)):
                raise ValueError(f"args has {clash[0]}, which sets what {field} sets: keep one of them")
        return self

    def environment(self, run_dir: str | Path) -> dict[str, str]:
        """The variables the ranks of a run in ``run_dir`` get: ``HOROVOD_FUSION_THRESHOLD``
        (bytes), ``HOROVOD_CYCLE_TIME`` (ms), ``HOROVOD_TIMELINE`` (``run_dir``/horovod_timeline.json),
        ``HOROVOD_HIERARCHICAL_ALLREDUCE`` (1 or 0) for the knobs that are set, and lbtrain's
        ``LBTRAIN_HOROVOD_COMPRESSION`` always, ``LBTRAIN_HOROVOD_IDLE_THREADS`` and
        ``LBTRAIN_HOROVOD_PIN_CORES`` (``1``) when switched on.

        >>> HorovodLaunchConfig(fusion_threshold_mb=32, cycle_time_ms=5, hierarchical_allreduce=True).environment("run")
        {'LBTRAIN_HOROVOD_COMPRESSION': 'none', 'HOROVOD_FUSION_THRESHOLD': '33554432', 'HOROVOD_CYCLE_TIME': '5.0', 'HOROVOD_HIERARCHICAL_ALLREDUCE': '1'}
        """
        variables = {HOROVOD_COMPRESSION_VARIABLE: self.compression}
        if self.fusion_threshold_mb is not None:
            variables["HOROVOD_FUSION_THRESHOLD"] = str(round(self.fusion_threshold_mb * 1024 * 1024))
        if self.cycle_time_ms is not None:
            variables["HOROVOD_CYCLE_TIME"] = str(self.cycle_time_ms)
        if self.timeline:
            variables["HOROVOD_TIMELINE"] = str(Path(run_dir).resolve() / HOROVOD_TIMELINE_FILE)
        if self.hierarchical_allreduce is not None:
            variables["HOROVOD_HIERARCHICAL_ALLREDUCE"] = str(int(self.hierarchical_allreduce))
        if self.idle_threads:
            variables[HOROVOD_IDLE_THREADS_VARIABLE] = "1"
        if self.pin_cores:
            variables[HOROVOD_PIN_CORES_VARIABLE] = "1"
        return variables


class MultiWorkerLaunchConfig(_Strict):
    """How ``mode: multiworker`` starts each run: W processes of ``lbtrain train --mode
    multiworker`` on this machine, worker i with ``TF_CONFIG`` naming ``localhost:PORT`` for every
    worker and itself as task i (``lbtrain.tf_distribute.launch_multiworker``). ``base_port``: the
    workers listen on ``base_port .. base_port + W - 1`` (refused before anything trains if one is
    in use); null (default): free ports chosen per run."""

    base_port: int | None = Field(default=None, ge=1024, le=65535)


class ParameterServerLaunchConfig(_Strict):
    """How ``mode: parameter_server`` starts each run: one job on this machine of a chief (the
    coordinator, which writes the run), W workers and ``ps_tasks`` parameter servers, every task
    ``lbtrain train --mode parameter_server`` with its ``TF_CONFIG``
    (``lbtrain.parameter_server.launch_parameter_server``). ``base_port``: the tasks listen on
    ``base_port .. base_port + W + ps_tasks`` (chief, workers, parameter servers; refused before
    anything trains if one is in use); null (default): free ports chosen per run."""

    ps_tasks: int = Field(default=1, ge=1)
    base_port: int | None = Field(default=None, ge=1024, le=65535)


class SearchParam(_Strict):
    """One dimension of an Optuna search space: ``float``/``int`` between ``low`` and ``high``
    (``log`` scale, ``step``), or ``categorical`` over ``choices``."""

    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "SearchParam":
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("categorical needs a non-empty choices list")
            if self.low is not None or self.high is not None or self.log or self.step is not None:
                raise ValueError("categorical takes choices only (no low, high, log, step)")
            return self
        if self.choices is not None:
            raise ValueError(f"{self.type} takes low and high, not choices")
        if self.low is None or self.high is None or not self.low < self.high:
            raise ValueError(f"{self.type} needs low < high, got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0, got {self.low}")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        if self.type == "int" and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise ValueError(f"int needs whole low and high, got {self.low}, {self.high}")
        return self


class SweepConfig(_Strict):
    """How ``lbtrain sweep`` tunes: trials per world size (finished ones, pruned included), the
    seeded TPE sampler, the pruner fed every epoch's validation accuracy (``median``, or
    ``successive_halving``: asynchronous successive halving, Li et al. 2020), and the storage
    (default ``sqlite:///<output_dir>/<name>/optuna.db``; any SQLAlchemy URL). Heartbeats let a
    rerun fail and retry trials a killed process left RUNNING after ``grace_seconds``."""

    trials: int = Field(default=20, gt=0)
    sampler_seed: int = 0
    pruner: Literal["median", "successive_halving", "none"] = "median"
    pruner_startup_trials: int = Field(default=2, ge=0)
    pruner_warmup_epochs: int = Field(default=0, ge=0)
    storage: str | None = None
    heartbeat_seconds: int = Field(default=10, gt=0)
    grace_seconds: int = Field(default=30, gt=0)


def check_search_paths(search: dict[str, SearchParam]) -> dict[str, SearchParam]:
    """``search`` unchanged if every key is a field path of a run; else a ValueError naming it."""
    for path in search:
        if "." not in path or not known_field_path(path):
            raise ValueError(f"{path!r} is no field path (use e.g. lr.base_lr, lr.warmup_epochs, optimizer.name)")
    return search


class ProtocolConfig(_Strict):
    """The tuning protocol of ``lbtrain sweep`` (``lbtrain.protocol``; Shallue et al. 2018,
    Nado et al. 2021): every arm is tuned with ``sweep.trials`` trials on validation, then its
    best configuration is re-run with each of ``seeds`` (at least 3) and tested.
    ``reference_world_size`` (default the smallest of ``grid.world_sizes``) is where a recipe's
    base LR is tuned for its "rule" arms. ``rules`` maps a recipe's label to the LR rules its
    reference tuning is carried by, one rule arm each (default: the recipe's own ``lr.rule``):
    ``{momentum: [none, sqrt, linear]}`` compares three rules on one base-batch tuning.
    ``search`` maps a recipe's label to dimensions that replace (or add to) the experiment's
    ``search`` for that recipe, e.g. Adam's LR range beside SGD's; the trial budget stays
    ``sweep.trials`` for every arm. ``equal_steps`` lists world sizes where the best arm (by
    validation accuracy, every seed ok) is also re-run for as many updates as the reference
    world size's runs took (Hoffer et al. 2017's "train longer"), with the same seeds."""

    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=3)
    reference_world_size: int | None = Field(default=None, gt=0)
    rules: dict[str, list[str | float]] = Field(default_factory=dict)
    search: dict[str, dict[str, SearchParam]] = Field(default_factory=dict)
    equal_steps: list[int] = Field(default_factory=list)

    @field_validator("search")
    @classmethod
    def _search_paths(cls, search: dict[str, dict[str, SearchParam]]) -> dict[str, dict[str, SearchParam]]:
        for dimensions in search.values():
            check_search_paths(dimensions)
        return search

    @field_validator("rules")
    @classmethod
    def _known_rules(cls, rules: dict[str, list[str | float]]) -> dict[str, list[str | float]]:
        for recipe, listed in rules.items():
            if not listed or len(set(map(str, listed))) != len(listed):
                raise ValueError(f"rules of {recipe!r} must be a non-empty list of distinct rules, got {listed}")
            for rule in listed:
                try:
                    LRConfig(rule=rule)
                except ValidationError:
                    raise ValueError(f"rules of {recipe!r}: {rule!r} is not a rule (allowed: linear, sqrt, none or a float exponent)") from None
        return rules

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {seeds}")
        return seeds


class ExperimentConfig(_Strict):
    """One study: a base run, a grid of changes to it, where results go and how runs start.

    ``mode``: ``simulated`` (W workers in one process), ``horovod`` (``horovodrun -np W``),
    ``mirrored`` (``tf.distribute.MirroredStrategy`` over W devices of a fresh process),
    ``multiworker`` (``tf.distribute.MultiWorkerMirroredStrategy``, W local processes) or
    ``parameter_server`` (asynchronous ``tf.distribute.ParameterServerStrategy``: a chief, W
    workers and parameter servers as local processes); the ``horovod``, ``multiworker`` and
    ``parameter_server`` sections say how those start.

    ``grid`` maps field paths (``lr.rule``, ``optimizer.name``, ``training.per_worker_batch``,
    any ``section.field``) or the shorthands ``world_sizes`` / ``seeds`` to lists of values,
    crossed with each other; ``variants`` is a list of named override sets (``label`` plus
    field paths) crossed with the rest, for recipes that change several fields together.
    ``sizing`` says what the study trimmed to fit its machine and why; reports quote it beside
    the description.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    sizing: str = ""
    mode: Literal["simulated", "horovod", "mirrored", "multiworker", "parameter_server"] = "simulated"
    output_dir: str = "results"
    horovod: HorovodLaunchConfig = Field(default_factory=HorovodLaunchConfig)
    multiworker: MultiWorkerLaunchConfig = Field(default_factory=MultiWorkerLaunchConfig)
    parameter_server: ParameterServerLaunchConfig = Field(default_factory=ParameterServerLaunchConfig)
    data: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] = Field(default_factory=dict)
    optimizer: dict[str, Any] = Field(default_factory=dict)
    lr: dict[str, Any] = Field(default_factory=dict)
    training: dict[str, Any] = Field(default_factory=dict)
    analysis: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, SearchParam] = Field(default_factory=dict)
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    protocol: ProtocolConfig | None = None

    @field_validator("search")
    @classmethod
    def _search_paths(cls, search: dict[str, SearchParam]) -> dict[str, SearchParam]:
        return check_search_paths(search)

    def base_run(self) -> dict[str, Any]:
        """The run every grid point starts from, as plain data."""
        return {section: dict(getattr(self, section)) for section in RUN_SECTIONS}

    @property
    def results_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` over ``base``, recursing into mappings present in both.

    >>> deep_merge({"lr": {"base_lr": 0.1, "warmup_epochs": 5}, "seed": 0}, {"lr": {"base_lr": 0.2}, "seed": 1})
    {'lr': {'base_lr': 0.2, 'warmup_epochs': 5}, 'seed': 1}
    """
    merged = dict(base)
    for key, value in update.items():
        merged[key] = deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def nested(path: str, value: Any) -> dict[str, Any]:
    """The mapping that sets the dotted ``path`` to ``value``, one level per part.

    >>> nested("lr.decay.type", "cosine")
    {'lr': {'decay': {'type': 'cosine'}}}
    """
    result: Any = value
    for part in reversed(path.split(".")):
        result = {part: result}
    return result


def with_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each ``field.path: value`` of ``overrides`` merged in, in order: how a grid
    point, a sweep trial and ``--set`` change a base run."""
    for path, value in overrides.items():
        data = deep_merge(data, nested(path, value))
    return data


def _resolve_extends(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's mapping merged over the files it ``extends`` (each relative to the file's
    folder, else to the working directory), earlier ones first."""
    path = path.resolve()
    if path in chain:
        raise ConfigError(f"{path}: extends itself through {' -> '.join(p.name for p in chain)}")
    data = read_yaml_mapping(path)
    extends = data.pop("extends", [])
    if isinstance(extends, str):
        extends = [extends]
    if not isinstance(extends, list) or not all(isinstance(item, str) for item in extends):
        raise ConfigError(f"{path}: extends must be a list of YAML paths, got {extends!r}")
    merged: dict[str, Any] = {}
    for item in extends:
        candidate = path.parent / item
        target = candidate if candidate.exists() else Path(item)
        merged = deep_merge(merged, _resolve_extends(target, (*chain, path)))
    return deep_merge(merged, data)


def _known_path(path: list[str]) -> bool:
    """Whether ``section.field...`` names a field of the experiment schema (free-form
    mappings such as ``model.options`` take any key below them)."""
    model: type[BaseModel] | None = ExperimentConfig
    for depth, part in enumerate(path):
        if model is None:
            return True
        if part not in model.model_fields:
            return False
        if depth == 0 and part in RUN_SECTIONS:
            model = RUN_SECTION_SCHEMAS[part]
            continue
        annotation = model.model_fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return True


def known_field_path(dotted: str) -> bool:
    """Whether a dotted path (``lr.rule``) names a field a run or experiment has."""
    return _known_path(dotted.split("."))


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies ``path=value`` overrides (values parsed as YAML: ``3``, ``0.1``, ``[1, 2]``,
    ``linear``); a path that names no field is an error."""
    for override in overrides:
        path, separator, raw = override.partition("=")
        if not separator or not path:
            raise ConfigError(f"--set {override!r}: expected PATH=VALUE, e.g. lr.base_lr=0.2")
        if not known_field_path(path):
            raise ConfigError(f"--set {path}: no such field (sections: name, mode, output_dir, horovod, multiworker, parameter_server, grid, {', '.join(RUN_SECTIONS)})")
        try:
            value = parse_yaml(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--set {path}: value {raw!r} is not valid YAML") from None
        data = with_overrides(data, {path: value})
    return data


def load_experiment(path: str | Path, overrides: list[str] = ()) -> ExperimentConfig:
    """Reads an experiment YAML: ``extends`` merged, ``--set`` overrides applied, validated.
    Grid points are validated by ``runner.expand``."""
    data = apply_overrides(_resolve_extends(Path(path)), list(overrides))
    data.setdefault("name", Path(path).stem)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from None
