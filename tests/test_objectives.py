"""The loss, ``accuracy`` and chance of each task, against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.data import Dataset
from lbtrain.models import ModelError
from lbtrain.objectives import chance, check_output, compile_arguments, output_activation


def dataset(y_train, task="classification", num_classes=3, features=4):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(len(y_train), features)).astype(np.float32)
    empty = np.zeros((0, features), np.float32)
    return Dataset("test", x, np.asarray(y_train), empty, np.zeros((0,)), x, np.asarray(y_train), (features,), num_classes,
                   "memory", task)


def dense_model(width, activation=None, features=4):
    inputs = tf.keras.Input((features,))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(width, activation=activation)(inputs))


def evaluated(model, data):
    loss, metrics = compile_arguments(model, data)
    model.compile(optimizer="sgd", loss=loss, metrics=metrics)
    return model.evaluate(data.x_train, data.y_train, verbose=0, batch_size=len(data.x_train)), model.predict(data.x_train, verbose=0)


def test_logits_and_softmax_outputs_get_the_matching_cross_entropy():
    data = dataset(np.array([0, 1, 2, 2, 1, 0]))
    for activation, from_logits in ((None, True), ("softmax", False)):
        tf.keras.utils.set_random_seed(1)
        model = dense_model(3, activation)
        assert output_activation(model) == activation
        (loss, accuracy), outputs = evaluated(model, data)
        probabilities = tf.nn.softmax(outputs).numpy() if from_logits else outputs
        assert loss == pytest.approx(-np.mean(np.log(probabilities[np.arange(6), data.y_train])), rel=1e-5)
        assert accuracy == pytest.approx(np.mean(outputs.argmax(1) == data.y_train))


def test_one_output_for_two_classes_is_binary_cross_entropy_thresholded_at_zero():
    data = dataset(np.array([0, 1, 1, 0, 1, 1]), num_classes=2)
    tf.keras.utils.set_random_seed(2)
    (loss, accuracy), logits = evaluated(dense_model(1), data)
    p = 1 / (1 + np.exp(-logits[:, 0]))
    assert loss == pytest.approx(-np.mean(data.y_train * np.log(p) + (1 - data.y_train) * np.log(1 - p)), rel=1e-4)
    assert accuracy == pytest.approx(np.mean((logits[:, 0] > 0) == data.y_train))


def test_regression_is_mean_squared_error_and_accuracy_is_r_squared_against_the_training_mean():
    y = np.random.default_rng(3).normal(size=(8, 2)).astype(np.float32) * [1.0, 3.0]
    data = dataset(y, task="regression", num_classes=2)
    (loss, r_squared), predictions = evaluated(dense_model(2), data)
    mse = np.mean((predictions - y) ** 2)
    assert loss == pytest.approx(mse, rel=1e-5)
    assert r_squared == pytest.approx(1 - mse / np.mean(np.var(y, axis=0)), rel=1e-5)
    assert chance(data) == 0.0


def test_chance_is_the_majority_share():
    assert chance(dataset(np.array([0, 1, 1, 1, 2, 2, 1, 1]))) == 5 / 8


@pytest.mark.parametrize("width, data, message", [
    (4, dataset(np.array([0, 1, 2])), r"has 4 outputs but the labels are 3 classes \(0 to 2\); make its last layer Dense\(3\) of logits$"),
    (1, dataset(np.ones((3, 2), np.float32) * [[1], [2], [3]], task="regression", num_classes=2),
     r"has 1 outputs but the data has 2 regression target\(s\); make its last layer Dense\(2\)$"),
])
def test_an_output_that_does_not_fit_the_labels_is_one_line(width, data, message):
    with pytest.raises(ModelError, match=message):
        check_output(dense_model(width), data)


def test_an_output_that_is_not_one_vector_per_sample_is_refused():
    inputs = tf.keras.Input((4, 2))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(3)(inputs))
    with pytest.raises(ModelError, match=r"outputs shape \(None, 4, 3\); lbtrain needs one vector per sample"):
        check_output(model, dataset(np.array([0, 1, 2])))
