"""The schema of one training run (pydantic v2).

A ``RunConfig`` is everything ``trainer.train`` needs: data, model, optimizer, learning-rate
recipe and training settings. Unknown keys are errors (a typo is never silently ignored),
values are checked strictly (no "2" for 2), and cross-field checks (the LR recipe against the
number of epochs, optimizer parameters against the optimizer) run when the config is built,
before any training starts.
"""


from __future__ import annotations

import math
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from lbtrain.config.errors import ConfigError, format_validation_error
from lbtrain.config.limits import MAX_BATCH, MAX_EPOCHS, MAX_SAMPLES, MAX_SEED, MAX_STEPS, MAX_WORLD_SIZE, check_numbers, quote
from lbtrain.recipe import DECAY_CLOCKS, SCHEDULE_KEYS, WARMUP_TYPES
from lbtrain.verdict import DEFAULT_COLLAPSE_MARGIN, DEFAULT_DIVERGENCE_FACTOR, DEFAULT_INSTABILITY_FACTOR


class _Strict(BaseModel):
    # allow_inf_nan=False: every float field is finite (lbtrain.config.limits checks the rest).
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _null_clears(cls, data: Any) -> Any:
        """``null`` for a field that takes no None clears it to its default, as if never set:
        a variant or ``--set model.options=null`` drops the options it inherited. A field that
        takes None (``data.train_subset``) gets None."""
        if not isinstance(data, dict):
            return data
        return {key: value for key, value in data.items() if value is not None or _takes_none(cls.model_fields.get(key))}


def _takes_none(field) -> bool:
    """Whether a pydantic field takes None (an unknown key counts as taking it: ``extra=forbid`` names it)."""
    return field is None or field.annotation is Any or type(None) in typing.get_args(field.annotation)


def _reference_if_callable(value: Any) -> Any:
    """A model or dataset given as a Python callable becomes its reference (``lbtrain.references``)."""
    if callable(value) and not isinstance(value, str):
        from lbtrain.references import reference_of

        return reference_of(value)
    return value


class DataConfig(_Strict):
    """Which data and which part of it (see ``lbtrain.data.load_dataset``): one of lbtrain's
    datasets, or the user's (``lbtrain.data.sources``: a ``.npz`` path, ``package.module:load``, a
    registered name, ``tfds:<name>``, or in Python the loader itself). ``task``: ``auto``,
    ``classification`` or ``regression``; ``test_split``: the share held out as the test set when
    the user's data has none; ``num_classes``: the classes of the user's classification data
    (default: the largest training label + 1, refused when the training labels skip a class or
    the validation or test labels hold one they lack)."""

    dataset: str = "fashion_mnist"
    train_subset: int | None = Field(default=None, gt=0)
    validation_split: float = Field(default=0.0, ge=0.0, lt=1.0)
    task: Literal["auto", "classification", "regression"] = "auto"
    test_split: float = Field(default=0.2, gt=0.0, lt=1.0)
    num_classes: int | None = Field(default=None, ge=2)
    options: dict[str, Any] = Field(default_factory=dict)

    def load(self, seed: int = 0):
        """The ``lbtrain.data.Dataset`` this section describes, split with ``seed``."""
        from lbtrain.data import load_dataset

        return load_dataset(self.dataset, train_subset=self.train_subset, validation_split=self.validation_split, seed=seed,
                            task=self.task, test_split=self.test_split, classes=self.num_classes, **self.options)

    @field_validator("dataset", mode="before")
    @classmethod
    def _callable_dataset(cls, value: Any) -> Any:
        return _reference_if_callable(value)

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, name: str) -> str:
        from lbtrain.data import check_dataset

        return check_dataset(name, {})

    @field_validator("options")
    @classmethod
    def _known_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from lbtrain.data import check_dataset

        if "dataset" in info.data:
            check_dataset(info.data["dataset"], options)
        return options


