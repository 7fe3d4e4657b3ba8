"""Optuna sweeps: one study per world size, tuning the recipe the experiment's ``search`` names.

Each study (``<experiment>-w<W>``) maximizes the final *validation* accuracy (the test set is
only read for the best trial's report), samples with a seeded TPE sampler, and prunes with a
median pruner fed every epoch's validation accuracy, never before the trial's warmup has ended.
Every trial carries its run's verdict (``lbtrain.verdict``) as the user attribute ``status``: a
diverged trial is pruned with its reason (user attribute ``reason``); a collapsed one completes
with its (chance-level) value, so the sampler learns from it, but "best" and the fits only ever
take trials whose status is ``ok``. Studies live in SQLite (``results/<name>/optuna.db``), a
journal file on a shared filesystem or a database server (``lbtrain.studies.storages``), so processes on
one machine or many share them; every process (a rerun too) takes trials until its study has
exactly ``trials`` finished ones, and heartbeats let a worker fail and retry trials a killed
process left RUNNING. The summary fits the tuned learning rate against the global batch,
``lr* ~ B ** alpha``: is the tuned LR linear (alpha 1) or sqrt (alpha 0.5) in the batch?
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import logging
import math
import os
import statistics
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import optuna
import tensorflow as tf

from lbtrain.config import ConfigError, ExperimentConfig, SearchParam, run_config_from_dict, with_overrides
from lbtrain.errors import WorkersFailed
from lbtrain.files import csv_text, write_atomic, write_json_atomic
from lbtrain.reports.scaling_laws import LrExponentFit, lr_exponent
from lbtrain.results import OPTUNA_DATABASE, SWEEP_FIT_FILE, SWEEP_SUMMARY_FILE, claim_folder, file_lock
from lbtrain.storage_urls import STORAGE_VARIABLE, local_path
from lbtrain.studies.plan import Placement, PlannedRun, check_runs, process_local_problem
from lbtrain.studies.storages import claim_trial, open_storage, run_claimed
from lbtrain.trainer import train
from lbtrain.verdict import OK, is_ok
from lbtrain.worlds.base import World
from lbtrain.worlds.modes import DEFAULT_MODE, default_mode_name, get_mode
from lbtrain.worlds.simulated import SimulatedWorld

logger = logging.getLogger(__name__)

# A grid's edge extension is queued outside the searched range on purpose (``lbtrain.studies.search``):
# Optuna's warning about it is silenced where a trial takes its values (``suggest``).
OUT_OF_RANGE_WARNING = r"Fixed parameter .* is out of range"

OBJECTIVE = "validation_accuracy"
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def study_name(experiment: ExperimentConfig, world_size: int) -> str:
    return f"{experiment.name}-w{world_size}"


@dataclasses.dataclass(frozen=True)
class StudySpec:
    """One Optuna study: its name, the world size its trials train at, the run every trial
    starts from (plain data) and the fields it searches. A plain sweep has one per world size
    (``world_study``); the tuning protocol (``lbtrain.studies.protocol``) one per arm it tunes."""

    name: str
    world_size: int
    base: dict[str, Any]
    search: dict[str, SearchParam]
    # The protocol's: ``grid`` or ``tpe`` (``lbtrain.studies.search``), TPE's random startup
    # trials, and the pruner that overrides ``sweep.pruner``; None keeps the plain sweep's TPE.
    method: str | None = None
    startup_trials: int | None = None
    pruner: str | None = None
    # The protocol's ``tuning_seeds``: each trial trains once per seed and scores their mean
    # validation accuracy; empty: once, with the base run's ``training.seed``.
    seeds: tuple[int, ...] = ()

    @property
    def scored_seeds(self) -> list[int]:
        """The seeds a trial's score rests on: ``seeds``, else the base run's ``training.seed``."""
        return list(self.seeds) or [self.run({}).training.seed]

    def run(self, params: dict[str, Any], seed: int | None = None):
        """The run config of one trial: the base run at the study's world size with ``params``
        (and ``training.seed`` = ``seed`` when given)."""
        seeded = {} if seed is None else {"training.seed": seed}
        return run_config_from_dict(with_overrides(self.base, {"training.world_size": self.world_size, **params, **seeded}))


def world_study(experiment: ExperimentConfig, world_size: int) -> StudySpec:
    """The study of a plain sweep at ``world_size``: the experiment's base run and search space."""
    return StudySpec(study_name(experiment, world_size), world_size, experiment.base_run(), dict(experiment.search))


