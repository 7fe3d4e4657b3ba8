"""The schema of one training run (pydantic v2), and its one-line error messages.

A ``RunConfig`` is everything ``trainer.train`` needs: data, model, optimizer, learning-rate
recipe and training settings. Unknown keys are errors (a typo is never silently ignored),
values are checked strictly (no "2" for 2), and cross-field checks (the LR recipe against the
number of epochs, optimizer parameters against the optimizer) run when the config is built,
before any training starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator


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


class ModelConfig(_Strict):
    """A model of the zoo and its options (see ``lbtrain.models.build_model``)."""

    name: str = "mlp"
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known_model(cls, name: str) -> str:
        from lbtrain.models import model_info

        return model_info(name).name


class OptimizerConfig(_Strict):
    """An optimizer of ``lbtrain.optimizers.OPTIMIZERS`` and its keyword parameters."""

    name: Literal["sgd", "momentum", "adam", "lars", "lamb"] = "momentum"
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _parameters_build(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from lbtrain.optimizers import build_optimizer

        if "name" in info.data:
            build_optimizer(info.data["name"], 0.1, **params)
        return params


class LRConfig(_Strict):
    """The learning-rate recipe (see ``lbtrain.schedules.build_schedule``)."""

    base_lr: float = Field(default=0.1, gt=0)
    base_batch: int = Field(default=128, gt=0)
    rule: str | float = "linear"
    warmup_epochs: float = Field(default=0.0, ge=0)
    warmup_start: float | None = Field(default=None, ge=0)
    decay: dict[str, Any] | None = None
    offset_decay: bool = True

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
            "decay": self.decay,
            "offset_decay": self.offset_decay,
        }


class TrainingConfig(_Strict):
    """How one run trains. ``world_size`` workers each take ``per_worker_batch`` samples a step."""

    world_size: int = Field(default=1, gt=0)
    per_worker_batch: int = Field(default=128, gt=0)
    epochs: int = Field(default=3, gt=0)
    seed: int = 0
    micro_batches: int = Field(default=1, gt=0)
    eval_batch: int = Field(default=1024, gt=0)
    divergence_factor: float = Field(default=10.0, gt=1.0)
    checkpoint: bool = True
    tensorboard: bool = False


class AnalysisConfig(_Strict):
    """Measurements a run takes besides its metrics (see ``lbtrain.analysis``).

    ``sharpness``: Keskar et al. 2017's sharpness of the final weights on the training set
    (or its first ``sharpness_samples`` samples), box ``sharpness_epsilon``, full space or a
    random subspace of ``sharpness_subspace`` dimensions. ``noise_scale``: McCandlish et al.
    2018's gradient noise scale B_simple, measured every ``noise_scale_every`` steps.
    """

    sharpness: bool = False
    sharpness_epsilon: float = Field(default=1e-3, gt=0)
    sharpness_subspace: int | None = Field(default=None, gt=0)
    sharpness_samples: int | None = Field(default=None, gt=0)
    noise_scale: bool = False
    noise_scale_every: int = Field(default=10, gt=0)


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

        if self.training.world_size % self.training.micro_batches:
            raise ValueError(
                f"training.micro_batches ({self.training.micro_batches}) must divide training.world_size "
                f"({self.training.world_size}): each micro-batch holds whole workers' batches"
            )
        global_batch = self.training.world_size * self.training.per_worker_batch
        # A nominal long epoch: the checks here are about structure, not about step counts.
        build_schedule(
            self.lr.schedule_spec(), steps_per_epoch=10**6, base_lr=self.lr.base_lr,
            base_batch=self.lr.base_batch, global_batch=global_batch, total_epochs=self.training.epochs,
        )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as written to ``config.yaml``."""
        return self.model_dump(mode="json")


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


def load_run_config(path: str | Path) -> RunConfig:
    """Reads a resolved run config (YAML), as the runner writes into each run directory."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML ({' '.join(str(error).split())})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections, got {type(data).__name__}")
    return run_config_from_dict(data)


# ---------------------------------------------------------------- experiments

RUN_SECTION_SCHEMAS: dict[str, type[BaseModel]] = {
    "data": DataConfig, "model": ModelConfig, "optimizer": OptimizerConfig, "lr": LRConfig, "training": TrainingConfig,
    "analysis": AnalysisConfig,
}
RUN_SECTIONS = tuple(RUN_SECTION_SCHEMAS)
# Grid shorthands: the lists most studies sweep, under short names.
GRID_SHORTHANDS = {"world_sizes": "training.world_size", "seeds": "training.seed"}


class HorovodLaunchConfig(_Strict):
    """How ``mode: horovod`` starts each run: ``horovodrun -np W -H HOSTS ARGS... lbtrain train``.
    ``hosts`` defaults to ``localhost:W``; ``args`` go to horovodrun as they are."""

    hosts: str | None = None
    args: list[str] = Field(default_factory=list)


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


class ExperimentConfig(_Strict):
    """One study: a base run, a grid of changes to it, where results go and how runs start.

    ``grid`` maps field paths (``lr.rule``, ``optimizer.name``, ``training.per_worker_batch``,
    any ``section.field``) or the shorthands ``world_sizes`` / ``seeds`` to lists of values,
    crossed with each other; ``variants`` is a list of named override sets (``label`` plus
    field paths) crossed with the rest, for recipes that change several fields together.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    mode: Literal["simulated", "horovod"] = "simulated"
    output_dir: str = "results"
    horovod: HorovodLaunchConfig = Field(default_factory=HorovodLaunchConfig)
    data: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] = Field(default_factory=dict)
    optimizer: dict[str, Any] = Field(default_factory=dict)
    lr: dict[str, Any] = Field(default_factory=dict)
    training: dict[str, Any] = Field(default_factory=dict)
    analysis: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, SearchParam] = Field(default_factory=dict)
    sweep: SweepConfig = Field(default_factory=SweepConfig)

    @field_validator("search")
    @classmethod
    def _search_paths(cls, search: dict[str, SearchParam]) -> dict[str, SearchParam]:
        for path in search:
            if "." not in path or not known_field_path(path):
                raise ValueError(f"{path!r} is no field path (use e.g. lr.base_lr, lr.warmup_epochs, optimizer.name)")
        return search

    def base_run(self) -> dict[str, Any]:
        """The run every grid point starts from, as plain data."""
        return {section: dict(getattr(self, section)) for section in RUN_SECTIONS}

    @property
    def results_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` over ``base``, recursing into mappings present in both."""
    merged = dict(base)
    for key, value in update.items():
        merged[key] = deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def nested(path: str, value: Any) -> dict[str, Any]:
    """``nested("lr.decay.type", "cosine") == {"lr": {"decay": {"type": "cosine"}}}``."""
    result: Any = value
    for part in reversed(path.split(".")):
        result = {part: result}
    return result


def _read_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a YAML file") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML ({' '.join(str(error).split())})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _resolve_extends(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's mapping merged over the files it ``extends`` (each relative to the file's
    folder, else to the working directory), earlier ones first."""
    path = path.resolve()
    if path in chain:
        raise ConfigError(f"{path}: extends itself through {' -> '.join(p.name for p in chain)}")
    data = _read_yaml_mapping(path)
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
            raise ConfigError(f"--set {path}: no such field (sections: name, mode, output_dir, horovod, grid, {', '.join(RUN_SECTIONS)})")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--set {path}: value {raw!r} is not valid YAML") from None
        data = deep_merge(data, nested(path, value))
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