class ModelConfig(_Strict):
    """A model and its options (see ``lbtrain.models.build_model``): a zoo name,
    ``package.module:build``, a registered name, ``keras.applications.<Name>``, or in Python the
    factory itself."""

    name: str = "mlp"
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name", mode="before")
    @classmethod
    def _callable_model(cls, value: Any) -> Any:
        return _reference_if_callable(value)

    @field_validator("name")
    @classmethod
    def _known_model(cls, name: str) -> str:
        from lbtrain.models import model_source

        return model_source(name).name

    @field_validator("options")
    @classmethod
    def _options_build(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        from lbtrain.models import check_model_options

        if "name" in info.data:
            check_model_options(info.data["name"], options)
        return options


class OptimizerConfig(_Strict):
    """An optimizer of ``lbtrain.optimizers.OPTIMIZERS`` (the registry is the list of names)
    and its keyword parameters; a parameter set to null is left out (a variant or ``--set
    optimizer.params.momentum=null`` clears what it inherited: the optimizer's default)."""

    name: str = "momentum"
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params", mode="before")
    @classmethod
    def _null_params_cleared(cls, params: Any) -> Any:
        return {key: value for key, value in params.items() if value is not None} if isinstance(params, dict) else params

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
    base_batch: int = Field(default=128, gt=0, le=MAX_BATCH)
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
    """Stop at the end of the first epoch whose training loss is at most ``train_loss``, whose
    training accuracy is at least ``train_accuracy``, or whose validation accuracy is at least
    ``val_accuracy`` (one of the three; Keskar et al. 2017 compare batches at equal training
    loss; steps to a validation target, Shallue et al. 2018, need no epoch past it). The run's
    budget is then the cap."""

    train_loss: float | None = Field(default=None, gt=0)
    train_accuracy: float | None = Field(default=None, gt=0, le=1)
    val_accuracy: float | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="after")
    def _one_target(self) -> "StopAtConfig":
        if sum(value is not None for value in (self.train_loss, self.train_accuracy, self.val_accuracy)) != 1:
            raise ValueError("give one target: train_loss (stop when the loss is at most it), train_accuracy or val_accuracy "
                             "(at least it)")
        return self

    @property
    def metric(self) -> str:
        """The metric compared, as Keras logs it (``loss``, ``accuracy`` or ``val_accuracy``)."""
        return "loss" if self.train_loss is not None else "accuracy" if self.train_accuracy is not None else "val_accuracy"

    @property
    def target(self) -> float:
        return next(value for value in (self.train_loss, self.train_accuracy, self.val_accuracy) if value is not None)

    def reached(self, value: float) -> bool:
        """Whether an epoch's ``metric`` value meets the target."""
        return value <= self.target if self.metric == "loss" else value >= self.target

    def describe(self) -> str:
        name = "validation accuracy" if self.metric == "val_accuracy" else f"train {self.metric}"
        return f"{name} {'<=' if self.metric == 'loss' else '>='} {self.target:g}"


def parse_hosts(lines: list[str], source: str = "discovery") -> dict[str, int]:
    """``{host: slots}`` of ``host:slots`` entries (Horovod's host discovery format); blank
    entries are skipped. A ``ValueError`` names the first entry that is not one.

    >>> parse_hosts(["localhost:2", "10.0.0.7:4", ""])
    {'localhost': 2, '10.0.0.7': 4}
    """
    hosts: dict[str, int] = {}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        host, _, slots = line.rpartition(":")
        if not host or not slots.isdigit() or int(slots) < 1 or any(char.isspace() for char in host):
            raise ValueError(f"{source} gave {line[:80]!r}, not host:slots (a host name or address, a colon, a positive number)")
        hosts[host] = int(slots)
    return hosts


