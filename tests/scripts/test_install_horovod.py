"""scripts/install_horovod.py takes no Horovod wheel built another way: its cache is keyed by
everything a build depends on, and ``horovodrun --check-build`` must list what the build flags
asked for. Building Horovod takes minutes, so the poisoned wheel is reproduced by its
``--check-build`` listing: a wheel built in pip's isolated environment (no TensorFlow) shows
neither TensorFlow nor Gloo."""

import importlib.util
import os
import subprocess
import sys

import pytest

from helpers import REPO_ROOT

_spec = importlib.util.spec_from_file_location("install_horovod", os.path.join(REPO_ROOT, "scripts", "install_horovod.py"))
install_horovod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_horovod)

LISTING = """Horovod v0.28.1:

Available Frameworks:
    [{tensorflow}] TensorFlow
    [{pytorch}] PyTorch
    [ ] MXNet

Available Controllers:
    [ ] MPI
    [{gloo}] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [ ] MPI
    [{gloo}] Gloo
"""


def listing(tensorflow=True, pytorch=False, gloo=True) -> str:
    mark = {True: "X", False: " "}
    return LISTING.format(tensorflow=mark[tensorflow], pytorch=mark[pytorch], gloo=mark[gloo])


def test_a_wheel_built_as_asked_passes():
    assert install_horovod.check_build_problems(listing(), install_horovod.BUILD_FLAGS) == []


def test_a_wheel_built_in_pips_isolated_environment_is_rejected():
    problems = install_horovod.check_build_problems(listing(tensorflow=False, gloo=False), install_horovod.BUILD_FLAGS)
    assert problems == ["TensorFlow is missing", "Gloo is missing"]


def test_pytorch_listed_without_being_asked_for_is_no_problem():
    """--check-build marks PyTorch available whenever horovod.torch imports, which it does
    without its extension (seen on this machine's fresh TensorFlow-only build)."""
    assert install_horovod.check_build_problems(listing(pytorch=True), install_horovod.BUILD_FLAGS) == []


def test_an_unreadable_listing_is_rejected():
    assert "TensorFlow is not listed" in install_horovod.check_build_problems("", install_horovod.BUILD_FLAGS)


def test_the_cache_key_changes_with_everything_a_build_depends_on():
    flags = install_horovod.BUILD_FLAGS
    base = install_horovod.wheel_key("horovod==0.28.1", "tensorflow-cpu==2.15.1", "cp311", flags)
    assert base == install_horovod.wheel_key("horovod==0.28.1", "tensorflow-cpu==2.15.1", "cp311", dict(reversed(flags.items())))
    others = [
        install_horovod.wheel_key("horovod==0.28.0", "tensorflow-cpu==2.15.1", "cp311", flags),
        install_horovod.wheel_key("horovod==0.28.1", "tensorflow-cpu==2.14.1", "cp311", flags),
        install_horovod.wheel_key("horovod==0.28.1", "tensorflow==2.15.1", "cp311", flags),
        install_horovod.wheel_key("horovod==0.28.1", "tensorflow-cpu==2.15.1", "cp310", flags),
        install_horovod.wheel_key("horovod==0.28.1", "tensorflow-cpu==2.15.1", "cp311", {**flags, "HOROVOD_WITH_PYTORCH": "1"}),
    ]
    assert base not in others and len(set(others)) == len(others)


@pytest.mark.horovod
def test_the_installed_horovod_lists_what_the_build_flags_asked_for():
    """The Horovod of this stack, as make test installed it."""
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    completed = subprocess.run([horovodrun, "--check-build"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert install_horovod.check_build_problems(completed.stdout, install_horovod.BUILD_FLAGS) == []
