"""Runs an experiment: expands its grid into runs, trains each one, writes the summary.

``expand`` turns an ``ExperimentConfig`` into ``PlannedRun``s with stable ids (a hash of the
resolved run config, after a readable prefix). ``run_experiment`` trains the runs that have no
``metrics.json`` yet (so a killed experiment resumes where it stopped; an interrupted run
continues from its last epoch checkpoint), in a child process for ``mode: simulated``
(``lbtrain.isolation``: a run that crashes the process is recorded, not fatal), under
``horovodrun -np W`` for ``mode: horovod``, in a fresh ``lbtrain train --mode mirrored`` process
for ``mode: mirrored``, as W ``lbtrain train --mode multiworker`` processes for ``mode:
multiworker`` (``lbtrain.tf_distribute``) and as a chief, W workers and parameter servers for
``mode: parameter_server`` (``lbtrain.parameter_server``), records diverged and failed runs and
goes on, then writes ``summary.csv``.
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
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from lbtrain.config import (
    GRID_SHORTHANDS, ConfigError, ExperimentConfig, RunConfig, describe_budget, known_field_path, run_config_from_dict,
    with_overrides,
)
from lbtrain.files import csv_text, write_atomic
from lbtrain.isolation import RunProcess
from lbtrain.results import (
    CONFIG_FILE, EXPERIMENT_FILE, METRICS_FILE, RUNS_FOLDER, SUMMARY_FILE, ResultsError, RunResult, claim_folder, folder_lock,
    is_finished, read_run, write_run,
)

SUMMARY_COLUMNS = (
    "run_id", "label", "status", "world_size", "per_worker_batch", "global_batch", "rule", "warmup_epochs", "optimizer",
    "seed", "learning_rate", "budget", "train_accuracy", "test_accuracy", "gap_accuracy", "train_loss", "test_loss",
    "gap_loss", "validation_accuracy", "sharpness", "noise_scale", "target_reached_step", "total_steps", "samples_per_second", "wall_time_seconds",
    "reason",
)


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    """One grid point: its id, a human label and the resolved config."""

    run_id: str
    label: str
    config: RunConfig


def label_slug(label: str) -> str:
    """The label as it appears in run ids: lower case, runs of other characters as ``-``.

    >>> label_slug("Linear+WU 2")
    'linear-wu-2'
    """
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "run"


def run_id(config: RunConfig, label: str) -> str:
    """``<label>-w<W>-s<seed>-<hash>``: the hash (10 hex digits of SHA-256 over the canonical
    JSON of the resolved config, ``RunConfig.identity``) makes the id stable and unique; the
    prefix makes it readable."""
    digest = hashlib.sha256(json.dumps(config.identity(), sort_keys=True).encode()).hexdigest()[:10]
    return f"{label_slug(label)}-w{config.training.world_size}-s{config.training.seed}-{digest}"


def _check_labels(variants: list[dict[str, Any]]) -> None:
    """Variant labels must differ as run ids show them: two variants labelled alike (or alike
    but for case, spaces or punctuation) would be grouped as seeds of one recipe."""
    seen: dict[str, tuple[int, str]] = {}
    for index, variant in enumerate(variants):
        if "label" not in variant:
            continue
        label = str(variant["label"])
        slug = label_slug(label)
        if slug in seen:
            first, other = seen[slug]
            raise ConfigError(f"grid.variants[{index}].label {label!r} is the same recipe name as grid.variants[{first}].label "
                              f"{other!r} (labels must differ in letters or digits)")
        seen[slug] = (index, label)


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


def check_runs(planned: list[PlannedRun]) -> None:
    """Every run against its dataset, before anything trains: the data loads with its options
    and subset, the global batch fits the training set, the warmup fits the budget, the schedule
    builds at the real number of steps per epoch, and the model builds for the data's shape
    (once per distinct data and model config, so a large grid is checked in seconds). A problem
    is a ``ConfigError`` naming the run."""
    from lbtrain.data import DatasetError, load_dataset, steps_per_epoch
    from lbtrain.models import ModelError, build_model
    from lbtrain.schedules import ScheduleError

    if any(run.config.training.tensorboard for run in planned) and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("training.tensorboard needs TensorBoard, which is not installed here (TensorFlow 2.21 no "
                          "longer installs it): pip install 'lbtrain[tensorboard]', or set training.tensorboard: false")
    datasets: dict[str, Any] = {}
    models_built: set[str] = set()
    for run in planned:
        config = run.config
        data_key = json.dumps(config.data.model_dump(mode="json"), sort_keys=True)
        try:
            if data_key not in datasets:
                datasets[data_key] = load_dataset(config.data.dataset, train_subset=config.data.train_subset,
                                                  validation_split=config.data.validation_split, **config.data.options)
            data = datasets[data_key]
            config.schedule(steps_per_epoch(len(data.x_train), config.training.update_batch, config.training.world_size))
            model_key = json.dumps([config.model.model_dump(mode="json"), data.input_shape, data.num_classes], sort_keys=True)
            if model_key not in models_built:
                build_model(config.model.name, data.input_shape, data.num_classes, **config.model.options)
                models_built.add(model_key)
        except (ConfigError, DatasetError, ModelError, ScheduleError) as error:
            raise ConfigError(f"{error} (run {run.label}, world size {config.training.world_size})") from None


def check_tf_distribute(experiment: ExperimentConfig, planned: list[PlannedRun]) -> None:
    """``mode: mirrored`` / ``multiworker`` against this stack and every run, before anything
    trains: the stack runs the mode (``tf_distribute.stack_problem``), no run uses a setting the
    mode lacks (``tf_distribute.unsupported_setting``), and a fixed ``multiworker.base_port``
    leaves the largest world its ports. A problem is a one-line ``ConfigError``."""
    from lbtrain.tf_distribute import ports_in_use, stack_problem, unsupported_setting

    mode = experiment.mode
    problem = stack_problem(mode)
    if problem is not None:
        raise ConfigError(problem)
    for run in planned:
        problem = unsupported_setting(run.config, mode)
        if problem is not None:
            raise ConfigError(f"{problem} (run {run.label}, world size {run.config.training.world_size})")
    base_port = experiment.multiworker.base_port
    if mode == "multiworker" and base_port is not None and planned:
        ports = range(base_port, base_port + max(run.config.training.world_size for run in planned))
        if ports[-1] > 65535:
            raise ConfigError(f"multiworker.base_port {base_port}: the grid needs ports up to {ports[-1]}, above 65535")
        taken = ports_in_use(ports)
        if taken:
            raise ConfigError(f"multiworker.base_port: port {taken[0]} is in use (the grid needs ports {ports[0]}-{ports[-1]})")


def check_parameter_server(experiment: ExperimentConfig, planned: list[PlannedRun]) -> None:
    """``mode: parameter_server`` against this stack and every run, before anything trains: the
    stack runs it, no run uses a setting the mode lacks (``parameter_server.unsupported_setting``), and a
    fixed ``parameter_server.base_port`` leaves the largest job its ports. A problem is a
    one-line ``ConfigError``."""
    from lbtrain.parameter_server import job_ports, stack_problem, unsupported_setting

    problem = stack_problem()
    if problem is not None:
        raise ConfigError(problem)
    for run in planned:
        problem = unsupported_setting(run.config)
        if problem is not None:
            raise ConfigError(f"{problem} (run {run.label}, world size {run.config.training.world_size})")
    settings = experiment.parameter_server
    if settings.base_port is not None and planned:
        job_ports(max(run.config.training.world_size for run in planned), settings.ps_tasks, settings.base_port)


def summary_row(planned: PlannedRun, result: RunResult) -> dict[str, Any]:
    """One line of ``summary.csv``."""
    config, metrics = planned.config, result.metrics
    return {
        "run_id": planned.run_id,
        "label": planned.label,
        "status": result.status,
        "world_size": config.training.world_size,
        "per_worker_batch": config.training.per_worker_batch,
        "global_batch": config.global_batch,
        "rule": config.lr.rule,
        "warmup_epochs": config.lr.warmup_epochs,
        "optimizer": config.optimizer.name,
        "seed": config.training.seed,
        "learning_rate": result.learning_rate,
        "budget": describe_budget(config.training.budget),
        "train_accuracy": metrics.get("train_accuracy"),
        "test_accuracy": metrics.get("test_accuracy"),
        "gap_accuracy": result.generalization_gap.get("accuracy"),
        "train_loss": metrics.get("train_loss"),
        "test_loss": metrics.get("test_loss"),
        "gap_loss": result.generalization_gap.get("loss"),
        "validation_accuracy": metrics.get("validation_accuracy"),
        "sharpness": metrics.get("sharpness"),
        "noise_scale": metrics.get("noise_scale"),
        "target_reached_step": metrics.get("target_reached_step"),
        "total_steps": result.total_steps,
        "samples_per_second": result.samples_per_second,
        "wall_time_seconds": result.wall_time_seconds,
        "reason": result.reason or "",
    }


def summary_csv(rows: list[dict[str, Any]]) -> str:
    return csv_text(rows, SUMMARY_COLUMNS)


def _number(value: Any, digits: int = 4) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def summary_table(rows: list[dict[str, Any]]) -> str:
    """The summary as an aligned text table for the terminal."""
    header = f"{'world':>5} {'batch':>6} {'recipe':<18} {'optimizer':<9} {'lr':>8} {'train acc':>9} {'test acc':>8} {'gap':>7}  status"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['world_size']:>5} {row['global_batch']:>6} {row['label'][:18]:<18} {row['optimizer']:<9} "
            f"{row['learning_rate']:>8.4g} {_number(row['train_accuracy']):>9} {_number(row['test_accuracy']):>8} "
            f"{_number(row['gap_accuracy'], 3):>7}  {row['status']}"
        )
    return "\n".join(lines)


def write_experiment(experiment: ExperimentConfig) -> Path:
    """Records the resolved experiment beside its results, for ``lbtrain report``."""
    return write_atomic(experiment.results_dir / EXPERIMENT_FILE, yaml.safe_dump(experiment.model_dump(mode="json"), sort_keys=False))


def horovodrun_path() -> str | None:
    """The launcher: ``$HOROVODRUN`` if set (a wrapper script, say), else the ``horovodrun``
    beside this Python (the venv), else on PATH; None if there is none."""
    if os.environ.get("HOROVODRUN"):
        chosen = os.environ["HOROVODRUN"]
        return chosen if Path(chosen).is_file() or shutil.which(chosen) else None
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.is_file() else shutil.which("horovodrun")


def horovod_launch_problem() -> str | None:
    """Why ``mode: horovod`` cannot start here (naming the fix), or None. With ``$HOROVODRUN``
    (a wrapper that may start another environment) only the launcher itself is checked; else
    this stack must run Horovod (``lbtrain._keras.horovod_problem``: TensorFlow 2.15 with
    Horovod) and have its ``horovodrun``."""
    if os.environ.get("HOROVODRUN"):
        if horovodrun_path() is None:
            return f"$HOROVODRUN is {os.environ['HOROVODRUN']!r}, which is not a file or command (use mode: simulated)"
        return None
    from lbtrain._keras import HOROVOD_INSTALL, horovod_problem

    problem = horovod_problem()
    if problem is None and horovodrun_path() is None:
        problem = f"horovodrun is not installed here: {HOROVOD_INSTALL}, or use mode: simulated"
    return problem


_WORKER_LINE = re.compile(r"^\[\d+\]<std(?:err|out)>:(.*)$")
_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)|lbtrain: error): ")


def _worker_error(output: str) -> str:
    """The error a worker died with (``[rank]<stderr>:KindError: ...`` or lbtrain's one-line
    ``lbtrain: error: ...``), else the job's last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    worker_lines = [match.group(1).strip() for match in map(_WORKER_LINE.match, lines) if match]
    exceptions = [line for line in worker_lines if _EXCEPTION_LINE.match(line)]
    return (exceptions or lines or ["no output"])[-1]


