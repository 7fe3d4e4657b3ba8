"""Which Keras lbtrain runs on, and the few places where the two Keras lines differ.

lbtrain supports TensorFlow 2.15 to 2.21. TensorFlow 2.15's ``tf.keras`` is Keras 2.15; from
TensorFlow 2.16 on it is Keras 3 (here only with the TensorFlow backend, since lbtrain's update
formulas and layers are TensorFlow ops). Everything else in lbtrain writes ``tf.keras`` and goes
through this module where the lines differ, so this is the only module that asks which Keras is
present (``KERAS_3``):

- optimizers: ``Optimizer`` gives LARS and LAMB one interface over both base classes
  (``build_slots``, ``apply_update(gradient, variable, learning_rate)``, ``slot_index``); Keras 3
  takes ``learning_rate`` in the base ``__init__`` and passes it to ``update_step``, Keras 2
  reads it from ``self.learning_rate`` and keeps slot indices in ``_index_dict``;
- the names that exclusion regexes match (``variable_name``): Keras 3 variables are named
  ``kernel`` with the layer in their ``path`` (``dense_0/kernel``), Keras 2's are
  ``dense_0/kernel:0``;
- reading and setting an optimizer's learning rate and step from a callback (Keras 3 has no
  ``backend.get_value``/``set_value``, and its ``optimizer.learning_rate`` is the schedule at
  the *next* step);
- the training flag a layer gets when called without one, and the base optimizer's keyword
  arguments.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from typing import Any

import tensorflow as tf

from lbtrain._registration import register_keras_objects

# The TensorFlow releases lbtrain is tested on: 2.15 (tf.keras 2.15, the Horovod stack) and
# 2.16 to 2.21 (Keras 3).
SUPPORTED_TENSORFLOW = ((2, 15), (2, 21))
INSTALL_HINT = "pip install 'lbtrain[cpu]' (tensorflow-cpu), 'lbtrain[tensorflow]' or 'lbtrain[gpu]'"


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def _keras_version() -> str:
    version = getattr(tf.keras, "__version__", None)
    if version is None:  # TensorFlow 2.15: tf.keras is the keras 2.15 package's API
        import keras

        version = keras.__version__
    return version


TENSORFLOW_RELEASE = _release(tf.__version__)
if TENSORFLOW_RELEASE < SUPPORTED_TENSORFLOW[0]:
    raise ImportError(f"lbtrain needs TensorFlow 2.15 to 2.21, found {tf.__version__}: {INSTALL_HINT}")
if TENSORFLOW_RELEASE > SUPPORTED_TENSORFLOW[1]:
    warnings.warn(f"lbtrain is tested on TensorFlow 2.15 to 2.21, found {tf.__version__}", stacklevel=2)

KERAS_VERSION = _keras_version()
KERAS_3 = _release(KERAS_VERSION) >= (3, 0)

if KERAS_3 and tf.keras.backend.backend() != "tensorflow":
    raise ImportError(f"lbtrain runs Keras 3 on the TensorFlow backend, but KERAS_BACKEND is "
                      f"{tf.keras.backend.backend()!r}: unset it or set it to 'tensorflow'")

# What the base optimizer's ``__init__`` takes besides ``learning_rate`` and ``weight_decay``
# (which LARS and LAMB take themselves). Keras 2 also writes ``is_legacy_optimizer`` into every
# config (accepted, never listed).
if KERAS_3:
    BASE_OPTIMIZER_ARGUMENTS = (
        "clipnorm", "clipvalue", "ema_momentum", "ema_overwrite_frequency", "global_clipnorm",
        "gradient_accumulation_steps", "loss_scale_factor", "name", "use_ema",
    )
    CONFIG_ONLY_ARGUMENTS: tuple[str, ...] = ()
else:
    BASE_OPTIMIZER_ARGUMENTS = (
        "clipnorm", "clipvalue", "ema_momentum", "ema_overwrite_frequency", "global_clipnorm", "jit_compile", "name",
        "use_ema",
    )
    CONFIG_ONLY_ARGUMENTS = ("is_legacy_optimizer",)


HOROVOD_INSTALL = ("install TensorFlow 2.15 and build Horovod against it: pip install tensorflow-cpu==2.15.1, then "
                   "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 pip install --no-build-isolation --no-cache-dir "
                   "'lbtrain[horovod]' (README, Install)")


def horovod_problem() -> str | None:
    """Why Horovod's world cannot run on this stack, as a sentence naming the fix; None if it can
    (Horovod installed next to TensorFlow 2.15). Looks Horovod up without importing it."""
    if TENSORFLOW_RELEASE != SUPPORTED_TENSORFLOW[0]:
        return (f"Horovod runs on TensorFlow 2.15 only, this is TensorFlow {tf.__version__} with Keras {KERAS_VERSION} "
                f"(Horovod 0.28.1 does not build against TensorFlow 2.16+ and its Keras layer fails on Keras 3, "
                f"horovod#4290): use mode: simulated here, or {HOROVOD_INSTALL}")
    if importlib.util.find_spec("horovod") is None:
        return f"Horovod is not installed: {HOROVOD_INSTALL}, or use mode: simulated"
    return None


def variable_name(variable) -> str:
    """The name lbtrain's exclusion regexes match: the layer and the weight, ``dense_0/kernel``
    on Keras 3 (the variable's ``path``), ``dense_0/kernel:0`` on Keras 2 (and for a plain
    ``tf.Variable`` on either)."""
    return getattr(variable, "path", None) or variable.name


def tensorflow_variables(variables) -> list[tf.Variable]:
    """The ``tf.Variable`` of each Keras variable, for ``tf.GradientTape`` and plain TensorFlow
    code: Keras 3 wraps it (``.value``; its ``dtype`` is a string), Keras 2's are ``tf.Variable``."""
    return [variable.value for variable in variables] if KERAS_3 else list(variables)


