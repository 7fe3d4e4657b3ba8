"""The plan of an experiment: its grid expanded into runs with stable ids, each checked before
anything trains.

``expand`` turns an ``ExperimentConfig`` into ``PlannedRun``s with stable ids (a hash of the
resolved run config, after a readable prefix); ``check_runs`` checks every run against its data
and model, and ``check_mode`` against the experiment's mode (``lbtrain.worlds.modes``), so a bad grid
point is a one-line error before the first run trains. ``place_runs`` decides how the runs share
the machine: how many train at once, with how many TensorFlow threads each, on which GPUs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import itertools
import json
import math
import os
import re
from typing import Any, Sequence

from lbtrain.config import (
    GRID_SHORTHANDS,
    ConfigError,
    ExperimentConfig,
    RunConfig,
    known_field_path,
    run_config_from_dict,
    with_overrides,
)
from lbtrain.worlds.modes import Mode, get_mode


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One grid point: its id, a human label and the resolved config."""

    run_id: str
    label: str
    config: RunConfig


# A run id names a folder: its readable part is cut so the id stays far below the 255 bytes a
# file name may have (the hash after it keeps ids apart).
MAX_SLUG = 80


def label_slug(label: str) -> str:
    """The label as it appears in run ids: lower case, runs of other characters as ``-``, at
    most ``MAX_SLUG`` characters.

    >>> label_slug("Linear+WU 2"), len(label_slug("x" * 300))
    ('linear-wu-2', 80)
    """
    return re.sub(r"[^a-z0-9]+", "-", label.lower())[:MAX_SLUG].strip("-") or "run"


def run_id(config: RunConfig, label: str) -> str:
    """``<label>-w<W>-s<seed>-<hash>``: the hash (10 hex digits of SHA-256 over the canonical
    JSON of the resolved config, ``RunConfig.identity``) makes the id stable and unique; the
    prefix makes it readable."""
    digest = hashlib.sha256(json.dumps(config.identity(), sort_keys=True).encode()).hexdigest()[:10]
    return f"{label_slug(label)}-w{config.training.world_size}-s{config.training.seed}-{digest}"


def _check_labels(variants: list[dict[str, Any]]) -> None:
    """Variant labels must differ as run ids show them: two variants labelled alike (or alike
    but for case, spaces or punctuation) would be grouped as seeds of one recipe. One label may
    name several variants only when they set different ``training.world_size`` or
    ``training.per_worker_batch``, written the same way: one recipe given per batch (an LR
    chosen for each batch, say), which reports group by recipe and global batch."""
    seen: dict[tuple[str, Any, Any], tuple[int, str]] = {}
    spelled: dict[str, tuple[int, str]] = {}
    for index, variant in enumerate(variants):
        if "label" not in variant:
            continue
        label = str(variant["label"])
        slug = label_slug(label)
        key = (slug, variant.get("training.world_size"), variant.get("training.per_worker_batch"))
        first, other = seen.get(key) or spelled.get(slug, (index, label))
        if key in seen or other != label:
            raise ConfigError(f"grid.variants[{index}].label {label!r} is the same recipe name as grid.variants[{first}].label "
                              f"{other!r} (labels must differ in letters or digits; one label, written alike, may name "
                              "variants of different training.world_size or training.per_worker_batch)")
        seen[key] = (index, label)
        spelled.setdefault(slug, (index, label))


def grid_axes(grid: dict[str, Any]) -> tuple[list[tuple[str, list[Any]]], list[dict[str, Any]]]:
    """The crossed lists as (field path, values) and the variants (each with a label)."""
    axes, variants = [], [{"label": ""}]
    for key, values in grid.items():
        if key == "variants":
            if not isinstance(values, list) or not values or not all(isinstance(v, dict) for v in values):
                raise ConfigError("grid.variants must be a non-empty list of mappings (label plus field paths)")
            variants = values
            continue
        path = GRID_SHORTHANDS.get(key, key)
        if not known_field_path(path) or "." not in path:
            raise ConfigError(f"grid.{key}: no such field (use world_sizes, seeds, variants or a path such as lr.rule)")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key} must be a non-empty list, got {values!r}")
        axes.append((path, values))
    for index, variant in enumerate(variants):
        for path in variant:
            if path != "label" and (not known_field_path(path) or "." not in path):
                raise ConfigError(f"grid.variants[{index}].{path}: no such field")
    _check_labels(variants)
    return axes, variants


def _point_label(variant: dict[str, Any], point: dict[str, Any]) -> str:
    if variant.get("label"):
        return str(variant["label"])
    shown = {path: value for path, value in point.items() if path not in ("training.world_size", "training.seed")}
    return "-".join(f"{path.rsplit('.', 1)[-1]}={value}" for path, value in shown.items()) or "base"


