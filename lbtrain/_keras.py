"""Which Keras lbtrain runs on, and the few places where the two Keras lines differ.

lbtrain supports TensorFlow 2.15 to 2.21. TensorFlow 2.15's ``tf.keras`` is Keras 2.15; from
TensorFlow 2.16 on it is Keras 3. Everything else in lbtrain goes through this module where the
lines differ, so this is the only module that asks which Keras is present (``KERAS_3``) and on
which backend (``BACKEND``):

- the backend: the library layer (``lbtrain.optimizers``' LARS and LAMB, ``lbtrain.schedules``)
  runs on every Keras 3 backend (TensorFlow, JAX, PyTorch), since its formulas are written in
  ``ops`` and its classes subclass ``keras`` (``tf.keras`` on TensorFlow, Keras 3 itself on
  another backend, where TensorFlow is then not imported and need not be installed); the rest
  of lbtrain (the trainer, the worlds and Horovod, the callbacks, the layers, the measures) is
  TensorFlow code, and the names it imports from here (``TENSORFLOW_ONLY``) refuse any other
  backend with a one-line ImportError;
- ``ops``, the operations the update formulas and schedules are written in, once for both lines:
  ``keras.ops`` on Keras 3 (any backend), the same functions in TensorFlow on tf.keras 2;
- optimizers: ``Optimizer`` gives LARS and LAMB one interface over both base classes
  (``build_slots``, ``apply_update(gradient, variable, learning_rate)``, ``slot_index``, and
  ``assign``/``assign_add``/``assign_sub``, through which every variable is updated, as Keras 3
  requires for JAX's stateless training); Keras 3 takes ``learning_rate`` in the base
  ``__init__`` and passes it to ``update_step``, Keras 2 reads it from ``self.learning_rate``
  and keeps slot indices in ``_index_dict``;
- the names that exclusion regexes match (``variable_name``): the layer and the weight,
  ``dense_0/kernel`` on both, from Keras 3's ``path`` (``beta_vae/dense_0/kernel`` in a
  Sequential named ``beta_vae``; ``variable.name`` is only ``kernel``) and Keras 2's ``name``
  (``dense_0/kernel:0``, ``beta_vae/dense_0/kernel:0`` in a subclassed model);
- reading and setting an optimizer's learning rate and step from a callback (Keras 3 has no
  ``backend.get_value``/``set_value``, and its ``optimizer.learning_rate`` is the schedule at
  the *next* step);
- the training flag a layer gets when called without one, the base optimizer's keyword
  arguments, and the keys of the other line's optimizer configs (``OTHER_LINE_CONFIG``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import warnings
from typing import Any

from lbtrain._registration import register_keras_objects
from lbtrain.errors import INSTALL_HINT, TENSORFLOW_MISSING, tensorflow_missing

# The TensorFlow releases lbtrain is tested on: 2.15 (tf.keras 2.15, the Horovod stack) and
# 2.16 to 2.21 (Keras 3).
SUPPORTED_TENSORFLOW = ((2, 15), (2, 21))


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def _keras_without_tensorflow():
    """Keras 3 itself when its backend is not TensorFlow (``KERAS_BACKEND=jax`` or ``torch``):
    lbtrain's library layer then imports no TensorFlow (a JAX user need not install it); else
    None. Under ``TF_USE_LEGACY_KERAS`` lbtrain's Keras is ``tf.keras`` (tf_keras), whatever
    ``keras`` is."""
    if os.environ.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1"):
        return None
    try:
        import keras
    except ImportError as error:
        if tensorflow_missing(error):  # Keras 3 on its default backend, or Keras 2
            raise ImportError(TENSORFLOW_MISSING) from None
        raise
    if _release(keras.__version__) >= (3, 0) and keras.backend.backend() != "tensorflow":
        return keras
    return None


def _keras_version(tf) -> str:
    version = getattr(tf.keras, "__version__", None)
    if version is None:  # TensorFlow 2.15: tf.keras is the keras 2.15 package's API
        import keras

        version = keras.__version__
    return version


keras = _keras_without_tensorflow()
if keras is not None:
    tf = None
    TENSORFLOW_RELEASE = None
    KERAS_VERSION = keras.__version__
else:
    try:
        import tensorflow as tf
    except ModuleNotFoundError as error:
        if tensorflow_missing(error):
            raise ImportError(TENSORFLOW_MISSING) from None
        raise
    TENSORFLOW_RELEASE = _release(tf.__version__)
    if TENSORFLOW_RELEASE < SUPPORTED_TENSORFLOW[0]:
        raise ImportError(f"lbtrain needs TensorFlow 2.15 to 2.21, found {tf.__version__}: {INSTALL_HINT}")
    if TENSORFLOW_RELEASE > SUPPORTED_TENSORFLOW[1]:
        warnings.warn(f"lbtrain is tested on TensorFlow 2.15 to 2.21, found {tf.__version__}", stacklevel=2)
    keras = tf.keras
    KERAS_VERSION = _keras_version(tf)
KERAS_3 = _release(KERAS_VERSION) >= (3, 0)

# Keras 3's backend (KERAS_BACKEND); tf.keras 2 has only TensorFlow.
BACKEND = keras.backend.backend() if KERAS_3 else "tensorflow"
BACKEND_ERROR = (f"lbtrain runs Keras 3 on the TensorFlow backend, but KERAS_BACKEND is {BACKEND!r}: unset it or set it to "
                 f"'tensorflow' (only lbtrain.optimizers and lbtrain.schedules run on every backend)")
LearningRateSchedule = keras.optimizers.schedules.LearningRateSchedule


class _Ops:
    """The operations lbtrain's update formulas (LARS, LAMB) and schedules (``Warmup``,
    ``PerUpdate``, ...) are written in, each the same function on both Keras lines:
    ``keras.ops``'s on Keras 3 (whatever the backend, so they run inside JAX's compiled step),
    TensorFlow's on tf.keras 2 (``tf.pow`` for ``power``, ``tf.math.floordiv`` for
    ``floor_divide``), so a formula is written once and tf.keras 2 runs the TensorFlow ops it
    always ran. Two are lbtrain's own, for what the two differ in: ``norm`` is the Euclidean norm
    of all of a tensor's elements, in its dtype (``tf.norm``'s default on tf.keras 2;
    ``keras.ops.norm`` takes only vectors and matrices, and on JAX returns float32 for float64),
    ``dense`` a gradient as a dense tensor (TensorFlow hands an embedding's as
    ``tf.IndexedSlices``, which ``keras.ops`` leaves as they are)."""

    NAMES = ("cast", "convert_to_tensor", "floor_divide", "is_tensor", "logical_and", "maximum", "ones_like", "power", "sqrt",
             "square", "where")

    def __init__(self, module, **renamed):
        self._module = module
        for name in self.NAMES:
            setattr(self, name, getattr(module, name) if name not in renamed else renamed[name])

    def norm(self, tensor):
        if KERAS_3:
            return self.sqrt(self._module.sum(self.square(tensor)))
        return tf.norm(tensor)

    def dense(self, gradient):
        if tf is not None and isinstance(gradient, tf.IndexedSlices):
            return tf.convert_to_tensor(gradient)
        return self.convert_to_tensor(gradient)


ops = _Ops(keras.ops) if KERAS_3 else _Ops(tf, power=tf.pow, floor_divide=tf.math.floordiv)

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

# What the *other* Keras line writes into an optimizer's config and this line's base optimizer
# does not take, so that a config (or a saved model) from either line loads (lbtrain's LARS and
# LAMB drop these in ``from_config``): each key, the values with which dropping it changes no
# update (``None``: any value), and why.
# Keras 2 writes ``is_legacy_optimizer`` and ``jit_compile`` into every optimizer's config, and its
# legacy optimizers ``decay``; Keras 3 writes ``loss_scale_factor`` and ``gradient_accumulation_steps``.
KERAS_2_ONLY_CONFIG: dict[str, tuple[tuple[Any, ...] | None, str]] = {
    "is_legacy_optimizer": (None, "tf.keras 2's mark of its optimizer kind, no setting"),
    "jit_compile": (None, "Keras 3 takes it in model.compile, which compiles the optimizer's step with the model's"),
    "decay": ((None, 0, 0.0), "tf.keras 2's legacy rate lr / (1 + decay * step); Keras 3 does not apply it, "
                              "a tf.keras.optimizers.schedules.InverseTimeDecay as learning_rate does"),
}
KERAS_3_ONLY_CONFIG: dict[str, tuple[tuple[Any, ...] | None, str]] = {
    "loss_scale_factor": ((None, 1, 1.0), "tf.keras 2's optimizers do not scale the loss; "
                                          "tf.keras.mixed_precision.LossScaleOptimizer does"),
    "gradient_accumulation_steps": ((None, 1), "tf.keras 2's optimizers do not accumulate gradients: every batch's "
                                               "gradient is applied; a larger batch does the same"),
}
OTHER_LINE_CONFIG = KERAS_2_ONLY_CONFIG if KERAS_3 else KERAS_3_ONLY_CONFIG


def learning_rate_config_for_this_line(value: Any) -> Any:
    """A serialized learning rate (a number, or a schedule's config with the schedules it
    holds) as this Keras line takes it. tf.keras 2 writes ``"name": None`` into its schedules'
    configs (``CosineDecay``, ...), which Keras 3's take and then fail on when called
    (``Argument `name` must be a string``): on Keras 3 that ``name`` is left out, so the
    schedule takes its default name. Anything else is returned as it is."""
    if isinstance(value, list):
        return [learning_rate_config_for_this_line(item) for item in value]
    if not isinstance(value, dict):
        return value
    value = {key: learning_rate_config_for_this_line(item) for key, item in value.items()}
    inner, class_name = value.get("config"), value.get("class_name")
    keras_schedule = (isinstance(class_name, str) and hasattr(keras.optimizers.schedules, class_name)
              and str(value.get("module") or "keras").startswith("keras"))
    if KERAS_3 and keras_schedule and isinstance(inner, dict) and "name" in inner and inner["name"] is None:
        value["config"] = {key: item for key, item in inner.items() if key != "name"}
    return value


# Short enough that the whole error line stays within the command line's 300 characters.
HOROVOD_INSTALL = ("pip install tensorflow-cpu==2.15.1, then HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 pip install "
                   "--no-build-isolation --no-cache-dir 'lbtrain[horovod]'")


def horovod_problem() -> str | None:
    """Why Horovod's world cannot run on this stack, as a sentence naming the fix; None if it can
    (Horovod installed next to TensorFlow 2.15). Looks Horovod up without importing it."""
    if TENSORFLOW_RELEASE != SUPPORTED_TENSORFLOW[0]:
        return (f"Horovod runs on TensorFlow 2.15 only (horovod#4290), this is TensorFlow {tf.__version__}: use mode: simulated, "
                f"or {HOROVOD_INSTALL}")
    if importlib.util.find_spec("horovod") is None:
        return f"Horovod is not installed: {HOROVOD_INSTALL}, or use mode: simulated"
    return None


# The ``:0`` TensorFlow puts after a Keras 2 variable's name (and a plain ``tf.Variable``'s).
_OUTPUT_INDEX = re.compile(r":\d+$")


def variable_name(variable) -> str:
    """The name lbtrain's exclusion regexes match, the same on both Keras lines: the innermost
    layer and the weight, ``dense_0/kernel``.

    It is the last two parts of Keras 3's ``path`` or Keras 2's ``name`` (a plain
    ``tf.Variable``'s on either), without Keras 2's ``:0``. Those carry what encloses the
    layer, differently on each line: Keras 3 puts a Sequential or subclassed model's name
    first (``beta_vae/dense_0/kernel``) and every enclosing model's or layer's
    (``outer/block/dense_0/kernel``), Keras 2 only a subclassed model's
    (``beta_vae/dense_0/kernel:0``). A model named ``beta_vae`` or ``debias_net`` would match
    the default regexes ``beta`` and ``bias`` on every variable, and turn LARS into momentum
    SGD."""
    name = getattr(variable, "path", None) or variable.name
    return "/".join(_OUTPUT_INDEX.sub("", name).split("/")[-2:])


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


def horovod_backward_passes(optimizer) -> int:
    """``k`` of ``hvd.DistributedOptimizer(optimizer, backward_passes_per_step=k)`` (the wrapper
    keeps it on its gradient aggregation helper), 1 for any other optimizer."""
    return int(getattr(getattr(optimizer, "_agg_helper", None), "backward_passes_per_step", 1))


class Optimizer(keras.optimizers.Optimizer):
    """tf.keras's base optimizer, the same on Keras 2 and Keras 3.

    A subclass implements ``build_slots(var_list)`` (its slot variables, made with
    ``add_variable_from_reference(variable, name)``) and ``apply_update(gradient, variable,
    learning_rate)`` (its formula, in ``ops``, finding a variable's slots at
    ``slot_index(variable)`` and updating every variable through ``self.assign``,
    ``self.assign_add`` or ``self.assign_sub``), and extends ``get_config``. Its ``__init__``
    passes the learning rate and the base optimizer's keyword arguments here.
    """

    def __init__(self, learning_rate, name: str, **kwargs):
        if KERAS_3:
            if ops.is_tensor(learning_rate):
                # Keras 2 copies a tensor or variable's value into its own variable; Keras 3
                # takes only floats, schedules and callables: copy the value the same way.
                learning_rate = float(keras.ops.convert_to_numpy(learning_rate))
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

    @property
    def updates_applied(self):
        """The number of updates applied before this one (a tensor): the step lbtrain's optimizers
        clock their schedule and bias corrections with. ``iterations``, which Keras 3 counts in
        updates under ``gradient_accumulation_steps``; divided by ``k`` under Horovod's
        ``backward_passes_per_step=k``, which adds one to it per backward pass."""
        passes = horovod_backward_passes(self)
        return self.iterations if passes == 1 else self.iterations // passes

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

        def _get_current_learning_rate(self):
            """Keras 3's, but a schedule is clocked in updates under ``gradient_accumulation_steps``
            (Keras's own optimizers pass it the number of batches; ``lbtrain.schedules.PerUpdate``
            is the fix for those): a warmup of n steps lasts n updates whatever the accumulation.
            (Keras 3 has no public hook for the step a schedule is given.)"""
            schedule = self._learning_rate
            if self.gradient_accumulation_steps and isinstance(schedule, LearningRateSchedule):
                return schedule(self.updates_applied)
            return super()._get_current_learning_rate()

        def load_own_variables(self, store):
            """Keras 3's, which also loads the state a tf.keras 2 ``.keras`` file holds. tf.keras 2
            keeps a float learning rate out of the optimizer's variables (it is in the config),
            Keras 3 among them, so that file holds one variable fewer, and Keras 3 would skip the
            whole state (step, momentum, moments: "Skipping variable loading for optimizer"):
            the other variables load in order, and the rate stays the config's."""
            variables = list(self.variables)
            others = [variable for variable in variables if variable is not self._learning_rate]
            if len(others) == len(variables) - 1 == len(store.keys()) and all(
                    tuple(store[str(index)].shape) == tuple(variable.shape) for index, variable in enumerate(others)):
                for index, variable in enumerate(others):
                    variable.assign(store[str(index)])
                return
            super().load_own_variables(store)

    else:

        def update_step(self, gradient, variable):
            self.apply_update(gradient, variable, self.learning_rate)

        def _compute_current_learning_rate(self):
            """tf.keras 2's, but a schedule is clocked in updates under Horovod's
            ``DistributedOptimizer(backward_passes_per_step=k)``: Horovod adds one to
            ``iterations`` on every backward pass and applies the summed (or averaged) gradient on
            every k-th (horovod/tensorflow/gradient_aggregation_eager.py), so the schedule would
            run k times too fast; it gets ``iterations // k``, the number of updates applied, as
            without the wrapper at a k times larger batch. (Keras's own optimizers need
            ``lbtrain.schedules.PerUpdate(schedule, k)`` for the same.)"""
            if horovod_backward_passes(self) == 1 or not isinstance(self._learning_rate, LearningRateSchedule):
                return super()._compute_current_learning_rate()
            self._current_learning_rate.assign(self._learning_rate(self.updates_applied))

        def slot_index(self, variable) -> int:
            """The index of ``variable`` in the list ``build_slots`` was given."""
            return self._index_dict[self._var_key(variable)]

        # Keras 3's names for updating a variable (there, what a backend's stateless training
        # sees); tf.keras 2 updates the variable itself.
        def assign(self, variable, value) -> None:
            variable.assign(value)

        def assign_add(self, variable, value) -> None:
            variable.assign_add(value)

        def assign_sub(self, variable, value) -> None:
            variable.assign_sub(value)

    def get_config(self) -> dict:
        config = super().get_config()
        if not KERAS_3:  # Keras 3's base config has the learning rate already
            config["learning_rate"] = self._serialize_hyperparameter(self._learning_rate)
        return config


# What only the TensorFlow backend runs: on another Keras 3 backend these names are withdrawn,
# so the modules that import them (the trainer, the worlds, Horovod's launcher, the callbacks,
# the layers, the measures) fail to import with ``BACKEND_ERROR``, one line, as they always did.
TENSORFLOW_ONLY = ("HOROVOD_INSTALL", "applied_learning_rate", "default_training", "horovod_problem", "optimizer_step",
                   "set_learning_rate", "tensorflow_variables")
if BACKEND != "tensorflow":
    for _name in TENSORFLOW_ONLY:
        del globals()[_name]
    del _name


def __getattr__(name: str) -> Any:
    if name in TENSORFLOW_ONLY:
        raise ImportError(BACKEND_ERROR)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Imported first, this module's ``import tensorflow`` (or ``import keras``) set off lbtrain's
# registration, which waits for this module (``lbtrain._registration.register_keras_objects``).
register_keras_objects(keras_module_loaded=True)
