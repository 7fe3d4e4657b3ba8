"""lbtrain report --results-page: the results page of the committed studies, printed or written,
without TensorFlow; and the one-line errors of the report command's arguments."""

from pathlib import Path

import pytest

from conftest import REPO_ROOT, run_cli, stderr_lines
from lbtrain.reports.results_page import QUICKSTART_BEGIN, QUICKSTART_END, render_quickstart, render_results_page

RESULTS = Path(REPO_ROOT) / "results"


def test_the_results_page_is_printed_as_committed():
    result = run_cli("report", "--results-page")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (RESULTS / "README.md").read_text()
    assert stderr_lines(result.stderr) == []


def test_write_puts_the_page_and_the_quickstart_table_beside_the_results_folder(tmp_path):
    (tmp_path / "results" / "quickstart_reference").mkdir(parents=True)
    (tmp_path / "results" / "quickstart_reference" / "summary.csv").write_bytes(
        (RESULTS / "quickstart_reference" / "summary.csv").read_bytes())
    (tmp_path / "README.md").write_text(f"# lbtrain\n{QUICKSTART_BEGIN}\nold\n{QUICKSTART_END}\n")

    result = run_cli("report", "--results-page", "--write", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote results/README.md and the quickstart table in {tmp_path.resolve() / 'README.md'}\n"
    assert (tmp_path / "results" / "README.md").read_text() == render_results_page(tmp_path / "results")
    assert (tmp_path / "README.md").read_text() == f"# lbtrain\n{render_quickstart(tmp_path / 'results')}\n"


@pytest.mark.parametrize("arguments, message", [
    ((), "the following arguments are required: results (or give --results-page)"),
    (("results/quickstart", "--write"), "--write needs --results-page"),
    (("--results-page", "--target", "0.9"), "--target and --metric are for a results folder's report, not --results-page"),
    (("--results-page", "no_such_folder"), "no_such_folder is not a folder of studies"),
])
def test_arguments_that_do_not_go_together_are_one_line_exit_2(tmp_path, arguments, message, lbtrain_here):
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
    assert line.startswith(f"lbtrain: error: the tuning trials in 'sqlite:///{database}' cannot be read (DatabaseError: ")
    assert line.endswith(f"if the file is damaged, move it aside (mv {database} {database}.damaged) or restore it from a backup, "
                         "then report again (without the storage the report leaves out the tuning time)")
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
