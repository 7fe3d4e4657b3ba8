"""lbtrain's Keras classes are registered whatever the order in which a user imports lbtrain,
Keras and TensorFlow, each order in a fresh process (``lbtrain._registration``)."""

import itertools

import pytest

from conftest import run_python

CHECK = """
import sys
for name in sys.argv[1].split(","):
    __import__(name)
import tensorflow as tf
import keras
print(keras.__version__, tf.keras.utils.get_registered_object("lbtrain>Warmup").__name__,
      tf.keras.utils.get_registered_object("lbtrain>LARS").__name__)
"""


@pytest.mark.parametrize("order", [",".join(order) for order in itertools.permutations(("lbtrain", "keras", "tensorflow"))]
                         + ["lbtrain,keras.layers"])
def test_every_import_order_registers_lbtrains_classes(order):
    completed = run_python(CHECK, order)
    assert completed.returncode == 0, completed.stderr[-1500:]
    assert completed.stdout.split()[1:] == ["Warmup", "LARS"]
