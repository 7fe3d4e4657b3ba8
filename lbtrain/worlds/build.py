"""This process's world, by mode name (``lbtrain.worlds.modes``): what ``lbtrain train`` and every
launched task build before TensorFlow runs an op."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from lbtrain.config import ConfigError, RunConfig, TrainingConfig, run_config_from_dict
from lbtrain.config.run import check_micro_batches
from lbtrain.worlds.base import World
from lbtrain.worlds.modes import default_mode_name, get_mode


def current_world(world_size: int, micro_batches: int = 1, mode: str | None = None) -> World:
    """The world of ``mode`` (a name of ``MODES``); without one, Horovod's world when launched by
    horovodrun/mpirun, else a simulated one of ``world_size``. Build it before TensorFlow runs an
    op. Under Horovod (but in an elastic job) and multiworker the number of processes must equal ``world_size``."""
    world = get_mode(mode or default_mode_name()).build_world(world_size, micro_batches)
    if world is not None and world.size != world_size and not world.elastic:
        raise ConfigError(f"training.world_size is {world_size} but the launcher started {world.size} processes")
    return world


def _training_section(run: dict[str, Any]) -> TrainingConfig:
    """The ``training`` section of a run config, validated alone (or the ``ConfigError`` of the
    whole config, which names the field)."""
    try:
        training = TrainingConfig.model_validate(run.get("training") or {})
        check_micro_batches(training)
        return training
    except (ValidationError, ValueError):
        return run_config_from_dict(run).training


def prepare_run(run: dict[str, Any], mode: str | None = None) -> tuple[World | None, RunConfig | None]:
    """This process's world and the validated config for the run config ``run`` (plain data, as
    read from its YAML), in the order the strategies need: the world is built before the config
    is validated (validating builds the optimizer, which starts TensorFlow's runtime, after
    which logical devices and collectives can no longer be set up), then the config is checked
    against the mode. ``(None, None)``: this task only served (a parameter server's worker whose
    server stopped). A problem is a ``ConfigError``."""
    chosen = get_mode(mode or default_mode_name())
    problem = chosen.launch_problem()
    if problem is not None:
        raise ConfigError(problem)
    training = _training_section(run)
    world = current_world(training.world_size, training.micro_batches, chosen.name)
    if world is None:
        return None, None
    config = run_config_from_dict(run)
    chosen.check(config)
    return world, config
