import os
import stat

from lbtrain.files import write_atomic, write_json_atomic


def test_atomic_writes_leave_no_partial_file_and_the_mode_a_new_file_gets(tmp_path):
    previous = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "a" / "summary.csv", "x,y\n")
        json_path = write_json_atomic(tmp_path / "metrics.json", {"loss": 1.5})
    finally:
        os.umask(previous)
    assert path.read_text() == "x,y\n" and json_path.read_text() == '{\n  "loss": 1.5\n}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and stat.S_IMODE(json_path.stat().st_mode) == 0o644
    assert not list(tmp_path.rglob("*.partial"))
