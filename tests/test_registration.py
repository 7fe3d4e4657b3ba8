"""lbtrain's Keras classes are registered whatever the order in which a user imports lbtrain,
Keras and TensorFlow, each order in a fresh process (``lbtrain._registration``), and importing
lbtrain never makes ``import tensorflow`` raise under another Keras 3 backend (``KERAS_BACKEND=jax``,
with JAX installed or not)."""

import importlib.util
import itertools

import pytest

from helpers import run_python, stderr_lines
from lbtrain._keras import KERAS_3

CHECK = """
import sys
for name in sys.argv[1].split(","):
    __import__(name)
import tensorflow as tf
import keras
print(keras.__version__, tf.keras.utils.get_registered_object("lbtrain>Warmup").__name__,
      tf.keras.utils.get_registered_object("lbtrain>LARS").__name__)
"""


ORDERS = [",".join(order) for order in itertools.permutations(("lbtrain", "keras", "tensorflow"))] + ["lbtrain,keras.layers"]


@pytest.mark.skipif(not KERAS_3, reason="on tf.keras 2, KERAS_BACKEND means nothing: test_with_keras_backend_jax_every_"
                                         "import_order_works checks these classes registered in every order")
@pytest.mark.parametrize("order", ORDERS)
def test_every_import_order_registers_lbtrains_classes(order):
    completed = run_python(CHECK, order)
    assert completed.returncode == 0, completed.stderr[-1500:]
    assert completed.stdout.split()[1:] == ["Warmup", "LARS"]


# ------------------------------------------------ KERAS_BACKEND=jax (issue #34, defect 7)

# Under another Keras 3 backend, lbtrain's schedules, LARS and LAMB are registered, the
# TensorFlow-only ghost batch norm is not, and importing it (or the trainer) refuses the
# backend in one line; on tf.keras 2, KERAS_BACKEND means nothing and everything registers.
CHECK_BACKEND = """
import sys
for name in sys.argv[1].split(","):
    __import__(name)
import tensorflow as tf
import keras
import lbtrain
from lbtrain._keras import BACKEND
registered = [name for name in ("Warmup", "LARS", "LAMB", "GhostBatchNormalization")
              if tf.keras.utils.get_registered_object("lbtrain>" + name) is not None]
refusals = []
for name in ("GhostBatchNormalization", "train"):
    try:
        getattr(lbtrain, name)
    except ImportError as error:
        refusals.append(str(error))
print(BACKEND, ",".join(registered), len(refusals), sep="\\n")
print(*refusals, sep="\\n")
"""

REFUSAL = "lbtrain runs Keras 3 on the TensorFlow backend, but KERAS_BACKEND is 'jax': unset it or set it to 'tensorflow'"


@pytest.mark.parametrize("order", ORDERS)
def test_with_keras_backend_jax_every_import_order_works(order, monkeypatch):
    """``KERAS_BACKEND=jax python -c "import lbtrain; import tensorflow"`` (and every order):
    importing lbtrain never makes ``import tensorflow`` or ``import keras`` raise."""
    if KERAS_3 and importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed next to this Keras 3 (make setup-keras3 installs it); "
                    "test_with_keras_backend_jax_and_no_jax_lbtrain_leaves_keras_error_to_keras covers that case")
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    completed = run_python(CHECK_BACKEND, order)
    assert completed.returncode == 0, completed.stderr[-1500:]
    backend, registered, refused, *refusals = completed.stdout.splitlines()
    if KERAS_3:
        assert (backend, registered, refused) == ("jax", "Warmup,LARS,LAMB", "2")
        assert len(refusals) == 2 and all(refusal.startswith(REFUSAL) for refusal in refusals), refusals  # one line each
    else:
        assert (backend, registered, refused) == ("tensorflow", "Warmup,LARS,LAMB,GhostBatchNormalization", "0")


# Keras 3 with KERAS_BACKEND=jax and no JAX: ``import keras`` fails in Keras (``import jax``),
# ``import tensorflow`` alone works. The child hides JAX as an uninstalled package would be.
WITHOUT_JAX = """
import sys
sys.modules["jax"] = None  # as if JAX were not installed
for name in sys.argv[1].split(","):
    __import__(name)
print("imported")
"""


@pytest.mark.skipif(not KERAS_3, reason="Keras 3's backends: this interpreter is the tf.keras 2 stack")
@pytest.mark.parametrize("order, keras_error", [("tensorflow", False), ("lbtrain,tensorflow", False),
                                                ("tensorflow,lbtrain", False), ("keras", True), ("lbtrain,keras", True),
                                                ("lbtrain,tensorflow,keras", True)])
def test_with_keras_backend_jax_and_no_jax_lbtrain_leaves_keras_error_to_keras(order, keras_error, monkeypatch):
    """Without JAX, ``import lbtrain`` changes nothing: ``import tensorflow`` works (lbtrain then
    registers nothing, its classes being Keras's subclasses), and ``import keras`` raises
    Keras's own error, as it does without lbtrain."""
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    completed = run_python(WITHOUT_JAX, order)
    if keras_error:
        assert completed.returncode == 1 and completed.stdout == ""
        assert stderr_lines(completed.stderr)[-1] == "ModuleNotFoundError: import of jax halted; None in sys.modules"
        assert "keras/src/backend/jax" in completed.stderr
    else:
        assert completed.returncode == 0, completed.stderr[-1500:]
        assert completed.stdout == "imported\n"
