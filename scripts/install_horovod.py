"""Installs Horovod into the virtualenv of the Python running this script, built against that
virtualenv's TensorFlow with lbtrain's build flags, and never from a wheel built another way.

pip caches a wheel it built from Horovod's sdist under the sdist's name alone, whatever
TensorFlow, frameworks and controllers it was built with: a Horovod built in pip's isolated
build environment (no TensorFlow), for PyTorch, or against another TensorFlow is taken again by
the next ``pip install horovod==0.28.1`` on the machine. So this script builds with
``--no-cache-dir`` and keeps its own cache, one folder per (Horovod, TensorFlow, Python, build
flags): ``$LBTRAIN_WHEEL_CACHE`` or ``~/.cache/lbtrain/wheels``. Before the wheel is kept, and
every time it is installed, ``horovodrun --check-build`` must list the frameworks and
controllers the flags ask for (TensorFlow and Gloo); a cached wheel that does not is deleted and
built again.

Usage (what ``make`` runs): ``.venv/bin/python scripts/install_horovod.py``
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HOROVOD = "horovod==0.28.1"
# Gloo runs `horovodrun -np 2` on one machine; MPI/NCCL builds are the cluster user's option.
BUILD_FLAGS = {
    "HOROVOD_WITH_TENSORFLOW": "1", "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1", "HOROVOD_WITHOUT_PYTORCH": "1", "HOROVOD_WITHOUT_MXNET": "1",
}
# What --check-build calls each flag's subject.
CHECK_BUILD_NAMES = {"TENSORFLOW": "TensorFlow", "PYTORCH": "PyTorch", "MXNET": "MXNet", "GLOO": "Gloo", "MPI": "MPI"}
# Horovod's own dependencies, and what its build needs besides TensorFlow (--no-build-isolation).
BUILD_REQUIREMENTS = ["cmake", "psutil", "cloudpickle", "packaging", "pyyaml"]
TENSORFLOW_DISTRIBUTIONS = ("tensorflow-cpu", "tensorflow", "tensorflow-intel", "tensorflow-macos")


def tensorflow_version() -> str:
    """The installed TensorFlow's version, under whichever distribution name it came."""
    for name in TENSORFLOW_DISTRIBUTIONS:
        try:
            return f"{name}=={importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    raise SystemExit("install_horovod: install TensorFlow 2.15 first; Horovod compiles against it")


def wheel_key(horovod: str, tensorflow: str, python: str, flags: dict[str, str]) -> str:
    """The cache folder of one build: a hash of everything the wheel depends on."""
    described = " ".join([horovod, tensorflow, python, *(f"{name}={value}" for name, value in sorted(flags.items()))])
    return hashlib.sha256(described.encode()).hexdigest()[:16]


def required_listing(flags: dict[str, str]) -> list[str]:
    """What --check-build must mark available for ``flags``: each framework or controller named
    by a ``HOROVOD_WITH_X`` flag. (Not the ``HOROVOD_WITHOUT_X`` ones as absent: --check-build
    marks PyTorch available whenever ``horovod.torch`` imports, which it does without its
    extension.)"""
    required = []
    for flag in flags:
        match = re.fullmatch(r"HOROVOD_WITH_(\w+)", flag)
        if match and match.group(1) in CHECK_BUILD_NAMES:
            required.append(CHECK_BUILD_NAMES[match.group(1)])
    return required


def check_build_problems(listing: str, flags: dict[str, str]) -> list[str]:
    """What ``horovodrun --check-build`` output lacks of what ``flags`` asked for (empty if
    nothing). The frameworks and the controllers are checked, not the tensor operations."""
    sections = re.split(r"\n(?=Available Tensor Operations:)", listing)[0]
    shown = {name: mark == "X" for mark, name in re.findall(r"\[([ X])\]\s+(\S+)", sections)}
    problems = []
    for name in required_listing(flags):
        if name not in shown:
            problems.append(f"{name} is not listed")
        elif not shown[name]:
            problems.append(f"{name} is missing")
    return problems


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, **kwargs)


def build_wheel(pip: list[str], folder: Path) -> Path:
    """Builds Horovod from source against the installed TensorFlow into ``folder``; pip's cache
    is neither read nor written."""
    run([*pip, "install", "--quiet", *BUILD_REQUIREMENTS])
    staging = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", dir=folder.parent))
    print(f"install_horovod: building {HOROVOD} against {tensorflow_version()} (about 2 minutes on 2 cores)", flush=True)
    run([*pip, "wheel", "--quiet", "--no-cache-dir", "--no-build-isolation", "--no-deps", "--wheel-dir", str(staging), HOROVOD],
        env={**os.environ, **BUILD_FLAGS})
    staging.rename(folder)  # whole or not at all: a killed build leaves only a staging folder
    return next(folder.glob("horovod-*.whl"))


def install_and_check(pip: list[str], wheel: Path, horovodrun: Path) -> list[str]:
    run([*pip, "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel)])
    run([*pip, "install", "--quiet", *BUILD_REQUIREMENTS])
    listing = subprocess.run([str(horovodrun), "--check-build"], capture_output=True, text=True).stdout
    (Path(sys.prefix) / "horovod-check-build.txt").write_text(listing)
    return check_build_problems(listing, BUILD_FLAGS)


def main() -> int:
    pip = [sys.executable, "-m", "pip"]
    horovodrun = Path(sys.executable).parent / "horovodrun"
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    cache = Path(os.environ.get("LBTRAIN_WHEEL_CACHE") or Path.home() / ".cache" / "lbtrain" / "wheels")
    folder = cache / f"horovod-{wheel_key(HOROVOD, tensorflow_version(), python, BUILD_FLAGS)}"
    cache.mkdir(parents=True, exist_ok=True)
    for attempt in ("cached", "fresh"):
        wheels = sorted(folder.glob("horovod-*.whl"))
        if not wheels:
            shutil.rmtree(folder, ignore_errors=True)
            wheels, attempt = [build_wheel(pip, folder)], "fresh"
        problems = install_and_check(pip, wheels[0], horovodrun)
        if not problems:
            print(f"install_horovod: {wheels[0].name} ({attempt}) lists TensorFlow and Gloo; cached in {folder}")
            return 0
        print(f"install_horovod: the {attempt} wheel {wheels[0]} was not built as asked ({'; '.join(problems)})", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        if attempt == "fresh":
            break
    print(f"install_horovod: a fresh build does not list what {' '.join(f'{k}={v}' for k, v in BUILD_FLAGS.items())} "
          f"asked for; see {Path(sys.prefix) / 'horovod-check-build.txt'}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
