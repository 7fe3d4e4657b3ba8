"""``lbtrain.worlds.build``: this process's world, built before the config is validated, with
every problem a one-line ``ConfigError``."""

import pytest

from lbtrain.config import ConfigError
from lbtrain.worlds.build import current_world, prepare_run
from lbtrain.worlds.simulated import SimulatedWorld


def test_micro_batches_that_do_not_divide_the_world_are_a_config_error_before_the_world_is_built():
    run = {"data": {"dataset": "synthetic"}, "training": {"world_size": 4, "micro_batches": 3, "per_worker_batch": 8}}
    with pytest.raises(ConfigError, match=r"^training.micro_batches \(3\) must divide training.world_size \(4\): "
                                          r"each micro-batch holds whole workers' batches$"):
        prepare_run(run, "simulated")


def test_a_simulated_run_gets_its_world_and_its_validated_config():
    world, config = prepare_run({"data": {"dataset": "synthetic"}, "training": {"world_size": 4, "micro_batches": 2}}, "simulated")
    assert isinstance(world, SimulatedWorld) and (world.size, world.micro_batches) == (4, 2)
    assert config.training.world_size == 4


def test_an_unknown_mode_names_the_modes():
    with pytest.raises(ConfigError, match=r"^mode 'ring' is not a mode \(allowed: simulated, horovod, mirrored, multiworker, parameter_server\)$"):
        current_world(2, mode="ring")