def _error_line(output: str) -> str:
    """The last exception or ``lbtrain: error:`` line of a process's output, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return (exceptions or lines or ["no output"])[-1]


def _train_command(planned: PlannedRun, run_dir: Path) -> list[str]:
    """``lbtrain train CONFIG --run-dir DIR --resume`` for a run, its resolved config written first."""
    config_path = write_atomic(run_dir / CONFIG_FILE, yaml.safe_dump(planned.config.to_dict(), sort_keys=False))
    lbtrain = Path(sys.executable).parent / "lbtrain"
    return [str(lbtrain) if lbtrain.is_file() else "lbtrain", "train", str(config_path), "--run-dir", str(run_dir), "--resume"]


def _launched_result(planned: PlannedRun, run_dir: Path, returncode: int, failure: str) -> RunResult:
    """What a launched ``lbtrain train`` wrote (its root wrote the run), or a failed run with
    ``failure`` when it exited non-zero or wrote nothing."""
    if returncode == 0 and is_finished(run_dir):
        return read_run(run_dir)
    result = RunResult.failed(planned.config, failure)
    write_run(run_dir, result)
    return result


def _train_mirrored(planned: PlannedRun, run_dir: Path) -> RunResult:
    """Runs ``lbtrain train --mode mirrored`` in a fresh process (whose TensorFlow has not yet
    started, so it can make W logical devices)."""
    completed = subprocess.run([*_train_command(planned, run_dir), "--mode", "mirrored"], capture_output=True, text=True)
    return _launched_result(planned, run_dir, completed.returncode,
                            f"lbtrain train --mode mirrored exited with {completed.returncode}: "
                            f"{_error_line(completed.stdout + completed.stderr)}")


def _train_multiworker(planned: PlannedRun, run_dir: Path, experiment: ExperimentConfig) -> RunResult:
    """Runs the W workers of ``lbtrain train --mode multiworker`` (``launch_multiworker``); the
    first worker that exits non-zero ends the job and names the failure."""
    from lbtrain.tf_distribute import launch_multiworker

    program = [*_train_command(planned, run_dir), "--mode", "multiworker"]
    try:
        job = launch_multiworker(planned.config.training.world_size, program, base_port=experiment.multiworker.base_port)
    except ConfigError as error:
        return _launched_result(planned, run_dir, 1, str(error))
    return _launched_result(planned, run_dir, job.returncode,
                            f"{job.task} exited with {job.returncode}: {_error_line(job.output)}")


def _train_parameter_server(planned: PlannedRun, run_dir: Path, experiment: ExperimentConfig) -> RunResult:
    """Runs the chief, workers and parameter servers of ``lbtrain train --mode parameter_server``
    (``launch_parameter_server``); the chief writes the run, and a task that dies ends the job and
    names the failure."""
    from lbtrain.parameter_server import launch_parameter_server

    settings = experiment.parameter_server
    program = [*_train_command(planned, run_dir), "--mode", "parameter_server"]
    try:
        job = launch_parameter_server(planned.config.training.world_size, settings.ps_tasks, program,
                                      base_port=settings.base_port)
    except ConfigError as error:
        return _launched_result(planned, run_dir, 1, str(error))
    return _launched_result(planned, run_dir, job.returncode,
                            f"{job.task} exited with {job.returncode}: {_error_line(job.output)}")


def launch_horovod(experiment: ExperimentConfig, world_size: int, program: list[str], run_dir: Path) -> subprocess.CompletedProcess:
    """Runs ``program`` on ``world_size`` ranks, ``horovodrun -np W -H HOSTS ARGS... PROGRAM``
    (output captured), with the experiment's Horovod knobs in the environment the ranks inherit
    (``HorovodLaunchConfig.environment``: Horovod's own variables, which horovodrun's flags only
    set for it, and which a ``$HOROVODRUN`` wrapper or mpirun pass on as well)."""
    settings = experiment.horovod
    command = [horovodrun_path(), "-np", str(world_size), "-H", settings.hosts or f"localhost:{world_size}", *settings.args, *program]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **settings.environment(run_dir)})


def _train_horovod(planned: PlannedRun, run_dir: Path, experiment: ExperimentConfig) -> RunResult:
    """Runs ``lbtrain train`` under horovodrun (its rank 0 writes the run); a non-zero exit is a
    failed run, written here with the last error line of the job's output."""
    completed = launch_horovod(experiment, planned.config.training.world_size, _train_command(planned, run_dir), run_dir)
    return _launched_result(planned, run_dir, completed.returncode,
                            f"horovodrun exited with {completed.returncode}: {_worker_error(completed.stdout + completed.stderr)}")


