"""``horovodrun`` for real: how a job whose rank dies is reported."""

import sys
import textwrap

import pytest

from lbtrain.config import HorovodLaunchConfig
from lbtrain.launch.horovodrun import launch_horovod

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
