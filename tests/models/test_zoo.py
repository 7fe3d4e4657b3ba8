import numpy as np
import pytest
import tensorflow as tf

from lbtrain.data import load_dataset
from lbtrain.layers import GhostBatchNormalization
from lbtrain.models import MODELS, ModelError, build_model, set_virtual_batch_size

# The input shapes of the datasets each model suits: images (28x28x1) and signals (40,).
SHAPES = {"fashion_mnist-like": (28, 28, 1), "mnist1d-like": (40,)}


@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("name", MODELS)
def test_every_model_builds_outputs_logits_and_fits_one_step(name, shape_name):
    dataset = load_dataset("synthetic", input_shape=SHAPES[shape_name], num_classes=10, train_size=16, test_size=8)
    model = build_model(name, dataset.input_shape, dataset.num_classes, seed=0)
    assert model.output_shape == (None, 10)
    assert model.layers[-1].get_config()["activation"] == "linear"
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(dataset.x_train, dataset.y_train, batch_size=16, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert any(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))


def test_mlp_on_real_mnist1d_fits():
    dataset = load_dataset("mnist1d", num_samples=200)
    model = build_model("mlp", dataset.input_shape, dataset.num_classes, widths=[32], seed=0)
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    loss = model.fit(dataset.x_train, dataset.y_train, batch_size=32, epochs=1, verbose=0).history["loss"][0]
    assert 0.5 < loss < 5.0


def test_mlp_widths_and_seed_give_same_initial_weights():
    first = build_model("mlp", (12,), 3, widths=[7, 5], seed=4)
    second = build_model("mlp", (12,), 3, widths=[7, 5], seed=4)
    assert [w.shape for w in first.get_weights()] == [(12, 7), (7,), (7, 5), (5,), (5, 3), (3,)]
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_resnet_batch_norm_layers_take_the_virtual_batch_size():
    model = build_model("resnet", (8, 8, 1), 4, widths=[4, 8], virtual_batch_size=2)
    norms = [layer for layer in model.layers if isinstance(layer, GhostBatchNormalization)]
    assert len(norms) == 6 and {layer.virtual_batch_size for layer in norms} == {2}
    assert not any(isinstance(layer, tf.keras.layers.BatchNormalization) for layer in model.layers)


def test_ghost_batch_norm_normalizes_each_workers_interleaved_share():
    """With virtual_batch_size=b a global batch of W*b is normalized per ghost batch
    ([b, W] reshape: ghost r = samples r, r+W, ...), i.e. per rank of the input pipeline."""
    world_size, batch = 2, 4
    model = build_model("mlp", (3,), 2, widths=[5], batch_norm=True, seed=1)
    ghost = set_virtual_batch_size(model, batch)
    x = np.random.default_rng(0).standard_normal((world_size * batch, 3)).astype(np.float32)
    np.testing.assert_allclose(ghost(x, training=False), model(x, training=False), atol=1e-6)
    probe = lambda m: tf.keras.Model(m.input, m.get_layer("batch_norm_0").output)
    together = probe(ghost)(x, training=True).numpy()
    for rank in range(world_size):
        alone = probe(model)(x[rank::world_size], training=True).numpy()
        np.testing.assert_allclose(together[rank::world_size], alone, atol=1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: build_model("vgg", (4,), 2), r"unknown model 'vgg' \(allowed: mlp, cnn, resnet, a reference package.module:function, or keras.applications.<Name>\)"),
        (lambda: build_model("mlp", (4,), 2, depth=3), r"unknown option 'depth' for model 'mlp' \(allowed: widths, batch_norm"),
        (lambda: build_model("mlp", (4,), 2, widths=[8, 0]), r"widths must be a list of at most 64 positive integers, got \[8, 0\]"),
        (lambda: build_model("cnn", (8,), 2, kernel_size=0), r"kernel_size must be a positive integer, got 0"),
        (lambda: build_model("cnn", (8,), 2, dropout=1.0), r"dropout must be a number in \[0, 1\), got 1.0"),
        (lambda: build_model("mlp", (4,), 2, batch_norm="yes"), r"batch_norm must be true or false, got 'yes'"),
        (lambda: build_model("resnet", (8,), 2, widths=[]), r"widths must name at least one stage for model 'resnet'"),
        (lambda: build_model("resnet", (8,), 2, blocks_per_stag=2), r"did you mean 'blocks_per_stage'\?"),
        (lambda: build_model("cnn", (2, 2, 2, 2), 2), r"inputs of rank 1 to 3"),
    ],
)
def test_bad_model_arguments(call, message):
    with pytest.raises(ModelError, match=message):
        call()