def _spec(experiment: ExperimentConfig, study: int | StudySpec) -> StudySpec:
    return study if isinstance(study, StudySpec) else world_study(experiment, study)


def storage_url(experiment: ExperimentConfig) -> str:
    """The experiment's storage: its ``sweep.storage`` (``sqlite:///``, ``journal:///``,
    ``postgresql://``...: ``lbtrain.studies.storages``) or SQLite in its results folder."""
    return experiment.sweep.storage or f"sqlite:///{(experiment.results_dir / OPTUNA_DATABASE).resolve()}"


def world_sizes(experiment: ExperimentConfig) -> list[int]:
    """The world sizes swept: ``grid.world_sizes``, else the base run's world size."""
    sizes = experiment.grid.get("world_sizes", [experiment.training.get("world_size", 1)])
    if not isinstance(sizes, list) or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in sizes):
        raise ConfigError(f"grid.world_sizes must be a list of positive integers, got {sizes!r}")
    return sizes


def sampler_seed(experiment: ExperimentConfig, world_size: int, worker: int, finished: int, study: str = "") -> int:
    """The TPE sampler's seed for one process: drawn from ``sweep.sampler_seed``, the world
    size, the worker's index, the number of trials the study had finished when the process
    joined and (for the protocol's studies) the study's name, so parallel workers, reruns and
    the arms of one world size draw distinct trials (one seed for all makes them repeat each
    other), while the same sweep launched the same way draws the same ones."""
    entropy = [experiment.sweep.sampler_seed, world_size, worker, finished] + ([zlib.crc32(study.encode())] if study else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def _storage(url: str, settings) -> optuna.storages.BaseStorage:
    """The Optuna storage behind ``url`` with the sweep's heartbeats (``lbtrain.studies.storages``); a
    URL it cannot open is a one-line ``ConfigError`` naming the storage."""
    return open_storage(url, settings.heartbeat_seconds, settings.grace_seconds)


def open_sweep_storage(experiment: ExperimentConfig, storage: str | None = None) -> optuna.storages.BaseStorage:
    """The experiment's storage (``storage``, else ``storage_url``) opened with its sweep's
    heartbeats, for ``open_study`` to share among several studies."""
    return _storage(storage or storage_url(experiment), experiment.sweep)


def open_study(experiment: ExperimentConfig, study: int | StudySpec, storage: str | optuna.storages.BaseStorage | None = None,
               worker: int = 0) -> optuna.Study:
    """Creates or loads a study (a ``StudySpec``, or the plain sweep's study of a world size),
    with this process's sampler (``sampler_seed``; worker ``worker`` of a parallel sweep).
    ``storage``: a URL (None: ``storage_url``), or one already opened (``open_sweep_storage``),
    which the studies a process keeps open share, as they share its database connections."""
    spec = _spec(experiment, study)
    settings = experiment.sweep
    opened_storage = storage if isinstance(storage, optuna.storages.BaseStorage) else _storage(storage or storage_url(experiment), settings)
    pruners = {
        "median": lambda: optuna.pruners.MedianPruner(
            n_startup_trials=settings.pruner_startup_trials, n_warmup_steps=settings.pruner_warmup_epochs),
        "successive_halving": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=settings.pruner_warmup_epochs + 1),
        "none": optuna.pruners.NopPruner,
    }
    opened = optuna.create_study(
        study_name=spec.name, storage=opened_storage, direction="maximize", pruner=pruners[spec.pruner or settings.pruner](),
        load_if_exists=True,
    )
    _check_objective(opened)
    _check_tuning_seeds(opened, spec)
    seed = sampler_seed(experiment, spec.world_size, worker, finished_trials(opened), spec.name if spec.method else "")
    if spec.method == "grid":
        # Every trial of a grid is queued with its parameters (``lbtrain.studies.protocol``): none is sampled.
        opened.sampler = optuna.samplers.RandomSampler(seed=seed)
        return opened
    # Constant liar: a worker treats the trials others are running as done and bad, so
    # parallel workers spread out instead of sampling next to each other.
    startup = {} if spec.startup_trials is None else {"n_startup_trials": spec.startup_trials}
    opened.sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=True, **startup)
    return opened


