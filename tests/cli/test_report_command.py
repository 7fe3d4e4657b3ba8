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
def test_arguments_that_do_not_go_together_are_one_line_exit_2(tmp_path, arguments, message):
    result = run_cli("report", *arguments, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("lbtrain: error: ") and message in lines[0]
