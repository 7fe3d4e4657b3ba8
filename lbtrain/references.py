"""Models and datasets of one's own, by name or by reference, resolved alike in every process.

A config names a model (``model.name``) or a dataset (``data.dataset``) in one of three ways:

- **a reference** ``"package.module:function"``: the function is imported (the current folder is
  searched after ``sys.path``, as ``uvicorn app:main`` does, so a package beside the experiment
  is found without ``PYTHONPATH``);
- **a registered name**: ``@lbtrain.register_model("name")`` / ``@lbtrain.register_dataset("name")``
  on a function of an importable module (which the experiment's ``imports: [module]``, or the
  command line's ``--import module``, imports first: ``import_modules``), or an entry point of the
  group ``lbtrain.models`` / ``lbtrain.datasets`` in an installed package's metadata;
- lbtrain's own names (its zoo and its datasets), which their registries hold.

Every process that trains (an isolated run, each ``horovodrun`` rank, each tf.distribute or
parameter-server worker) resolves the name again: a reference imports there as here, an entry
point is read from the installed metadata, and a name registered in this process is exported to
children through the environment (``LBTRAIN_REGISTERED_MODELS`` / ``..._DATASETS``: name =
reference), which every child inherits. A callable that no other process can import (a lambda,
a closure, a function of ``__main__``) is *process-local*: it works where it was made and is
refused, in one line, by modes that start processes (``process_local``).

Trust: a reference is code, as a Python script is (an experiment YAML that names one runs that
code). What lbtrain refuses, in one line before anything is imported, is a reference into
Python's standard library or builtins (``os:system``, ``shutil:rmtree``, ``builtins:open``),
or into lbtrain's own code: no model or dataset of the user's lives there, and such a reference
can only act on the machine (``refuse_standard_library``).

This module imports no TensorFlow.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import re
import sys
from typing import Any, Callable

from lbtrain.spelling import did_you_mean

__all__ = ["DATASET_REGISTRY", "MODEL_REGISTRY", "Registry", "ReferenceError_", "check_options", "import_reference", "is_reference",
           "process_local", "reference_of", "refuse_standard_library", "register_dataset", "register_model",
           "signature_options"]

# ``package.module:qualified.name``: dotted identifiers on both sides of one colon.
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_<][\w.<>]*(#\d+)?$")

# Callables only this process can call, by the name ``reference_of`` gave them.
_LOCAL: dict[str, Callable[..., Any]] = {}


class ReferenceError_(ValueError):  # noqa: N801 (ReferenceError is a Python builtin)
    """A reference that does not import, or a name that is not registered."""


def is_reference(text: str) -> bool:
    """Whether ``text`` reads as ``module:function``.

    >>> is_reference("my_pkg.models:build"), is_reference("mlp"), is_reference("data/x.npz")
    (True, False, False)
    """
    return bool(_REFERENCE.match(text))


def process_local(reference: str) -> bool:
    """Whether ``reference`` names a callable that only this process holds (see the module doc)."""
    return reference in _LOCAL


# Python's own modules (``sys.stdlib_module_names`` holds builtins and the private ``_io``, ``_posixsubprocess``...).
_STANDARD_LIBRARY = frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names)


def refuse_standard_library(module_name: str, what: str, reference: str) -> None:
    """``ReferenceError_`` when ``module_name`` belongs to Python's standard library or builtins,
    decided from the name alone (nothing is imported).

    >>> refuse_standard_library("os.path", "dataset", "os.path:join")
    Traceback (most recent call last):
      ...
    lbtrain.references.ReferenceError_: dataset 'os.path:join' names Python's standard library (os); a reference names a function of your own module or of an installed package
    """
    top = module_name.split(".")[0]
    if top in _STANDARD_LIBRARY:
        raise ReferenceError_(f"{what} {reference!r} names Python's standard library ({top}); a reference names a function "
                              "of your own module or of an installed package")


def _refuse_home(module_name: str, what: str, reference: str) -> None:
    """``refuse_standard_library``, and lbtrain's own modules too: a reference into lbtrain
    (``lbtrain.files:write_atomic``) could act on the machine as one into ``shutil`` can, and
    lbtrain's models and datasets are named by name (``mlp``, ``mnist1d``)."""
    refuse_standard_library(module_name, what, reference)
    if module_name.split(".")[0] == "lbtrain":
        raise ReferenceError_(f"{what} {reference!r} names lbtrain's own code ({module_name}); name lbtrain's models and "
                              "datasets by name (mlp, mnist1d, ...) and your own by reference")


