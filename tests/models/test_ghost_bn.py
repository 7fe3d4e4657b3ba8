"""Ghost batch norm on the user's models: functional and sequential models (nested too) are
rebuilt with per-worker batch norm and the same weights; subclassed ones are refused unless
they already use lbtrain's ghost layer."""

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.layers import GhostBatchNormalization
from lbtrain.models import ModelError, batch_norm_layers, set_virtual_batch_size


def functional_with_nested_sequential():
    inputs = tf.keras.Input((6,))
    block = tf.keras.Sequential([tf.keras.layers.Dense(8), tf.keras.layers.BatchNormalization()], name="block")
    x = tf.keras.layers.BatchNormalization(name="outer_bn")(block(inputs))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(3)(x))


class Subclassed(tf.keras.Model):
    def __init__(self, norm):
        super().__init__()
        self.dense, self.norm, self.out = tf.keras.layers.Dense(8), norm, tf.keras.layers.Dense(3)

    def call(self, inputs, training=None):
        return self.out(self.norm(self.dense(inputs), training=training))


def test_every_batch_norm_of_a_nested_functional_model_becomes_ghost_with_the_same_weights():
    model = functional_with_nested_sequential()
    x = np.random.default_rng(0).normal(size=(8, 6)).astype(np.float32)
    ghost = set_virtual_batch_size(model, 2)
    layers = batch_norm_layers(ghost)
    assert len(layers) == 2 and all(isinstance(layer, GhostBatchNormalization) and layer.virtual_batch_size == 2 for layer in layers)
    np.testing.assert_allclose(ghost(x, training=False), model(x, training=False), atol=1e-6)
    # In training, each group of 2 interleaved samples (a worker's share) is normalized apart.
    whole, apart = ghost(x, training=True).numpy(), model(x[0::4], training=True).numpy()
    assert not np.allclose(whole, model(x, training=True).numpy(), atol=1e-3)
    assert apart.shape == (2, 3)


def test_a_subclassed_model_with_batch_norm_is_refused_naming_both_fixes():
    model = Subclassed(tf.keras.layers.BatchNormalization(name="norm"))
    model(np.zeros((2, 6), np.float32))
    with pytest.raises(ModelError, match=r"subclassed Subclassed with batch norm \(norm\).*build it with keras.Sequential or the "
                                         r"functional API, or use lbtrain.layers.GhostBatchNormalization\(virtual_batch_size=4\)"):
        set_virtual_batch_size(model, 4)


def test_a_subclassed_model_with_ghost_batch_norm_of_the_right_size_is_kept():
    model = Subclassed(GhostBatchNormalization(4))
    model(np.zeros((8, 6), np.float32))
    assert set_virtual_batch_size(model, 4) is model
    with pytest.raises(ModelError):
        set_virtual_batch_size(model, 2)


def test_a_subclassed_model_without_batch_norm_is_kept():
    model = Subclassed(tf.keras.layers.Dropout(0.1))
    model(np.zeros((2, 6), np.float32))
    assert set_virtual_batch_size(model, 4) is model
