"""What a run leaves behind, in one place: the ``RunResult`` record, its statuses, and the
results layout.

``results/<experiment>/runs/<run_id>/`` holds one run: ``config.yaml`` (the resolved run),
``history.csv`` (one row per epoch), ``metrics.json`` (the ``RunResult``) and, while it trains,
``checkpoints/``. Beside the runs: ``experiment.yaml`` (the resolved experiment),
``summary.csv`` (one row per run), ``owner.json`` (the experiment name and config file that
own the folder) and ``.lock`` (held by the process running the experiment); the other commands
write their files beside them (sweeps, the protocol, reports, advice). Every file name lbtrain
writes is a constant here. Every file is written atomically and ``metrics.json`` last: a run is
finished exactly when its ``metrics.json`` exists, so a killed experiment resumes cleanly.

This module loads no TensorFlow: reports and tables read results through it alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import yaml

from lbtrain.files import csv_text, write_atomic, write_json_atomic

if TYPE_CHECKING:
    from lbtrain.config import RunConfig

RUNS_FOLDER = "runs"
SUMMARY_FILE = "summary.csv"
EXPERIMENT_FILE = "experiment.yaml"
CONFIG_FILE = "config.yaml"
HISTORY_FILE = "history.csv"
METRICS_FILE = "metrics.json"
CHECKPOINT_FOLDER = "checkpoints"
OWNER_FILE = "owner.json"
LOCK_FILE = ".lock"
# In a run folder of mode: horovod with horovod.timeline: rank 0's Horovod timeline.
HOROVOD_TIMELINE_FILE = "horovod_timeline.json"
# An elastic job's host discovery script, when the run lists its hosts (training.elastic.discovery).
ELASTIC_DISCOVERY_FILE = "discover_hosts.sh"
# Beside the runs: what the other commands write into an experiment's results folder.
OPTUNA_DATABASE = "optuna.db"  # lbtrain sweep's default storage (sqlite:///<folder>/optuna.db)
SWEEP_SUMMARY_FILE = "sweep_summary.csv"
SWEEP_FIT_FILE = "sweep_fit.json"
PROTOCOL_FILE = "protocol.json"
PROTOCOL_REPORT = "protocol.md"
SCALE_DESIGN_FILE = "scale_design.json"  # lbtrain scale: what the first run's budget kept, reused on a rerun
ANSWER_FILE = "answer.json"  # lbtrain scale: the answer as data, its page, and its figures under FIGURES_FOLDER
ANSWER_REPORT = "answer.md"
ANSWER_FIGURES = {"accuracy": "answer_accuracy.png", "learning_rate": "answer_learning_rate.png"}
REPORT_FILE = "report.md"
REPORT_JSON = "report.json"
FIGURES_FOLDER = "figures"  # the report's and a comparison's figures:
FIGURE_ACCURACY_VS_BATCH = "accuracy_vs_batch.png"
FIGURE_GAP_VS_BATCH = "gap_vs_batch.png"
FIGURE_STEPS_TO_TARGET = "steps_to_target.png"
FIGURE_SHARPNESS_VS_BATCH = "sharpness_vs_batch.png"
FIGURE_SWEEP_LR_VS_BATCH = "sweep_lr_vs_batch.png"
FIGURE_LEARNING_CURVES = "learning_curves.png"
FIGURE_LR_SCHEDULES = "lr_schedules.png"
FIGURE_ACCURACY_VS_LR = "accuracy_vs_lr.png"
FIGURE_UPDATES_TO_TARGET_VS_LR = "updates_to_target_vs_lr.png"
ADVICE_FOLDER = "advice"  # lbtrain advise: ADVICE_FILE and ADVICE_FIGURE
ADVICE_FILE = "advice.json"
ADVICE_FIGURE = "advice.png"
# In the --output folder of lbtrain compare.
COMPARE_FILE = "compare.md"
COMPARE_JSON = "compare.json"
# The advisor's validation against the committed studies, from which the calibration in
# lbtrain/studies/findings.json is rendered (both outside the package, by the repository's lab).
ADVISOR_VALIDATION_FILE = "validation.json"
# In the --output folder of lbtrain bench.
BENCH_CSV = "bench.csv"
BENCH_JSON = "bench.json"
BENCH_FIGURE = "bench.png"


class ResultsError(ValueError):
    """A results folder or file that cannot be used: damaged, not writable, or another
    experiment's."""