def _import_module(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        top = module_name.split(".")[0]
        if error.name not in (top, module_name) or os.getcwd() in sys.path:
            raise
        sys.path.append(os.getcwd())
        return importlib.import_module(module_name)


_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def import_modules(modules: list[str], where: str) -> None:
    """Imports each of ``modules`` (an experiment's ``imports``, the command line's ``--import``),
    so that the models and datasets they register are known here and, exported through the
    environment, in every process this one starts. Something that is no module name, a module of
    Python's standard library, or one that does not import, is a one-line ``ReferenceError_``
    starting with ``where``."""
    for module in modules:
        if not isinstance(module, str) or not _MODULE.match(module):
            raise ReferenceError_(f"{where}: {module!r} is no module name (write package.module)")
        refuse_standard_library(module, where, module)
        try:
            _import_module(module)
        except (Exception, SystemExit) as error:  # an import runs the user's code, which raises (or exits) as it does
            raise ReferenceError_(f"{where}: importing {module} failed ({type(error).__name__}: {error}); put its folder "
                                  "on PYTHONPATH or run from the folder that holds it") from None


def import_reference(reference: str, what: str) -> Callable[..., Any]:
    """The callable ``reference`` (``module:qualified.name``) names. ``what`` ("model",
    "dataset") starts the one-line ``ReferenceError_`` for a module that does not import, a
    name it lacks, or something that is not callable."""
    if reference in _LOCAL:
        return _LOCAL[reference]
    if not is_reference(reference):
        raise ReferenceError_(f"{what} {reference!r} is not a reference (write package.module:function)")
    module_name, _, qualified = reference.partition(":")
    if module_name == "__main__" or "<locals>" in qualified:
        raise ReferenceError_(f"{what} {reference!r} was defined in another process's __main__ or inside a function; "
                              "move it to a module that can be imported")
    _refuse_home(module_name, what, reference)
    try:
        target: Any = _import_module(module_name)
    except (Exception, SystemExit) as error:  # an import runs the user's code, which raises (or exits) as it does
        raise ReferenceError_(f"{what} {reference!r}: importing {module_name} failed ({type(error).__name__}: {error}); "
                              "put its folder on PYTHONPATH or run from the folder that holds it") from None
    for part in qualified.split("."):
        if not hasattr(target, part):
            found = [name for name in dir(target) if not name.startswith("_")]
            raise ReferenceError_(f"{what} {reference!r}: {module_name} has no {qualified!r} ({did_you_mean(part, found)}"
                                  f"it defines: {', '.join(found[:12]) or 'nothing'})")
        target = getattr(target, part)
        # A user's module that imported os (``pkg:os.system``) or re-exports a function of Python's.
        home = target.__name__ if inspect.ismodule(target) else getattr(target, "__module__", None) if (
            inspect.isroutine(target) or inspect.isclass(target)) else None
        if isinstance(home, str):
            _refuse_home(home, what, reference)
    if not callable(target):
        raise ReferenceError_(f"{what} {reference!r} is a {type(target).__name__}, not a function or class")
    return target


def reference_of(function: Callable[..., Any]) -> str:
    """The reference that names ``function``: ``module:qualname`` when another process can import
    it back, else a process-local name (``__main__:build``, ``my_mod:make.<locals>.build``,
    ``my_mod:<lambda>#2``) that ``import_reference`` resolves in this process only."""
    module = getattr(function, "__module__", None) or "__main__"
    qualified = getattr(function, "__qualname__", None) or type(function).__name__
    reference = f"{module}:{qualified}"
    if module != "__main__" and "<" not in qualified and module in sys.modules:
        # A decorator runs before its module binds the name, so a name not there yet is trusted.
        found: Any = sys.modules[module]
        for part in qualified.split("."):
            found = getattr(found, part, function)
        if found is function:
            return reference
    for number in range(1, len(_LOCAL) + 2):
        name = reference if number == 1 else f"{reference}#{number}"
        if _LOCAL.setdefault(name, function) is function:
            return name
    raise AssertionError("unreachable: one of the numbered names is free")


class Registry:
    """Names of one kind (``what``: "model", "dataset") registered by decorator, by an entry-point
    ``group``, or inherited from the parent process through ``environment_variable``."""

    def __init__(self, what: str, group: str, environment_variable: str):
        self.what, self.group, self.environment_variable = what, group, environment_variable
        self._functions: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A decorator that registers a function under ``name`` (in this process and in the
        processes it starts, if the function can be imported there)."""
        if not isinstance(name, str) or not name or is_reference(name):
            raise ReferenceError_(f"a registered {self.what} name is a non-empty string without ':', got {name!r}")

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            self._functions[name] = function
            reference = reference_of(function)
            if not process_local(reference):
                exported = self._exported()
                exported[name] = reference
                os.environ[self.environment_variable] = ";".join(f"{key}={value}" for key, value in sorted(exported.items()))
            return function

        return decorate

    def _exported(self) -> dict[str, str]:
        text = os.environ.get(self.environment_variable, "")
        return dict(item.split("=", 1) for item in text.split(";") if "=" in item)

    def _entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        return {entry.name: entry for entry in importlib.metadata.entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Every name registered here, exported by a parent, or declared by an entry point."""
        return sorted({*self._functions, *self._exported(), *self._entry_points()})

    def get(self, name: str) -> Callable[..., Any] | None:
        """The function registered as ``name``, or None."""
        if name in self._functions:
            return self._functions[name]
        exported = self._exported()
        if name in exported:
            self._functions[name] = import_reference(exported[name], self.what)
            return self._functions[name]
        entry = self._entry_points().get(name)
        if entry is not None:
            refuse_standard_library(entry.module, self.what, entry.value)
            try:
                self._functions[name] = entry.load()
            except (Exception, SystemExit) as error:  # loading runs the package's code
                raise ReferenceError_(f"{self.what} {name!r}: entry point {entry.value} of group {self.group} does not load "
                                      f"({type(error).__name__}: {error})") from None
            return self._functions[name]
        return None

    def is_local(self, name: str) -> bool:
        """Whether ``name`` is registered here to a function no other process can import."""
        return name in self._functions and name not in self._exported() and self._entry_points().get(name) is None


MODEL_REGISTRY = Registry("model", "lbtrain.models", "LBTRAIN_REGISTERED_MODELS")
DATASET_REGISTRY = Registry("dataset", "lbtrain.datasets", "LBTRAIN_REGISTERED_DATASETS")


def register_model(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@lbtrain.register_model("name")``: ``model.name: name`` then builds with the decorated
    ``build(input_shape, num_classes, **options) -> keras.Model`` (see ``lbtrain.models``)."""
    return MODEL_REGISTRY.register(name)


def register_dataset(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@lbtrain.register_dataset("name")``: ``data.dataset: name`` then loads with the decorated
    ``load(**options)`` (returning arrays or ``tf.data`` datasets, see ``lbtrain.data.sources``)."""
    return DATASET_REGISTRY.register(name)


def signature_options(function: Callable[..., Any], skip: int) -> tuple[tuple[str, ...], bool]:
    """``(names, open)``: the keyword options ``function`` takes after its first ``skip``
    positional parameters, and whether it also takes ``**options``."""
    try:
        parameters = list(inspect.signature(function).parameters.values())[skip:]
    except (TypeError, ValueError):  # a builtin of a C extension may not declare one
        name = f"{getattr(function, '__module__', None)}:{getattr(function, '__qualname__', type(function).__name__)}"
        raise ReferenceError_(f"{name} declares no signature lbtrain can read, so its options cannot be checked; wrap it in "
                              "a Python function") from None
    names = tuple(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return names, any(p.kind is p.VAR_KEYWORD for p in parameters)


def check_options(function: Callable[..., Any], skip: int, options: dict[str, Any], what: str) -> None:
    """``ReferenceError_`` naming the first option ``function`` does not take (after ``skip``
    positional parameters), with the ones it does."""
    names, open_ended = signature_options(function, skip)
    if open_ended:
        return
    for key in options:
        if key not in names:
            raise ReferenceError_(f"unknown option {key!r} for {what} ({did_you_mean(key, names)}allowed: {', '.join(names) or 'none'})")