def _check_objective(study: optuna.Study) -> None:
    """A study of this name that already exists must be one that maximizes ``OBJECTIVE``, which
    lbtrain records in the study's user attribute ``objective`` (and adds to a study of its own
    made before it did); one made for another direction or objective (by another program, or
    an experiment of the same name) is a ``ConfigError``: its trials' values and the new ones
    would be ranked together, and its best trial would be the wrong one."""
    directions = [direction.name.lower() for direction in study.directions]
    objective = study.user_attrs.get("objective", OBJECTIVE)
    if directions != ["maximize"] or objective != OBJECTIVE:
        raise ConfigError(
            f"Optuna study {study.study_name!r} exists in the sweep's storage with direction {', '.join(directions)} and "
            f"objective {objective!r}; lbtrain's sweep maximizes {OBJECTIVE!r}: rename the experiment, set sweep.storage, "
            f"or delete that study")
    if "objective" not in study.user_attrs:
        study.set_user_attr("objective", OBJECTIVE)


def _check_tuning_seeds(study: optuna.Study, spec: StudySpec) -> None:
    """A study's trials are scored on the seeds it records in its user attribute
    ``tuning_seeds`` (a study made before it was recorded: the base run's ``training.seed``, the
    one seed its trials trained with); a study with finished trials scored on other seeds than
    ``spec.scored_seeds`` is a ``ConfigError``, as their values would be ranked together. A study
    without finished trials records the spec's seeds."""
    wanted = spec.scored_seeds
    if not finished_trials(study):
        if study.user_attrs.get("tuning_seeds") != wanted:
            study.set_user_attr("tuning_seeds", wanted)
        return
    recorded = list(study.user_attrs.get("tuning_seeds") or [spec.run({}).training.seed])
    if recorded != wanted:
        raise ConfigError(
            f"Optuna study {study.study_name!r} has trials scored on tuning seed{'s' if len(recorded) > 1 else ''} "
            f"{', '.join(map(str, recorded))}, the experiment asks for {', '.join(map(str, wanted))} (protocol.tuning_seeds, "
            "else training.seed): keep them, rename the experiment, set sweep.storage, or delete that study")


def suggest(trial: optuna.trial.BaseTrial, search: dict[str, SearchParam]) -> dict[str, Any]:
    """One value per searched field path (a queued trial's own: a grid's edge extension lies
    outside the searched range on purpose, ``lbtrain.studies.search``, so Optuna's warning that a
    fixed parameter is out of range is silenced here)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=OUT_OF_RANGE_WARNING, category=UserWarning)
        return _suggested(trial, search)


def _suggested(trial: optuna.trial.BaseTrial, search: dict[str, SearchParam]) -> dict[str, Any]:
    values = {}
    for path, param in search.items():
        if param.type == "categorical":
            values[path] = trial.suggest_categorical(path, param.choices)
        elif param.type == "int":
            values[path] = trial.suggest_int(path, int(param.low), int(param.high), step=int(param.step or 1), log=param.log)
        else:
            values[path] = trial.suggest_float(path, param.low, param.high, step=param.step, log=param.log)
    return values


def trial_run(experiment: ExperimentConfig, world_size: int, params: dict[str, Any]):
    """The run config of one trial of the plain sweep at ``world_size``."""
    return world_study(experiment, world_size).run(params)


class _PruningCallback(tf.keras.callbacks.Callback):
    """Each epoch, the rank holding the trial (rank 0; the only one in a simulated world)
    reports the validation accuracy (rank-averaged under Horovod) and, once the trial's warmup
    of ``warmup_epochs`` has ended, asks the pruner (a warming-up trial has not yet shown its
    LR); the decision is broadcast so every rank stops together."""

    def __init__(self, trial: optuna.trial.Trial | None, world: World, warmup_epochs: float = 0.0):
        super().__init__()
        self.trial, self.world, self.warmup_epochs, self.pruned_at = trial, world, warmup_epochs, None

    def on_epoch_end(self, epoch, logs=None):
        prune = False
        value = (logs or {}).get("val_accuracy")
        if self.trial is not None and value is not None and math.isfinite(value):
            self.trial.report(float(value), epoch)
            prune = epoch + 1 >= self.warmup_epochs and self.trial.should_prune()
        if self.world.broadcast_object(prune):
            self.pruned_at = epoch + 1
            self.model.stop_training = True


def _record_result(trial: optuna.trial.Trial, result, pruning: _PruningCallback, pruner: str) -> float | None:
    """Stores what a trial's run produced as user attributes; returns the objective value, or
    None when the trial is to be pruned (diverged, or stopped by the pruner: reason stored)."""
    trial.set_user_attr("epochs_run", len(result.history))
    trial.set_user_attr("test_accuracy", result.metrics.get("test_accuracy"))
    trial.set_user_attr("learning_rate", result.learning_rate)
    trial.set_user_attr("status", result.status)
    if pruning.pruned_at is not None and result.status != "diverged":
        trial.set_user_attr("reason", f"pruned by the {pruner} pruner after epoch {pruning.pruned_at}")
        return None
    if not is_ok(result.status):
        trial.set_user_attr("reason", result.reason)
    return None if result.status == "diverged" else float(result.metrics[OBJECTIVE])


def search_corners(search: dict[str, SearchParam]) -> list[dict[str, Any]]:
    """Every combination of each dimension's extremes (low and high, or every choice)."""
    extremes = [[(path, value) for value in (param.choices if param.type == "categorical" else
                                             [int(param.low), int(param.high)] if param.type == "int" else [param.low, param.high])]
                for path, param in search.items()]
    return [dict(corner) for corner in itertools.product(*extremes)]


