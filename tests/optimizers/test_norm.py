"""The per-layer norm LARS and LAMB take of weights, gradients and updates
(``lbtrain.optimizers._layerwise.norm``): one reduction on TensorFlow, equal to NumPy's norm of
all the elements, in the tensor's dtype, uncompiled and under XLA (a train step compiled with
``jit_compile=True`` holds the optimizer's update)."""

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.optimizers._layerwise import norm

SHAPES = {"scalar": (), "bias": (7,), "dense kernel": (31, 17), "conv kernel": (3, 3, 2, 5)}


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-14), (np.float32, 1e-6)])
@pytest.mark.parametrize("shape", SHAPES)
def test_norm_is_numpys_norm_of_all_elements_compiled_or_not(shape, dtype, rtol):
    value = np.asarray(np.random.default_rng(0).standard_normal(SHAPES[shape]) * 3.0, dtype=dtype)
    variable = tf.Variable(value)
    compiled = tf.function(lambda: norm(variable), jit_compile=True)
    expected = np.linalg.norm(value.astype(np.float64).ravel())
    for got in (norm(variable), norm(tf.constant(value)), compiled()):
        assert got.dtype == tf.as_dtype(dtype) and got.shape == ()
        np.testing.assert_allclose(got.numpy(), expected, rtol=rtol)


def test_norm_of_zeros_is_zero():
    assert norm(tf.zeros((4, 3), tf.float64)).numpy() == 0.0
