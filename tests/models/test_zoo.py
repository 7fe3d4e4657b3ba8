import json
import re
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from helpers import run_python
from lbtrain._keras import variable_name
from lbtrain.config import ConfigError, load_experiment
from lbtrain.data import load_dataset
from lbtrain.layers import GhostBatchNormalization
from lbtrain.models import MODELS, ModelError, batch_norm_layers, build_model, set_virtual_batch_size
from lbtrain.models.zoo import parameter_count
from lbtrain.optimizers import DEFAULT_EXCLUDE
from lbtrain.studies.runner import run_experiment

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
        (lambda: build_model("vgg", (4,), 2), r"unknown model 'vgg' \(allowed: mlp, cnn, resnet, vit, a reference package.module:function, or keras.applications.<Name>\)"),
        (lambda: build_model("mlp", (4,), 2, depth=3), r"unknown option 'depth' for model 'mlp' \(allowed: widths, batch_norm"),
        (lambda: build_model("mlp", (4,), 2, widths=[8, 0]), r"widths must be a list of at most 64 positive integers, got \[8, 0\]"),
        (lambda: build_model("cnn", (8,), 2, kernel_size=0), r"kernel_size must be a positive integer, got 0"),
        (lambda: build_model("cnn", (8,), 2, dropout=1.0), r"dropout must be a number in \[0, 1\), got 1.0"),
        (lambda: build_model("mlp", (4,), 2, batch_norm="yes"), r"batch_norm must be true or false, got 'yes'"),
        (lambda: build_model("resnet", (8,), 2, widths=[]), r"widths must name at least one stage for model 'resnet'"),
        (lambda: build_model("resnet", (8,), 2, blocks_per_stag=2), r"did you mean 'blocks_per_stage'\?"),
        (lambda: build_model("cnn", (2, 2, 2, 2), 2), r"inputs of rank 1 to 3"),
        (lambda: build_model("vit", (28, 28, 1), 2, patch_size=5),
         r"^patch_size must divide the input's size 28x28 for model 'vit', got 5 \(allowed: 1, 2, 4, 7, 14, 28\)$"),
        (lambda: build_model("vit", (40,), 2, patch_size=3), r"^patch_size must divide the input's size 40 for model 'vit', got 3 \(allowed: 1, 2, 4, 5, 8, 10, 20, 40\)$"),
        (lambda: build_model("vit", (28, 28, 1), 2, patch_size=0), r"^patch_size must be a positive integer or null, got 0$"),
        (lambda: build_model("vit", (28, 28, 1), 2, heads=5), r"^heads must divide dim \(64\) for model 'vit', got 5 \(allowed: 1, 2, 4, 8, 16, 32, 64\)$"),
        (lambda: build_model("vit", (28, 28, 1), 2, dim=6), r"^heads must divide dim \(6\) for model 'vit', got 4 \(allowed: 1, 2, 3, 6\)$"),
        (lambda: build_model("vit", (28, 28, 1), 2, dim=2**17), r"^dim must be an integer from 1 to 65536, got 131072$"),
        (lambda: build_model("vit", (28, 28, 1), 2, depth=0), r"^depth must be an integer from 1 to 64, got 0$"),
        (lambda: build_model("vit", (28, 28, 1), 2, heads=0), r"^heads must be a positive integer, got 0$"),
        (lambda: build_model("vit", (28, 28, 1), 2, mlp_ratio=1.5), r"^mlp_ratio must be a positive integer, got 1.5$"),
        (lambda: build_model("vit", (28, 28, 1), 2, dropout=-0.1), r"^dropout must be a number in \[0, 1\), got -0.1$"),
        (lambda: build_model("vit", (28, 28, 1), 2, patch=4),
         r"^unknown option 'patch' for model 'vit' \(did you mean 'patch_size'\? allowed: patch_size, dim, depth, heads, mlp_ratio, dropout\)$"),
        (lambda: build_model("vit", (4, 4, 4, 1), 2), r"^model 'vit' takes inputs of rank 1 to 3, got shape \(4, 4, 4, 1\)$"),
    ],
)
def test_bad_model_arguments(call, message):
    with pytest.raises(ModelError, match=message):
        call()