def expand(experiment: ExperimentConfig) -> list[PlannedRun]:
    """Every run of the experiment, in grid order (variants outermost, then the lists in the
    order written). Each is validated; a bad one is a ``ConfigError`` naming its grid point."""
    axes, variants = grid_axes(experiment.grid)
    planned, seen = [], set()
    for variant in variants:
        overrides = {path: value for path, value in variant.items() if path != "label"}
        for values in itertools.product(*(values for _, values in axes)):
            point = dict(zip((path for path, _ in axes), values))
            data = with_overrides(experiment.base_run(), {**point, **overrides})
            label = _point_label(variant, point)
            where = ", ".join(f"{path}={value}" for path, value in point.items())
            try:
                config = run_config_from_dict(data)
            except ConfigError as error:
                raise ConfigError(f"{error} (grid point {label}{': ' + where if where else ''})") from None
            identifier = run_id(config, label)
            if identifier not in seen:
                seen.add(identifier)
                planned.append(PlannedRun(identifier, label, config))
    return planned


def process_local_problem(config: RunConfig, why: str) -> str | None:
    """Why ``config`` cannot train in another process, or None: its model or dataset is a
    callable only this process holds (a lambda, a closure, a ``__main__`` function;
    ``lbtrain.references``). ``why`` says which process would train it."""
    from lbtrain.data.sources import source_process_local
    from lbtrain.models import model_source

    for what, name, local in (("model", config.model.name, model_source(config.model.name).process_local),
                              ("dataset", config.data.dataset, source_process_local(config.data.dataset))):
        if local:
            return (f"{what} {name!r} is defined in __main__, in a function or as a lambda, and {why}, which cannot import "
                    "it: move it to a module (a .py file on PYTHONPATH or beside the experiment) and name it module:function")
    return None


def check_runs(planned: list[PlannedRun], mode: Mode | None = None) -> None:
    """Every run against its dataset, before anything trains: the data loads with its options
    and subset, the global batch fits the training set, the warmup fits the budget, the schedule
    builds at the real number of steps per epoch, the model builds for the data's shape and its
    output fits the labels, and, in a mode that simulates workers (``Mode.ghost_batch_norm``),
    its batch norms can become ghost batch norms (once per distinct data and model config, so a
    large grid is checked in seconds). A problem is a ``ConfigError`` naming the run."""
    from lbtrain.data import DatasetError, steps_per_epoch
    from lbtrain.models import ModelError, build_model, set_virtual_batch_size
    from lbtrain.objectives import check_output
    from lbtrain.schedules import ScheduleError

    if any(run.config.training.tensorboard for run in planned) and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("training.tensorboard needs TensorBoard, which is not installed here (TensorFlow 2.21 no "
                          "longer installs it): pip install 'lbtrain[tensorboard]', or set training.tensorboard: false")
    datasets: dict[str, Any] = {}
    models_checked: set[str] = set()
    for run in planned:
        config = run.config
        data_key = json.dumps(config.data.model_dump(mode="json"), sort_keys=True)
        try:
            if data_key not in datasets:
                datasets[data_key] = config.data.load()
            data = datasets[data_key]
            config.schedule(steps_per_epoch(len(data.x_train), config.training.update_batch, config.training.world_size))
            ghost = mode is not None and mode.ghost_batch_norm and config.training.world_size > 1
            model_key = json.dumps([config.model.model_dump(mode="json"), data_key, ghost and config.training.per_worker_batch],
                                   sort_keys=True)
            if model_key not in models_checked:
                model = build_model(config.model.name, data.input_shape, data.num_classes, **config.model.options)
                check_output(model, data)
                _check_stale_gradients_fit(config, model.count_params())
                if ghost:
                    set_virtual_batch_size(model, config.training.per_worker_batch)
                models_checked.add(model_key)
        except (ConfigError, DatasetError, ModelError, ScheduleError) as error:
            raise ConfigError(f"{error} (run {run.label}, world size {config.training.world_size})") from None


def _check_stale_gradients_fit(config: RunConfig, weights: int) -> None:
    """``ConfigError`` when ``training.staleness`` copies of the model's gradients
    (``lbtrain.train_step.StaleGradients``' ring buffer) would not fit in memory."""
    from lbtrain.config.limits import memory_problem

    staleness = config.training.staleness
    problem = memory_problem(4.0 * staleness * weights, f"{staleness} delayed copies of the model's {weights} gradients") \
        if staleness else None
    if problem is not None:
        raise ConfigError(f"training.staleness: {problem}; a delay is a few updates")


def check_mode(experiment: ExperimentConfig, planned: list[PlannedRun]) -> None:
    """The experiment's mode against this machine and every run, before anything trains: its
    launcher is here, this stack runs it, no run uses a setting the mode lacks, and fixed ports
    leave the largest run its ports. A problem is a one-line ``ConfigError`` naming the run."""
    mode = get_mode(experiment.mode)
    launcher = mode.launcher()
    problem = launcher.problem()
    if problem is not None:
        raise ConfigError(f"mode: {mode.name}: {problem}")
    problem = mode.launch_problem() or launcher.settings_problem(experiment)
    if problem is not None:
        raise ConfigError(problem)
    checked_discoveries = []
    for run in planned:
        problem = mode.unsupported_setting(run.config) or process_local_problem(
            run.config, f"lbtrain run trains each run of mode {mode.name} in processes of their own")
        if problem is not None:
            raise ConfigError(f"{problem} (run {run.label}, world size {run.config.training.world_size})")
        elastic = run.config.training.elastic
        if elastic is not None and elastic.discovery is not None and elastic.discovery not in checked_discoveries:
            from lbtrain.launch.horovodrun import discovered_hosts

            discovered_hosts(elastic.discovery)
            checked_discoveries.append(elastic.discovery)
    if planned:
        launcher.check_ports(max(run.config.training.world_size for run in planned), experiment)


