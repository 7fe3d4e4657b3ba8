"""Registers lbtrain's Keras objects (schedules, LARS/LAMB, ghost batch norm) as soon as
TensorFlow is imported, without importing TensorFlow itself.

A model saved with an lbtrain schedule or optimizer loads after a plain ``import lbtrain``,
with no ``custom_objects``: Keras finds the classes in its registry, which the modules below
fill when they are imported. ``import lbtrain`` must stay free of TensorFlow (reports and
result files are read without it), so instead of importing those modules it waits for
TensorFlow: if it is already loaded they are imported at once, else a finder on
``sys.meta_path`` imports them right after ``tensorflow`` finishes loading.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys

REGISTERING_MODULES = ("lbtrain.schedules", "lbtrain.optimizers", "lbtrain.layers")


def register_keras_objects() -> None:
    """Imports every registering module not already being imported (one that is will register
    its classes when it finishes)."""
    for name in REGISTERING_MODULES:
        if name not in sys.modules:
            importlib.import_module(name)


class _ThenRegister(importlib.abc.Loader):
    """Loads ``tensorflow`` with its own loader, then registers lbtrain's objects."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        register_keras_objects()


class _TensorFlowWatcher(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` through the other finders and wraps its loader, once."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenRegister(spec.loader)
                return spec
        return None


def register_when_tensorflow_loads() -> None:
    """Registers now if TensorFlow is loaded, else right after it is."""
    if "tensorflow" in sys.modules:
        register_keras_objects()
    elif not any(isinstance(finder, _TensorFlowWatcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TensorFlowWatcher())
