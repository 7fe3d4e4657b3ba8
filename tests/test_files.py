import os
import stat

from helpers import run_python
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


def test_a_write_that_fails_half_way_keeps_the_old_file_and_leaves_no_partial_one(tmp_path):
    # A full disk, made real in a fresh process: files may not grow past 4096 bytes there.
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from lbtrain.files import write_atomic\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "path = Path(sys.argv[1]) / 'summary.csv'\n"
        "write_atomic(path, 'old\\n')\n"
        "try:\n"
        "    write_atomic(path, 'x' * 100000)\n"
        "except OSError as error:\n"
        "    print(error.strerror)\n"
    )
    completed = run_python(code, str(tmp_path))
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "File too large"
    assert (tmp_path / "summary.csv").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.csv"]
