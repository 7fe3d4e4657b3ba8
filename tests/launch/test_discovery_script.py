"""A discovery script that hangs is refused in one line and killed with everything it started
(its process group), not left running after lbtrain has moved on."""

import os

import pytest

import lbtrain.launch.horovodrun as horovodrun
from helpers import wait_until
from lbtrain.config import ConfigError


def _alive(pid: int) -> bool:
    """Running (a zombie no one has reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_hanging_discovery_script_is_killed_with_its_children(tmp_path, monkeypatch):
    monkeypatch.setattr(horovodrun, "DISCOVERY_TIMEOUT_SECONDS", 2)
    child = tmp_path / "child.pid"
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {child}\nwait\n")
    script.chmod(0o755)
    with pytest.raises(ConfigError) as refused:
        horovodrun.discovered_hosts(str(script))
    assert str(refused.value) == f"training.elastic.discovery: {script} did not finish within 2 s"
    pid = int(child.read_text())
    wait_until(lambda: not _alive(pid), "the discovery script's child to end", timeout=5)


def test_a_discovery_script_that_answers_gives_its_hosts(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\necho other:4\n")
    script.chmod(0o755)
    assert horovodrun.discovered_hosts(str(script)) == {"localhost": 2, "other": 4}
    assert not [name for name in os.listdir(tmp_path) if name != "discover.sh"]
