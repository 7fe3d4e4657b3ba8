"""The train step that computes the gradient in pieces and measures the gradient noise scale in
the same compiled step (lbtrain.train_step).

Gradient accumulation, both kinds: lbtrain's ``training.accumulation_steps`` (k batches per
worker and update, one update of synchronous SGD at the global batch ``world_size *
per_worker_batch * k``, Goyal et al. 2017 sec. 2, in a simulated world and under horovodrun), and
Keras 3's ``gradient_accumulation_steps`` (Keras clocks a schedule in batches; lbtrain's LARS and
LAMB clock it in updates, and ``PerUpdate`` does so for Keras's own optimizers).

Simulated staleness (``training.staleness``): asynchronous SGD with a constant delay tau,
``w_{t+1} = w_t - eta * g(w_{max(t - tau, 0)}; batch_{max(t - tau, 0)})`` (Lian et al. 2015,
Dutta et al. 2018), exactly, in one process (lbtrain.train_step.StaleGradients)."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from helpers import constant_output_problem, two_rank_run
from lbtrain._keras import KERAS_3
from lbtrain.config import ConfigError, run_config_from_dict
from lbtrain.measures.noise_scale import NoiseScaleSettings, measurement_pieces
from lbtrain.models import build_model
from lbtrain.optimizers import LAMB, LARS
from lbtrain.schedules import PerUpdate, Warmup, build_schedule
from lbtrain.train_step import GradientStepModel, NoiseScaleTracker, StaleGradients, noise_scale_tracker
from lbtrain.trainer import train
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


# Gradient accumulation: lbtrain's accumulation_steps and Keras 3's gradient_accumulation_steps.
def spec(batch_norm=False, **training):
    """A dropout-free mlp on 192 MNIST-1D samples; one epoch is 6 updates at global batch 32."""
    return {
        "data": {"dataset": "mnist1d", "train_subset": 192, "options": {"num_samples": 400}},
        "model": {"name": "mlp", "options": {"widths": [32], "batch_norm": batch_norm}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.1, "base_batch": 8, "rule": "sqrt", "warmup_epochs": 0.5, "decay": {"type": "cosine"}},
        "training": {"world_size": 1, "per_worker_batch": 8, "epochs": 2, "seed": 2, **training},
    }


def test_accumulating_4_batches_on_one_worker_equals_a_simulated_world_of_4():
    """Both updates average the same 32 samples of the stream (no batch norm, so how they are
    grouped does not matter); only the float summation order differs: atol 1e-6 after 12
    momentum steps on weights of size ~0.1-1."""
    accumulated = train(run_config_from_dict(spec(accumulation_steps=4)), SimulatedWorld(1))
    world = train(run_config_from_dict(spec(world_size=4)), SimulatedWorld(4))
    assert isinstance(accumulated.model, GradientStepModel) and accumulated.model.pieces == 4
    for a, b in zip(accumulated.model.get_weights(), world.model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert accumulated.metrics["train_loss"] == pytest.approx(world.metrics["train_loss"], abs=1e-5)

    # Recorded as batch 32: the LR rule, the warmup and decay clocks, the steps per epoch.
    assert (accumulated.global_batch, accumulated.steps_per_epoch, accumulated.total_steps) == (32, 6, 12)
    assert accumulated.learning_rate == world.learning_rate == pytest.approx(0.1 * math.sqrt(32 / 8))
    schedule = build_schedule(run_config_from_dict(spec()).lr.schedule_spec(), steps_per_epoch=6, base_lr=0.1, base_batch=8,
                              global_batch=32, total_epochs=2)
    np.testing.assert_allclose([row["lr"] for row in accumulated.history], [float(schedule(5)), float(schedule(11))], rtol=1e-6)
    np.testing.assert_allclose([row["lr"] for row in accumulated.history], [row["lr"] for row in world.history], rtol=1e-7)
    assert accumulated.config["training"]["accumulation_steps"] == 4


def test_a_sample_budget_counts_updates_of_the_accumulated_batch():
    run = run_config_from_dict(spec(epochs=None, samples=96, accumulation_steps=2, world_size=2))
    assert run.global_batch == 32 and run.total_steps(6) == 3


def data(samples, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((samples, 6)).astype(np.float32), rng.integers(0, 3, samples)


def test_each_worker_normalizes_its_own_batch_of_each_accumulated_step():
    """SimulatedWorld(2) accumulating 2 steps with ghost batch norm: one SGD update with the mean
    of 4 gradients, worker r's batch of step j being stream positions ``j*W*b + i*W + r``
    (what rank r of horovodrun reads), each normalized over its own 5 samples."""
    world_size, batch, steps = 2, 5, 2
    x, y = data(world_size * batch * steps)
    model = SimulatedWorld(world_size).prepare_model(batch_norm_mlp(), batch, accumulation_steps=steps)
    assert model.sequential and model.pieces == steps
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=LOSS)
    model.fit(x, y, batch_size=len(x), shuffle=False, verbose=0)

    reference = batch_norm_mlp()
    gradients = []
    block = world_size * batch
    for step in range(steps):
        block_x, block_y = x[step * block:(step + 1) * block], y[step * block:(step + 1) * block]
        for rank in range(world_size):
            with tf.GradientTape() as tape:
                value = LOSS(block_y[rank::world_size], reference(block_x[rank::world_size], training=True))
            gradients.append(tape.gradient(value, reference.trainable_variables))
    for i, variable in enumerate(reference.trainable_variables):
        expected = variable.numpy() - 0.1 * np.mean([g[i].numpy() for g in gradients], axis=0)
        np.testing.assert_allclose(model.trainable_variables[i].numpy().reshape(expected.shape), expected, atol=1e-6)


@pytest.mark.parametrize("world_size, micro_batches, pieces, small", [(4, 1, 3, 32), (4, 2, 6, 16), (1, 1, 3, 8)])
def test_accumulated_batches_are_the_pieces_of_the_step_and_of_the_noise_scale(world_size, micro_batches, pieces, small):
    """k = 3 accumulated steps of W workers x 8, each cut in ``micro_batches``: the step's pieces,
    and the noise scale's small batch (its big batch is the whole update, W * 8 * 3)."""
    model = build_model("mlp", (6,), 3, widths=[8], batch_norm=world_size == 1, seed=0)
    prepared = SimulatedWorld(world_size, micro_batches).prepare_model(model, 8, noise_scale=NoiseScaleSettings(),
                                                                        accumulation_steps=3)
    tracker = noise_scale_tracker(prepared)
    assert prepared.pieces == pieces and (tracker.small_batch, tracker.big_batch) == (small, world_size * 8 * 3)


