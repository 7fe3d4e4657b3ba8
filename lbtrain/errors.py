"""lbtrain's errors that the command line reports as one line: ``ConfigError`` (bad input, exit
code 2), ``WorkersFailed`` (processes it started that ended with their own one-line errors), and
TensorFlow missing where lbtrain needs it (``TENSORFLOW_MISSING``)."""

# lbtrain's TensorFlow extras (the one place they are named for an error line).
INSTALL_HINT = "pip install 'lbtrain[cpu]' (tensorflow-cpu), 'lbtrain[tensorflow]' or 'lbtrain[gpu]'"
TENSORFLOW_MISSING = (f"lbtrain needs TensorFlow for this, and it is not installed: {INSTALL_HINT}; without it only "
                      "lbtrain.optimizers and lbtrain.schedules run, on Keras 3 with KERAS_BACKEND=jax or torch")


def tensorflow_missing(error: BaseException) -> bool:
    """Whether ``error`` is ``import tensorflow`` failing because TensorFlow is not installed."""
    return isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] == "tensorflow"


class ConfigError(ValueError):
    """A config that cannot be used; the message is one line naming the field path and what is allowed."""


class WorkersFailed(RuntimeError):
    """Processes started side by side (a parallel sweep's workers) that failed, each having
    printed its reason as one line; the message gathers the distinct reasons, so a storage that
    fails under eight workers is one line, not eight. ``exit_code``: 2 when every failed process
    ended on bad input (exit 2), else 1."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
