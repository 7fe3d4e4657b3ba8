import json
import math
import time

import numpy as np
import pytest
import tensorflow as tf

from helpers import goyal_blow_up_run, run_horovod, two_rank_run
from lbtrain.config import run_config_from_dict
from lbtrain.models import build_model
from lbtrain.train_step import GradientStepModel
from lbtrain.trainer import train
from lbtrain.worlds.build import current_world
from lbtrain.worlds.simulated import SimulatedWorld


def batch_norm_mlp(seed=0):
    return build_model("mlp", (6,), 3, widths=[8], batch_norm=True, seed=seed)


def sgd_steps(model, x, y, batch, steps):
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x[: batch * steps], y[: batch * steps], batch_size=batch, shuffle=False, verbose=0)
    return [v.numpy() for v in model.trainable_variables]


def data(samples, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((samples, 6)).astype(np.float32), rng.integers(0, 3, samples)


def test_simulated_world_feeds_the_global_batch_from_one_shard():
    world = SimulatedWorld(8)
    assert (world.size, world.rank, world.is_root) == (8, 0, True)
    assert world.input_shard() == (0, 1) and world.process_batch(32) == 256
    np.testing.assert_array_equal(world.allreduce_mean([1.0, 2.0]), [1.0, 2.0])
    assert world.broadcast_object({"a": 1}) == {"a": 1}


def test_simulated_step_equals_the_average_of_per_worker_gradients_with_batch_norm():
    """One SimulatedWorld(4) step with ghost BN == SGD on the mean of 4 workers' gradients,
    each worker normalizing its own 5 samples (positions r, r+4, ... of the global batch)."""
    world_size, batch = 4, 5
    x, y = data(world_size * batch)
    simulated = SimulatedWorld(world_size).prepare_model(batch_norm_mlp(), batch)
    after = sgd_steps(simulated, x, y, world_size * batch, 1)

    worker_model = batch_norm_mlp()
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    gradients = []
    for rank in range(world_size):
        with tf.GradientTape() as tape:
            value = loss(y[rank::world_size], worker_model(x[rank::world_size], training=True))
        gradients.append(tape.gradient(value, worker_model.trainable_variables))
    expected = [v.numpy() - 0.1 * np.mean([g[i].numpy() for g in gradients], axis=0)
                for i, v in enumerate(worker_model.trainable_variables)]
    for got, want in zip(after, expected):
        np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-6)


def test_without_ghost_batch_norm_the_step_would_differ():
    world_size, batch = 4, 5
    x, y = data(world_size * batch)
    ghost = sgd_steps(SimulatedWorld(world_size).prepare_model(batch_norm_mlp(), batch), x, y, world_size * batch, 1)
    plain = sgd_steps(batch_norm_mlp(), x, y, world_size * batch, 1)
    assert max(np.abs(a.reshape(b.shape) - b).max() for a, b in zip(ghost, plain)) > 1e-4


def test_models_without_batch_norm_are_trained_as_they_are():
    model = build_model("mlp", (6,), 3, widths=[8])
    assert SimulatedWorld(4).prepare_model(model, 5) is model


def test_micro_batches_accumulate_to_the_same_update_as_one_big_batch():
    world_size, batch, steps = 4, 6, 3
    x, y = data(world_size * batch * steps, seed=1)
    whole = sgd_steps(SimulatedWorld(world_size).prepare_model(batch_norm_mlp(), batch), x, y, world_size * batch, steps)
    accumulated_model = SimulatedWorld(world_size, micro_batches=2).prepare_model(batch_norm_mlp(), batch)
    assert isinstance(accumulated_model, GradientStepModel) and accumulated_model.pieces == 2
    accumulated = sgd_steps(accumulated_model, x, y, world_size * batch, steps)
    for a, b in zip(whole, accumulated):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: SimulatedWorld(0), r"world size must be a positive integer, got 0"),
        (lambda: SimulatedWorld(2.0), r"world size must be a positive integer, got 2.0"),
        (lambda: SimulatedWorld(6, micro_batches=4), r"micro_batches must be a positive integer dividing the world size 6, got 4"),
    ],
)
def test_bad_world_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_current_world_is_simulated_outside_a_launcher(monkeypatch):
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    world = current_world(16, micro_batches=4)
    assert isinstance(world, SimulatedWorld) and world.size == 16 and world.micro_batches == 4


# ---------------------------------------------------------------- real horovodrun


