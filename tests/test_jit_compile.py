"""``training.jit_compile``: the train step compiled with XLA trains the same weights as the
uncompiled step within float tolerance, in every world whose step compiles (simulated worlds of 1
and 4 with ghost batch norm, accumulated and micro-batched steps, stale gradients, the in-step
noise scale, Horovod with the allreduce outside XLA); ``auto`` resolves as documented; ``true``
where the step cannot compile, and values other than auto/true/false, are one-line errors.

Tolerance: the compiled step computes the same float32 operations, but XLA fuses them and
orders the reductions (over the batch, the convolution windows, the batch-norm groups)
differently, so each gradient differs from the uncompiled one by a few ulps; after 8 to 16
momentum steps the weights (of size 0.01 to 1) were measured to differ by at most 5.4e-7 on both
stacks. ``atol=1e-6`` (about 8 ulps of 1.0) with ``rtol=1e-5`` bounds that with a margin, and is
far below what a real difference in the update (one sample, one step, another LR) moves the
weights by (1e-3 and more).
"""

import json

import numpy as np
import pytest
from helpers import JOB_FOLDER, shared_horovod_job

from lbtrain.config import LATER_FIELD_DEFAULTS, ConfigError, run_config_from_dict
from lbtrain.trainer import accelerators, resolve_jit_compile, train
from lbtrain.worlds.modes import get_mode
from lbtrain.worlds.simulated import SimulatedWorld

RTOL, ATOL = 1e-5, 1e-6
CNN = {"name": "cnn", "options": {"filters": [4], "dense": [16], "batch_norm": True}}
MLP = {"name": "mlp", "options": {"widths": [32]}}


def spec(model=None, **training):
    """256 MNIST-1D samples, momentum SGD; one worker of 32 by default (8 steps an epoch)."""
    return {
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 400}},
        "model": model or MLP,
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.1, "base_batch": 32},
        "training": {"world_size": 1, "per_worker_batch": 32, "epochs": 2, "seed": 3, "checkpoint": False, **training},
    }


def assert_same_weights(compiled, uncompiled):
    for a, b, variable in zip(compiled.model.get_weights(), uncompiled.model.get_weights(), uncompiled.model.weights):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=variable.name)


@pytest.mark.parametrize("model, training", [
    (MLP, {}),
    (CNN, {}),
    (CNN, {"world_size": 4, "per_worker_batch": 8}),
    (CNN, {"world_size": 4, "per_worker_batch": 8, "accumulation_steps": 2}),
    (CNN, {"world_size": 4, "per_worker_batch": 8, "micro_batches": 2}),
    (MLP, {"staleness": 2}),
], ids=["mlp-w1", "cnn-bn-w1", "cnn-ghost-bn-w4", "cnn-ghost-bn-w4-accumulated", "cnn-ghost-bn-w4-micro-batches",
        "mlp-stale"])
def test_the_compiled_step_trains_the_uncompiled_steps_weights(model, training):
    runs = {}
    for jit_compile in (True, False):
        config = run_config_from_dict(spec(model, jit_compile=jit_compile, **training))
        runs[jit_compile] = train(config, SimulatedWorld(config.training.world_size, config.training.micro_batches))
        assert runs[jit_compile].model.jit_compile is jit_compile
    assert runs[True].total_steps == runs[False].total_steps > 0
    assert_same_weights(runs[True], runs[False])
    np.testing.assert_allclose([row["loss"] for row in runs[True].history], [row["loss"] for row in runs[False].history],
                               rtol=RTOL)


def test_the_compiled_step_measures_the_same_noise_scale():
    """The in-step noise scale sums squared gradient norms: under XLA as sum(g**2) (TensorFlow's
    Euclidean-norm reduction has no XLA kernel), the same value within float tolerance."""
    runs = {jit_compile: train(run_config_from_dict({**spec(MLP, jit_compile=jit_compile, world_size=4, per_worker_batch=8),
                                                      "analysis": {"noise_scale": True}}), SimulatedWorld(4))
            for jit_compile in (True, False)}
    assert_same_weights(runs[True], runs[False])
    assert runs[True].metrics["noise_scale"] == pytest.approx(runs[False].metrics["noise_scale"], rel=1e-4)