def check_sweepable(experiment: ExperimentConfig, studies: list[StudySpec] | None = None, *, in_process: bool = True) -> None:
    """A sweep needs something to search and a validation split to score on, and every corner
    of each study's search space must give a valid run at its world size, checked against its
    data and model as ``lbtrain run`` checks its grid (``check_runs``), before any trial trains,
    so a bad space is an error now rather than a failed trial an hour in. ``studies``: default
    the plain sweep's, one per world size. ``in_process``: the trials train in this process; if
    not, a model or dataset only this process holds is refused."""
    if not experiment.search:
        raise ConfigError("search: name at least one field to tune, e.g. lr.base_lr: {type: float, low: 0.01, high: 1, log: true}")
    if not get_mode(experiment.mode).sweepable:
        raise ConfigError(f"mode: {experiment.mode} cannot be swept: trials train simulated worlds (synchronous, exact for "
                          "the synchronous modes), which asynchronous training is not; tune a grid of LRs with lbtrain run instead")
    if not experiment.data.get("validation_split"):
        raise ConfigError("data.validation_split must be > 0 for a sweep: trials are scored on validation, never on test")
    corners = []
    for spec in studies if studies is not None else [world_study(experiment, w) for w in world_sizes(experiment)]:
        for corner in search_corners(spec.search):
            where = ", ".join(f"{path}={value}" for path, value in corner.items())
            try:
                corners.append(PlannedRun(f"corner-{len(corners)}", f"{spec.name} corner {where}", spec.run(corner)))
            except ConfigError as error:
                raise ConfigError(f"search space corner {where} ({spec.name}, world size {spec.world_size}) is no valid run: {error}") from None
    problem = None if in_process else process_local_problem(corners[0].config, "the sweep's trials train in other processes")
    if problem is not None:
        raise ConfigError(problem)
    check_runs(corners, get_mode(DEFAULT_MODE))  # trials train simulated worlds


def _objective_value(trial: optuna.trial.Trial, result, pruning: _PruningCallback, pruner: str) -> float:
    """``_record_result``, raising ``optuna.TrialPruned`` (with the reason) for a pruned trial."""
    value = _record_result(trial, result, pruning, pruner)
    if value is None:
        raise optuna.TrialPruned(trial.user_attrs["reason"])
    return value


def objective(experiment: ExperimentConfig, study: int | StudySpec):
    """The function a study optimizes (a ``StudySpec``, or the plain sweep's world size)."""
    spec = _spec(experiment, study)

    def run_trial(trial: optuna.trial.Trial) -> float:
        params = suggest(trial, spec.search)
        if spec.seeds:
            return _seeds_objective_value(trial, spec, params)
        config = spec.run(params)
        world = SimulatedWorld(spec.world_size, config.training.micro_batches)
        pruning = _PruningCallback(trial, world, config.lr.warmup_epochs)
        return _objective_value(trial, train(config, world, callbacks=[pruning]), pruning, spec.pruner or experiment.sweep.pruner)

    return run_trial