def tiny_run(**training):
    """Five steps of a dropout-free mlp on 160 MNIST-1D samples, 2 workers x 16."""
    return {
        "data": {"dataset": "mnist1d", "train_subset": 160, "options": {"num_samples": 400}},
        "model": {"name": "mlp", "options": {"widths": [32, 32]}},
        "optimizer": {"name": "lars", "params": {"momentum": 0.9, "weight_decay": 1e-4, "eta": 0.02}},
        "lr": {"base_lr": 0.5, "base_batch": 16, "rule": "linear", "warmup_epochs": 0.4, "decay": {"type": "cosine"}},
        # Five steps test equality, not learning: no margin above chance is asked of them.
        "training": {"world_size": 2, "per_worker_batch": 16, "epochs": 1, "seed": 3, "collapse_margin": 0.0, **training},
    }


def noise_scale_run(batch_norm: bool) -> dict:
    """``tiny_run`` with TensorBoard logs and the gradient noise scale measured every 2 steps."""
    spec = tiny_run(tensorboard=True)
    spec["model"]["options"]["batch_norm"] = batch_norm
    spec["analysis"] = {"noise_scale": True, "noise_scale_every": 2}
    return spec


# Trained in the session's shared horovodrun job (conftest: two_rank_runs).
NOISE_SCALE_RUNS = {batch_norm: two_rank_run(f"test_worlds:noise_scale:{batch_norm}", noise_scale_run(batch_norm))
                    for batch_norm in (False, True)}
GOYAL_BLOW_UP = two_rank_run("test_worlds:goyal_blow_up", goyal_blow_up_run(world_size=2, per_worker_batch=2048))


@pytest.mark.slow
@pytest.mark.parametrize("batch_norm", [False, True], ids=["mlp", "mlp_batch_norm"])
@pytest.mark.horovod
def test_horovodrun_two_ranks_equal_simulated_world_of_two_and_only_rank0_writes(two_rank_runs, batch_norm):
    spec = noise_scale_run(batch_norm)
    arrays, runs = two_rank_runs(NOISE_SCALE_RUNS[batch_norm])
    horovod_result = json.loads(str(arrays["result"]))
    assert horovod_result["total_steps"] == 5 and horovod_result["status"] == "ok"

    # Only rank 0 wrote: its checkpoint and TensorBoard logs exist, rank 1's folder does not.
    assert sorted(p.name for p in runs.iterdir()) == ["rank0"]
    assert (runs / "rank0" / "checkpoints" / "checkpoint").is_file()
    assert any((runs / "rank0" / "tensorboard").rglob("*.v2"))

    simulated = train(run_config_from_dict(spec), SimulatedWorld(2))
    names = [v.name for v in simulated.model.weights]
    trainable = {v.name for v in simulated.model.trainable_variables}
    for i, name in enumerate(names):
        rank0, rank1 = arrays[f"rank0:{i}"], arrays[f"rank1:{i}"]
        if name in trainable:
            np.testing.assert_array_equal(rank0, rank1, err_msg=name)
            np.testing.assert_allclose(simulated.model.weights[i].numpy().reshape(rank0.shape), rank0, atol=1e-5, err_msg=name)
    for key in ("train_accuracy", "test_accuracy") if not batch_norm else ():
        assert simulated.metrics[key] == pytest.approx(horovod_result["metrics"][key], abs=1e-6)
    # The gradient noise scale, measured in every step: rank-local vs allreduced gradients give
    # what one process computes in two pieces of one worker each.
    # Compared as stored (a non-finite estimate is null in JSON).
    stored = simulated.to_dict()
    for measured, expected in ((stored["history"][0], horovod_result["history"][0]), (stored["metrics"], horovod_result["metrics"])):
        for key in ("noise_scale", "noise_trace", "gradient_norm_sq") if measured is stored["history"][0] else ("noise_scale",):
            assert (measured[key] is None) == (expected[key] is None), key
            if expected[key] is not None:
                assert measured[key] == pytest.approx(expected[key], rel=1e-4), key


@pytest.mark.slow
@pytest.mark.horovod
def test_a_rank_raising_fails_the_whole_job_fast_with_its_error_visible():
    started = time.monotonic()
    result = run_horovod("failing_rank.py", json.dumps(tiny_run()), timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "rank 1 failed on purpose at step 3" in result.stdout + result.stderr
    assert elapsed < 60


@pytest.mark.slow
@pytest.mark.horovod
def test_horovodrun_judges_the_goyal_blow_up_like_the_simulated_world(two_rank_runs):
    """Two ranks of 2048 (global batch 4096, linear rule, no warmup): every rank stops at the
    same epoch end, and the run is recorded diverged or collapsed, never ok."""
    arrays, _ = two_rank_runs(GOYAL_BLOW_UP)
    horovod_result = json.loads(str(arrays["result"]))
    assert horovod_result["status"] in ("diverged", "collapsed"), horovod_result["reason"]
    assert horovod_result["initial_loss"] == pytest.approx(math.log(10), abs=0.5)