def test_auto_leaves_the_step_uncompiled_on_this_cpu_only_machine(caplog):
    """``auto`` compiles only where a GPU or TPU is visible (the docs and TrainingConfig's doc);
    the run logs the choice and why, once (at debug level: not compiling is the usual case on a CPU)."""
    if accelerators():
        pytest.skip(f"this machine has {accelerators()}: auto compiles here")
    assert resolve_jit_compile("auto", SimulatedWorld(4)) == (
        False, "training.jit_compile is auto and only the CPU is visible, where the compiled step measured slower "
               "(benchmarks/bench_jit.py)")
    assert resolve_jit_compile(True, SimulatedWorld(4)) == (True, "training.jit_compile is true")
    assert resolve_jit_compile(False, SimulatedWorld(4)) == (False, "training.jit_compile is false")
    with caplog.at_level("DEBUG", logger="lbtrain.trainer"):
        result = train(run_config_from_dict(spec(epochs=1)), SimulatedWorld(1))
    assert result.model.jit_compile is False
    assert [record.getMessage() for record in caplog.records if "train step" in record.getMessage()] == [
        "train step not compiled: training.jit_compile is auto and only the CPU is visible, where the compiled step "
        "measured slower (benchmarks/bench_jit.py)"]


@pytest.mark.parametrize("value", ["yes", "True", 1, 0, 1.0])
def test_a_value_other_than_auto_true_or_false_is_a_one_line_error(value):
    with pytest.raises(ConfigError) as error:
        run_config_from_dict(spec(jit_compile=value))
    assert str(error.value) == f"training.jit_compile: must be one of auto, true, false (got {value!r})"


def test_null_clears_jit_compile_to_its_default():
    """null clears a field that takes no None to its default (an inherited value undone), here auto."""
    assert run_config_from_dict(spec(jit_compile=None)).training.jit_compile == "auto"


def test_the_default_is_auto_and_leaves_run_ids_as_they_were():
    """A field added later: hashed into a run's id only away from its default."""
    assert run_config_from_dict(spec()).training.jit_compile == "auto"
    assert LATER_FIELD_DEFAULTS["training.jit_compile"] == "auto"
    assert "jit_compile" not in run_config_from_dict(spec()).identity()["training"]
    assert run_config_from_dict(spec(jit_compile=True)).identity()["training"]["jit_compile"] is True


@pytest.mark.parametrize("mode", ["mirrored", "multiworker", "parameter_server"])
def test_true_in_a_tf_distribute_mode_is_refused_in_one_line(mode):
    """XLA cannot compile a tf.distribute step (measured: MirroredStrategy's replicas read variables
    on another device, on both stacks; MultiWorkerMirroredStrategy's all-reduce has no XLA CPU
    implementation): refused before anything runs; auto and false pass."""
    assert get_mode(mode).unsupported_setting(run_config_from_dict(spec(jit_compile=True))) == (
        f"training.jit_compile is true, but mode: {mode} cannot compile its step with XLA (XLA cannot compile a "
        "tf.distribute step, whose variables and all-reduce span devices): set it to auto or false, or train in mode: "
        "simulated or horovod")
    for setting in ("auto", False):
        assert get_mode(mode).unsupported_setting(run_config_from_dict(spec(jit_compile=setting))) is None


def test_the_trainer_refuses_true_in_a_world_that_cannot_compile_and_auto_does_not_compile_there():
    from lbtrain.worlds.mirrored import MirroredWorld

    world = MirroredWorld(1)
    assert resolve_jit_compile("auto", world) == (
        False, "training.jit_compile is auto and mode: mirrored cannot compile its step with XLA (XLA cannot compile a "
               "tf.distribute step, whose variables and all-reduce span devices)")
    with pytest.raises(ConfigError, match=r"^training.jit_compile is true, but mode: mirrored cannot compile its step"):
        train(run_config_from_dict(spec(jit_compile=True)), world)


# Run in the session's shared horovodrun job (conftest: horovod_jobs).
JIT_TWO_RANKS = shared_horovod_job("test_jit_compile:cnn", "jit_two_ranks.py",
                                   json.dumps(spec(CNN, world_size=2, per_worker_batch=16, epochs=1, jit_compile=True)),
                                   f"{JOB_FOLDER}/weights.npz")


@pytest.mark.slow
@pytest.mark.horovod
def test_horovodrun_two_ranks_compiled_equal_a_simulated_world_of_two_uncompiled(horovod_jobs):
    """Horovod's allreduce has no XLA kernel: each rank compiles its forward and backward pass
    and allreduces outside XLA. Two ranks (batch norm, each rank normalizes its own batch) reach
    the weights of an uncompiled simulated world of 2, atol 1e-5 as the uncompiled two-rank test
    (the allreduce adds its own summation order)."""
    run = spec(CNN, world_size=2, per_worker_batch=16, epochs=1, jit_compile=True)
    arrays = np.load(horovod_jobs(JIT_TWO_RANKS) / "weights.npz")
    assert bool(arrays["compiled_gradients"]) and bool(arrays["ranks_equal"])
    simulated = train(run_config_from_dict({**run, "training": {**run["training"], "jit_compile": False}}), SimulatedWorld(2))
    for i, variable in enumerate(simulated.model.trainable_variables):
        np.testing.assert_allclose(arrays[f"arr_{i}"], variable.numpy(), rtol=RTOL, atol=1e-5, err_msg=variable.name)
