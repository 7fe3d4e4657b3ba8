"""Runs an experiment's plan: trains each run in its mode's world, writes the summary.

``run_experiment`` trains the runs that have no ``metrics.json`` yet (so a killed experiment
resumes where it stopped; an interrupted run continues from its last epoch checkpoint): in a
child process for a mode launched ``isolated`` (``lbtrain.launch.isolation``: a run that crashes
the process is recorded, not fatal), else as ``lbtrain train --mode M`` processes started by the
mode's launch kind (``lbtrain.launch.start_run``: horovodrun, a fresh process, a tf.distribute
or parameter-server job). A run whose configuration another label's run already finished (the
same hash ends both ids) is copied from it, not trained: it would train to the same numbers. It
records diverged and failed runs and goes on, then writes ``summary.csv``. Its progress lines are INFO records of the ``lbtrain`` logger (``lbtrain.logs``)
unless the caller takes them (``progress``).
"""

from __future__ import annotations

import logging
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from lbtrain.config import ConfigError, ExperimentConfig, describe_budget
from lbtrain.files import csv_text, write_atomic
from lbtrain.launch.isolation import RunProcess
from lbtrain.modes import Mode, get_mode
from lbtrain.results import (
    CONFIG_FILE,
    EXPERIMENT_FILE,
    METRICS_FILE,
    RUNS_FOLDER,
    SUMMARY_FILE,
    ResultsError,
    RunResult,
    claim_folder,
    folder_lock,
    is_finished,
    read_run,
    run_hash,
    write_run,
)
from lbtrain.studies.plan import PlannedRun, check_mode, check_runs, expand

logger = logging.getLogger(__name__)

SUMMARY_COLUMNS = (
    "run_id", "label", "status", "world_size", "per_worker_batch", "global_batch", "rule", "warmup_epochs", "optimizer",
    "seed", "learning_rate", "budget", "train_accuracy", "test_accuracy", "gap_accuracy", "train_loss", "test_loss",
    "gap_loss", "validation_accuracy", "sharpness", "noise_scale", "target_reached_step", "total_steps", "samples_per_second", "wall_time_seconds",
    "reason",
)


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


def _train_launched(mode: Mode, planned: PlannedRun, run_dir: Path, experiment: ExperimentConfig) -> RunResult:
    """Runs ``lbtrain train --mode M`` for ``planned`` as the mode's launch kind starts it (the
    root writes the run); a job that fails is a failed run, with the failing task's error line."""
    from lbtrain.launch import start_run

    program = [*_train_command(planned, run_dir), "--mode", mode.name]
    try:
        job = start_run(mode.launch, program, planned.config.training.world_size, experiment, run_dir,
                        elastic=planned.config.training.elastic)
    except ConfigError as error:
        return _launched_result(planned, run_dir, 1, str(error))
    return _launched_result(planned, run_dir, job.returncode, job.failure)


def _remove_partial_files(folder: Path) -> None:
    """Temporary files of atomic writes a kill interrupted (``.NAME.*.partial``)."""
    if folder.is_dir():
        for stale in folder.rglob(".*.partial"):
            stale.unlink(missing_ok=True)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def log_progress(line: str) -> None:
    """The default ``progress`` of runs, sweeps and the protocol: one INFO record of the
    ``lbtrain`` logger."""
    logger.info(line)


def run_experiment(
    experiment: ExperimentConfig,
    *,
    config_file: str | None = None,
    fresh: bool = False,
    progress: Callable[[str], None] = log_progress,
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
    progress: Callable[[str], None] = log_progress,
) -> list[dict[str, Any]]:
    """Trains every unfinished run of ``planned`` into ``experiment``'s results folder and writes
    ``summary.csv``; returns its rows.

    Every run is checked against its dataset first (``check_runs``); then the results folder is
    claimed for this experiment and ``config_file`` (``results.claim_folder``: another
    experiment of the same name is refused) and locked for this process. Runs that finished
    ``ok``, ``diverged`` or ``collapsed`` are skipped; ``failed`` ones and those whose
    ``metrics.json`` is damaged (a warning) are trained again; a run whose configuration another
    label's run finished is copied from it (``_finished_twin``); ``fresh`` deletes the experiment's
    previous runs first. One progress line per run (with elapsed time and an ETA from the mean time of
    the runs trained so far, counting every run still ahead)."""
    check_mode(experiment, planned)
    check_runs(planned, get_mode(experiment.mode))
    folder = experiment.results_dir
    claim_folder(folder, experiment.name, config_file, experiment.model_dump(mode="json"))
    with folder_lock(folder, experiment.name):
        logger.info("%s: %d runs (%s) -> %s", experiment.name, len(planned), experiment.mode, folder)
        runs_dir = folder / RUNS_FOLDER
        if fresh and runs_dir.exists():
            shutil.rmtree(runs_dir)
        _remove_partial_files(folder)
        write_experiment(experiment)
        rows = _train_all(experiment, planned, runs_dir, progress)
        write_atomic(folder / SUMMARY_FILE, summary_csv(rows))
        _note_runs_left_out(runs_dir, planned)
    return rows