def _seeds_objective_value(trial: optuna.trial.Trial, spec: StudySpec, params: dict[str, Any]) -> float:
    """A trial of a study tuned on several seeds (``StudySpec.seeds``): one run per seed, one
    after another; the value is the mean of their validation accuracies,
    ``(1/k) sum_i acc_val(seed_i)``. The trial takes the first verdict that is not ok (a run
    that diverges ends the trial: it is pruned, as a one-seed trial); ``seed_values`` records
    each seed's value. Nothing is reported per epoch: the protocol prunes only by divergence."""
    values: dict[str, float] = {}
    tests, status = [], OK
    for seed in spec.seeds:
        config = spec.run(params, seed)
        world = SimulatedWorld(spec.world_size, config.training.micro_batches)
        result = train(config, world)
        trial.set_user_attr("learning_rate", result.learning_rate)
        if not is_ok(result.status):
            trial.set_user_attr("status", result.status)
            trial.set_user_attr("reason", f"seed {seed}: {result.reason}")
            trial.set_user_attr("epochs_run", len(result.history))
            trial.set_user_attr("seed_values", values)  # the seeds done before this one
            trial.set_user_attr("test_accuracy", None)
            if result.status == "diverged":
                raise optuna.TrialPruned(trial.user_attrs["reason"])
            return float(result.metrics[OBJECTIVE])
        values[str(seed)] = float(result.metrics[OBJECTIVE])
        tests.append(result.metrics.get("test_accuracy"))
        status = status if status != OK else result.status  # an ok-unstable seed makes the trial ok-unstable
        trial.set_user_attr("epochs_run", len(result.history))
    trial.set_user_attr("status", status)
    trial.set_user_attr("seed_values", values)
    trial.set_user_attr("test_accuracy", None if None in tests else statistics.fmean(tests))
    return statistics.fmean(values.values())


def finished_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def _report_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    outcome = f"validation {trial.value:.4f}" if trial.value is not None else trial.user_attrs.get("reason", trial.state.name.lower())
    logger.info("[%s trial %d] %s: %s %s", study.study_name, trial.number, trial.state.name.lower(), outcome, trial.params)


def optimize(experiment: ExperimentConfig, study: int | StudySpec, trials: int, storage: str | None = None,
             worker: int = 0) -> optuna.Study:
    """Runs trials of one study (a ``StudySpec``, or the plain sweep's world size), logging one
    line per trial (INFO), while the study has fewer than ``trials`` finished plus running trials
    (across every process sharing the storage: ``lbtrain.studies.storages.claim_trial``), so the
    processes together finish exactly ``trials``. Trials a killed process left RUNNING are
    failed first, even when the study has its trials already; their retries wait in the queue
    for the next top-up."""
    spec = _spec(experiment, study)
    opened = open_study(experiment, spec, storage, worker)
    run_trial = objective(experiment, spec)
    while (trial := claim_trial(opened, trials)) is not None:
        train_trial(opened, trial, run_trial)
    return opened


def train_trial(study: optuna.Study, trial: optuna.Trial, run_trial: Callable[[optuna.Trial], float]) -> None:
    """Trains a trial this process claimed (``run_claimed``: its heartbeat, its outcome told to
    the study), logs its line and frees what its run left behind before the next one."""
    _report_trial(study, run_claimed(study, trial, run_trial))
    gc.collect()


def optimize_distributed(experiment: ExperimentConfig, world: World, trials: int, storage: str | None = None,
                         worker: int = 0) -> optuna.Study | None:
    """The sweep of a Horovod job (world size = the job's size): rank 0 alone talks to the
    storage, claims each trial (``lbtrain.studies.storages.claim_trial``, as ``optimize``) and
    broadcasts its parameters; every rank trains while rank 0 records the trial's heartbeat;
    rank 0 tells the result. ``worker``: the job's index among Horovod jobs sweeping the same
    study (it seeds the sampler). Returns the study on rank 0, None elsewhere."""
    study = open_study(experiment, world.size, storage, worker) if world.is_root else None
    while True:
        trial = claim_trial(study, trials) if world.is_root else None
        params = world.broadcast_object(None if trial is None else suggest(trial, experiment.search))
        if params is None:
            return study
        config = trial_run(experiment, world.size, params)
        pruning = _PruningCallback(trial, world, config.lr.warmup_epochs)
        if not world.is_root:
            train(config, world, callbacks=[pruning])
            continue
        _report_trial(study, run_claimed(study, trial, lambda claimed: _objective_value(
            claimed, train(config, world, callbacks=[pruning]), pruning, experiment.sweep.pruner)))


