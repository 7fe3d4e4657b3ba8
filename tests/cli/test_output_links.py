"""Every file lbtrain writes stays inside its folder: ``lbtrain report`` refuses a results folder
whose ``figures/`` or ``report.md`` is a link out of it, and ``advise``/``compare`` refuse an
``--output`` they cannot write, each in one line with exit 2, before any work and with nothing
changed inside or outside."""

import os
import re
import shutil
from pathlib import Path

import pytest

from helpers import REPO_ROOT, snapshot, stderr_lines
from lbtrain.cli import one_line

RESULTS = Path(REPO_ROOT) / "results"


@pytest.mark.parametrize("link", ["figures", "report.md"])
def test_report_refuses_a_link_out_of_the_results_folder(tmp_path, lbtrain_here, link):
    folder = tmp_path / "results" / "goyal_sweep"
    shutil.copytree(RESULTS / "goyal_sweep", folder)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("not lbtrain's")
    target = outside if link == "figures" else outside / "keep.txt"
    if (folder / link).is_dir():
        shutil.rmtree(folder / link)
    else:
        (folder / link).unlink(missing_ok=True)
    os.symlink(target, folder / link)
    before = snapshot(tmp_path)
    result = lbtrain_here("report", str(folder))
    assert result.returncode == 2 and result.stdout == ""
    [line] = stderr_lines(result.stderr)
    # As the command line prints it: one line of at most MAX_ERROR_LENGTH characters (long test paths are cut in the middle).
    assert line == "lbtrain: error: " + one_line(f"{folder / link} is a symbolic link to {target}, outside the results folder; "
                                                 "lbtrain writes only inside it: remove the link")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("output, message", [
    ("/proc/lbtrain-output", r"--output /proc/lbtrain-output: cannot create the folder \(.+\)$"),
    ("a-file/inside", r"--output a-file/inside: a file is where the folder should be$"),
])
def test_advise_refuses_an_output_it_cannot_write_before_the_probe_trains(tmp_path, lbtrain_here, output, message):
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(f"name: probe\noutput_dir: {tmp_path / 'results'}\ndata: {{dataset: mnist1d}}\n")
    (tmp_path / "a-file").write_text("a file")
    before = snapshot(tmp_path)
    result = lbtrain_here("advise", str(experiment), "--output", output, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    [line] = stderr_lines(result.stderr)
    assert re.fullmatch(f"lbtrain: error: {message}", line), line
    assert snapshot(tmp_path) == before  # no probe ran: no results folder, no partial output


def test_compare_refuses_an_output_with_a_link_out_and_leaves_no_folder_it_made(tmp_path, lbtrain_here):
    output = tmp_path / "comparison"
    (output / "figures").parent.mkdir()
    os.symlink(tmp_path, output / "figures")
    before = snapshot(tmp_path)
    result = lbtrain_here("compare", str(RESULTS / "sync_vs_async_sync"), str(RESULTS / "sync_vs_async_async"),
                          "--output", str(output))
    assert result.returncode == 2
    [line] = stderr_lines(result.stderr)
    assert line.startswith(f"lbtrain: error: {output / 'figures'} is a symbolic link to {tmp_path}, outside the results folder")
    assert snapshot(tmp_path) == before
    result = lbtrain_here("compare", str(RESULTS / "sync_vs_async_sync"), str(RESULTS / "sync_vs_async_async"),
                          "--output", str(tmp_path / "missing" / "folder"), "--target", "7")
    assert result.returncode == 2 and not (tmp_path / "missing").exists()


def test_report_refuses_a_folder_where_it_writes_report_md(tmp_path, lbtrain_here):
    folder = tmp_path / "goyal_sweep"
    shutil.copytree(RESULTS / "goyal_sweep", folder)
    (folder / "report.md").unlink()
    (folder / "report.md").mkdir()
    before = snapshot(tmp_path)
    result = lbtrain_here("report", str(folder))
    assert result.returncode == 2 and result.stdout == ""
    assert stderr_lines(result.stderr) == [f"lbtrain: error: {folder / 'report.md'} is a folder where lbtrain writes a file: "
                                           "move it away"]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("damage, message", [
    ("fifo", "not a regular file (a FIFO, a device or a socket); an experiment is a YAML file"),
    ("alias bomb", "expands to more than 100000 values (aliases repeated inside aliases?); write the values out, or use extends"),
])
def test_report_reads_the_recorded_experiment_within_the_limits_of_an_experiment_file(tmp_path, lbtrain_here, damage, message):
    folder = tmp_path / "goyal_sweep"
    shutil.copytree(RESULTS / "goyal_sweep", folder)
    record = folder / "experiment.yaml"
    record.unlink()
    if damage == "fifo":
        os.mkfifo(record)  # reading it would wait forever for a writer
    else:
        levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
            f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, 9)]
        record.write_text("\n".join(levels) + "\nname: *a8\n")
    before = snapshot(tmp_path)
    result = lbtrain_here("report", str(folder))
    assert result.returncode == 2 and result.stdout == ""
    assert stderr_lines(result.stderr) == [f"lbtrain: error: {record}: {message}"]
    assert snapshot(tmp_path) == before
