"""Runs an experiment's plan: trains each run in its mode's world, writes the summary.

``run_experiment`` trains the runs that have no ``metrics.json`` yet (so a killed experiment
resumes where it stopped; an interrupted run continues from its last epoch checkpoint): in the
child process its mode's launcher keeps (``lbtrain.launch.isolation``: a run that crashes the
process is recorded, not fatal), else as ``lbtrain train --mode M`` processes its mode's
launcher starts (``lbtrain.launch.launchers``: horovodrun, a fresh process, a tf.distribute or
parameter-server job). A run whose configuration another label's run already finished (the
same hash ends both ids) is copied from it, not trained: it would train to the same numbers.
Independent runs train side by side, as many as the cores (or GPUs) allow (``placement``): small
models leave most of a machine idle from one process. It records diverged and failed runs and
goes on, then writes ``summary.csv``. Its progress lines are INFO records of the ``lbtrain`` logger (``lbtrain.logs``)
unless the caller takes them (``progress``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import queue
import resource
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from lbtrain.config import ConfigError, ExperimentConfig, describe_budget
from lbtrain.files import csv_text, write_atomic
from lbtrain.launch.isolation import RunEnded
from lbtrain.launch.launchers import Footprint
from lbtrain.results import (
    CONFIG_FILE,
    EXPERIMENT_FILE,
    METRICS_FILE,
    RUNS_FOLDER,
    SUMMARY_FILE,
    ResultsError,
    RunResult,
    accuracy_name,
    claim_folder,
    folder_lock,
    is_finished,
    read_run,
    run_hash,
    write_run,
)
from lbtrain.studies.plan import Placement, PlannedRun, check_mode, check_runs, expand, place_runs, visible_gpus
from lbtrain.verdict import is_ok
from lbtrain.worlds.modes import DEFAULT_MODE, Mode, get_mode

logger = logging.getLogger(__name__)

# The default of ``lbtrain run --workers`` (``default_workers``).
WORKERS_VARIABLE = "LBTRAIN_WORKERS"

SUMMARY_COLUMNS = (
    "run_id", "label", "status", "world_size", "per_worker_batch", "global_batch", "rule", "warmup_epochs", "optimizer",
    "seed", "learning_rate", "budget", "train_accuracy", "test_accuracy", "gap_accuracy", "train_loss", "test_loss",
    "gap_loss", "validation_accuracy", "sharpness", "noise_scale", "target_reached_step", "total_steps", "samples_per_second", "wall_time_seconds",
    "reason", "task",
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
        "task": result.task,
    }


def summary_csv(rows: list[dict[str, Any]]) -> str:
    return csv_text(rows, SUMMARY_COLUMNS)


def _number(value: Any, digits: int = 4) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def _short(name: str) -> str:
    """``acc`` for accuracy in the terminal's narrow columns; R² as it is."""
    return "acc" if name == "accuracy" else name


def summary_table(rows: list[dict[str, Any]]) -> str:
    """The summary as an aligned text table for the terminal (R² for regression: ``accuracy_name``)."""
    score = _short(accuracy_name(row.get("task") for row in rows))
    header = (f"{'world':>5} {'batch':>6} {'recipe':<18} {'optimizer':<9} {'lr':>8} {'train ' + score:>9} {'test ' + score:>8} "
              f"{'gap':>7}  status")
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


def _train_launched(mode: Mode, planned: PlannedRun, run_dir: Path, experiment: ExperimentConfig, threads: int,
                    environment: dict[str, str], stopped: threading.Event) -> RunResult:
    """Runs ``lbtrain train --mode M --threads T`` for ``planned`` as the mode's launcher
    starts it, with ``environment`` (the root writes the run); a job that fails is a failed run,
    with the failing task's error line. A job that ended after ``stopped`` was set is not
    recorded (``RunEnded``), nor one that SIGINT ended: a terminal's Ctrl-C reaches every process
    of the job, and this thread (perhaps a worker's, which Python's ``KeyboardInterrupt`` does not
    reach) raises it for the command."""
    program = [*_train_command(planned, run_dir), "--mode", mode.name, "--threads", str(threads)]
    try:
        job = mode.launcher().start(program, planned.config.training.world_size, experiment, run_dir,
                                    elastic=planned.config.training.elastic, env=environment)
    except ConfigError as error:
        return _launched_result(planned, run_dir, 1, str(error))
    if stopped.is_set():
        raise RunEnded(f"the run in {run_dir} was stopped by lbtrain")
    if job.returncode in (-signal.SIGINT, 128 + signal.SIGINT):
        raise KeyboardInterrupt
    return _launched_result(planned, run_dir, job.returncode, job.failure)


