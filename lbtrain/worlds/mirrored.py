"""``mode: mirrored``: ``tf.distribute.MirroredStrategy`` over W devices of one process.

W GPUs where there are any, else W logical CPU devices, which must be configured before
TensorFlow's runtime starts, hence one fresh process per run (``lbtrain train --mode mirrored``).
What it shares with ``mode: multiworker`` is in ``lbtrain.worlds.strategy``.
"""

from __future__ import annotations

import tensorflow as tf

from lbtrain.config import ConfigError, RunConfig
from lbtrain.worlds.strategy import StrategyWorld, unsupported_by_strategy

MODE = "mirrored"


def unsupported_setting(config: RunConfig) -> str | None:
    """The first field of ``config`` this mode cannot train, as a one-line message, or None."""
    return unsupported_by_strategy(config, MODE)


class MirroredWorld(StrategyWorld):
    """``tf.distribute.MirroredStrategy`` over ``size`` devices of this process (see the module doc)."""

    mode = MODE

    def __init__(self, size: int):
        """Takes the first ``size`` GPUs if TensorFlow sees any GPU, else configures ``size``
        logical CPU devices, which works only before TensorFlow's runtime starts (a
        ``ConfigError`` says so otherwise)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"world size must be a positive integer, got {size!r}")
        gpus = tf.config.list_physical_devices("GPU")
        if gpus and len(gpus) < size:
            raise ConfigError(f"mode: mirrored with training.world_size {size} needs {size} GPUs, this machine has {len(gpus)}")
        if not gpus:
            cpu = tf.config.list_physical_devices("CPU")[0]
            try:
                tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * size)
            except RuntimeError:
                pass  # TensorFlow has started: the devices it has are checked below
        devices = [device.name for device in tf.config.list_logical_devices("GPU" if gpus else "CPU")]
        if len(devices) < size:
            raise ConfigError(f"mode: mirrored with training.world_size {size} needs {size} CPU devices, but TensorFlow "
                              f"started with {len(devices)}: build MirroredWorld({size}) before TensorFlow runs an op "
                              "(lbtrain train --mode mirrored does)")
        self.devices = devices[:size]
        self.strategy = tf.distribute.MirroredStrategy(self.devices)
        self.size, self.rank, self.local_rank = size, 0, 0

    def __repr__(self) -> str:
        return f"MirroredWorld(size={self.size}, devices={self.devices})"
