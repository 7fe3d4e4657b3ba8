"""``horovodrun`` for real: how a job whose rank dies is reported, and the controller lbtrain
tells it to use."""

import sys
import textwrap

import pytest

from lbtrain.config import HorovodLaunchConfig
from lbtrain.launch.horovodrun import controller_arguments, launch_horovod

# Rank 1 is killed (SIGKILL, as the OOM killer does) while rank 0 waits, as in a collective.
KILLED_RANK = textwrap.dedent("""
    import os, signal, time
    if os.environ["HOROVOD_RANK"] == "1":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
""")


@pytest.mark.horovod
def test_a_killed_rank_is_named_with_its_signal_in_the_one_line_failure(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(KILLED_RANK)
    job = launch_horovod(HorovodLaunchConfig(), 2, [sys.executable, str(script)], tmp_path)
    assert job.returncode != 0
    assert job.failure == "horovodrun exited with 1: rank 1 exited with code 137 (SIGKILL): Killed", job.output[-2000:]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["job.py"]


@pytest.mark.horovod
def test_horovodrun_is_told_the_controller_it_would_choose_by_itself():
    from horovod.runner.launch import is_gloo_used  # horovodrun's own choice: forks, imports the extension

    assert controller_arguments([]) == (["--gloo"] if is_gloo_used() else [])


@pytest.mark.horovod
@pytest.mark.parametrize("args", [["--mpi"], ["--gloo"], ["--jsrun"], ["--config-file=flags.yaml"], ["--config-file", "f.yaml"]])
def test_a_controller_chosen_in_the_args_is_left_alone(args):
    assert controller_arguments(args) == []


@pytest.mark.horovod
def test_a_horovodrun_wrapper_gets_no_controller_flag(monkeypatch):
    monkeypatch.setenv("HOROVODRUN", sys.executable)
    assert controller_arguments([]) == []