def _note_runs_left_out(runs_dir: Path, planned: list[PlannedRun]) -> None:
    """One warning when the folder holds finished runs of an earlier grid that this one does not
    have (a rerun with another ``--set grid...``): the summary and the report are this grid's,
    and the earlier runs stay on disk."""
    planned_ids = {run.run_id for run in planned}
    earlier = [path for path in runs_dir.iterdir() if path.is_dir() and path.name not in planned_ids and is_finished(path)] \
        if runs_dir.is_dir() else []
    if earlier:
        logger.warning("%d earlier run%s in %s %s not in this grid: left out of %s and the report, kept on disk (rerun with "
                       "their grid to summarize them again, without training them; --fresh deletes every earlier run)",
                       len(earlier), "" if len(earlier) == 1 else "s", runs_dir, "is" if len(earlier) == 1 else "are", SUMMARY_FILE)


def _previous_result(run_dir: Path) -> RunResult | None:
    """What a run wrote before, or None; a damaged ``metrics.json`` is a warning and removed, so
    the run trains again (from its last checkpoint)."""
    if not is_finished(run_dir):
        return None
    try:
        return read_run(run_dir)
    except ResultsError as error:
        logger.warning("%s: training the run again", error)
        (run_dir / METRICS_FILE).unlink()
        return None


def _finished_twin(runs_dir: Path, identifier: str) -> Path | None:
    """A finished run (not ``failed``) of another label with this run's configuration: the same
    hash ends both ids (``plan.run_id``), as when a tuned arm's LR is the one a scaling rule
    gives. Training it again would give the same numbers at the same cost."""
    digest = run_hash(identifier)
    if not runs_dir.is_dir():
        return None
    for candidate in sorted(runs_dir.glob(f"*-{digest}")):
        if candidate.name == identifier or not is_finished(candidate):
            continue
        try:
            if read_run(candidate).status != "failed":
                return candidate
        except ResultsError:
            continue  # a damaged twin is its own run's to retrain, when its grid plans it
    return None


def _copy_run(twin: Path, run_dir: Path) -> RunResult:
    """Copies ``twin``'s files (not its checkpoints) into ``run_dir``, replacing what an earlier
    interrupted attempt left there, ``metrics.json`` last so an interrupted copy is not a
    finished run; returns the copied result."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    files = sorted((path for path in twin.iterdir() if path.is_file()), key=lambda path: path.name == METRICS_FILE)
    for path in files:
        write_atomic(run_dir / path.name, path.read_bytes())
    return read_run(run_dir)


def _train_all(experiment: ExperimentConfig, planned: list[PlannedRun], runs_dir: Path,
               progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Trains the runs not finished before, in order; returns every run's summary row."""
    started, trained_seconds, trained = time.perf_counter(), 0.0, 0
    mode = get_mode(experiment.mode)
    rows = []
    with RunProcess() as simulated:
        for index, run in enumerate(planned, start=1):
            run_dir = runs_dir / run.run_id
            previous = _previous_result(run_dir)
            if previous is not None and previous.status != "failed":
                rows.append(_report(run, previous, index, len(planned), "done before, skipped", progress))
                continue
            twin = _finished_twin(runs_dir, run.run_id)
            if twin is not None:
                rows.append(_report(run, _copy_run(twin, run_dir), index, len(planned), f"same configuration as {twin.name}, copied", progress))
                continue
            run_started = time.perf_counter()
            logger.debug("training run %s (%s, %s) in %s", run.run_id, run.label, run.config.training.world_text, run_dir)
            if mode.launch == "isolated":
                result = simulated.train(run.config, run_dir)
            else:
                result = _train_launched(mode, run, run_dir, experiment)
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