@contextlib.contextmanager
def _environment(variable: str, value: str) -> Iterator[None]:
    """``variable`` set to ``value`` while the block runs (for the processes it starts), then as before."""
    before = os.environ.get(variable)
    os.environ[variable] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = before


def _spawn_workers(experiment: ExperimentConfig, experiment_path: str, overrides: list[str], trials: int, storage: str,
                   workers: int) -> None:
    """``workers`` processes of ``lbtrain sweep --worker INDEX`` topping up every world size's
    study (``run_workers``, placed by ``trial_placement``); the studies are created first so the
    workers do not race to create them (or Optuna's tables)."""
    from lbtrain.studies.runner import trial_placement

    for world_size in world_sizes(experiment):
        open_study(experiment, world_size, storage)
    run_workers(experiment_path, overrides, storage, trial_placement(experiment, trials, workers), ["--trials", str(trials)])


def run_workers(experiment_path: str, overrides: Sequence[str], storage: str, placed: Placement, arguments: Sequence[str] = ()) -> None:
    """``placed.workers`` processes of ``lbtrain sweep EXPERIMENT --worker INDEX`` (plus
    ``arguments`` and each ``--set`` of ``overrides``) sharing the storage, started side by side:
    a plain sweep's, or the tuning protocol's (``lbtrain.studies.protocol.run_tuning``). Each
    runs ``placed.threads`` TensorFlow threads (``--threads``) and sees its own GPUs
    (``--environment``, from ``Placement.environment``), as the runner's processes do. Returns once
    every worker has ended; ``WorkersFailed`` when any failed, with the distinct one-line errors
    they printed (eight workers meeting one full disk make one line)."""
    import sys

    from lbtrain.launch import run_side_by_side
    from lbtrain.launch.error_line import ended_by

    # The storage (and its password) reaches the workers in their environment, never their command line.
    shown = [value for value in overrides if value.partition("=")[0].strip() != "sweep.storage"]
    command = [sys.executable, "-m", "lbtrain.cli", "sweep", experiment_path, *arguments,
               *(item for value in shown for item in ("--set", value)), "--threads", str(placed.threads)]
    commands = [[*command, "--worker", str(index),
                 *(item for name, value in placed.environment(index).items() for item in ("--environment", f"{name}={value}"))]
                for index in range(placed.workers)]
    # Every worker is waited for: the survivors finish the studies, retrying a dead worker's stale trial.
    with _environment(STORAGE_VARIABLE, storage):
        exits = run_side_by_side(commands)
    failed = [index for index, ended in enumerate(exits) if ended.code]
    if failed:
        # A worker killed (SIGKILL, the OOM killer) printed no line: how it ended stands for one.
        reasons = list(dict.fromkeys(error for index in failed for error in exits[index].errors
                                     or [ended_by(exits[index].code)]))
        which = f"sweep worker {failed[0]}" if len(failed) == 1 else f"sweep workers {', '.join(map(str, failed))}"
        raise WorkersFailed(f"{which} of {placed.workers} failed: " + "; ".join(reasons),
                            exit_code=2 if all(exits[index].code == 2 for index in failed) else 1)


def worker_process(threads: int | None, environment: list[str]) -> None:
    """Sets up a sweep worker's process as ``run_workers`` placed it, before TensorFlow runs an
    op: ``environment``'s ``NAME=VALUE`` entries (its GPUs: TensorFlow reads
    ``CUDA_VISIBLE_DEVICES`` when it first looks for them) and ``threads`` intra- and inter-op
    threads (None: TensorFlow's default, every core)."""
    from lbtrain.worlds.base import configure_threads

    os.environ.update(item.split("=", 1) for item in environment)
    configure_threads(threads, threads)


def _check_storage(experiment: ExperimentConfig, storage: str) -> None:
    """Opens a storage that lives outside the results folder before the folder is claimed, so
    one that cannot be opened (a server it cannot reach, a wrong password, a journal in a
    folder it cannot write) is an error before anything is written. A storage inside the
    results folder (the default SQLite file) is opened after the claim, which checks the folder."""
    path = local_path(storage)
    results = experiment.results_dir.resolve()
    if path is None or not path.is_relative_to(results):
        _storage(storage, experiment.sweep)