def test_micro_batches_within_accumulated_steps_give_the_same_update():
    """Micro-batches split each accumulated step into whole workers: the same update as
    accumulating whole steps (batch norm included, ghost batches unchanged)."""
    world_size, batch, steps = 4, 3, 2
    x, y = data(world_size * batch * steps * 2, seed=1)
    weights = []
    for micro_batches in (1, 2):
        model = SimulatedWorld(world_size, micro_batches).prepare_model(batch_norm_mlp(), batch, accumulation_steps=steps)
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=LOSS)
        model.fit(x, y, batch_size=world_size * batch * steps, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("value, message", [
    (0, "training.accumulation_steps: Input should be greater than 0 (got 0)"),
    (-2, "training.accumulation_steps: Input should be greater than 0 (got -2)"),
    (True, "training.accumulation_steps: Input should be a valid integer (got True)"),
    (2.0, "training.accumulation_steps: Input should be a valid integer (got 2.0)"),
])
def test_bad_accumulation_steps_are_one_line_config_errors(value, message):
    with pytest.raises(ConfigError) as error:
        run_config_from_dict(spec(accumulation_steps=value))
    assert str(error.value) == message


# Trained in the session's shared horovodrun job (conftest: two_rank_runs).
HOROVOD_ACCUMULATING = two_rank_run("test_train_step:accumulating_2", spec(batch_norm=True, world_size=2, accumulation_steps=2, epochs=1))


@pytest.mark.slow
@pytest.mark.horovod
def test_horovodrun_two_ranks_accumulating_2_equal_the_simulated_world(two_rank_runs):
    """horovodrun -np 2 with accumulation_steps 2 (each rank: its k batches one after another,
    one allreduce per update) and SimulatedWorld(2) with the same setting reach the same weights
    (batch norm included: each rank normalizes each of its own batches), atol 1e-5 as for the
    plain two-rank test."""
    run = spec(batch_norm=True, world_size=2, accumulation_steps=2, epochs=1)
    arrays, _ = two_rank_runs(HOROVOD_ACCUMULATING)
    horovod_result = json.loads(str(arrays["result"]))
    assert (horovod_result["global_batch"], horovod_result["total_steps"]) == (32, 6)
    simulated = train(run_config_from_dict(run), SimulatedWorld(2))
    trainable = {v.name for v in simulated.model.trainable_variables}
    for i, variable in enumerate(simulated.model.weights):
        if variable.name in trainable:
            rank0 = arrays[f"rank0:{i}"]
            np.testing.assert_array_equal(rank0, arrays[f"rank1:{i}"], err_msg=variable.name)
            np.testing.assert_allclose(variable.numpy().reshape(rank0.shape), rank0, atol=1e-5, err_msg=variable.name)


# Keras 3's gradient_accumulation_steps and the schedule's clock.

keras_3_only = pytest.mark.skipif(not KERAS_3, reason="gradient_accumulation_steps is Keras 3's (tf.keras 2 has none)")

STEPS = 4  # batches per update


def schedule():
    return Warmup(target_lr=0.8, warmup_steps=4, start_lr=0.0)  # 0.2, 0.4, 0.6, 0.8, then 0.8


def trained(optimizer, batches=8):
    """``optimizer`` after ``batches`` batches of 4 samples on a tiny dense model (one epoch)."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    x = np.random.default_rng(0).normal(size=(4 * batches, 3)).astype(np.float32)
    model.fit(x, np.zeros((4 * batches, 2), np.float32), batch_size=4, epochs=1, verbose=0, shuffle=False)
    return model.optimizer


@keras_3_only
@pytest.mark.parametrize("make", [lambda s: LARS(s, momentum=0.9, gradient_accumulation_steps=STEPS),
                                  lambda s: LAMB(s, gradient_accumulation_steps=STEPS)], ids=["LARS", "LAMB"])
def test_lbtrain_optimizers_clock_their_schedule_in_updates(make):
    optimizer = trained(make(schedule()))
    assert int(optimizer.iterations.numpy()) == 2  # 8 batches, one update per 4
    assert float(optimizer.learning_rate) == pytest.approx(0.6)  # schedule(2): the third update's rate


@keras_3_only
def test_keras_sgd_clocks_batches_and_per_update_fixes_it():
    keras_clock = trained(tf.keras.optimizers.SGD(schedule(), gradient_accumulation_steps=STEPS))
    assert int(keras_clock.iterations.numpy()) == 2 and float(keras_clock.learning_rate) == pytest.approx(0.8)  # schedule(8)
    per_update = trained(tf.keras.optimizers.SGD(PerUpdate(schedule(), STEPS), gradient_accumulation_steps=STEPS))
    assert float(per_update.learning_rate) == pytest.approx(0.6)


def test_per_update_values_and_its_config_round_trip():
    wrapped = PerUpdate(schedule(), 3)
    assert [round(float(wrapped(step)), 6) for step in range(7)] == [0.2, 0.2, 0.2, 0.4, 0.4, 0.4, 0.6]
    again = tf.keras.optimizers.schedules.deserialize(tf.keras.optimizers.schedules.serialize(wrapped))
    assert isinstance(again, PerUpdate) and again.gradient_accumulation_steps == 3 and float(again(6)) == pytest.approx(0.6)


# Simulated staleness: StaleGradients.
class Record(tf.keras.callbacks.Callback):
    """The weight and the logged staleness after every update of a one-weight model."""

    def __init__(self):
        super().__init__()
        self.weights, self.staleness = [], []

    def on_train_batch_end(self, batch, logs=None):
        self.weights.append(float(self.model.trainable_variables[0].numpy().ravel()[0]))
        self.staleness.append(float(logs["staleness"]))


def one_weight_sgd(staleness, targets, learning_rate=0.1):
    """Loss (w - c_t)^2 at update t (prediction w * 1, mean squared error, one sample a
    batch), so g(w; batch t) = 2 (w - c_t); w_0 = 1; plain SGD."""
    inputs = tf.keras.Input((1,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")(inputs))
    prepared = SimulatedWorld(1).prepare_model(model, 1, staleness=staleness)
    prepared.compile(optimizer=tf.keras.optimizers.SGD(learning_rate), loss="mse")
    record = Record()
    prepared.fit(np.ones((len(targets), 1), np.float32), np.array(targets, np.float32)[:, None], batch_size=1,
                 shuffle=False, verbose=0, callbacks=[record])
    return record


def test_staleness_1_matches_the_hand_computed_updates():
    record = one_weight_sgd(1, targets=[0.0, 1.0, 0.5])
    # t=0: g(w_0; c_0) = 2 (1 - 0) = 2, the only gradient there is:    w_1 = 1 - 0.1 * 2 = 0.8
    # t=1: computes g(w_1; c_1) = 2 (0.8 - 1) = -0.4, applies g_0 = 2:  w_2 = 0.8 - 0.2 = 0.6
    # t=2: computes g(w_2; c_2) = 2 (0.6 - 0.5) = 0.2, applies g_1:     w_3 = 0.6 + 0.04 = 0.64
    np.testing.assert_allclose(record.weights, [0.8, 0.6, 0.64], atol=1e-6)
    assert record.staleness == [0.0, 1.0, 1.0]


def test_staleness_2_applies_the_gradient_of_w0_for_the_first_three_updates():
    record = one_weight_sgd(2, targets=[0.0, 0.0, 0.0, 0.0])
    # g_0 = g(w_0) = 2 is applied at t = 0, 1, 2 (w_1 = 0.8, w_2 = 0.6, w_3 = 0.4);
    # t=3 applies g_1 = g(w_1) = 1.6:                                   w_4 = 0.4 - 0.16 = 0.24
    np.testing.assert_allclose(record.weights, [0.8, 0.6, 0.4, 0.24], atol=1e-6)
    assert record.staleness == [0.0, 1.0, 2.0, 2.0]
    # Synchronous SGD for comparison: 1 -> 0.8 -> 0.64 -> 0.512 -> 0.4096.


def test_a_stale_mlp_follows_the_delayed_recursion_with_momentum():
    """Seven momentum-SGD updates of an mlp with tau = 3 against a plain loop that keeps every
    gradient and applies ``grads[max(t - 3, 0)]`` at update t (float32, atol 1e-6)."""
    tau, steps, batch = 3, 7, 6
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((steps * batch, 5)).astype(np.float32), rng.integers(0, 3, steps * batch)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    stale = SimulatedWorld(1).prepare_model(build_model("mlp", (5,), 3, widths=[8], seed=0), batch, staleness=tau)
    stale.compile(optimizer=tf.keras.optimizers.SGD(0.2, momentum=0.9), loss=loss)
    stale.fit(x, y, batch_size=batch, shuffle=False, verbose=0)

    reference = build_model("mlp", (5,), 3, widths=[8], seed=0)
    optimizer = tf.keras.optimizers.SGD(0.2, momentum=0.9)
    computed = []
    for step in range(steps):
        with tf.GradientTape() as tape:
            value = loss(y[step * batch:(step + 1) * batch], reference(x[step * batch:(step + 1) * batch], training=True))
        computed.append(tape.gradient(value, reference.trainable_variables))
        optimizer.apply_gradients(zip(computed[max(step - tau, 0)], reference.trainable_variables))
    for got, want in zip(stale.trainable_variables, reference.trainable_variables):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


def test_staleness_0_trains_the_model_as_it_is():
    model = build_model("mlp", (5,), 3, widths=[8], seed=0)
    assert SimulatedWorld(4).prepare_model(model, 2, staleness=0) is model


def run(**training):
    return run_config_from_dict({
        "data": {"dataset": "mnist1d", "train_subset": 192, "options": {"num_samples": 400}},
        "model": {"name": "mlp", "options": {"widths": [32]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.05, "base_batch": 8, "rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}},
        "training": {"world_size": 4, "per_worker_batch": 8, "epochs": 3, "seed": 1, **training},
    })


class StopAfterFirstEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise KeyboardInterrupt("killed after epoch 1")


def test_the_ring_buffer_is_checkpointed_so_a_resumed_run_ends_like_an_uninterrupted_one(tmp_path):
    """Staleness 4 in a simulated world of 4: a run killed after epoch 1 (6 updates) and resumed
    applies the same stale gradients as one that never stopped; the history and the run config
    record the staleness."""
    config = run(staleness=4)
    uninterrupted = train(config, SimulatedWorld(4))
    with pytest.raises(KeyboardInterrupt):
        train(config, SimulatedWorld(4), run_dir=tmp_path, callbacks=[StopAfterFirstEpoch()])
    resumed = train(config, SimulatedWorld(4), run_dir=tmp_path, resume=True)
    assert resumed.total_steps == uninterrupted.total_steps == 18
    assert int(resumed.model.stale_gradients.updates.numpy()) == 18
    for a, b in zip(uninterrupted.model.trainable_variables, resumed.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert [row["staleness"] for row in resumed.history] == [4.0, 4.0, 4.0]
    assert resumed.config["training"]["staleness"] == 4

    synchronous = train(run(), SimulatedWorld(4))
    assert not isinstance(synchronous.model, GradientStepModel)
    assert max(np.abs(a.numpy() - b.numpy()).max()
               for a, b in zip(synchronous.model.trainable_variables, uninterrupted.model.trainable_variables)) > 1e-3


@pytest.mark.parametrize("value, message", [
    (-1, "training.staleness: Input should be greater than or equal to 0 (got -1)"),
    (True, "training.staleness: Input should be a valid integer (got True)"),
    (1.5, "training.staleness: Input should be a valid integer (got 1.5)"),
])
def test_bad_staleness_is_a_one_line_config_error(value, message):
    with pytest.raises(ConfigError) as error:
        run(staleness=value)
    assert str(error.value) == message


def test_the_buffer_needs_a_positive_integer_staleness():
    variables = [tf.Variable(tf.zeros(2))]
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="staleness must be an integer >= 1"):
            StaleGradients(variables, bad)