# ---------------------------------------------------------------- vit

# Input shapes and options the vit's weights are counted on: images with and without a channel
# axis, colour, a signal, and every option away from its default.
VIT_CASES = {
    "fashion_mnist default": ((28, 28, 1), {}),
    "mnist1d default": ((40,), {}),
    "grey 2-D, all options": ((28, 28), {"patch_size": 4, "dim": 24, "depth": 3, "heads": 3, "mlp_ratio": 2, "dropout": 0.1}),
    "colour, not square": ((12, 8, 3), {"patch_size": 2, "dim": 8, "heads": 1}),
    "signal of single values": ((10,), {"patch_size": 1, "dim": 4, "depth": 1, "heads": 2}),
}


@pytest.mark.parametrize("case", VIT_CASES)
def test_vit_parameter_count_is_the_built_models(case):
    shape, options = VIT_CASES[case]
    model = build_model("vit", shape, 7, seed=0, **options)
    assert parameter_count("vit", shape, 7, options) == model.count_params()
    assert model.output_shape == (None, 7) and batch_norm_layers(model) == []


def test_vit_defaults_cut_16_patches_of_7x7_from_fashion_mnist_and_20_of_2_from_mnist1d():
    image = build_model("vit", (28, 28, 1), 10, seed=0)
    assert image.get_layer("patches").output.shape[1:] == (16, 49)
    assert image.get_layer("patch_embedding").output.shape[1:] == (16, 64)
    assert sum(1 for layer in image.layers if isinstance(layer, tf.keras.layers.MultiHeadAttention)) == 2
    assert image.get_layer("block0_mlp_hidden").output.shape[-1] == 256
    assert not any(isinstance(layer, tf.keras.layers.Dropout) for layer in image.layers)
    signal = build_model("vit", (40,), 10, seed=0)
    assert signal.get_layer("patches").output.shape[1:] == (20, 2)


def test_vit_patches_are_the_images_blocks_in_reading_order():
    shape, size = (6, 4, 2), 2
    model = build_model("vit", shape, 3, seed=0, patch_size=size, dim=4, heads=1, depth=1)
    x = np.arange(2 * np.prod(shape), dtype=np.float32).reshape(2, *shape)
    patches = tf.keras.Model(model.input, model.get_layer("patches").output)(x).numpy()
    expected = [x[:, i:i + size, j:j + size, :].reshape(2, -1) for i in range(0, 6, size) for j in range(0, 4, size)]
    np.testing.assert_array_equal(patches, np.stack(expected, axis=1))


def test_vits_decay_exclusions_are_its_norms_biases_and_position_embedding_and_no_kernel():
    """LAMB's and LARS's default regexes (``DEFAULT_EXCLUDE``) leave out of weight decay and
    layer adaptation the layer norms, the biases and the position embedding (the patch
    embedding's bias), and every kernel stays in."""
    model = build_model("vit", (28, 28, 1), 10, seed=0, depth=1)
    names = [variable_name(variable) for variable in model.trainable_variables]
    excluded = {name for name in names if any(re.search(pattern, name) for pattern in DEFAULT_EXCLUDE)}
    assert excluded == {name for name in names if not name.endswith("/kernel")}
    assert "patch_embedding/bias" in excluded and "block0_layer_norm_a/gamma" in excluded


def test_vit_through_the_simulated_worlds_ghost_batch_norm_copy_is_the_same_model():
    """The preflight of a simulated world copies every model for ghost batch norm: a vit has
    none, and its copy computes what it does."""
    model = build_model("vit", (28, 28, 1), 10, seed=0, dim=16, depth=1)
    x = np.random.default_rng(0).random((8, 28, 28, 1), dtype=np.float32)
    np.testing.assert_allclose(set_virtual_batch_size(model, 4)(x), model(x), atol=1e-6)