def _remove_partial_files(folder: Path) -> None:
    """Temporary files of atomic writes a kill interrupted (``.NAME.*.partial``)."""
    if folder.is_dir():
        for stale in folder.rglob(".*.partial"):
            stale.unlink(missing_ok=True)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def run_experiment(
    experiment: ExperimentConfig,
    *,
    config_file: str | None = None,
    fresh: bool = False,
    progress: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Trains every unfinished run of ``experiment``'s grid (``expand``) and writes
    ``summary.csv``; returns its rows (see ``run_planned``)."""
    return run_planned(experiment, expand(experiment), config_file=config_file, fresh=fresh, progress=progress)


def run_planned(
    experiment: ExperimentConfig,
    planned: list[PlannedRun],
    *,
    config_file: str | None = None,
    fresh: bool = False,
    progress: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Trains every unfinished run of ``planned`` into ``experiment``'s results folder and writes
    ``summary.csv``; returns its rows.

    Every run is checked against its dataset first (``check_runs``); then the results folder is
    claimed for this experiment and ``config_file`` (``results.claim_folder``: another
    experiment of the same name is refused) and locked for this process. Runs that finished
    ``ok``, ``diverged`` or ``collapsed`` are skipped; ``failed`` ones and those whose
    ``metrics.json`` is damaged are trained again; ``fresh`` deletes the experiment's previous
    runs first. One progress line per run (with elapsed time and an ETA from the mean time of
    the runs trained so far, counting every run still ahead)."""
    if experiment.mode == "horovod":
        problem = horovod_launch_problem()
        if problem is not None:
            raise ConfigError(f"mode: horovod: {problem}")
        stale = next((run for run in planned if run.config.training.staleness), None)
        if stale is not None:
            raise ConfigError(f"training.staleness {stale.config.training.staleness} (run {stale.label}) is simulated only: "
                              "real Horovod workers are synchronous (use mode: simulated)")
    if experiment.mode in ("mirrored", "multiworker"):
        check_tf_distribute(experiment, planned)
    if experiment.mode == "parameter_server":
        check_parameter_server(experiment, planned)
    check_runs(planned)
    folder = experiment.results_dir
    claim_folder(folder, experiment.name, config_file, experiment.model_dump(mode="json"))
    with folder_lock(folder, experiment.name):
        runs_dir = folder / RUNS_FOLDER
        if fresh and runs_dir.exists():
            shutil.rmtree(runs_dir)
        _remove_partial_files(folder)
        write_experiment(experiment)
        rows = _train_all(experiment, planned, runs_dir, progress)
        write_atomic(folder / SUMMARY_FILE, summary_csv(rows))
    return rows


def _previous_result(run_dir: Path, progress: Callable[[str], None]) -> RunResult | None:
    """What a run wrote before, or None; a damaged ``metrics.json`` is reported and removed, so
    the run trains again (from its last checkpoint)."""
    if not is_finished(run_dir):
        return None
    try:
        return read_run(run_dir)
    except ResultsError as error:
        progress(f"{error}: training the run again")
        (run_dir / METRICS_FILE).unlink()
        return None


def _train_all(experiment: ExperimentConfig, planned: list[PlannedRun], runs_dir: Path,
               progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Trains the runs not finished before, in order; returns every run's summary row."""
    started, trained_seconds, trained = time.perf_counter(), 0.0, 0
    rows = []
    with RunProcess() as simulated:
        for index, run in enumerate(planned, start=1):
            run_dir = runs_dir / run.run_id
            previous = _previous_result(run_dir, progress)
            if previous is not None and previous.status != "failed":
                rows.append(_report(run, previous, index, len(planned), "done before, skipped", progress))
                continue
            run_started = time.perf_counter()
            if experiment.mode == "horovod":
                result = _train_horovod(run, run_dir, experiment)
            elif experiment.mode == "mirrored":
                result = _train_mirrored(run, run_dir)
            elif experiment.mode == "multiworker":
                result = _train_multiworker(run, run_dir, experiment)
            elif experiment.mode == "parameter_server":
                result = _train_parameter_server(run, run_dir, experiment)
            else:
                result = simulated.train(run.config, run_dir)
            seconds = time.perf_counter() - run_started
            trained_seconds, trained = trained_seconds + seconds, trained + 1
            remaining = len(planned) - index
            note = f"{_duration(seconds)}, elapsed {_duration(time.perf_counter() - started)}, ETA {_duration(remaining * trained_seconds / trained)}"
            rows.append(_report(run, result, index, len(planned), note, progress))
    return rows


def _report(run: PlannedRun, result: RunResult, index: int, count: int, note: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """The run's summary row, after one progress line about it."""
    row = summary_row(run, result)
    outcome = f"test acc {_number(row['test_accuracy'])}, gap {_number(row['gap_accuracy'], 3)}"
    if result.status != "ok":
        outcome = f"{outcome}: {result.reason}"
    progress(f"[{index}/{count}] {run.label} w{row['world_size']} x {row['per_worker_batch']} seed {row['seed']}: "
             f"{result.status}, {outcome} ({note})")
    return row