def _remove_partial_files(folder: Path) -> None:
    """Temporary files of atomic writes a kill interrupted (``.NAME.*.partial``)."""
    if folder.is_dir():
        for stale in folder.rglob(".*.partial"):
            stale.unlink(missing_ok=True)


def duration(seconds: float) -> str:
    """Seconds as ``1h02m``, ``3m05s`` or ``42s``.

    >>> duration(3725), duration(185), duration(42.4)
    ('1h02m', '3m05s', '42s')
    """
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


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
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Trains every unfinished run of ``experiment``'s grid (``expand``) and writes
    ``summary.csv``; returns its rows (see ``run_planned``)."""
    return run_planned(experiment, expand(experiment), config_file=config_file, fresh=fresh, progress=progress, workers=workers)


def run_planned(
    experiment: ExperimentConfig,
    planned: list[PlannedRun],
    *,
    config_file: str | None = None,
    fresh: bool = False,
    progress: Callable[[str], None] = log_progress,
    workers: int | None = None,
    note_left_out: bool = True,
) -> list[dict[str, Any]]:
    """Trains every unfinished run of ``planned`` into ``experiment``'s results folder and writes
    ``summary.csv``; returns its rows. ``note_left_out``: warn about finished runs of the folder
    that ``planned`` does not hold (off for a stage whose later stage plans them).

    Every run is checked against its dataset first (``check_runs``); then the results folder is
    claimed for this experiment and ``config_file`` (``results.claim_folder``: another
    experiment of the same name is refused) and locked for this process. Runs that finished
    ``ok``, ``diverged`` or ``collapsed`` are skipped; ``failed`` ones and those whose
    ``metrics.json`` is damaged (a warning) are trained again; a run whose configuration another
    label's run finished is copied from it (``_finished_twin``); ``fresh`` deletes the experiment's
    previous runs first. ``workers`` runs train at once (None: ``default_workers()``, else as
    many as the cores or GPUs allow, ``placement``), each run's processes with their share of the cores as TensorFlow
    threads; a run's numbers do not depend on which other runs train beside it. One progress line
    per run as it finishes (with elapsed time and an ETA from the mean time of the runs trained so
    far, counting every run still ahead, shared among the workers)."""
    workers = default_workers() if workers is None else workers
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
        rows = _train_all(experiment, planned, runs_dir, progress, workers)
        write_atomic(folder / SUMMARY_FILE, summary_csv(rows))
        if note_left_out:
            note_runs_left_out(runs_dir, planned)
    return rows


def note_runs_left_out(runs_dir: Path, planned: list[PlannedRun]) -> None:
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


def _train_all(experiment: ExperimentConfig, planned: list[PlannedRun], runs_dir: Path, progress: Callable[[str], None],
               workers: int | None, positions: list[int] | None = None, count: int | None = None) -> list[dict[str, Any]]:
    """Every run's summary row, in order: runs finished before are skipped and runs whose twin
    finished are copied (``_finished_twin``); the others train, ``workers`` at once (None:
    ``place_runs``'s choice). Of several runs with one configuration only the first trains;
    the others are copied from it in a second round (trained there if it failed).
    ``positions`` and ``count``: where the runs stand in the whole grid, for progress lines."""
    positions = positions or list(range(1, len(planned) + 1))
    count = count or len(planned)
    rows: list[dict[str, Any] | None] = [None] * len(planned)
    to_train: list[int] = []
    later: list[int] = []
    training_hashes: set[str] = set()
    for slot, run in enumerate(planned):
        run_dir = runs_dir / run.run_id
        previous = _previous_result(run_dir)
        if previous is not None and previous.status != "failed":
            rows[slot] = _report(run, previous, positions[slot], count, "done before, skipped", progress)
            continue
        twin = _finished_twin(runs_dir, run.run_id)
        if twin is not None:
            rows[slot] = _report(run, _copy_run(twin, run_dir), positions[slot], count, f"same configuration as {twin.name}, copied", progress)
        elif run_hash(run.run_id) in training_hashes:
            later.append(slot)
        else:
            training_hashes.add(run_hash(run.run_id))
            to_train.append(slot)
    trained = _train_runs(experiment, [planned[slot] for slot in to_train], runs_dir, progress, workers,
                          [positions[slot] for slot in to_train], count)
    for slot, row in zip(to_train, trained):
        rows[slot] = row
    if later:
        again = _train_all(experiment, [planned[slot] for slot in later], runs_dir, progress, workers,
                           [positions[slot] for slot in later], count)
        for slot, row in zip(later, again):
            rows[slot] = row
    return rows


def default_workers() -> int | None:
    """The runs trained at once when the caller does not say: ``$LBTRAIN_WORKERS`` (``auto`` or a
    whole number >= 1; a shared machine, or a test suite that already runs a process per core,
    sets 1), else None, the automatic choice. Another value is a one-line ``ConfigError``."""
    value = os.environ.get(WORKERS_VARIABLE, "auto").strip() or "auto"
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"${WORKERS_VARIABLE} is {value!r} (allowed: auto or a whole number >= 1)")
    return int(value)


def placement(experiment: ExperimentConfig, planned: list[PlannedRun], workers: int | None = None) -> Placement:
    """How ``planned``'s runs share this machine (``plan.place_runs``): the mode's launcher
    says what one run takes (its ``footprint``: the largest run counts); runs on
    fixed ports train one at a time. ``workers`` None: the automatic choice."""
    launcher = get_mode(experiment.mode).launcher()
    return _placed([launcher.footprint(run.config.training.world_size, experiment) for run in planned], workers)


def trial_placement(experiment: ExperimentConfig, trials: int, workers: int | None = None) -> Placement:
    """How ``trials`` sweep trials that may train at once share this machine, by ``placement``'s
    rule: each trains a simulated world (``DEFAULT_MODE``, whatever the experiment's mode) in
    the process of the sweep worker that holds it. ``workers`` None: the automatic choice."""
    launcher = get_mode(DEFAULT_MODE).launcher()
    return _placed([launcher.footprint(1, experiment)] * trials, workers)


def _placed(footprints: list[Footprint], workers: int | None) -> Placement:
    """``plan.place_runs`` for runs of these footprints (the largest counts; runs on fixed ports
    train one at a time) on this machine's usable cores and visible GPUs."""
    from lbtrain.worlds.horovod import usable_cores

    if any(footprint.fixed_ports for footprint in footprints):
        workers = 1
    gpus = visible_gpus(len(_gpus()))
    return place_runs(len(footprints), processes=max((footprint.processes for footprint in footprints), default=1),
                      cores=len(usable_cores()), gpus=gpus, gpus_per_run=max((footprint.gpus for footprint in footprints), default=1),
                      workers=workers)


@dataclasses.dataclass(frozen=True)
class GridPrice:
    """The price of a grid's runs left to train (``price_runs``): their ``seconds`` one after
    another on this machine, from a probe of ``batches`` global batches, and how ``lbtrain run``
    would place them (``placed``). ``stopping`` of the runs stop at a target (``training.stop_at``):
    each is priced at its whole budget, so the price is an upper bound."""

    seconds: float
    runs: int
    batches: int
    placed: Placement
    stopping: int = 0

    def describe(self) -> str:
        """One line: the machine time, what it counts, and how the runs would share the machine."""
        from lbtrain.studies.price import PROBE_STEPS, stopping_text

        if not self.runs:
            return "price: every run is finished, nothing to train"
        threads = f"{self.placed.threads} TensorFlow thread{'s' * (self.placed.threads != 1)} per process"
        side = (f"{self.placed.workers} at a time here ({threads}): a wall time from about {duration(self.seconds / self.placed.workers)} "
                "(where one core steps as fast as all) to that" if self.placed.workers > 1 else f"one at a time here ({threads})")
        priced = f"about {duration(self.seconds)} of machine time for {self.runs} run{'s' * (self.runs != 1)} left to train"
        bound = f"at most {priced} ({stopping_text(self.stopping)})" if self.stopping else priced
        return (f"price: {bound}, one after another on this machine (from a probe of {PROBE_STEPS} steps at each of {self.batches} global "
                f"batch{'es' * (self.batches != 1)} and a process start); {side}")


def price_runs(experiment: ExperimentConfig, planned: list[PlannedRun], workers: int | None = None) -> GridPrice:
    """The price of ``planned``'s runs that have not finished (``lbtrain.studies.price``: a probe
    trains each distinct global batch a few steps in this process, so it runs the model and
    data loader as a run does), checked first as ``run_planned`` checks them. The price counts
    a process start per run (``Probe.launch_seconds``); where the mode's launcher keeps one
    child between runs (a simulated world), one start for them all, as one after another."""
    from lbtrain.studies.price import estimate_seconds, probe_costs, stopping_early

    left = [run for run in planned if not is_finished(experiment.results_dir / RUNS_FOLDER / run.run_id)]
    workers = default_workers() if workers is None else workers
    check_mode(experiment, left)
    check_runs(left, get_mode(experiment.mode))
    configs = [run.config for run in left]
    probe = probe_costs(configs)
    placed = placement(experiment, left, workers)
    seconds = estimate_seconds(configs, probe)
    if configs and get_mode(experiment.mode).launcher().child(placed.threads, {}) is not None:
        seconds -= (len(configs) - 1) * probe.launch_seconds
    return GridPrice(seconds, len(left), len(probe.costs), placed, stopping=stopping_early(configs))


def _gpus() -> list:
    """The GPUs TensorFlow sees in this process."""
    import tensorflow as tf

    return tf.config.list_physical_devices("GPU")


class _Worker:
    """Trains runs one after another for ``_train_runs``, the way the experiment's mode starts
    them: in an isolated child that stays up between runs (``RunProcess``), or as the mode's
    launched job; with ``threads`` TensorFlow threads per process and ``environment`` (its GPUs)."""

    def __init__(self, experiment: ExperimentConfig, threads: int, environment: dict[str, str]) -> None:
        self.experiment, self.mode, self.threads, self.environment = experiment, get_mode(experiment.mode), threads, environment
        self.process = self.mode.launcher().child(threads, environment)
        self.stopped = threading.Event()

    def train(self, run: PlannedRun, run_dir: Path) -> RunResult:
        """Trains ``run`` into ``run_dir``; ``RunEnded`` if ``stop`` ended it (nothing recorded)."""
        logger.debug("training run %s (%s, %s) in %s", run.run_id, run.label, run.config.training.world_text, run_dir)
        if self.process is not None:
            return self.process.train(run.config, run_dir)
        return _train_launched(self.mode, run, run_dir, self.experiment, self.threads, self.environment, self.stopped)

    def stop(self) -> None:
        """Ends the run in training now (from another thread too): its child is killed; a
        launched job's result is not recorded (a terminal's Ctrl-C reached its processes)."""
        self.stopped.set()
        if self.process is not None:
            self.process.kill()

    def close(self) -> None:
        if self.process is not None:
            self.process.close()


def _train_runs(experiment: ExperimentConfig, runs: list[PlannedRun], runs_dir: Path, progress: Callable[[str], None],
                workers: int | None, positions: list[int], count: int) -> list[dict[str, Any]]:
    """Trains ``runs`` as ``placement`` places them and returns their rows in order: one at a
    time in this thread, or ``Placement.workers`` at once, each worker a thread that hands its
    runs to its own ``_Worker``; progress lines come from this thread as runs finish. An
    interrupt (Ctrl-C) or an error ends every worker's run at once (each resumes from its last
    checkpoint on the rerun) and is raised again."""
    if not runs:
        return []
    placed = placement(experiment, runs, workers)
    logger.info(placed.describe(len(runs)))
    started, cpu_started, clock = time.perf_counter(), cpu_seconds(), _EtaClock(len(runs), placed.workers)
    team = [_Worker(experiment, placed.threads, placed.environment(index)) for index in range(placed.workers)]
    rows: list[dict[str, Any] | None] = [None] * len(runs)
    try:
        if placed.workers == 1:
            for slot, run in enumerate(runs):
                run_started = time.perf_counter()
                result = team[0].train(run, runs_dir / run.run_id)
                rows[slot] = _report(run, result, positions[slot], count, clock.note(time.perf_counter() - run_started, started), progress)
        else:
            for slot, run, result, seconds in _side_by_side(team, runs, runs_dir):
                rows[slot] = _report(run, result, positions[slot], count, clock.note(seconds, started), progress)
    except BaseException:
        for worker in team:
            worker.stop()
        raise
    for worker in team:
        worker.close()
    logger.info(machine_use(len(runs), time.perf_counter() - started, cpu_seconds() - cpu_started, placed.cores))
    return rows


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of every process it started that has ended
    and been waited for (its run processes, their ranks and tasks: ``getrusage``)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine_use(runs: int, wall: float, cpu: float, cores: int) -> str:
    """One line on how much of the machine ``runs`` runs used: their CPU time over wall time x
    cores, the busy share.

    >>> machine_use(12, 100.0, 170.0, 2)
    '12 runs trained in 1m40s: 170 CPU-seconds, 85% of 2 cores busy'
    """
    return (f"{runs} run{'s' * (runs != 1)} trained in {duration(wall)}: {cpu:.0f} CPU-seconds, "
            f"{cpu / (wall * cores):.0%} of {cores} core{'s' * (cores != 1)} busy")


def _side_by_side(team: list[_Worker], runs: list[PlannedRun], runs_dir: Path):
    """Yields ``(index, run, result, seconds)`` as the workers of ``team`` finish ``runs``, each
    worker a daemon thread taking the next run from a shared queue; an exception in a worker is
    raised here."""
    waiting: queue.Queue[tuple[int, PlannedRun]] = queue.Queue()
    for item in enumerate(runs):
        waiting.put(item)
    finished: queue.Queue = queue.Queue()

    def work(worker: _Worker) -> None:
        while not worker.stopped.is_set():
            try:
                slot, run = waiting.get_nowait()
            except queue.Empty:
                return
            run_started = time.perf_counter()
            try:
                result = worker.train(run, runs_dir / run.run_id)
            except BaseException as error:  # handed to the caller's thread, which stops the others
                finished.put(error)
                return
            finished.put((slot, run, result, time.perf_counter() - run_started))

    for worker in team:
        threading.Thread(target=work, args=(worker,), daemon=True, name="lbtrain-run-worker").start()
    for _ in runs:
        item = finished.get()
        if isinstance(item, BaseException):
            raise item
        yield item


class _EtaClock:
    """The progress note of each trained run: its time, the time since the runs started and an
    ETA (the mean time of the runs trained so far, times the runs still ahead, over the workers)."""

    def __init__(self, runs: int, workers: int) -> None:
        self.left, self.workers, self.seconds, self.trained = runs, workers, 0.0, 0

    def note(self, seconds: float, started: float) -> str:
        self.seconds, self.trained, self.left = self.seconds + seconds, self.trained + 1, self.left - 1
        eta = self.left * self.seconds / self.trained / self.workers
        return f"{duration(seconds)}, elapsed {duration(time.perf_counter() - started)}, ETA {duration(eta)}"


def _report(run: PlannedRun, result: RunResult, index: int, count: int, note: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """The run's summary row, after one progress line about it."""
    row = summary_row(run, result)
    outcome = f"test {_short(accuracy_name([result.task]))} {_number(row['test_accuracy'])}, gap {_number(row['gap_accuracy'], 3)}"
    if not is_ok(result.status):
        outcome = f"{outcome}: {result.reason}"
    progress(f"[{index}/{count}] {run.label} w{row['world_size']} x {row['per_worker_batch']} seed {row['seed']}: "
             f"{result.status}, {outcome} ({note})")
    return row