@dataclasses.dataclass(frozen=True)
class Placement:
    """How a grid's runs share this machine: ``workers`` runs train at once, every process of
    a run with ``threads`` TensorFlow intra-op and inter-op threads, and worker ``i`` sees only
    the GPUs ``devices[i]`` (``CUDA_VISIBLE_DEVICES``; None: no GPU is placed)."""

    workers: int
    threads: int
    cores: int
    devices: tuple[tuple[str, ...], ...] | None = None

    def environment(self, worker: int) -> dict[str, str]:
        """What the processes of worker ``worker`` add to their environment: the GPUs they see."""
        return {} if self.devices is None else {"CUDA_VISIBLE_DEVICES": ",".join(self.devices[worker])}

    def describe(self, runs: int) -> str:
        """One log line: how many runs train at once, their threads, the machine.

        >>> Placement(2, 1, 2).describe(12)
        '12 runs to train, 2 at a time, 1 TensorFlow thread per process (2 cores)'
        """
        at_once = "one at a time" if self.workers == 1 else f"{self.workers} at a time"
        gpus = len({device for group in self.devices for device in group}) if self.devices else 0
        where = f"{self.cores} cores" + (f", {gpus} GPUs" if gpus else "")
        return (f"{runs} run{'s' * (runs != 1)} to train, {at_once}, {self.threads} TensorFlow "
                f"thread{'s' * (self.threads != 1)} per process ({where})")


def visible_gpus(gpus: int, variable: str | None = None) -> list[str]:
    """The ids a child gives ``CUDA_VISIBLE_DEVICES`` for each of the ``gpus`` GPUs this process
    sees: its own ``CUDA_VISIBLE_DEVICES`` entries (``variable``, default the environment's)
    where it has one, since TensorFlow numbers the visible GPUs from 0; else ``0 .. gpus - 1``.

    >>> visible_gpus(2, "4,6"), visible_gpus(2, ""), visible_gpus(0, None)
    (['4', '6'], ['0', '1'], [])
    """
    variable = os.environ.get("CUDA_VISIBLE_DEVICES") if variable is None else variable
    listed = [entry.strip() for entry in (variable or "").split(",") if entry.strip()]
    return listed[:gpus] if len(listed) >= gpus else [str(index) for index in range(gpus)]


def place_runs(runs: int, *, processes: int, cores: int, gpus: Sequence[str] = (), gpus_per_run: int = 1,
               workers: int | None = None) -> Placement:
    """How ``runs`` runs, each of ``processes`` processes (the mode launcher's ``footprint``) that
    trains on ``gpus_per_run`` GPUs where there are GPUs, share ``cores`` cores and the ``gpus``
    (``visible_gpus``).

    ``workers`` (None: automatic) runs train at once: on GPUs, one run per group of
    ``gpus_per_run`` of them (each run's processes see only its group); on CPUs, as many runs as
    leave each process a core, ``floor(cores / processes)``. Never more than ``runs``, never fewer
    than one. Every process then runs ``max(1, floor(cores / (workers x processes)))`` threads,
    so ``workers x processes x threads <= cores`` whenever the cores allow one thread each: small
    models cannot fill a machine's cores from one process (TensorFlow's default pools take every
    core), so several runs side by side finish a grid sooner. Given more workers than GPU
    groups, workers share the groups in turn.

    >>> place_runs(12, processes=1, cores=2)
    Placement(workers=2, threads=1, cores=2, devices=None)
    >>> place_runs(1, processes=1, cores=8), place_runs(3, processes=2, cores=8).threads
    (Placement(workers=1, threads=8, cores=8, devices=None), 1)
    >>> place_runs(5, processes=2, cores=4, gpus=["0", "1", "2", "3"], gpus_per_run=2).devices
    (('0', '1'), ('2', '3'))
    """
    if gpus:
        per_run = max(1, min(gpus_per_run, len(gpus)))
        groups = [tuple(gpus[start:start + per_run]) for start in range(0, len(gpus) - per_run + 1, per_run)]
        automatic = len(groups)
    else:
        automatic = max(1, cores // max(1, processes))
    chosen = max(1, min(automatic if workers is None else workers, runs))
    threads = max(1, math.floor(cores / (chosen * max(1, processes))))
    return Placement(chosen, threads, cores, tuple(groups[index % len(groups)] for index in range(chosen)) if gpus else None)
