"""``build_model`` from every kind of name: zoo, reference, registered, Keras Applications; and
the one-line errors of factories that fail."""

import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import lbtrain
from lbtrain.models import ModelError, build_model, check_model_options, model_source
from lbtrain.references import MODEL_REGISTRY


@pytest.fixture
def user_models(tmp_path, monkeypatch):
    (tmp_path / "user_models.py").write_text(textwrap.dedent("""
        import tensorflow as tf

        def convnet(input_shape, num_classes, width=4):
            inputs = tf.keras.Input(input_shape)
            x = tf.keras.layers.Conv2D(width, 3, padding="same")(inputs)
            x = tf.keras.layers.BatchNormalization()(x)
            x = tf.keras.layers.GlobalAveragePooling2D()(x)
            return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes)(x))

        def broken(input_shape, num_classes):
            raise RuntimeError("no GPU here\\nsecond line")

        def not_a_model(input_shape, num_classes):
            return [1, 2]

        def anything(input_shape, num_classes, **options):
            return convnet(input_shape, num_classes, width=options.get("width", 2))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("user_models", None)


def test_a_reference_builds_with_its_options_and_the_seed_fixes_its_weights(user_models):
    first = build_model("user_models:convnet", (8, 8, 1), 3, seed=5, width=6)
    second = build_model("user_models:convnet", (8, 8, 1), 3, seed=5, width=6)
    assert first.output_shape == (None, 3) and first.layers[1].filters == 6
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert model_source("user_models:convnet").kind == "reference"


@pytest.mark.parametrize("name, options, message", [
    ("user_models:convnet", {"widht": 2}, r"^unknown option 'widht' for model 'user_models:convnet' \(did you mean 'width'\?"),
    ("user_models:broken", {}, r"^model 'user_models:broken' raised RuntimeError building for input shape \(8, 8, 1\) and 3 "
                               r"outputs: no GPU here$"),
    ("user_models:not_a_model", {}, r"^model 'user_models:not_a_model' returned a list, not a keras.Model$"),
    ("user_models:convnett", {}, r"has no 'convnett' \(did you mean 'convnet'\?"),
    ("keras.applications.MobileNetV2", {"weights": "imagenet"}, r"weights must be null \(lbtrain trains from scratch\)"),
    ("keras.applications.MobileNetV2", {"classes": 10}, r"option 'classes' is set by lbtrain from the data"),
    ("keras.applications.MobileNetV9", {}, r"unknown Keras application 'keras.applications.MobileNetV9' \(did you mean 'MobileNetV2'"),
    ("convnet", {}, r"^unknown model 'convnet' \("),
])
def test_bad_models_are_one_line_errors(user_models, name, options, message):
    with pytest.raises(ModelError, match=message) as error:
        build_model(name, (8, 8, 1), 3, **options)
    assert "\n" not in str(error.value)


def test_a_factory_with_options_of_its_own_takes_any(user_models):
    check_model_options("user_models:anything", {"width": 3, "depth": 2})
    assert build_model("user_models:anything", (4, 4, 2), 2, width=3).output_shape == (None, 2)


def test_a_registered_name_builds_its_factory(monkeypatch):
    monkeypatch.setattr(MODEL_REGISTRY, "_functions", {})  # the registration ends with the test

    @lbtrain.register_model("tiny-dense-for-test")
    def tiny(input_shape, num_classes):
        inputs = tf.keras.Input(input_shape)
        return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes)(tf.keras.layers.Flatten()(inputs)))

    model = build_model("tiny-dense-for-test", (3, 2), 4)
    assert model.output_shape == (None, 4) and model_source("tiny-dense-for-test").kind == "registered"


def test_a_keras_application_is_built_from_scratch_with_logits():
    model = build_model("keras.applications.MobileNetV2", (32, 32, 3), 5, seed=0, alpha=0.35)
    assert model.output_shape == (None, 5)
    assert model.layers[-1].activation.__name__ == "linear"
    assert model_source("tf.keras.applications.MobileNetV2").kind == "application"
