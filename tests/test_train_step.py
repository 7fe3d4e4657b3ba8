"""The train step that computes the gradient in pieces and measures the gradient noise scale in
the same compiled step (lbtrain.train_step)."""

import math

import numpy as np
import pytest
import tensorflow as tf
from helpers import constant_output_problem

from lbtrain.measures.noise_scale import NoiseScaleSettings, measurement_pieces
from lbtrain.models import build_model
from lbtrain.train_step import GradientStepModel, NoiseScaleTracker, noise_scale_tracker
from lbtrain.worlds.simulated import SimulatedWorld

LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def measured(world, model, inputs, targets, per_worker_batch, steps, epochs=1, **settings):
    prepared = world.prepare_model(model, per_worker_batch, noise_scale=NoiseScaleSettings(**settings))
    prepared.compile(optimizer=tf.keras.optimizers.SGD(0.0), loss=tf.keras.losses.MeanSquaredError())
    history = prepared.fit(inputs, targets, batch_size=world.size * per_worker_batch, epochs=epochs, steps_per_epoch=steps,
                           shuffle=False, verbose=0)
    return prepared, history.history


@pytest.mark.parametrize("world_size, per_worker_batch, pieces, small", [(4, 16, None, 32), (4, 16, 4, 16), (1, 32, None, 16),
                                                                          (1, 32, 8, 4)])
def test_noise_scale_matches_a_known_gradient_covariance(world_size, per_worker_batch, pieces, small):
    model, inputs, targets, true_scale = constant_output_problem()
    prepared, history = measured(SimulatedWorld(world_size), model, inputs, targets, per_worker_batch, 60, pieces=pieces)
    tracker = noise_scale_tracker(prepared)
    assert (tracker.small_batch, tracker.big_batch) == (small, world_size * per_worker_batch)
    assert int(tracker.measurements.numpy()) == 60
    assert true_scale == pytest.approx(32, rel=0.05)
    assert history["noise_scale"][0] == pytest.approx(true_scale, rel=0.15)
    assert history["noise_scale_undetermined"] == [0.0]


def test_the_estimate_is_the_two_batch_formula_of_the_step_gradients():
    """One step, decay 0: the logged estimate is McCandlish's formula applied to the two pieces'
    gradients and their mean, computed here with NumPy."""
    model, inputs, targets, _ = constant_output_problem(dimension=3, samples=8)
    bias = model.layers[0].bias.numpy().astype(np.float64)
    prepared, history = measured(SimulatedWorld(2), model, inputs, targets, 4, 1, decay=0.0)
    # Piece r holds worker r's samples: positions r, r + 2, ... of the batch.
    pieces = [2 * (bias - targets[r::2].astype(np.float64).mean(axis=0)) / 3 for r in range(2)]
    small_sq, big_sq = np.mean([g @ g for g in pieces]), np.sum(np.mean(pieces, axis=0) ** 2)
    norm_sq = (8 * big_sq - 4 * small_sq) / 4
    trace = (small_sq - big_sq) / (1 / 4 - 1 / 8)
    assert history["gradient_norm_sq"][0] == pytest.approx(norm_sq, rel=1e-5)
    assert history["noise_trace"][0] == pytest.approx(trace, rel=1e-5)
    assert history["noise_scale"][0] == pytest.approx(trace / norm_sq, rel=1e-5)


def test_undetermined_where_the_gradient_norm_estimate_is_not_positive():
    """At w = the targets' mean the true |G|^2 is 0: its estimate is noise around 0, and the
    noise scale is NaN (undetermined), never negative or infinite."""
    model, inputs, targets, _ = constant_output_problem(samples=2000, distance_sq=0.0)
    prepared, history = measured(SimulatedWorld(4), model, inputs, targets, 16, 5, epochs=2, pieces=4)
    tracker = noise_scale_tracker(prepared)
    for epoch in range(2):
        undetermined = history["gradient_norm_sq"][epoch] <= 0
        assert history["noise_scale_undetermined"][epoch] == float(undetermined)
        assert math.isnan(history["noise_scale"][epoch]) if undetermined else history["noise_scale"][epoch] > 0
    assert any(value <= 0 for value in history["gradient_norm_sq"])
    assert tracker.estimate()["noise_scale_undetermined"] == history["noise_scale_undetermined"][-1]


def batch_norm_mlp():
    return build_model("mlp", (6,), 3, widths=[8], batch_norm=True, seed=0)


def train_steps(model, x, y, batch, steps):
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9), loss=LOSS)
    model.fit(x, y, batch_size=batch, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("world_size", [4, 1])
def test_measuring_leaves_training_unchanged_batch_norm_statistics_included(world_size):
    """The weights and the moving batch-norm statistics after three steps are those of the same
    world without the measurement (one worker: an mlp without batch norm, which a split keeps)."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4 * 6 * 3, 6)).astype(np.float32), rng.integers(0, 3, 4 * 6 * 3)
    world, batch = SimulatedWorld(world_size), 24 // world_size
    make = batch_norm_mlp if world_size > 1 else (lambda: build_model("mlp", (6,), 3, widths=[8], seed=0))
    plain = train_steps(world.prepare_model(make(), batch), x, y, 24, 3)
    measuring = world.prepare_model(make(), batch, noise_scale=NoiseScaleSettings(pieces=2))
    assert isinstance(measuring, GradientStepModel) and measuring.pieces == 2
    train_steps(measuring, x, y, 24, 3)
    weights = {getattr(v, "path", v.name): v.numpy() for v in plain.weights}
    compared = 0
    for variable in measuring.weights:
        name = getattr(variable, "path", variable.name)
        if name in weights:
            np.testing.assert_allclose(variable.numpy(), weights[name], atol=2e-6, err_msg=name)
            compared += 1
    assert compared == len(plain.weights)
    if world_size > 1:
        assert any("moving_variance" in name for name in weights)


def test_a_single_worker_with_batch_norm_is_not_split():
    model = batch_norm_mlp()
    assert SimulatedWorld(1).prepare_model(model, 8, noise_scale=NoiseScaleSettings()) is model


@pytest.mark.parametrize("world_size, batch, requested, pieces", [
    (8, 4, None, 2), (9, 4, None, 3), (7, 4, None, 7), (1, 32, None, 2), (1, 15, None, 3), (1, 1, None, None), (8, 4, 8, 8),
])
def test_measurement_pieces(world_size, batch, requested, pieces):
    assert measurement_pieces(world_size, batch, requested) == pieces


@pytest.mark.parametrize("call, message", [
    (lambda: measurement_pieces(6, 4, 4), r"analysis.noise_scale_pieces \(4\) must divide the world size \(6\)"),
    (lambda: measurement_pieces(1, 6, 4), r"analysis.noise_scale_pieces \(4\) must divide the per-worker batch \(6\)"),
    (lambda: NoiseScaleSettings(decay=1.0), r"noise scale decay must be in \[0, 1\), got 1.0"),
    (lambda: NoiseScaleSettings(pieces=1), r"noise scale pieces must be an integer >= 2, got 1"),
    (lambda: NoiseScaleTracker(8, 8, 0.9), r"the noise scale needs 0 < B_small < B_big, got 8 and 8"),
])
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()
