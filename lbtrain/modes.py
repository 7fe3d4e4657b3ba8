"""The mode registry's old address: it lives in ``lbtrain.worlds.modes``, beside the worlds it
names. Kept importable (``lbtrain.modes`` was public)."""

from lbtrain.worlds.modes import (
    DEFAULT_MODE,
    LAUNCHER_VARIABLES,
    MODE_NAMES,
    MODES,
    Mode,
    default_mode_name,
    get_mode,
    launched_by_horovod,
)

__all__ = ["DEFAULT_MODE", "LAUNCHER_VARIABLES", "MODE_NAMES", "MODES", "Mode", "default_mode_name", "get_mode", "launched_by_horovod"]