def optimizer_step(optimizer: tf.keras.optimizers.Optimizer) -> int:
    """The number of updates the optimizer has applied."""
    return int(optimizer.iterations.numpy())


def applied_learning_rate(optimizer: tf.keras.optimizers.Optimizer) -> float:
    """The learning rate the optimizer applied at its last step (before its first step: the
    rate of step 0).

    Keras 2 stores ``schedule(iterations)`` in a variable at the start of every
    ``apply_gradients``, so after a step that variable is the rate applied; Keras 3 evaluates
    ``optimizer.learning_rate`` at the current ``iterations``, the *next* step."""
    if not KERAS_3:
        return float(tf.keras.backend.get_value(optimizer.learning_rate))
    schedule = optimizer._learning_rate
    if isinstance(schedule, tf.keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(max(optimizer_step(optimizer) - 1, 0)))
    return float(tf.convert_to_tensor(optimizer.learning_rate))


def set_learning_rate(optimizer: tf.keras.optimizers.Optimizer, value: float) -> None:
    """Sets a float learning rate (the variable Keras keeps for it)."""
    if KERAS_3:
        optimizer.learning_rate = float(value)
    else:
        tf.keras.backend.set_value(optimizer.learning_rate, value)


def default_training() -> Any:
    """The training flag of a layer called without one: Keras 2's global learning phase; Keras 3
    fills ``training`` from the enclosing call itself, so a layer left without one is in
    inference."""
    return False if KERAS_3 else tf.keras.backend.learning_phase()


class Optimizer(tf.keras.optimizers.Optimizer):
    """tf.keras's base optimizer, the same on Keras 2 and Keras 3.

    A subclass implements ``build_slots(var_list)`` (its slot variables, made with
    ``add_variable_from_reference(variable, name)``) and ``apply_update(gradient, variable,
    learning_rate)`` (its formula, in TensorFlow ops, finding a variable's slots at
    ``slot_index(variable)``), and extends ``get_config``. Its ``__init__`` passes the learning
    rate and the base optimizer's keyword arguments here.
    """

    def __init__(self, learning_rate, name: str, **kwargs):
        if KERAS_3:
            if tf.is_tensor(learning_rate):
                # Keras 2 copies a tensor or variable's value into its own variable; Keras 3
                # takes only floats, schedules and callables: copy the value the same way.
                learning_rate = float(learning_rate.numpy())
            super().__init__(learning_rate, name=name, **kwargs)
        else:
            super().__init__(name=name, **kwargs)
            self._learning_rate = self._build_learning_rate(learning_rate)

    def build(self, var_list):
        if getattr(self, "built" if KERAS_3 else "_built", False):
            return
        super().build(var_list)
        self.build_slots(list(var_list))
        if not KERAS_3:
            self._built = True

    def build_slots(self, var_list) -> None:
        """Creates the optimizer's slot variables for ``var_list`` (called once)."""

    def apply_update(self, gradient, variable, learning_rate) -> None:
        """Updates ``variable`` (and its slots) with ``gradient`` at ``learning_rate``."""
        raise NotImplementedError

    if KERAS_3:

        def update_step(self, gradient, variable, learning_rate):
            self.apply_update(gradient, variable, learning_rate)

        def slot_index(self, variable) -> int:
            """The index of ``variable`` in the list ``build_slots`` was given."""
            return self._get_variable_index(variable)

    else:

        def update_step(self, gradient, variable):
            self.apply_update(gradient, variable, self.learning_rate)

        def slot_index(self, variable) -> int:
            """The index of ``variable`` in the list ``build_slots`` was given."""
            return self._index_dict[self._var_key(variable)]

    def get_config(self) -> dict:
        config = super().get_config()
        if not KERAS_3:  # Keras 3's base config has the learning rate already
            config["learning_rate"] = self._serialize_hyperparameter(self._learning_rate)
        return config


# Imported first, this module's ``import tensorflow`` set off lbtrain's registration, which
# waits for this module (``lbtrain._registration.register_keras_objects``).
register_keras_objects(keras_module_loaded=True)