# A run's status, decided by ``lbtrain.verdict``: trained and learned (ok); learned, but its loss
# blew up on the way and came back (ok-unstable); blew up (diverged); finished at chance or above
# its starting loss (collapsed); raised or was killed (failed). Only ok runs enter a mean.
STATUSES = ("ok", "ok-unstable", "diverged", "collapsed", "failed")


def finite_or_none(value: Any) -> Any:
    """``value`` with every NaN/inf float (in nested dicts and lists too) replaced by None, so
    it is plain JSON.

    >>> finite_or_none({"loss": float("nan"), "history": [1.0, float("inf")]})
    {'loss': None, 'history': [1.0, None]}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_or_none(item) for item in value]
    return value


# What a run's ``accuracy`` metrics measure, by the data's task (``lbtrain.objectives``), and the
# name every table, progress line and report shows them under.
ACCURACY_NAMES = {"classification": "accuracy", "regression": "R²"}


def accuracy_name(tasks: Iterable[str | None]) -> str:
    """``R²`` when every one of ``tasks`` is regression, else ``accuracy``."""
    tasks = set(tasks)
    return ACCURACY_NAMES["regression"] if tasks == {"regression"} else ACCURACY_NAMES["classification"]


@dataclasses.dataclass
class RunResult:
    """What one run produced. ``to_dict`` is plain JSON (NaN/inf become null).

    ``metrics``: ``train_loss``, ``train_accuracy``, ``test_loss``, ``test_accuracy`` (the final
    model on the full train and test sets), ``validation_loss`` and ``validation_accuracy`` with a
    validation split, plus what the run's analysis measured; ``generalization_gap``: ``accuracy``
    (train − test) and ``loss`` (test − train); ``history``: one row of Keras's logs per epoch.
    ``task`` is the data's (``classification`` or ``regression``); for regression every
    ``accuracy`` is R² (``lbtrain.objectives``), shown as R² (``accuracy_name``).

    ``budget`` says what the run was given (``{"epochs": 3}``, ``{"steps": 600}`` or
    ``{"samples": 76800}``, plus ``stop_at`` when it stopped at a target); ``initial_loss`` is the
    training loss at step 0, before any update, the reference of the verdict. ``world_changes``:
    an elastic run's changes of world size (``lbtrain.elastic.WorldChange``: step, samples, old
    and new world size, old and new learning rate), empty for a fixed world. ``experiment``: the
    name of the experiment whose results folder the run was written in (``write_run`` reads it
    from the folder's ``owner.json``; None outside one, and in runs written before it was kept),
    so a run copied into another experiment's folder is told apart. ``validation_points``: with
    ``training.validation_every_steps``, the validation loss and accuracy measured every N steps
    (``{"step", "val_loss", "val_accuracy"}``, ``lbtrain.callbacks.ValidationPoints``), empty otherwise.
    """

    config: dict[str, Any]
    status: str
    reason: str | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    generalization_gap: dict[str, float] = dataclasses.field(default_factory=dict)
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)
    world_size: int = 1
    global_batch: int = 0
    learning_rate: float = 0.0
    steps_per_epoch: int = 0
    total_steps: int = 0
    budget: dict[str, Any] = dataclasses.field(default_factory=dict)
    initial_loss: float | None = None
    samples_per_second: float = 0.0
    wall_time_seconds: float = 0.0
    world_changes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    task: str = "classification"
    experiment: str | None = None
    validation_points: list[dict[str, float]] = dataclasses.field(default_factory=list)
    model: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "model"}
        return finite_or_none(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunResult":
        known = {field.name for field in dataclasses.fields(cls)} - {"model"}
        return cls(**{key: value for key, value in data.items() if key in known})

    @classmethod
    def failed(cls, config: "RunConfig", error: BaseException | str) -> "RunResult":
        """A run that raised: the config and the error in one line."""
        reason = error if isinstance(error, str) else f"{type(error).__name__}: {' '.join(str(error).split())}"
        return cls(config=config.to_dict(), status="failed", reason=reason, world_size=config.training.world_size)


def history_csv(history: list[dict]) -> str:
    """Per-epoch rows as CSV, columns in first-seen order (``epoch`` first)."""
    return csv_text(history)


def write_run(run_dir: str | Path, result: RunResult) -> Path:
    """Writes one finished run into ``run_dir``; ``metrics.json`` last (the commit mark). A run
    written in a results folder (``<folder>/runs/<id>``) records the experiment that owns it."""
    run_dir = Path(run_dir)
    data = result.to_dict()
    if data["experiment"] is None:
        data["experiment"] = folder_experiment(run_dir.parent.parent)
    write_atomic(run_dir / CONFIG_FILE, yaml.safe_dump(result.config, sort_keys=False))
    write_atomic(run_dir / HISTORY_FILE, history_csv(data["history"]))
    return write_json_atomic(run_dir / METRICS_FILE, data)


def run_hash(run_id: str) -> str:
    """The configuration hash that ends a run id (``lbtrain.studies.plan.run_id``:
    ``<label>-w<W>-s<seed>-<hash>``): two runs with equal hashes trained the same configuration.

    >>> run_hash("momentum-warmup-tuned-w4-s1-75e0d75dd7")
    '75e0d75dd7'
    """
    return str(run_id).rsplit("-", 1)[-1]


def run_set(rows: list[dict[str, Any]]) -> frozenset[str] | None:
    """The configuration hashes of summary rows ``rows`` (``run_hash`` of each ``run_id``), or
    ``None`` when there are no rows or a row has no run id. Two labels with equal sets hold the
    same runs: the runner trained them once and copied them to the other label.

    >>> run_set([{"run_id": "a-w1-s1-75e0"}, {"run_id": "a-w1-s2-9f1c"}]) == {"75e0", "9f1c"}
    True
    """
    if not rows or not all(row.get("run_id") for row in rows):
        return None
    return frozenset(run_hash(row["run_id"]) for row in rows)


def is_finished(run_dir: str | Path) -> bool:
    """Whether the run in ``run_dir`` completed (whatever its status)."""
    return (Path(run_dir) / METRICS_FILE).is_file()


# A run's metrics.json holds its per-epoch history: kilobytes, a megabyte for a million epochs.
MAX_RECORD_BYTES = 64 << 20


def read_run(run_dir: str | Path) -> RunResult:
    """The ``RunResult`` a finished run wrote; a file that is not one (truncated, edited by
    hand) is a ``ResultsError`` naming it."""
    path = Path(run_dir) / METRICS_FILE
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:  # a run's record is kilobytes: this one would only fill the memory
            raise ValueError(f"{path.stat().st_size} bytes, more than a run's record of at most {MAX_RECORD_BYTES}")
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not the mapping of a run")
        return RunResult.from_dict(data)
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError, ValueError) as error:
        raise ResultsError(f"{path} is damaged ({type(error).__name__}: {' '.join(str(error).split())})") from None


def claim_folder(folder: Path, name: str, config_file: str | None, experiment: dict[str, Any]) -> None:
    """Makes ``folder`` the results folder of experiment ``name`` from ``config_file``, or
    refuses with a ``ResultsError``: when it cannot be created or written, or when another
    config file with the same experiment name owns it and the two resolved experiments
    (``experiment`` and the folder's ``experiment.yaml``) differ. Two experiments with one name
    would otherwise mix their runs, and ``--fresh`` on one would delete the other's."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ResultsError(f"{folder}: a file is where the results folder should be (set output_dir or name)") from None
    except OSError as error:
        raise ResultsError(f"{folder}: cannot create the results folder ({error.strerror})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ResultsError(f"{folder}: the results folder is not writable")
    refuse_links_out(folder)
    _refuse_misplaced(folder)
    owner_path = folder / OWNER_FILE
    owner = _read_owner(owner_path)
    recorded = folder / EXPERIMENT_FILE
    if owner is not None and owner["config_file"] != config_file:
        try:
            previous = yaml.safe_load(recorded.read_text()) if recorded.is_file() else None
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise ResultsError(
                f"{recorded} is damaged ({type(error).__name__}): rerun {owner['config_file']}, which owns the folder, to write "
                "it again, or give this experiment another name or output_dir"
            ) from None
        if previous != experiment:
            raise ResultsError(
                f"{folder} holds experiment {name!r} from {owner['config_file']}, configured otherwise: give this one another "
                "name or output_dir"
            )
        return
    write_json_atomic(owner_path, {"name": name, "config_file": config_file})


# The files lbtrain writes in a results folder and in each run's folder: a folder in the place of one
# would fail the write after the work (``_refuse_misplaced``).
_FOLDER_FILES = (OWNER_FILE, EXPERIMENT_FILE, SUMMARY_FILE, SWEEP_SUMMARY_FILE, SWEEP_FIT_FILE, REPORT_FILE, REPORT_JSON)
_RUN_FILES = (CONFIG_FILE, HISTORY_FILE, METRICS_FILE)


def _refuse_misplaced(folder: Path) -> None:
    """``ResultsError`` for a folder where the lock file or another file lbtrain writes is, or a
    file where the runs' folder, a run's folder in it or its checkpoints' folder would be: lbtrain
    would fail writing there, after training the run."""
    for path in (folder / LOCK_FILE, *(folder / name for name in _FOLDER_FILES)):
        if path.is_dir() and not path.is_symlink():
            raise ResultsError(f"{path} is a folder where lbtrain writes a file: move it away")
    runs = folder / RUNS_FOLDER
    if runs.exists() and not runs.is_dir():
        raise ResultsError(f"{runs} is a file where the runs' folder should be: move it away")
    for entry in sorted(runs.iterdir()) if runs.is_dir() else ():
        if not entry.name.startswith(".") and not entry.is_dir():
            raise ResultsError(f"{entry} is a file where a run's folder would be (runs/ holds one folder per run): move it away")
        for path in (entry / name for name in _RUN_FILES) if entry.is_dir() else ():
            if path.is_dir():
                raise ResultsError(f"{path} is a folder where lbtrain writes a file: move it away")
        checkpoints = entry / CHECKPOINT_FOLDER
        if checkpoints.exists() and not checkpoints.is_dir():
            raise ResultsError(f"{checkpoints} is a file where the run's checkpoints folder should be: move it away")


def folder_experiment(folder: Path) -> str | None:
    """The name of the experiment that owns results folder ``folder`` (its ``owner.json``), or None."""
    try:
        owner = _read_owner(folder / OWNER_FILE)
    except (ResultsError, OSError):
        return None
    return str(owner["name"]) if owner is not None and owner.get("name") is not None else None


def _read_owner(path: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResultsError(f"{path} is damaged ({error}); delete it to let this experiment claim the folder") from None
    return owner if isinstance(owner, dict) and "config_file" in owner else None


def check_output_folder(folder: Path, what: str) -> None:
    """``ResultsError`` naming ``what`` (``--output``, "the results folder") unless lbtrain can write
    in ``folder`` and only there: a path that cannot be a folder (``/proc/x``, a file), one that is
    not writable, one holding a symbolic link that leads out (``refuse_links_out``) or a folder
    where lbtrain writes a file (``_refuse_misplaced``). Checked
    before any work whose output it receives; folders made to check it are removed again."""
    missing = [path for path in (folder, *folder.parents) if not path.exists() and not path.is_symlink()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ResultsError(f"{what} {folder}: a file is where the folder should be") from None
    except OSError as error:
        raise ResultsError(f"{what} {folder}: cannot create the folder ({error.strerror})") from None
    try:
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ResultsError(f"{what} {folder}: the folder is not writable")
        refuse_links_out(folder)
        _refuse_misplaced(folder)
    finally:
        for path in missing:  # deepest first
            with contextlib.suppress(OSError):
                path.rmdir()


def refuse_links_out(folder: Path) -> None:
    """``ResultsError`` naming the first symbolic link inside ``folder`` whose target lies outside
    it: lbtrain would write through it (a ``.lock`` linked to a file elsewhere would be truncated).
    The folder itself may be a link (results kept on another disk): targets are compared with
    where it resolves to."""
    root = folder.resolve()
    for parent, folders, files in os.walk(folder):
        for name in (*folders, *files):
            path = Path(parent) / name
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                raise ResultsError(f"{path} is a symbolic link to {path.resolve()}, outside the results folder; lbtrain "
                                   "writes only inside it: remove the link")


@contextlib.contextmanager
def file_lock(path: Path, what: str, wait: bool = True) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path`` (created if missing, never through a link) while the
    block runs, released however the process ends: yields True once held, or at once False when
    ``wait`` is False and another holder has it. A file that cannot be opened is a
    ``ResultsError`` naming ``what`` it is."""
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as error:
        raise ResultsError(f"{path.parent}: cannot open {what} ({error.strerror})") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            held = True
        except BlockingIOError:
            held = False
        yield held
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def folder_lock(folder: Path, name: str) -> Iterator[None]:
    """Holds an exclusive lock on ``folder`` (``flock`` on its ``.lock`` file, released when the
    process ends, however it ends); a second process that asks while it is held gets a
    ``ResultsError`` naming the holder's pid. The lock file is never followed through a link."""
    try:
        descriptor = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ResultsError(f"{folder / LOCK_FILE} is a symbolic link; lbtrain writes only inside the results folder: "
                               "remove the link") from None
        if error.errno == errno.EISDIR:
            raise ResultsError(f"{folder / LOCK_FILE} is a folder where lbtrain writes a file: move it away") from None
        raise
    handle = os.fdopen(descriptor, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise ResultsError(f"experiment {name!r} is already running in {folder} (process {holder}); wait for it or stop it") from None
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()