def run_sweep(
    experiment: ExperimentConfig,
    *,
    experiment_path: str,
    overrides: list[str] = (),
    trials: int | None = None,
    storage: str | None = None,
    workers: int = 1,
    worker: int | None = None,
) -> tuple[list[dict[str, Any]], LrExponentFit] | None:
    """``lbtrain sweep``: checks the search space and claims the results folder, then runs the
    trials the way the process was launched: every rank of a Horovod job trains each trial of
    its one world size; ``workers > 1`` spawns that many processes sharing the storage (each
    given its index ``worker``); otherwise this process tops up each world size's study in
    turn, its sampler seeded by the ``worker_slot`` it holds (so processes started side by side
    on one storage draw distinct trials). Then (except in a spawned worker or a non-root rank)
    writes the outputs and returns their rows and fit. (Under ``horovodrun``, ``worker`` only
    seeds the sampler: Horovod jobs launched side by side, a SLURM array of them, draw distinct
    trials.)

    ``experiment_path`` and ``overrides`` are how spawned workers load the same experiment."""
    from lbtrain.worlds.modes import launched_by_horovod

    check_sweepable(experiment, in_process=workers == 1 and worker is None and not launched_by_horovod())
    trials = trials or experiment.sweep.trials
    storage = storage or storage_url(experiment)
    sizes = world_sizes(experiment)
    if launched_by_horovod():
        world = get_mode(default_mode_name()).build_world(sizes[0])
        if sizes != [world.size]:
            raise ConfigError(f"grid.world_sizes is {sizes} but horovodrun started {world.size} processes: sweep one world size per job")
        if world.is_root:
            _check_storage(experiment, storage)
            claim_folder(experiment.results_dir, experiment.name, str(Path(experiment_path).resolve()), experiment.model_dump(mode="json"))
        study = optimize_distributed(experiment, world, trials, storage, worker or 0)
        if not world.is_root:
            return None
        logger.info("%s: %d trials", study.study_name, len(study.trials))
        return write_outputs(experiment, storage)
    if worker is None:
        _check_storage(experiment, storage)
        claim_folder(experiment.results_dir, experiment.name, str(Path(experiment_path).resolve()), experiment.model_dump(mode="json"))
    if workers > 1:
        _spawn_workers(experiment, experiment_path, list(overrides), trials, storage, workers)
    else:
        _storage(storage, experiment.sweep)  # one that cannot be opened is refused before a slot's lock file is made
        with worker_slot(experiment.results_dir) as slot:
            for world_size in sizes:
                study = optimize(experiment, world_size, trials, storage, slot)
                logger.info("%s: %d trials", study.study_name, len(study.trials))
    return None if worker is not None else write_outputs(experiment, storage)


@contextlib.contextmanager
def worker_slot(folder: Path) -> Iterator[int]:
    """The lowest index no other sweep process of this results folder holds, held while the
    block runs (``flock`` on ``.sweep-worker-<index>.lock``, released however the process ends):
    the index that seeds this process's sampler (``sampler_seed``). A lone sweep always gets 0
    (the same sweep draws the same trials); processes started side by side on one storage, by
    ``--workers`` or by hand, get 0, 1, 2... and draw distinct trials."""
    for index in itertools.count():
        with file_lock(folder / f".sweep-worker-{index}.lock", "a sweep worker's lock file", wait=False) as held:
            if held:
                yield index
                return


def ok_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The complete trials whose run was judged ok (trials recorded before verdicts existed
    count as ok only if they carry no ``status``)."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [trial for trial in complete if is_ok(trial.user_attrs.get("status", OK))]


