"""Lazy public names (PEP 562): a package lists where each name lives and imports that module
on first use, so importing the package (or a TensorFlow-free module of it, such as
``lbtrain.results``) loads nothing it does not need."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, locations: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``locations`` maps each public name to the
    module (relative to ``package`` when it starts with a dot) that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in locations:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(locations[name], package), name)

    def __dir__() -> list[str]:
        return sorted(locations)

    return __getattr__, __dir__
