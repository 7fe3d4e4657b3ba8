"""lbtrain report: the one-line errors of its arguments, of a damaged sweep storage and of a folder
whose runs all failed. (The results page of this repository's studies is the lab's:
tests/lab/test_results_page.py.)"""

from pathlib import Path

import pytest

from helpers import REPO_ROOT, stderr_lines

RESULTS = Path(REPO_ROOT) / "results"


@pytest.mark.parametrize("arguments, message", [
    ((), "the following arguments are required: results"),
    (("results/quickstart", "--target", "high"), "argument --target: invalid float value: 'high'"),
])
def test_bad_arguments_are_one_line_exit_2(tmp_path, arguments, message, lbtrain_here):
    result = lbtrain_here("report", *arguments, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("lbtrain: error: ") and message in lines[0]


@pytest.mark.parametrize("damage", [b"", b"not a database at all" * 200])
def test_a_damaged_optuna_db_is_one_line_saying_how_to_report_without_it(tmp_path, damage, lbtrain_here):
    """A sweep's folder (the committed goyal_sweep) whose optuna.db was damaged: one line naming
    the file, with the way out; nothing in the folder is written or lost."""
    import shutil

    folder = tmp_path / "goyal_sweep"
    shutil.copytree(RESULTS / "goyal_sweep", folder)
    database = folder / "optuna.db"
    database.write_bytes(damage or (RESULTS / "goyal_sweep" / "optuna.db").read_bytes()[:20000])
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    result = lbtrain_here("report", str(folder))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = stderr_lines(result.stderr)
    # At most 300 characters: past that the middle (the database's own words) is cut, never the path or the way out.
    assert len(line) <= 300 and line.startswith(f"lbtrain: error: the tuning trials in 'sqlite:///{database}' ")
    assert line.endswith("if it is damaged, move it aside or restore a backup, then report again (leaving out the tuning time)")
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before


def test_a_report_of_runs_that_all_failed_says_so_in_one_line(tmp_path, lbtrain_here):
    """Every run failed before its first epoch (recorded by the runner's own functions): the
    report names the counts and the first reason, exit 2, and writes nothing."""
    from lbtrain.config import ExperimentConfig
    from lbtrain.results import RunResult, write_run
    from lbtrain.studies.plan import expand
    from lbtrain.studies.runner import summary_csv, summary_row

    experiment = ExperimentConfig.model_validate({"name": "doomed", "output_dir": str(tmp_path),
                                                  "data": {"dataset": "synthetic"}, "grid": {"world_sizes": [1, 2]}})
    folder = tmp_path / "doomed"
    rows = []
    for planned in expand(experiment):
        result = RunResult.failed(planned.config, "ValueError: the loader broke")
        write_run(folder / "runs" / planned.run_id, result)
        rows.append(summary_row(planned, result))
    (folder / "summary.csv").write_text(summary_csv(rows))
    before = sorted(path.relative_to(folder) for path in folder.rglob("*"))

    result = lbtrain_here("report", str(folder))
    assert result.returncode == 2 and result.stdout == ""
    assert stderr_lines(result.stderr) == [
        "lbtrain: error: no run trained an epoch (2 runs: 2 failed); the first says: ValueError: the loader broke; fix that "
        "and rerun the experiment, then report"]
    assert sorted(path.relative_to(folder) for path in folder.rglob("*")) == before