def best_ok_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The ok trial with the highest validation accuracy (the earliest among equals), or None."""
    return max(ok_trials(study), key=lambda trial: (trial.value, -trial.number), default=None)


def summary_rows(experiment: ExperimentConfig, storage: str | None = None) -> list[dict[str, Any]]:
    """One row per world size: trial counts by state and verdict, the best ok trial's
    validation accuracy, its test accuracy, its parameters and the learning rate it trained with."""
    rows = []
    for world_size in world_sizes(experiment):
        study = open_study(experiment, world_size, storage)
        trials = study.get_trials(deepcopy=False, states=FINISHED)
        statuses = [trial.user_attrs.get("status") for trial in trials]
        row = {
            "world_size": world_size,
            "study": study.study_name,
            "complete": sum(trial.state == optuna.trial.TrialState.COMPLETE for trial in trials),
            "pruned": sum(trial.state == optuna.trial.TrialState.PRUNED for trial in trials),
            "diverged": statuses.count("diverged"),
            "collapsed": statuses.count("collapsed"),
        }
        best = best_ok_trial(study)
        if best is not None:
            config = trial_run(experiment, world_size, best.params)
            row.update({
                "global_batch": config.global_batch,
                "best_validation_accuracy": best.value,
                "best_test_accuracy": best.user_attrs.get("test_accuracy"),
                "best_learning_rate": best.user_attrs["learning_rate"],
                **{f"param:{key}": value for key, value in best.params.items()},
            })
        rows.append(row)
    return rows


def write_summary(experiment: ExperimentConfig, rows: list[dict[str, Any]]) -> Path:
    """``sweep_summary.csv``: the rows of ``summary_rows``, columns in first-seen order."""
    return write_atomic(experiment.results_dir / SWEEP_SUMMARY_FILE, csv_text(rows))


def lr_points(study: optuna.Study) -> list[dict[str, Any]]:
    """The ok complete trials of a study as ``lr_exponent`` takes them: the learning rate each
    trained with, its validation accuracy and its verdict."""
    return [{"learning_rate": trial.user_attrs["learning_rate"], "validation_accuracy": trial.value,
             "status": trial.user_attrs.get("status", OK)} for trial in ok_trials(study)]


def lr_fit(experiment: ExperimentConfig, storage: str | None = None, top_k: int = 3) -> LrExponentFit:
    """The exponent of the tuned LR in the global batch over the sweep's world sizes, from the
    ``top_k`` ok complete trials of each (``lbtrain.reports.scaling_laws.lr_exponent``: one
    lucky best trial does not decide it), with a bootstrap interval over trials."""
    trials_by_batch = {trial_run(experiment, world_size, {}).global_batch: lr_points(open_study(experiment, world_size, storage))
                       for world_size in world_sizes(experiment)}
    return lr_exponent(trials_by_batch, top_k)


def write_figures(experiment: ExperimentConfig, storage: str | None = None) -> list[Path]:
    """Optuna's optimization history and parameter importances per study, as PNG."""
    import io

    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as optuna_plots

    written = []
    for world_size in world_sizes(experiment):
        study = open_study(experiment, world_size, storage)
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        plots = [("history", optuna_plots.plot_optimization_history)]
        if len(complete) >= 2 and len(experiment.search) >= 2:
            plots.append(("importances", optuna_plots.plot_param_importances))
        for label, plot in plots if complete else []:
            axes = plot(study)
            image = io.BytesIO()
            axes.figure.savefig(image, format="png", dpi=90, bbox_inches="tight")
            plt.close(axes.figure)
            written.append(write_atomic(experiment.results_dir / "figures" / f"sweep_{label}_w{world_size}.png", image.getvalue()))
    return written


def write_outputs(experiment: ExperimentConfig, storage: str | None = None) -> tuple[list[dict[str, Any]], LrExponentFit]:
    """Writes ``experiment.yaml``, ``sweep_summary.csv``, ``sweep_fit.json`` and the figures;
    returns rows and fit."""
    from lbtrain.studies.runner import write_experiment

    write_experiment(experiment)
    rows = summary_rows(experiment, storage)
    write_summary(experiment, rows)
    fit = lr_fit(experiment, storage)
    write_json_atomic(experiment.results_dir / SWEEP_FIT_FILE, fit.to_dict())
    write_figures(experiment, storage)
    return rows, fit


__all__ = [
    "StudySpec",
    "check_sweepable",
    "lr_fit",
    "best_ok_trial",
    "ok_trials",
    "open_study",
    "open_sweep_storage",
    "optimize",
    "optimize_distributed",
    "run_sweep",
    "run_workers",
    "storage_url",
    "study_name",
    "suggest",
    "summary_rows",
    "train_trial",
    "trial_run",
    "worker_process",
    "world_sizes",
    "worker_slot",
    "world_study",
    "write_figures",
    "write_outputs",
    "write_summary",
]
