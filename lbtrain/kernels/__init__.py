"""lbtrain's own CPU kernels: compiled once per TensorFlow, loaded when present.

TensorFlow has no kernel that batch-normalizes per (group, channel), so ghost batch norm written
in TensorFlow ops (``lbtrain.layers``) streams the whole tensor through memory once per
elementwise pass. ``ghost_batch_norm.cc`` does the forward pass and its gradient group by group,
each group's samples read while they are still in the core's cache: about as many passes over
memory as Keras's fused batch norm.

The kernels are built from source against the installed TensorFlow (``make setup`` runs
``python -m lbtrain.kernels``; a C++17 compiler and TensorFlow's headers, which its wheel ships,
are all it needs) into this folder, one library per TensorFlow version, so two stacks sharing
one source tree keep theirs. Without a library, or for what it does not cover (dtypes other than
float32, XLA-compiled steps, SavedModel traces), ``lbtrain.layers`` uses its TensorFlow ops:
same results within float rounding, only slower.
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("ghost_batch_norm.cc")


class KernelBuildError(RuntimeError):
    """The kernels could not be compiled (no compiler, or it failed); the message says why."""


def library_path() -> Path:
    """Where the library for the installed TensorFlow lives (named by its version)."""
    import tensorflow as tf

    return SOURCE.with_name(f"ghost_batch_norm-tf{tf.__version__}.so")


def _compiler() -> list[str]:
    """The compiler's command words: ``$CXX`` (``ccache g++`` is two), else ``c++``."""
    return shlex.split(os.environ.get("CXX", "c++"))


def compile_command(output: Path) -> list[str]:
    """The compiler call that builds ``SOURCE`` into ``output``: TensorFlow's own compile and link
    flags (``tf.sysconfig``), optimized, position-independent. ``$CXX`` names the compiler."""
    import tensorflow as tf

    return [*_compiler(), "-O3", "-shared", "-fPIC", str(SOURCE), "-o", str(output),
            *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]


def _up_to_date(library: Path) -> bool:
    """Whether ``library`` exists and was built from the current source."""
    return library.is_file() and library.stat().st_mtime >= SOURCE.stat().st_mtime


def build() -> Path:
    """Compiles the kernels for the installed TensorFlow unless they are built from the current
    source already; returns the library's path. Written to a temporary name first, then renamed:
    a build cut short leaves nothing that loads half."""
    target = library_path()
    if _up_to_date(target):
        return target
    compiler = _compiler()[0]
    if shutil.which(compiler) is None:
        raise KernelBuildError(f"no C++ compiler {compiler!r} on PATH (set CXX, or install g++); "
                               "lbtrain's ghost batch norm runs on TensorFlow ops without its kernel")
    try:
        folder = tempfile.mkdtemp(dir=target.parent)
    except OSError as error:
        raise KernelBuildError(f"cannot write the library into {target.parent} ({error.strerror or error}); "
                               "install lbtrain where you can write, or run this as its owner") from error
    try:
        partial = Path(folder) / target.name
        command = compile_command(partial)
        try:
            completed = subprocess.run(command, capture_output=True, text=True)
        except OSError as error:
            raise KernelBuildError(f"the C++ compiler {command[0]!r} cannot run ({error.strerror or error})") from error
        if completed.returncode != 0:
            lines = completed.stderr.strip().splitlines()
            first_error = next((line for line in lines if "error" in line), lines[-1] if lines else "(no output)")
            raise KernelBuildError(f"compiling {SOURCE.name} failed ({command[0]} exit {completed.returncode}): {first_error}")
        os.replace(partial, target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ghost_batch_norm_ops.cache_clear()  # a process that looked before the build loads it now
    return target


@functools.cache
def ghost_batch_norm_ops() -> ModuleType | None:
    """The loaded kernels (``lbtrain_ghost_batch_norm`` and its ``_grad``), or None when they
    are not built for this TensorFlow or do not load (said once: a WARNING for a library older
    than its source, else at DEBUG)."""
    import tensorflow as tf

    path = library_path()
    if not _up_to_date(path):
        # A library older than its source (lbtrain upgraded since the build) is worth a warning:
        # the user built it once and would not know it went unused.
        logger.log(logging.WARNING if path.is_file() else logging.DEBUG,
                   "ghost batch norm on TensorFlow ops: %s is %s (python -m lbtrain.kernels builds it)", path.name,
                   "older than its source" if path.is_file() else "not built")
        return None
    try:
        return tf.load_op_library(str(path))
    except (tf.errors.NotFoundError, OSError) as error:
        logger.debug("ghost batch norm on TensorFlow ops: %s does not load (%s)", path.name, error)
        return None


def main() -> int:
    """``python -m lbtrain.kernels``: builds the kernels, printing the library's path; exit 1
    with one line when they cannot be built."""
    try:
        print(build())
    except KernelBuildError as error:
        print(f"lbtrain.kernels: {error}", file=sys.stderr)
        return 1
    return 0


__all__ = ["KernelBuildError", "build", "compile_command", "ghost_batch_norm_ops", "library_path"]
