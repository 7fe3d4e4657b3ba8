"""Each mode names its launcher (``lbtrain.launch.launchers``), and the plan and the runner ask it:
what a run takes of the machine, whether it can start here, its fixed ports, the child that
trains simulated runs in turn."""

import socket

import pytest

from lbtrain.config import ConfigError, ExperimentConfig
from lbtrain.launch.horovodrun import horovod_launch_problem
from lbtrain.launch.isolation import RunProcess
from lbtrain.launch.launchers import (
    FreshProcessLauncher,
    HorovodrunLauncher,
    IsolatedChildLauncher,
    Launcher,
    ParameterServerLauncher,
    TfClusterLauncher,
)
from lbtrain.worlds.modes import MODES, get_mode


def experiment(tmp_path, **changes) -> ExperimentConfig:
    return ExperimentConfig.model_validate({"name": "launched", "output_dir": str(tmp_path), **changes})


def test_every_mode_names_a_launcher_class():
    launchers = {name: type(mode.launcher()) for name, mode in MODES.items()}
    assert launchers == {"simulated": IsolatedChildLauncher, "horovod": HorovodrunLauncher, "mirrored": FreshProcessLauncher,
                         "multiworker": TfClusterLauncher, "parameter_server": ParameterServerLauncher}
    assert all(issubclass(launcher, Launcher) for launcher in launchers.values())


def test_only_the_isolated_child_keeps_a_process_between_runs(tmp_path):
    child = get_mode("simulated").launcher().child(threads=1, environment={"CUDA_VISIBLE_DEVICES": ""})
    assert isinstance(child, RunProcess)
    assert [name for name, mode in MODES.items() if mode.launcher().child(1, {}) is not None] == ["simulated"]
    with pytest.raises(NotImplementedError, match="IsolatedChildLauncher starts no job"):
        IsolatedChildLauncher().start(["true"], 1, experiment(tmp_path), tmp_path)


def test_only_horovodrun_needs_something_installed():
    assert HorovodrunLauncher().problem() == horovod_launch_problem()
    assert {name: mode.launcher().problem() for name, mode in MODES.items() if name != "horovod"} == dict.fromkeys(
        ("simulated", "mirrored", "multiworker", "parameter_server"))


@pytest.mark.parametrize("mode, settings, field, ports", [
    ("multiworker", {"multiworker": {"base_port": None}}, "multiworker.base_port", 3),
    ("parameter_server", {"parameter_server": {"ps_tasks": 1, "base_port": None}}, "parameter_server.base_port", 5),
])
def test_fixed_ports_in_use_are_a_config_error_naming_the_field(tmp_path, mode, settings, field, ports):
    """A run of 3 workers: 3 ports for a tf.distribute cluster; chief + 3 workers + 1 parameter
    server for a parameter-server job. The last of them is taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        base_port = taken.getsockname()[1] - ports + 1
        section = next(iter(settings))
        fixed = experiment(tmp_path, mode=mode, **{section: {**settings[section], "base_port": base_port}})
        with pytest.raises(ConfigError, match=rf"{field}: port \d+ is in use \(the job needs ports {base_port}-{base_port + ports - 1}\)"):
            get_mode(mode).launcher().check_ports(3, fixed)
    get_mode(mode).launcher().check_ports(3, experiment(tmp_path, mode=mode))  # free ports: nothing to check


def test_only_horovodrun_reads_the_horovod_launch_settings(tmp_path):
    """horovod.args set on an experiment of another mode are not this launcher's to check (the
    message of a bad one under horovodrun: tests/launch/test_horovod_args.py)."""
    settings = experiment(tmp_path, horovod={"args": ["--no-such-flag"]})
    assert {name: mode.launcher().settings_problem(settings) for name, mode in MODES.items() if name != "horovod"} == dict.fromkeys(
        ("simulated", "mirrored", "multiworker", "parameter_server"))