def write_vit_experiment(tmp_path, options, epochs=3):
    path = tmp_path / "vit.yaml"
    path.write_text(textwrap.dedent(f"""
        name: tiny-vit
        output_dir: {tmp_path / "results"}
        data: {{dataset: mnist1d, options: {{num_samples: 2600}}}}
        model: {{name: vit, options: {json.dumps(options)}}}
        optimizer: {{name: adam}}
        lr: {{base_lr: 0.003, base_batch: 32, rule: none}}
        training: {{per_worker_batch: 32, epochs: {epochs}}}
        grid: {{world_sizes: [1]}}
    """))
    return path


def test_a_vit_experiment_trained_with_adam_by_the_runner_beats_chance(tmp_path):
    """MNIST-1D (2,080 training signals, 10 classes): three epochs of a narrow vit reach about
    43% test accuracy on either Keras line, chance being 10%."""
    experiment = load_experiment(write_vit_experiment(tmp_path, {"dim": 32, "heads": 2, "mlp_ratio": 2}))
    [row] = run_experiment(experiment, progress=lambda line: None)
    assert row["status"] == "ok"
    assert float(row["test_accuracy"]) > 0.25


def test_a_vit_patch_size_that_does_not_divide_the_data_is_refused_before_anything_trains(tmp_path):
    experiment = load_experiment(write_vit_experiment(tmp_path, {"patch_size": 3}))
    with pytest.raises(ConfigError, match=r"^patch_size must divide the input's size 40 for model 'vit', got 3 \(allowed: 1, 2, 4, 5, 8, "
                                          r"10, 20, 40\) \(run base, world size 1\)$"):
        run_experiment(experiment, progress=lambda line: None)
    assert not (tmp_path / "results" / "tiny-vit" / "runs").exists()


# ---------------------------------------------------------------- saved and reloaded

RELOAD = textwrap.dedent(
    """
    import json, sys
    import numpy as np, tensorflow as tf
    outputs = {}
    for key, (path, inputs) in json.loads(sys.argv[1]).items():
        outputs[key] = tf.keras.models.load_model(path).predict(np.load(inputs), verbose=0).tolist()
    print(json.dumps(outputs))
    """
)


# Small options for every zoo model, so saving and loading them all takes seconds.
SMALL = {"mlp": {"widths": [16]}, "cnn": {"filters": [4], "dense": [8]}, "resnet": {"widths": [4, 8]},
         "vit": {"dim": 16, "heads": 2, "dropout": 0.1}}


def test_every_model_saved_predicts_the_same_in_a_fresh_process_without_lbtrain(tmp_path):
    """``.keras`` files of every zoo model on images and on signals, loaded by Keras alone (no
    ``import lbtrain``): the zoo's layers are Keras's own."""
    assert set(SMALL) == set(MODELS)
    rng = np.random.default_rng(0)
    paths, inputs, expected = {}, {}, {}
    for shape_name, shape in SHAPES.items():
        x = rng.random((16, *shape), dtype=np.float32)
        inputs[shape_name] = str(tmp_path / f"{shape_name}.npy")
        np.save(inputs[shape_name], x)
        for name in MODELS:
            key = f"{name} {shape_name}"
            model = build_model(name, shape, 10, seed=0, **SMALL[name])
            model(x, training=True)  # batch norm's moving statistics move off their start (a fit would trace for seconds)
            paths[key] = (str(tmp_path / f"{name}-{shape_name}.keras"), inputs[shape_name])
            model.save(paths[key][0])
            expected[key] = model.predict(x, verbose=0)
    completed = run_python(RELOAD, json.dumps(paths))
    assert completed.returncode == 0, completed.stderr[-3000:]
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    assert set(loaded) == set(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(loaded[key], want, rtol=1e-5, atol=1e-6, err_msg=key)
