"""lab/migrations/rejudge_results.py: by default it writes only the verdicts that moved, in a
run's metrics.json and in summary.csv, every other byte as committed."""

import json
import shutil
from pathlib import Path

from lab.migrations.rejudge_results import rejudge_verdicts, verdict_rows
from lbtrain.results import METRICS_FILE, RUNS_FOLDER, SUMMARY_FILE

RESULTS = Path(__file__).resolve().parents[2] / "results"
STUDY = "critical_batch_v3"
AT_CHANCE = "linear-capped-w64-s2-552af90bee"  # at chance for epochs 1-14 of 36
HEALTHY = "linear-capped-w64-s1-ce7c345bb6"


def copy_of_two_runs(tmp_path: Path, status: str) -> Path:
    """critical_batch_v3 cut to two runs, the one at chance recorded ``status`` (as trained: ok)."""
    folder = tmp_path / STUDY
    for run_id in (AT_CHANCE, HEALTHY):
        shutil.copytree(RESULTS / STUDY / RUNS_FOLDER / run_id, folder / RUNS_FOLDER / run_id)
    lines = (RESULTS / STUDY / SUMMARY_FILE).read_text().splitlines(keepends=True)
    folder.joinpath(SUMMARY_FILE).write_text("".join([lines[0], *[line for line in lines if line.startswith((AT_CHANCE, HEALTHY))]]))
    path = folder / RUNS_FOLDER / AT_CHANCE / METRICS_FILE
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "status": status, "reason": None}, indent=2) + "\n")
    summary = folder / SUMMARY_FILE
    # Its summary row as trained: ok, no reason (the committed reason, the last cell, has no comma).
    summary.write_text("".join(line.replace(",collapsed,", ",ok,", 1).rsplit(",", 1)[0] + ",\n" if line.startswith(AT_CHANCE) else line
                               for line in summary.read_text().splitlines(keepends=True)))
    return folder


def test_a_run_recorded_ok_that_sat_at_chance_is_rewritten_collapsed_and_nothing_else(tmp_path):
    folder = copy_of_two_runs(tmp_path, "ok")
    healthy_before = (folder / RUNS_FOLDER / HEALTHY / METRICS_FILE).read_bytes()
    moved = rejudge_verdicts(folder)
    reason = "train accuracy sat at chance (0.1 ± 0.02) for 14 epochs in a row (epochs 1-14 of 36)"
    assert moved == {AT_CHANCE: ("collapsed", reason)}
    # The committed records are what the migration wrote: byte for byte.
    for name in (f"{RUNS_FOLDER}/{AT_CHANCE}/{METRICS_FILE}", f"{RUNS_FOLDER}/{HEALTHY}/{METRICS_FILE}"):
        assert (folder / name).read_bytes() == (RESULTS / STUDY / name).read_bytes()
    assert (folder / RUNS_FOLDER / HEALTHY / METRICS_FILE).read_bytes() == healthy_before
    committed = (RESULTS / STUDY / SUMMARY_FILE).read_text().splitlines(keepends=True)
    assert (folder / SUMMARY_FILE).read_text() == "".join(line for line in committed if line.startswith(("run_id,", AT_CHANCE, HEALTHY)))
    # Judged again, nothing moves.
    assert rejudge_verdicts(folder) == {}


def test_verdict_rows_keep_every_other_cell():
    summary = "run_id,label,status,test_accuracy,reason\na,x,ok,0.81,\nb,y,ok,0.80,\n"
    assert verdict_rows(summary, {"a": ("collapsed", "at chance")}) == "run_id,label,status,test_accuracy,reason\na,x,collapsed,0.81,at chance\nb,y,ok,0.80,\n"
