"""The schema of an experiment: a base run, a grid of changes to it, where results go, how runs
start (the mode and its launch settings), and how ``lbtrain sweep`` tunes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_serializer, field_validator, model_validator
from pydantic_core import PydanticCustomError

from lbtrain.config.limits import MAX_SEED, check_grid_size, quote
from lbtrain.config.run import AnalysisConfig, DataConfig, LRConfig, ModelConfig, OptimizerConfig, TrainingConfig, _Strict
from lbtrain.errors import ConfigError
from lbtrain.mode_names import DEFAULT_MODE, MODE_NAMES
from lbtrain.results import HOROVOD_TIMELINE_FILE

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
# Likewise the scheduling of a rank's threads (``HorovodWorld``): 1 or 0, unset for auto.
HOROVOD_IDLE_THREADS_VARIABLE = "LBTRAIN_HOROVOD_IDLE_THREADS"
HOROVOD_PIN_CORES_VARIABLE = "LBTRAIN_HOROVOD_PIN_CORES"
# The horovodrun flags that set the same variables as a knob (the flag would win).
_HOROVODRUN_FLAGS = {
    "fusion_threshold_mb": ("--fusion-threshold-mb",), "cycle_time_ms": ("--cycle-time-ms",),
    "timeline": ("--timeline-filename",), "hierarchical_allreduce": ("--hierarchical-allreduce", "--no-hierarchical-allreduce"),
}
_KNOB_OFF = {"timeline": False}  # the value that sets nothing, where it is not None
# ``auto`` (the rank decides from its cores and threads), on or off.
_AutoSwitch = Literal["auto"] | bool


class HorovodLaunchConfig(_Strict):
    """How ``mode: horovod`` starts each run: ``horovodrun -np W -H HOSTS ARGS... lbtrain train``.
    ``hosts`` defaults to ``localhost:W``; ``args`` go to horovodrun as they are.

    Horovod's knobs reach every rank as Horovod's own environment variables (``environment``);
    one left unset keeps Horovod's default (or the launching shell's variable):
    ``fusion_threshold_mb`` (tensor fusion buffer, MiB; 0 turns fusion off), ``cycle_time_ms``
    (the background thread's cycle), ``timeline`` (rank 0 records a Horovod timeline in the run
    folder), ``compression`` (``fp16``: gradients cross the allreduce as float16) and
    ``hierarchical_allreduce`` (with MPI or NCCL builds). Two of lbtrain's own act in each rank
    (``HorovodWorld``; Linux): ``idle_threads`` runs Horovod's threads at ``SCHED_IDLE`` and
    ``pin_cores`` binds each rank to its own share of the cores. Each is ``auto`` (the default:
    on exactly when the ranks' TensorFlow threads leave no core spare and they train on CPUs,
    ``lbtrain.worlds.horovod.place_threads``), ``true`` or ``false`` (their effect on np=2
    against two independent processes: ``benchmarks/bench_horovod.py``; docs: Benchmarks)."""

    hosts: str | None = None
    args: list[str] = Field(default_factory=list)
    fusion_threshold_mb: float | None = Field(default=None, ge=0, le=1 << 20)
    cycle_time_ms: float | None = Field(default=None, gt=0, le=60_000)
    timeline: bool = False
    compression: Literal["none", "fp16"] = "none"
    hierarchical_allreduce: bool | None = None
    idle_threads: _AutoSwitch = "auto"
    pin_cores: _AutoSwitch = "auto"

    @field_validator("idle_threads", "pin_cores", mode="before")
    @classmethod
    def _auto_or_bool(cls, value: Any) -> Any:
        """One error naming all three values (the union's own would name only the boolean)."""
        if value != "auto" and not isinstance(value, bool):
            raise PydanticCustomError("auto_or_bool", "Input should be 'auto', true or false")
        return value

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
        ``LBTRAIN_HOROVOD_PIN_CORES`` (``1`` or ``0``) when not ``auto`` (unset, the rank decides).

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
        if self.idle_threads != "auto":
            variables[HOROVOD_IDLE_THREADS_VARIABLE] = str(int(self.idle_threads))
        if self.pin_cores != "auto":
            variables[HOROVOD_PIN_CORES_VARIABLE] = str(int(self.pin_cores))
        return variables


class MultiWorkerLaunchConfig(_Strict):
    """How ``mode: multiworker`` starts each run: W processes of ``lbtrain train --mode
    multiworker`` on this machine, worker i with ``TF_CONFIG`` naming ``localhost:PORT`` for every
    worker and itself as task i (``lbtrain.launch.cluster.launch_multiworker``). ``base_port``: the
    workers listen on ``base_port .. base_port + W - 1`` (refused before anything trains if one is
    in use); null (default): free ports chosen per run."""

    base_port: int | None = Field(default=None, ge=1024, le=65535)


class ParameterServerLaunchConfig(_Strict):
    """How ``mode: parameter_server`` starts each run: one job on this machine of a chief (the
    coordinator, which writes the run), W workers and ``ps_tasks`` parameter servers, every task
    ``lbtrain train --mode parameter_server`` with its ``TF_CONFIG``
    (``lbtrain.launch.cluster.launch_parameter_server``). ``base_port``: the tasks listen on
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

    trials: int = Field(default=20, gt=0, le=100_000)
    sampler_seed: int = Field(default=0, ge=0, le=MAX_SEED)
    pruner: Literal["median", "successive_halving", "none"] = "median"
    pruner_startup_trials: int = Field(default=2, ge=0, le=100_000)
    pruner_warmup_epochs: int = Field(default=0, ge=0, le=1_000_000)
    storage: str | None = None
    heartbeat_seconds: int = Field(default=10, gt=0, le=3600)
    grace_seconds: int = Field(default=30, gt=0, le=86400)

    @field_serializer("storage")
    def _password_masked(self, storage: str | None) -> str | None:
        """Dumped (``experiment.yaml``, the folder's owner check) with its password as ``***``
        (``lbtrain.storage_urls.describe``): no secret is written under results/."""
        from lbtrain.storage_urls import describe

        return None if storage is None else describe(storage)


def check_search_paths(search: dict[str, SearchParam]) -> dict[str, SearchParam]:
    """``search`` unchanged if every key is a field path of a run; else a ValueError naming it."""
    for path in search:
        if "." not in path or not known_field_path(path):
            raise ValueError(f"{path!r} is no field path (use e.g. lr.base_lr, lr.warmup_epochs, optimizer.name)")
    return search



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


class TrainLongerConfig(_Strict):
    """A convergence control of the protocol (``protocol.train_longer``): at ``world_size`` one
    arm re-run with every final seed for ``factor`` times the updates its finals took, its decay
    stretched to the longer budget and its warmup kept in epochs. ``arm`` names it by its final
    label (``"momentum+warmup linear rule"``); by default it is the arm with the best mean
    validation accuracy there (every seed ok), as for ``equal_steps``."""

    world_size: int = Field(gt=0)
    factor: float = Field(gt=1, le=1000)
    arm: str | None = None


# The fewest final seeds of a protocol's arm that a claim may rest on.
MIN_PROTOCOL_SEEDS = 3


class ProtocolConfig(_Strict):
    """The tuning protocol of ``lbtrain sweep`` (``lbtrain.studies.protocol``; Shallue et al. 2018,
    Nado et al. 2021): every arm is tuned on validation, then its best configuration is re-run
    with each of ``seeds`` (at least 3, none of them the tuning trials' ``training.seed``; fewer
    only with ``exploratory: true``, a first look on which no claim rests) and tested. ``search_method``: ``grid`` (default; a log2 grid extended up to ``grid_extensions``
    times per edge while the best sits on it) or ``tpe`` (``sweep.trials`` trials, the first
    ``tpe_startup_trials`` >= 10 random, at least 3x that many in all); see
    ``lbtrain.studies.search``. No trial is pruned but by divergence.
    ``reference_world_size`` (default the smallest of ``grid.world_sizes``) is where a recipe's
    base LR is tuned for its "rule" arms. ``rules`` maps a recipe's label to the LR rules its
    reference tuning is carried by, one rule arm each (default: the recipe's own ``lr.rule``):
    ``{momentum: [none, sqrt, linear]}`` compares three rules on one base-batch tuning.
    ``search`` maps a recipe's label to dimensions that replace (or add to) the experiment's
    ``search`` for that recipe, e.g. Adam's LR range beside SGD's; the trial budget stays
    ``sweep.trials`` for every arm. ``equal_steps`` lists world sizes where the best arm (by
    validation accuracy, every seed ok) is also re-run for as many updates as the reference
    world size's runs took (Hoffer et al. 2017's "train longer"), with the same seeds.
    ``rule_only`` lists recipes tuned at the reference world size only: elsewhere they have
    rule arms and no tuned arm (a recipe that is there to test a rule, e.g. linear scaling
    without warmup, at a fraction of the tuning); ``tuned_only`` lists recipes with tuned arms
    only, never carried by a rule (a recipe that is there as tuned, e.g. LARS in a study of SGD's
    rules). ``train_longer`` adds convergence controls
    (``TrainLongerConfig``): an arm re-run for a multiple of its own updates.
    ``tuning_seeds`` (default: none, each trial trains once with the run's ``training.seed``):
    every trial trains once per listed seed and is scored on the mean of their validation
    accuracies, so the pick is not one seed's luck; none of them may be a final seed."""

    seeds: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1)
    exploratory: bool = False
    search_method: Literal["grid", "tpe"] = "grid"
    grid_extensions: int = Field(default=3, ge=0)
    tpe_startup_trials: int = Field(default=10, gt=0)
    reference_world_size: int | None = Field(default=None, gt=0)
    rules: dict[str, list[str | float]] = Field(default_factory=dict)
    search: dict[str, dict[str, SearchParam]] = Field(default_factory=dict)
    equal_steps: list[int] = Field(default_factory=list)
    rule_only: list[str] = Field(default_factory=list)
    tuned_only: list[str] = Field(default_factory=list)
    train_longer: list[TrainLongerConfig] = Field(default_factory=list)
    tuning_seeds: list[int] = Field(default_factory=list)

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

    @field_validator("seeds", "tuning_seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {seeds}")
        if not all(0 <= seed <= MAX_SEED for seed in seeds):
            raise ValueError(f"seeds must be integers from 0 to {MAX_SEED}, got {quote(seeds)}")
        return seeds

    @model_validator(mode="after")
    def _enough_seeds(self) -> "ProtocolConfig":
        if len(self.seeds) < MIN_PROTOCOL_SEEDS and not self.exploratory:
            raise ValueError(f"seeds: the finals need at least {MIN_PROTOCOL_SEEDS} fresh seeds, got {len(self.seeds)} "
                             "(exploratory: true allows fewer for a first look; no claim then rests on them)")
        return self


class ExperimentConfig(_Strict):
    """One study: a base run, a grid of changes to it, where results go and how runs start.

    ``mode``: a name of ``lbtrain.worlds.modes.MODES`` (``simulated``, the default: W workers in one
    process; ``horovod``, ``mirrored``, ``multiworker``, ``parameter_server``); the ``horovod``,
    ``multiworker`` and ``parameter_server`` sections say how those start.

    ``grid`` maps field paths (``lr.rule``, ``optimizer.name``, ``training.per_worker_batch``,
    any ``section.field``) or the shorthands ``world_sizes`` / ``seeds`` to lists of values,
    crossed with each other; ``variants`` is a list of named override sets (``label`` plus
    field paths) crossed with the rest, for recipes that change several fields together.
    ``sizing`` says what the study trimmed to fit its machine and why; reports quote it beside
    the description.

    ``imports`` lists modules of the user's (``my_pkg.models``) imported before anything else
    is checked, so the models and datasets they register (``lbtrain.register_model``) can be
    named; the names reach every process the experiment starts (``lbtrain.references``). The
    command line's ``--import MODULE`` does the same.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)  # it names a folder
    description: str = ""
    sizing: str = ""
    mode: Literal[MODE_NAMES] = DEFAULT_MODE
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
    imports: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _imports_first(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("imports"), list):
            from lbtrain.references import ReferenceError_, import_modules

            try:
                import_modules(data["imports"], "imports")
            except ReferenceError_ as error:
                raise ValueError(str(error)) from None
        return data

    @field_validator("data", "model", mode="before")
    @classmethod
    def _callables_as_references(cls, section: Any, info: ValidationInfo) -> Any:
        """In Python, ``model={"name": build}`` and ``data={"dataset": load}`` take the callable
        itself; it is kept as its reference (``lbtrain.references.reference_of``)."""
        key = "dataset" if info.field_name == "data" else "name"
        if isinstance(section, dict) and callable(section.get(key)) and not isinstance(section.get(key), str):
            from lbtrain.references import reference_of

            return {**section, key: reference_of(section[key])}
        return section

    @field_validator("search")
    @classmethod
    def _search_paths(cls, search: dict[str, SearchParam]) -> dict[str, SearchParam]:
        return check_search_paths(search)

    @field_validator("grid")
    @classmethod
    def _grid_size(cls, grid: dict[str, Any]) -> dict[str, Any]:
        """At most ``MAX_GRID_RUNS`` runs, counted before any is expanded (in Python as from a file)."""
        try:
            check_grid_size(grid)
        except ConfigError as error:
            raise ValueError(str(error).removeprefix("grid: ")) from None
        return grid

    def base_run(self) -> dict[str, Any]:
        """The run every grid point starts from, as plain data."""
        return {section: dict(getattr(self, section)) for section in RUN_SECTIONS}

    @property
    def results_dir(self) -> Path:
        """``output_dir/name``, with ``~`` expanded as a shell would."""
        return Path(self.output_dir).expanduser() / self.name