class ElasticConfig(_Strict):
    """A world size that changes while the run trains (``lbtrain.elastic``; docs: Worlds and
    modes, Elastic worlds). Either of two kinds:

    - a simulated schedule (``mode: simulated``): ``world_sizes`` maps a point of the run to the
      world size from there on (``{0: 4, 300: 2, 600: 4}``), the points counted in optimizer
      ``steps`` or training ``samples`` (``unit``); it starts at 0 with ``training.world_size``;
    - real workers coming and going (``mode: horovod``, Horovod's elastic launcher with Gloo):
      between ``min_workers`` and ``max_workers`` ranks, the hosts found by ``discovery`` (a
      script printing one ``host:slots`` line per host, or that list itself), the state committed
      every ``commit_steps`` steps (a failure rolls back to the last commit), a host that failed
      tried again after ``cooldown_seconds: [low, high]`` (Horovod's blacklist cooldown; none:
      never), the job ended after ``timeout_seconds`` with fewer than ``min_workers``.

    ``lr``: ``follow`` (the scaling rule applied to the new global batch, the decay clocked in
    samples, a jump up re-warmed over ``rewarmup_steps`` steps) or ``keep`` (the initial world's
    schedule clocked in steps, as a Horovod elastic job that leaves its LR alone)."""

    world_sizes: dict[int, int] | None = None
    unit: Literal["steps", "samples"] = "steps"
    lr: Literal["follow", "keep"] = "follow"
    rewarmup_steps: int = Field(default=0, ge=0, le=MAX_STEPS)
    min_workers: int | None = Field(default=None, ge=1, le=MAX_WORLD_SIZE)
    max_workers: int | None = Field(default=None, ge=1, le=MAX_WORLD_SIZE)
    discovery: str | list[str] | None = None
    commit_steps: int = Field(default=10, ge=1, le=MAX_STEPS)
    cooldown_seconds: tuple[int, int] | None = None
    timeout_seconds: int = Field(default=600, ge=1, le=86_400)

    @field_validator("world_sizes", mode="before")
    @classmethod
    def _integer_points(cls, value: Any) -> Any:
        """Keys written as digit strings (JSON, a run's ``config.yaml``) are the integers they spell."""
        if isinstance(value, dict):
            return {int(key) if isinstance(key, str) and key.isdigit() else key: size for key, size in value.items()}
        return value

    @field_validator("cooldown_seconds", mode="before")
    @classmethod
    def _pair(cls, value: Any) -> Any:
        """A YAML list ``[5, 10]`` is the pair."""
        return tuple(value) if isinstance(value, list) else value

    @field_validator("world_sizes")
    @classmethod
    def _schedule(cls, value: dict[int, int] | None) -> dict[int, int] | None:
        if value is None:
            return None
        if 0 not in value:
            raise ValueError(f"must give the world size at 0 (the run's start), got points {sorted(value)}")
        for point, size in value.items():
            if point < 0:
                raise ValueError(f"points are steps or samples from 0 on, got {point}")
            if not 1 <= size <= MAX_WORLD_SIZE:
                raise ValueError(f"world sizes are 1 to {MAX_WORLD_SIZE}, got {size} at {point}")
        return dict(sorted(value.items()))

    @field_validator("discovery")
    @classmethod
    def _hosts(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list):
            parse_hosts(value)
        elif value is not None and not value.strip():
            raise ValueError("is a script's path or a list of host:slots, got an empty string")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> "ElasticConfig":
        real = {name: getattr(self, name) for name in ("min_workers", "max_workers", "discovery") if getattr(self, name) is not None}
        if self.world_sizes is not None and real:
            raise ValueError(f"give world_sizes (a simulated schedule) or min_workers, max_workers and discovery (real workers), "
                             f"not both (got world_sizes and {', '.join(real)})")
        if self.world_sizes is None and len(real) < 3:
            missing = [name for name in ("min_workers", "max_workers", "discovery") if name not in real]
            raise ValueError(f"give world_sizes (a simulated schedule) or min_workers, max_workers and discovery "
                             f"(real workers; missing {', '.join(missing)})")
        if self.world_sizes is None and self.min_workers > self.max_workers:
            raise ValueError(f"min_workers ({self.min_workers}) is more than max_workers ({self.max_workers})")
        if self.cooldown_seconds is not None and not 0 < self.cooldown_seconds[0] <= self.cooldown_seconds[1]:
            raise ValueError(f"cooldown_seconds is [low, high] with 0 < low <= high, got {list(self.cooldown_seconds)}")
        return self

    @property
    def sizes(self) -> list[int]:
        """Every world size the run may take: the schedule's, or ``min_workers`` to ``max_workers``."""
        if self.world_sizes is not None:
            return sorted(set(self.world_sizes.values()))
        return list(range(self.min_workers, self.max_workers + 1))


