"""Registers lbtrain's Keras objects (schedules, LARS/LAMB, ghost batch norm) as soon as
TensorFlow or Keras is imported, without importing either itself.

A model saved with an lbtrain schedule or optimizer loads after a plain ``import lbtrain``,
with no ``custom_objects``: Keras finds the classes in its registry, which the modules below
fill when they are imported. ``import lbtrain`` must stay free of TensorFlow (reports and
result files are read without it), so instead of importing those modules it waits for
TensorFlow: if it (or Keras) is already loaded they are imported at once, else a finder on
``sys.meta_path`` imports them right after ``tensorflow`` finishes loading, or after ``keras``
(or ``tf_keras``) when that is what loads TensorFlow, or is loaded without it (Keras 3 on JAX): ``import lbtrain; import keras`` must not
register while Keras is half-loaded, since the classes subclass Keras's.

Each class is registered twice (``keras_serializable``): as ``lbtrain>Name``, the name Keras
writes into saved models, and under its bare class name, which two paths look up instead:
Keras's H5 loader rebuilds an optimizer's learning-rate schedule by its ``class_name`` alone,
and ``hvd.DistributedOptimizer`` wraps an optimizer in an unregistered subclass of the same
name, so a saved model names the optimizer ``LARS``, not ``lbtrain>LARS``. A bare name is
looked up before Keras's own modules, so it must not be the name of a Keras class
(``keras.initializers.Constant`` is why the constant schedule is ``ConstantLearningRate``).

Registering never makes ``import tensorflow`` (or ``import keras``) raise, whatever Keras 3's
backend (``KERAS_BACKEND``):

- on another backend than TensorFlow (``jax``, ``torch``), the registering modules that refuse
  it (``TENSORFLOW_BACKEND_ONLY``: ghost batch norm's, the elastic schedule's) are not imported:
  the schedules, LARS and LAMB are registered, with or without TensorFlow installed, and ``import lbtrain.layers`` (like the trainer, the worlds, ...) gives
  the one-line error of ``lbtrain._keras`` when the user imports it;
- when Keras itself cannot load (``KERAS_BACKEND=jax`` without JAX installed: ``import keras``
  fails in Keras, ``import tensorflow`` alone works), nothing is registered, since lbtrain's
  classes subclass Keras's: ``import lbtrain; import tensorflow`` works as ``import tensorflow``
  does, and ``import keras`` or anything of lbtrain's that needs Keras raises Keras's own error.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import sys
from typing import Callable, TypeVar

REGISTERING_MODULES = ("lbtrain.schedules", "lbtrain.optimizers", "lbtrain.layers", "lbtrain.elastic")
# Those of them that refuse another Keras 3 backend than TensorFlow (``lbtrain._keras.BACKEND_ERROR``):
# not imported there, so their classes are registered on the TensorFlow backend only.
TENSORFLOW_BACKEND_ONLY = ("lbtrain.layers", "lbtrain.elastic")

# Every class registered by ``keras_serializable``, by bare name.
KERAS_CLASSES: dict[str, type] = {}

_Class = TypeVar("_Class", bound=type)


def keras_serializable(name: str | None = None) -> Callable[[_Class], _Class]:
    """Class decorator: registers a Keras class as ``lbtrain>{name}`` (``name`` defaults to the
    class name) and under its bare class name (see the module docstring for why both)."""

    def register(cls: _Class) -> _Class:
        # lbtrain's Keras (tf.keras, or Keras 3 itself on another backend), looked up as
        # ``register_keras_objects`` does: this module stays below the Keras layer.
        keras = importlib.import_module("lbtrain._keras").keras
        keras.utils.register_keras_serializable(package="lbtrain", name=name)(cls)
        keras.utils.get_custom_objects()[cls.__name__] = cls
        KERAS_CLASSES[cls.__name__] = cls
        return cls

    return register


def register_keras_objects(keras_module_loaded: bool = False) -> None:
    """Imports every registering module not already being imported (one that is will register
    its classes when it finishes). While ``lbtrain._keras``, which they all import, is itself
    loading (its ``import tensorflow`` is what called this), it calls this again when done."""
    keras_module = sys.modules.get("lbtrain._keras")
    if not keras_module_loaded and keras_module is not None and getattr(keras_module.__spec__, "_initializing", False):
        return
    if not keras_module_loaded and keras_module is None and not _keras_loads():
        return
    # Imported here, ``lbtrain._keras`` registers everything itself (``keras_module_loaded``).
    backend = importlib.import_module("lbtrain._keras").BACKEND
    for name in REGISTERING_MODULES:
        if name not in sys.modules and (backend == "tensorflow" or name not in TENSORFLOW_BACKEND_ONLY):
            importlib.import_module(name)


def _keras_loads() -> bool:
    """Whether the Keras behind ``tf.keras`` (which lbtrain's classes subclass) loads: ``keras``,
    or ``tf_keras`` under TensorFlow's ``TF_USE_LEGACY_KERAS``. It does not when Keras 3's backend
    is not installed (``KERAS_BACKEND=jax`` without JAX): then Keras's own error is left to the
    user's ``import keras`` or ``tf.keras``, and ``import tensorflow`` works as it does without
    lbtrain. The module is imported, not ``tf.keras`` read: TensorFlow's lazy ``tf.keras`` fails
    once with ImportError, then recurses without end on the next read."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS") in ("true", "True", "1")
    try:
        importlib.import_module("tf_keras" if legacy else "keras")
    except ImportError:
        return False
    return True


# Keras loads TensorFlow while it is itself loading (and TensorFlow 2.16+ loads tf_keras): the
# classes are registered once the outermost of them has finished, never while Keras is half-loaded.
WATCHED = ("tensorflow", "keras", "tf_keras")


def _loading(name: str) -> bool:
    """Whether ``name`` is being imported right now (its module exists but has not finished)."""
    module = sys.modules.get(name)
    return module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False)


class _ThenRegister(importlib.abc.Loader):
    """Loads a watched module with its own loader, then registers lbtrain's objects unless
    another watched module is still loading around it (that one registers when it is done)."""

    def __init__(self, loader: importlib.abc.Loader, name: str):
        self.loader, self.name = loader, name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        if _keras_present() and not any(_loading(other) for other in WATCHED if other != self.name):
            _remove_watcher()
            register_keras_objects()


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow``, ``keras`` and ``tf_keras`` through the other finders and wraps
    their loaders (each once), until lbtrain's objects are registered."""

    def __init__(self) -> None:
        self.wrapped: set[str] = set()

    def find_spec(self, fullname, path, target=None):
        if fullname not in WATCHED or fullname in self.wrapped:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenRegister(spec.loader, fullname)
                self.wrapped.add(fullname)
                return spec
        return None


def _keras_present() -> bool:
    """Whether TensorFlow is loaded, or Keras (which on JAX or PyTorch loads no TensorFlow)."""
    return "tensorflow" in sys.modules or "keras" in sys.modules


def _remove_watcher() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _ImportWatcher)]


def register_when_tensorflow_loads() -> None:
    """Registers now if TensorFlow or Keras is loaded (and neither is half-loaded), else right
    after the outermost of TensorFlow and Keras has finished loading."""
    if _keras_present() and not any(_loading(name) for name in WATCHED):
        register_keras_objects()
    elif not any(isinstance(finder, _ImportWatcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ImportWatcher())
