"""Precise batch-norm statistics: population statistics of the current weights against a NumPy
reference, for ghost and plain batch norm, and wired into the trainer before every evaluation."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.config import run_config_from_dict
from lbtrain.data import load_dataset
from lbtrain.layers import GhostBatchNormalization
from lbtrain.precise_bn import batch_norm_layers, recompute_batch_norm_statistics
from lbtrain.trainer import train
from lbtrain.worlds.simulated import SimulatedWorld


def dense_bn_model(batch_norm):
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((5,))
    hidden = tf.keras.layers.Dense(3, name="dense")(inputs)
    outputs = tf.keras.layers.Dense(2, name="out")(batch_norm(hidden))
    return tf.keras.Model(inputs, outputs)


def reference(model, x, group_size):
    """Per strided group (sample i * G + r in group r): mean and Bessel-corrected variance of the
    dense layer's output, averaged over the groups."""
    kernel, bias = model.get_layer("dense").get_weights()
    h = (x @ kernel + bias).astype(np.float64)
    groups = h.reshape(group_size, -1, h.shape[-1])
    return groups.mean(axis=0).mean(axis=0), groups.var(axis=0, ddof=1).mean(axis=0)


def test_ghost_batch_norm_gets_the_mean_of_its_groups_statistics():
    model = dense_bn_model(GhostBatchNormalization(4, name="ghost"))
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(2048, 5)).astype(np.float32)
    assert recompute_batch_norm_statistics(model, x, group_size=4) == 1
    mean, variance = reference(model, x[:1024], 4)  # the probe batch is 1024: two of them
    second_mean, second_variance = reference(model, x[1024:], 4)
    layer = model.get_layer("ghost")
    np.testing.assert_allclose(layer.moving_mean.numpy(), (mean + second_mean) / 2, rtol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), (variance + second_variance) / 2, rtol=1e-5)


def test_a_plain_batch_norm_layer_is_fed_one_group_at_a_time():
    model = dense_bn_model(tf.keras.layers.BatchNormalization(name="plain"))
    x = np.random.default_rng(1).normal(-1.0, 2.0, size=(30, 5)).astype(np.float32)
    recompute_batch_norm_statistics(model, x, group_size=8)  # 3 groups of 8; the last 6 samples unused
    h = (x[:24] @ model.get_layer("dense").get_weights()[0] + model.get_layer("dense").get_weights()[1]).astype(np.float64)
    groups = h.reshape(3, 8, -1)  # consecutive batches, one group each
    layer = model.get_layer("plain")
    np.testing.assert_allclose(layer.moving_mean.numpy(), groups.mean(axis=1).mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), groups.var(axis=1, ddof=1).mean(axis=0), rtol=1e-5)
    with pytest.raises(ValueError, match="precise batch norm needs at least 8 samples, got 5"):
        recompute_batch_norm_statistics(model, x[:5], group_size=8)


def test_a_one_input_model_is_probed_without_a_warning():
    """Keras 3 warned "The structure of `inputs` doesn't match the expected structure" at every
    probe batch when the probe took ``model.inputs`` (a list) and was called with one tensor."""
    model = dense_bn_model(tf.keras.layers.BatchNormalization(name="plain"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert recompute_batch_norm_statistics(model, np.ones((16, 5), np.float32), group_size=8) == 1


def test_a_model_without_batch_norm_is_left_alone():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(2)])
    assert recompute_batch_norm_statistics(model, np.zeros((8, 5), np.float32), group_size=4) == 0


def test_the_trainer_evaluates_a_few_step_large_batch_run_with_its_weights_statistics():
    """16 workers x 16 on 256 samples: one step an epoch, so after 3 epochs the moving averages
    hold 1 - 0.99**3 = 3% of the statistics. With precise_bn_samples the final moving statistics
    are the population statistics of the final weights over the first 256 training samples, and
    the validation accuracy the history records differs from the run without it."""
    spec = {
        "data": {"dataset": "mnist1d", "train_subset": 320, "validation_split": 0.2, "options": {"num_samples": 500}},
        "model": {"name": "cnn", "options": {"filters": [4], "dense": [16], "batch_norm": True}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 16},
        "training": {"world_size": 16, "per_worker_batch": 16, "epochs": 3, "checkpoint": False},
    }
    plain = train(run_config_from_dict(spec), SimulatedWorld(16))
    spec["training"]["precise_bn_samples"] = 256
    precise = train(run_config_from_dict(spec), SimulatedWorld(16))
    layers = batch_norm_layers(precise.model)
    final = [(layer.moving_mean.numpy().copy(), layer.moving_variance.numpy().copy()) for layer in layers]


    data = load_dataset("mnist1d", train_subset=320, validation_split=0.2, num_samples=500)
    recompute_batch_norm_statistics(precise.model, data.x_train[:256], group_size=16)
    for (mean, variance), layer in zip(final, layers):
        np.testing.assert_allclose(layer.moving_mean.numpy(), mean, rtol=1e-6)
        np.testing.assert_allclose(layer.moving_variance.numpy(), variance, rtol=1e-6)
    plain_moving = batch_norm_layers(plain.model)[0].moving_variance.numpy()
    assert np.all(np.abs(plain_moving - 1.0) < 0.1)  # 3 EMA steps: still near the initial 1
    assert [row["val_accuracy"] for row in plain.history] != [row["val_accuracy"] for row in precise.history]


def test_a_plain_run_with_precise_batch_norm_warns_nothing():
    """A run of a one-input functional model with batch norm and precise_bn_samples: no warning of
    Keras's or lbtrain's (on Keras 3 the probe printed "The structure of `inputs` doesn't match the
    expected structure" at every probe batch)."""
    spec = {"data": {"dataset": "mnist1d", "train_subset": 256, "validation_split": 0.25, "options": {"num_samples": 400}},
            "model": {"name": "cnn", "options": {"filters": [4], "dense": [8], "batch_norm": True}},
            "lr": {"base_lr": 0.05, "base_batch": 16, "warmup_epochs": 0.5},
            "training": {"world_size": 2, "per_worker_batch": 16, "epochs": 1, "precise_bn_samples": 64, "checkpoint": False}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train(run_config_from_dict(spec), SimulatedWorld(2))
    assert result.status != "failed" and result.total_steps == 6  # 192 samples in global batches of 32: it trained
    # Python shows no DeprecationWarning raised outside __main__ (Keras 2.15's seeding calls randrange with a float).
    shown = [warning for warning in caught if not issubclass(warning.category, (DeprecationWarning, PendingDeprecationWarning))]
    assert [f"{warning.category.__name__}: {warning.message}" for warning in shown] == []
