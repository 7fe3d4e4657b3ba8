"""The names of lbtrain's modes, as a YAML's ``mode:`` gives them, and the default mode.

The config schema validates ``mode:`` against these without the mode registry
(``lbtrain.worlds.modes``, one ``Mode`` per name, which refuses to import if its modes are not
these names, in this order), so the config, below the worlds, imports nothing of them. This
module imports nothing.
"""

__all__ = ["DEFAULT_MODE", "MODE_NAMES"]

MODE_NAMES = ("simulated", "horovod", "mirrored", "multiworker", "parameter_server")
DEFAULT_MODE = "simulated"
