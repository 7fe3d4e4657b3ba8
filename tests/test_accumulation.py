"""Gradient accumulation, both kinds: lbtrain's ``training.accumulation_steps`` (k batches per
worker and update, one update of synchronous SGD at the global batch ``world_size *
per_worker_batch * k``, Goyal et al. 2017 sec. 2, in a simulated world and under horovodrun), and
Keras 3's ``gradient_accumulation_steps`` (Keras clocks a schedule in batches; lbtrain's LARS and
LAMB clock it in updates, and ``PerUpdate`` does so for Keras's own optimizers)."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf
from helpers import two_rank_run

from lbtrain._keras import KERAS_3
from lbtrain.config import ConfigError, run_config_from_dict
from lbtrain.measures.noise_scale import NoiseScaleSettings
from lbtrain.models import build_model
from lbtrain.optimizers import LAMB, LARS
from lbtrain.schedules import PerUpdate, Warmup, build_schedule
from lbtrain.train_step import GradientStepModel, noise_scale_tracker
from lbtrain.trainer import train
from lbtrain.worlds.simulated import SimulatedWorld

LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


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


def batch_norm_mlp():
    return build_model("mlp", (6,), 3, widths=[8], batch_norm=True, seed=0)


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
HOROVOD_ACCUMULATING = two_rank_run("test_accumulation:2", spec(batch_norm=True, world_size=2, accumulation_steps=2, epochs=1))


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
