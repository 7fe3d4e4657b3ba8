import numpy as np
import pytest
import tensorflow as tf

from lbtrain import layers
from lbtrain._keras import KERAS_3, variable_name
from lbtrain.layers import GhostBatchNormalization

GROUPS, BATCH = 4, 3


def conv_input(seed=0, sample_shape=(5, 5, 2)):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((GROUPS * BATCH, *sample_shape)) * 3 + 1).astype(np.float32)


def built_layer(x, momentum=0.9):
    layer = GhostBatchNormalization(BATCH, momentum=momentum, epsilon=1e-3)
    layer.build(x.shape)
    layer.gamma.assign([1.5, 0.5])
    layer.beta.assign([0.2, -0.1])
    return layer


def test_each_group_is_normalized_with_its_own_statistics():
    x = conv_input()
    y = built_layer(x)(x, training=True).numpy()
    for group in range(GROUPS):
        members = x[group::GROUPS]
        mean, variance = members.mean(axis=(0, 1, 2)), members.var(axis=(0, 1, 2))
        expected = np.array([1.5, 0.5]) * (members - mean) / np.sqrt(variance + 1e-3) + np.array([0.2, -0.1])
        np.testing.assert_allclose(y[group::GROUPS], expected, atol=1e-4)


def test_moving_statistics_follow_the_mean_of_group_statistics():
    x = conv_input()
    layer = built_layer(x, momentum=0.9)
    layer(x, training=True)
    groups = [x[g::GROUPS] for g in range(GROUPS)]
    count = BATCH * 5 * 5
    mean = np.mean([g.mean(axis=(0, 1, 2)) for g in groups], axis=0)
    variance = np.mean([g.var(axis=(0, 1, 2)) * count / (count - 1) for g in groups], axis=0)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.1 * mean, rtol=1e-4)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.9 + 0.1 * variance, rtol=1e-4)


def keras_ghost_batch_norm():
    """Keras's own ghost batch norm, as ``(call, layer)``: Keras 2's ``virtual_batch_size``; on
    Keras 3, which dropped it, one BatchNormalization applied to each group in turn."""
    if not KERAS_3:
        layer = tf.keras.layers.BatchNormalization(virtual_batch_size=BATCH)
        return layer, layer
    layer = tf.keras.layers.BatchNormalization()

    def per_group(x, training):
        # Group g holds samples g, g + GROUPS, ...: stacking the groups on axis 1 interleaves them back.
        outputs = [layer(x[group::GROUPS], training=training) for group in range(GROUPS)]
        return tf.reshape(tf.stack(outputs, axis=1), tf.shape(x))

    return per_group, layer


@pytest.mark.parametrize("implementation", ["compiled kernel where built", "tensorflow ops"])
@pytest.mark.parametrize("sample_shape", [(5, 5, 2), (7, 2), (2,)], ids=["conv2d", "conv1d", "dense"])
def test_matches_keras_virtual_batch_norm_in_value_and_gradient(sample_shape, implementation, monkeypatch):
    if implementation == "tensorflow ops":  # as where lbtrain.kernels is not built
        monkeypatch.setattr(layers, "_compiled_kernels", lambda grouped: None)
    x = tf.constant(conv_input(1, sample_shape))
    ours = GhostBatchNormalization(BATCH)
    results = []
    for call, layer in ((ours, ours), keras_ghost_batch_norm()):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = call(x, training=True)
            loss = tf.reduce_sum(tf.sin(y))
        gradients = tape.gradient(loss, [x, layer.trainable_variables[0], layer.trainable_variables[1]])
        results.append([y.numpy()] + [np.reshape(g.numpy(), (-1,)) for g in gradients])
    for a, b in zip(*results):
        np.testing.assert_allclose(a.reshape(-1), b.reshape(-1), atol=2e-4)


def test_inference_uses_moving_statistics_like_batch_normalization():
    x = conv_input()
    layer = built_layer(x)
    layer.moving_mean.assign([0.5, -1.0])
    layer.moving_variance.assign([2.0, 0.25])
    expected = np.array([1.5, 0.5]) * (x - np.array([0.5, -1.0])) / np.sqrt(np.array([2.0, 0.25]) + 1e-3) + np.array([0.2, -0.1])
    np.testing.assert_allclose(layer(x, training=False).numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(layer(x[:5], training=False).numpy(), expected[:5], atol=1e-5)


def test_dense_inputs_and_config_round_trip(tmp_path):
    inputs = tf.keras.Input((6,))
    outputs = tf.keras.layers.Dense(2)(GhostBatchNormalization(4, momentum=0.8, name="bn")(inputs))
    model = tf.keras.Model(inputs, outputs)
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    model(x, training=True)
    path = str(tmp_path / "ghost.keras")
    model.save(path)
    loaded = tf.keras.models.load_model(path)
    layer = loaded.get_layer("bn")
    assert isinstance(layer, GhostBatchNormalization) and (layer.virtual_batch_size, layer.momentum) == (4, 0.8)
    np.testing.assert_allclose(loaded(x, training=False), model(x, training=False), atol=1e-6)
    names = ["bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance"]
    assert [variable_name(w) for w in layer.weights] == names


def test_bad_virtual_batch_size():
    with pytest.raises(ValueError, match="virtual_batch_size must be a positive integer, got 0"):
        GhostBatchNormalization(0)
