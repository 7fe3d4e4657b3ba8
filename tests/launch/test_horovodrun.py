"""``horovodrun`` for real: how a job whose rank dies is reported, and the controller lbtrain
tells it to use."""

import subprocess
import sys
import textwrap

import pytest

from lbtrain.config import ElasticConfig, HorovodLaunchConfig
from lbtrain.launch.horovodrun import controller_arguments, job_command, launch_horovod

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
    # horovodrun's own choice, asked in a fresh process (it forks and imports Horovod's extension).
    asked = subprocess.run([sys.executable, "-c", "from horovod.runner.launch import is_gloo_used; print(is_gloo_used())"],
                           capture_output=True, text=True, check=True)
    assert controller_arguments([]) == (["--gloo"] if asked.stdout.split()[-1] == "True" else [])


@pytest.mark.parametrize("args", [["--mpi"], ["--gloo"], ["--jsrun"], ["--config-file=flags.yaml"], ["--config-file", "f.yaml"],
                                  ["--js"], ["--config", "f.yaml"], ["--glo=1"]])
def test_a_controller_chosen_in_the_args_even_abbreviated_is_left_alone(args):
    assert controller_arguments(args) == []


@pytest.mark.horovod
@pytest.mark.parametrize("args", [["--gloo-timeout-seconds", "60"], ["--mpi-args=-x A"], ["--mpi-threads-disable"], ["-p", "22"]])
def test_flags_that_only_look_like_a_controller_still_get_the_chosen_one(args):
    assert controller_arguments(args) == controller_arguments([])


def test_a_horovodrun_wrapper_gets_no_controller_flag(monkeypatch):
    monkeypatch.setenv("HOROVODRUN", sys.executable)
    assert controller_arguments([]) == []


@pytest.mark.horovod
def test_a_static_job_gets_the_controller_and_an_elastic_one_its_flags_alone(tmp_path):
    program = [sys.executable, "train.py"]
    static = job_command(HorovodLaunchConfig(), 2, program, tmp_path)
    assert static[1:] == ["-np", "2", "-H", "localhost:2", *controller_arguments([]), *program]
    assert "--gloo" not in job_command(HorovodLaunchConfig(args=["--mpi"]), 2, program, tmp_path)
    elastic = ElasticConfig(min_workers=1, max_workers=2, discovery=["localhost:2"])
    command = job_command(HorovodLaunchConfig(), 2, program, tmp_path, elastic)
    assert command[1:5] == ["-np", "2", "--min-np", "1"] and "--gloo" not in command and "-H" not in command
