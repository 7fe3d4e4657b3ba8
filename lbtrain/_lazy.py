"""Lazy public names (PEP 562): a package lists where each name lives and imports that module
on first use, so importing the package (or a TensorFlow-free module of it, such as
``lbtrain.results``) loads nothing it does not need. A name whose module needs TensorFlow, where
it is not installed, is an ImportError of one line saying so (``lbtrain.errors.TENSORFLOW_MISSING``)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from lbtrain.errors import TENSORFLOW_MISSING, tensorflow_missing


def lazy_exports(package: str, locations: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``locations`` maps each public name to the
    module (relative to ``package`` when it starts with a dot) that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in locations:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(locations[name], package)
        except ModuleNotFoundError as error:
            if tensorflow_missing(error):
                raise ImportError(TENSORFLOW_MISSING) from None
            raise
        return getattr(module, name)

    def __dir__() -> list[str]:
        return sorted(locations)

    return __getattr__, __dir__