BUDGET_KINDS = ("epochs", "steps", "samples")
# The values of ``training.jit_compile``, as a YAML file writes them.
JIT_COMPILE_CHOICES = ("auto", "true", "false")
DEFAULT_EPOCHS = 3


class TrainingConfig(_Strict):
    """How one run trains. ``world_size`` workers each take ``per_worker_batch`` samples a step.

    The budget is one of ``epochs`` (default 3), ``steps`` (the same number of updates at every
    batch size: Hoffer et al. 2017's regime adaptation) or ``samples`` (``samples //
    global_batch`` steps); the decay length follows it. ``min_steps`` is a floor of updates under
    any budget: a run trains ``max(budget's steps, min_steps)`` (equal epochs with an update floor,
    so that a large batch is not judged on a handful of updates: at 64 workers an equal-epoch
    budget can leave single-digit updates; ``lbtrain scale`` sets it). ``stop_at`` ends a run early at a
    training target, the budget capping it. The verdict (``lbtrain.verdict``): a step loss above
    ``divergence_factor`` x the step-0 loss is divergence; a final train accuracy within
    ``collapse_margin`` of chance is a collapse; an epoch-mean training loss above
    ``instability_factor`` x the lowest before it, after the first epoch, makes an ok run
    ``ok-unstable``.

    ``validation_every_steps: N`` (null: at epoch ends only) also measures the validation loss and
    accuracy every N optimizer steps (steps N, 2N, ...: ``lbtrain.callbacks.ValidationPoints``),
    kept with their steps as the result's ``validation_points`` beside the per-epoch history; a
    ``stop_at.val_accuracy`` then stops at the first such point that reaches it, not at the end of
    its epoch, and steps to a target (``lbtrain.measures.steps_to_target``) are read from these
    points, so the count is not quantized by epochs (at batch 32 on 54,000 samples an epoch is
    1,687 steps). It needs a validation split.

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

    ``jit_compile`` (``auto``, ``true`` or ``false``; ``lbtrain.trainer.resolve_jit_compile``)
    compiles the train step with XLA. ``auto`` compiles where a GPU or TPU is visible and the
    mode's step can be compiled, and not on a CPU-only machine: there ``benchmarks/bench_jit.py``
    measured the compiled step slower (TF 2.15, 2 loaded cores, batch 256: the cnn with batch
    norm's epoch 4.3x to 4.6x the uncompiled one in the trainer, 5.0x to 7.3x in a plain
    ``model.fit``; the mlp's epochs, too short to tell, 0.9x to 3.5x), as Keras 3's own
    ``jit_compile="auto"`` decides. ``true``
    in a mode whose step cannot be compiled (``mirrored``, ``multiworker``, ``parameter_server``:
    XLA cannot compile a tf.distribute step) is a ``ConfigError`` before anything trains; under Horovod the forward and backward pass are compiled and the allreduce stays
    outside XLA (``HorovodAllreduce`` has no XLA kernel). The weights equal the uncompiled
    step's within float tolerance (models with dropout draw other masks under XLA).
    """

    world_size: int = Field(default=1, gt=0, le=MAX_WORLD_SIZE)
    per_worker_batch: int = Field(default=128, gt=0, le=MAX_BATCH)
    epochs: int | None = Field(default=None, gt=0, le=MAX_EPOCHS)
    steps: int | None = Field(default=None, gt=0, le=MAX_STEPS)
    samples: int | None = Field(default=None, gt=0, le=MAX_SAMPLES)
    min_steps: int | None = Field(default=None, gt=0, le=MAX_STEPS)
    stop_at: StopAtConfig | None = None
    validation_every_steps: int | None = Field(default=None, gt=0, le=MAX_STEPS)
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    micro_batches: int = Field(default=1, gt=0)
    accumulation_steps: int = Field(default=1, gt=0)
    staleness: int = Field(default=0, ge=0)
    eval_batch: int = Field(default=1024, gt=0)
    precise_bn_samples: int | None = Field(default=None, gt=0)
    divergence_factor: float = Field(default=DEFAULT_DIVERGENCE_FACTOR, gt=1.0)
    collapse_margin: float = Field(default=DEFAULT_COLLAPSE_MARGIN, ge=0, lt=1)
    instability_factor: float = Field(default=DEFAULT_INSTABILITY_FACTOR, gt=1.0)
    checkpoint: bool = True
    tensorboard: bool = False
    jit_compile: bool | Literal["auto"] = "auto"
    elastic: ElasticConfig | None = None

    @field_validator("jit_compile", mode="before")
    @classmethod
    def _jit_compile_choice(cls, value: Any) -> Any:
        if not (isinstance(value, bool) or value == "auto"):
            raise ValueError(f"must be one of {', '.join(JIT_COMPILE_CHOICES)} (got {quote(value)})")
        return value

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

    @model_validator(mode="after")
    def _elastic_schedule(self) -> "TrainingConfig":
        elastic = self.elastic
        if elastic is None:
            return self
        if elastic.world_sizes is not None and elastic.world_sizes[0] != self.world_size:
            raise ValueError(f"elastic.world_sizes starts at world size {elastic.world_sizes[0]} but training.world_size is "
                             f"{self.world_size}: make them equal")
        if elastic.world_sizes is None and not elastic.min_workers <= self.world_size <= elastic.max_workers:
            raise ValueError(f"training.world_size ({self.world_size}, the workers the job starts with) is not within "
                             f"elastic.min_workers ({elastic.min_workers}) and max_workers ({elastic.max_workers})")
        if self.steps is not None or self.min_steps is not None:
            raise ValueError("an elastic run's budget is epochs or samples (the data seen at every world size), not steps "
                             "(nor min_steps)")
        for name in ("micro_batches", "accumulation_steps", "staleness"):
            if getattr(self, name) != TrainingConfig.model_fields[name].default:
                raise ValueError(f"training.{name} ({getattr(self, name)}) cannot be combined with training.elastic yet")
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
        if self.min_steps is not None:
            budget["min_steps"] = self.min_steps
        if self.stop_at is not None:
            budget["stop_at"] = self.stop_at.model_dump(exclude_none=True)
        return budget


