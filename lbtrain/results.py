"""The results layout, in one place.

``results/<experiment>/runs/<run_id>/`` holds one run: ``config.yaml`` (the resolved run),
``history.csv`` (one row per epoch), ``metrics.json`` (the ``RunResult``) and, while it trains,
``checkpoints/``. Beside the runs: ``experiment.yaml`` (the resolved experiment) and
``summary.csv`` (one row per run). Every file is written atomically and ``metrics.json`` last: a run is
finished exactly when its ``metrics.json`` exists, so a killed experiment resumes cleanly.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from lbtrain.files import csv_text, write_atomic, write_json_atomic
from lbtrain.trainer import RunResult

RUNS_FOLDER = "runs"
SUMMARY_FILE = "summary.csv"
EXPERIMENT_FILE = "experiment.yaml"
CONFIG_FILE = "config.yaml"
HISTORY_FILE = "history.csv"
METRICS_FILE = "metrics.json"


def history_csv(history: list[dict]) -> str:
    """Per-epoch rows as CSV, columns in first-seen order (``epoch`` first)."""
    return csv_text(history)


def write_run(run_dir: str | Path, result: RunResult) -> Path:
    """Writes one finished run into ``run_dir``; ``metrics.json`` last (the commit mark)."""
    run_dir = Path(run_dir)
    write_atomic(run_dir / CONFIG_FILE, yaml.safe_dump(result.config, sort_keys=False))
    write_atomic(run_dir / HISTORY_FILE, history_csv(result.to_dict()["history"]))
    return write_json_atomic(run_dir / METRICS_FILE, result.to_dict())


def is_finished(run_dir: str | Path) -> bool:
    """Whether the run in ``run_dir`` completed (ok, diverged or failed alike)."""
    return (Path(run_dir) / METRICS_FILE).is_file()


def read_run(run_dir: str | Path) -> RunResult:
    """The ``RunResult`` a finished run wrote."""
    return RunResult.from_dict(json.loads((Path(run_dir) / METRICS_FILE).read_text()))