def check_micro_batches(settings: TrainingConfig) -> None:
    """ValueError unless ``micro_batches`` divides ``world_size`` (each micro-batch holds whole
    workers' batches)."""
    if settings.world_size % settings.micro_batches:
        raise ValueError(
            f"training.micro_batches ({settings.micro_batches}) must divide training.world_size "
            f"({settings.world_size}): each micro-batch holds whole workers' batches"
        )


class AnalysisConfig(_Strict):
    """Measurements a run takes besides its metrics (see ``lbtrain.reports``).

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
    (seeded by ``training.seed``; null for all), with ``lbtrain.measures.flatness``'s defaults.
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
# configured before the field existed finds its runs done. A path may reach into a nested section
# (``training.stop_at.val_accuracy``: only where ``stop_at`` is set).
LATER_FIELD_DEFAULTS = {"data.task": "auto", "data.test_split": 0.2, "lr.warmup_type": "gradual", "training.accumulation_steps": 1,
                        "training.staleness": 0, "training.precise_bn_samples": None,
                        "training.jit_compile": "auto", "training.elastic": None, "training.stop_at.val_accuracy": None,
                        "training.min_steps": None, "data.num_classes": None, "training.validation_every_steps": None}
# Fields that only judge a finished run and never change how it trains, with the value a run id
# hashes for them whatever they are set to (the default when ids were first computed; None: not
# hashed, a field added later): a run judged by another margin is the same run, found done
# rather than trained again.
JUDGING_FIELDS = {"training.collapse_margin": 0.05, "training.instability_factor": None}


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
        check_micro_batches(settings)
        pieces_requested = self.analysis.noise_scale and self.analysis.noise_scale_pieces is not None
        if pieces_requested and settings.micro_batches == settings.accumulation_steps == 1:
            from lbtrain.measures.noise_scale import measurement_pieces

            measurement_pieces(settings.world_size, settings.per_worker_batch, self.analysis.noise_scale_pieces)
        if settings.elastic is not None and self.analysis.noise_scale:
            raise ValueError("analysis.noise_scale cannot be combined with training.elastic yet (the noise scale is per global batch)")
        if settings.stop_at is not None and settings.stop_at.metric == "val_accuracy" and not self.data.validation_split:
            raise ValueError("training.stop_at.val_accuracy needs a validation split (data.validation_split > 0)")
        if settings.validation_every_steps is not None and not self.data.validation_split:
            raise ValueError("training.validation_every_steps needs a validation split (data.validation_split > 0)")
        if settings.validation_every_steps is not None and settings.elastic is not None:
            raise ValueError("training.validation_every_steps cannot be combined with training.elastic yet")
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
        ``samples // global_batch``, raised to ``min_steps`` where it is below; the decay length and
        the step at which training stops."""
        settings = self.training
        if settings.epochs is not None:
            steps = settings.epochs * steps_per_epoch
        elif settings.steps is not None:
            steps = settings.steps
        else:
            steps = settings.samples // self.global_batch
        return max(steps, settings.min_steps or 0)

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

    def elastic_samples(self, steps_per_epoch: int) -> int:
        """An elastic run's budget in training samples: what the budget trains at the initial world
        size (``total_steps * global_batch``), so it compares with the fixed-world run at equal samples."""
        return self.total_steps(steps_per_epoch) * self.global_batch

    def at_world_size(self, world_size: int, samples: int) -> "RunConfig":
        """This run with ``world_size`` workers and a budget of ``samples`` training samples: whose
        ``schedule`` is the recipe an elastic run follows in that world (``lbtrain.elastic``)."""
        training = self.training.model_copy(update={"world_size": world_size, "epochs": None, "steps": None,
                                                    "samples": samples, "elastic": None})
        return self.model_copy(update={"training": training})

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as written to ``config.yaml``."""
        return self.model_dump(mode="json")

    def identity(self) -> dict[str, Any]:
        """``to_dict`` without the fields of ``LATER_FIELD_DEFAULTS`` that are at their default, and
        with ``JUDGING_FIELDS`` at their fixed values: what a run's id hashes, so runs configured
        before such a field existed, or judged by another margin, keep their ids."""
        data = self.to_dict()
        for path, default in LATER_FIELD_DEFAULTS.items():
            *sections, field = path.split(".")
            parent = data
            for section in sections:
                parent = parent.get(section) if isinstance(parent, dict) else None
            if isinstance(parent, dict) and field in parent and parent[field] == default:
                del parent[field]
        for path, hashed in JUDGING_FIELDS.items():
            section, field = path.split(".")
            data[section].pop(field, None)
            if hashed is not None:
                data[section][field] = hashed
        return data


def describe_budget(budget: dict[str, Any]) -> str:
    """``{"steps": 600, "stop_at": {"train_loss": 0.3}}`` -> ``600 steps, until train loss <= 0.3``.

    >>> describe_budget({"epochs": 3})
    '3 epochs'
    """
    kind = next(kind for kind in BUDGET_KINDS if kind in budget)
    text = f"{budget[kind]} {kind}"
    if budget.get("min_steps"):
        text += f", at least {budget['min_steps']} steps"
    if budget.get("stop_at"):
        text += f", until {StopAtConfig(**budget['stop_at']).describe()}"
    return text



def run_config_from_dict(data: dict[str, Any]) -> RunConfig:
    """A ``RunConfig`` from plain data; any problem (a non-finite or oversized number anywhere
    included: ``lbtrain.config.limits``) is a one-line ``ConfigError``."""
    check_numbers(data)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, schema=RunConfig)) from None

