"""lbtrain.trainer: a run of its config in a world: its result, the same run twice, resumes after a
kill, divergence, budgets, stop-at targets, validation points and TensorBoard logs.

``training.jit_compile``: the train step compiled with XLA trains the same weights as the
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
weights by (1e-3 and more)."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from helpers import JOB_FOLDER, goyal_blow_up_run, shared_horovod_job
from lbtrain.config import LATER_FIELD_DEFAULTS, ConfigError, StopAtConfig, run_config_from_dict
from lbtrain.results import RunResult
from lbtrain.schedules import build_schedule
from lbtrain.trainer import accelerators, resolve_jit_compile, train
from lbtrain.worlds.modes import get_mode
from lbtrain.worlds.simulated import SimulatedWorld


def config(**sections):
    spec = {
        "data": {"dataset": "mnist1d", "train_subset": 256, "validation_split": 0.25, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [32]}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 16, "rule": "sqrt", "warmup_epochs": 1, "decay": {"type": "cosine"}},
        "training": {"world_size": 4, "per_worker_batch": 8, "epochs": 2, "seed": 1},
    }
    for section, values in sections.items():
        spec[section] = {**spec.get(section, {}), **values}
    return run_config_from_dict(spec)


def test_result_holds_scaled_lr_steps_metrics_gap_and_history():
    run = config()
    result = train(run, SimulatedWorld(4))
    assert result.status == "ok" and result.reason is None
    assert (result.world_size, result.global_batch, result.steps_per_epoch, result.total_steps) == (4, 32, 6, 12)
    assert result.budget == {"epochs": 2}
    # The step-0 loss, before any update, of a 10-class net near its initialisation: about ln 10.
    assert result.initial_loss == pytest.approx(math.log(10), abs=0.3)
    assert result.learning_rate == pytest.approx(0.05 * math.sqrt(2))
    assert set(result.metrics) == {f"{split}_{m}" for split in ("train", "test", "validation") for m in ("loss", "accuracy")}
    assert result.generalization_gap["accuracy"] == pytest.approx(result.metrics["train_accuracy"] - result.metrics["test_accuracy"])
    assert result.generalization_gap["loss"] == pytest.approx(result.metrics["test_loss"] - result.metrics["train_loss"])
    assert [row["epoch"] for row in result.history] == [1, 2]
    schedule = build_schedule(run.lr.schedule_spec(), steps_per_epoch=6, base_lr=0.05, base_batch=16, global_batch=32, total_epochs=2)
    # logs["lr"] is the rate applied at each epoch's last step.
    np.testing.assert_allclose([row["lr"] for row in result.history], [float(schedule(5)), float(schedule(11))], rtol=1e-6)
    for row in result.history:
        assert row["gap_accuracy"] == pytest.approx(row["accuracy"] - row["val_accuracy"])
        assert row["samples_per_second"] > 0
    assert json.loads(json.dumps(result.to_dict()))["metrics"] == result.metrics


def test_same_config_twice_gives_the_same_metrics_and_history():
    first, second = train(config(), SimulatedWorld(4)), train(config(), SimulatedWorld(4))
    assert first.metrics == second.metrics
    for a, b in zip(first.history, second.history):
        assert {k: v for k, v in a.items() if k != "samples_per_second"} == {k: v for k, v in b.items() if k != "samples_per_second"}
    for a, b in zip(first.model.get_weights(), second.model.get_weights()):
        np.testing.assert_array_equal(a, b)


class StopAfterFirstEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise KeyboardInterrupt("killed after epoch 1")


def test_resume_after_a_kill_at_epoch_one_ends_like_an_uninterrupted_run(tmp_path):
    """Weights, metrics and the noise scale's moving averages (checkpointed with the model)."""
    run = config(training={"epochs": 3}, optimizer={"name": "lars", "params": {"eta": 0.01}}, analysis={"noise_scale": True})
    uninterrupted = train(run, SimulatedWorld(4))
    with pytest.raises(KeyboardInterrupt):
        train(run, SimulatedWorld(4), run_dir=tmp_path, callbacks=[StopAfterFirstEpoch()])
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-1")
    resumed = train(run, SimulatedWorld(4), run_dir=tmp_path, resume=True)
    assert resumed.total_steps == uninterrupted.total_steps == 18
    for a, b in zip(uninterrupted.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert [row["epoch"] for row in resumed.history] == [1, 2, 3]
    assert resumed.metrics["test_accuracy"] == pytest.approx(uninterrupted.metrics["test_accuracy"], abs=1e-6)
    assert resumed.history[-1]["noise_scale"] == pytest.approx(uninterrupted.history[-1]["noise_scale"], rel=1e-4)


def _truncate_data_file(checkpoints):
    data = next(checkpoints.glob("ckpt-1.data-*"))
    data.write_bytes(data.read_bytes()[:100])


def _garble_index(checkpoints):
    (checkpoints / "checkpoint").write_bytes(b"\xff\xfe garbage \x00\x01")


def _index_names_missing_files(checkpoints):
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\nall_model_checkpoint_paths: "ckpt-7"\n')


@pytest.mark.parametrize("damage", [_truncate_data_file, _garble_index, _index_names_missing_files])
def test_a_damaged_checkpoint_is_moved_aside_with_one_warning_and_the_run_starts_over(tmp_path, caplog, damage):
    """An interrupted run whose checkpoint a crash or a full disk damaged trains again from
    scratch (equal to a run never interrupted) instead of failing on every rerun; the damaged
    folder is kept beside it, byte for byte."""
    run = config(training={"epochs": 2})
    uninterrupted = train(run, SimulatedWorld(4))
    run_dir = tmp_path / "run"
    outside = tmp_path / "outside.txt"
    outside.write_text("not lbtrain's")
    with pytest.raises(KeyboardInterrupt):
        train(run, SimulatedWorld(4), run_dir=run_dir, callbacks=[StopAfterFirstEpoch()])
    checkpoints = run_dir / "checkpoints"
    damage(checkpoints)
    damaged = {path.name: path.read_bytes() for path in checkpoints.iterdir()}
    with caplog.at_level("WARNING", logger="lbtrain"):
        resumed = train(run, SimulatedWorld(4), run_dir=run_dir, resume=True)
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING" and record.name.startswith("lbtrain")]
    assert len(warnings) == 1 and len(warnings[0]) < 400, warnings
    assert warnings[0].startswith(f"{checkpoints} is damaged (") and warnings[0].endswith(
        f"moved it to {run_dir / 'checkpoints.damaged-1'}; training the run from scratch")
    assert {path.name: path.read_bytes() for path in (run_dir / "checkpoints.damaged-1").iterdir()} == damaged
    assert [row["epoch"] for row in resumed.history] == [1, 2]
    assert resumed.metrics == pytest.approx(uninterrupted.metrics, abs=1e-6)
    assert tf.train.latest_checkpoint(str(checkpoints)).endswith("ckpt-2")
    assert outside.read_text() == "not lbtrain's"


def test_resume_of_a_finished_run_trains_no_more(tmp_path):
    run = config(training={"epochs": 1}, lr={"warmup_epochs": 0.5})
    first = train(run, SimulatedWorld(4), run_dir=tmp_path)
    again = train(run, SimulatedWorld(4), run_dir=tmp_path, resume=True)
    assert again.total_steps == first.total_steps == 6
    assert again.metrics == pytest.approx(first.metrics)


def test_huge_learning_rate_is_recorded_as_diverged_not_raised():
    result = train(config(lr={"base_lr": 1e6, "warmup_epochs": 0, "decay": None}), SimulatedWorld(4))
    assert result.status == "diverged"
    assert result.reason.startswith("loss became nan at epoch 1, step") or "exceeds" in result.reason
    assert result.total_steps < 12
    data = result.to_dict()
    json.dumps(data, allow_nan=False)
    assert RunResult.from_dict(data).status == "diverged"


def test_world_size_must_match_the_config():
    with pytest.raises(ValueError, match="training.world_size is 4 but the world has 2 workers"):
        train(config(), SimulatedWorld(2))


def test_tensorboard_logs_on_request(tmp_path):
    train(config(training={"epochs": 1, "tensorboard": True}, lr={"decay": None}), SimulatedWorld(4), run_dir=tmp_path)
    assert any((tmp_path / "tensorboard").rglob("*.v2"))


def test_failed_result_keeps_the_error_on_one_line():
    result = RunResult.failed(config(), ValueError("bad\nthing"))
    assert result.status == "failed" and result.reason == "ValueError: bad thing"
    with pytest.raises(ValueError, match="status must be one of ok, ok-unstable, diverged, collapsed, failed"):
        RunResult(config={}, status="crashed")


def test_analysis_section_measures_noise_scale_and_sharpness_without_changing_training():
    plain = train(config(), SimulatedWorld(4))
    measured = train(config(analysis={"noise_scale": True, "noise_scale_every": 4, "sharpness": True, "sharpness_samples": 64}),
                     SimulatedWorld(4))
    # Measuring restores batch-norm state and draws its own batches: the run itself is unchanged.
    assert measured.metrics["test_accuracy"] == plain.metrics["test_accuracy"]
    assert [row["loss"] for row in measured.history] == [row["loss"] for row in plain.history]
    assert measured.metrics["sharpness"] > 0 and measured.metrics["noise_scale"] == measured.history[-1]["noise_scale"]
    assert {"noise_scale", "noise_trace", "gradient_norm_sq"} <= set(measured.history[0])
    assert "sharpness" not in plain.metrics and "noise_scale" not in plain.history[0]


def test_a_step_budget_takes_the_same_steps_at_every_batch_and_decays_over_them():
    results = {world: train(config(training={"world_size": world, "epochs": None, "steps": 10}, lr={"warmup_epochs": 0}),
                            SimulatedWorld(world)) for world in (2, 4)}
    assert [results[w].total_steps for w in (2, 4)] == [10, 10]
    assert results[4].steps_per_epoch == 6 and [row["epoch"] for row in results[4].history] == [1, 2]
    assert results[2].steps_per_epoch == 12 and [row["epoch"] for row in results[2].history] == [1]
    assert results[4].budget == {"steps": 10}
    # Cosine over the 10 budgeted steps: the last step applies 0.05 sqrt(2) (1 + cos(pi 9/10)) / 2.
    last = 0.05 * math.sqrt(2) * (1 + math.cos(math.pi * 9 / 10)) / 2
    assert results[4].history[-1]["lr"] == pytest.approx(last, rel=1e-5)


def test_a_sample_budget_is_samples_over_the_global_batch():
    result = train(config(training={"epochs": None, "samples": 330}, lr={"warmup_epochs": 0}), SimulatedWorld(4))
    assert result.total_steps == 330 // 32 and result.budget == {"samples": 330}


def test_stop_at_a_training_target_ends_the_run_at_the_first_epoch_reaching_it():
    reached = train(config(training={"epochs": 3, "stop_at": {"train_accuracy": 0.01}}), SimulatedWorld(4))
    assert reached.total_steps == 6 and reached.metrics["target_reached_step"] == 6
    assert reached.budget == {"epochs": 3, "stop_at": {"train_accuracy": 0.01}}
    unreachable = train(config(training={"epochs": 2, "stop_at": {"train_loss": 1e-6}}), SimulatedWorld(4))
    assert unreachable.total_steps == 12 and "target_reached_step" not in unreachable.metrics


def test_stop_at_a_validation_target_ends_the_run_at_the_first_epoch_reaching_it():
    reached = train(config(training={"epochs": 3, "stop_at": {"val_accuracy": 0.01}}), SimulatedWorld(4))
    assert reached.total_steps == 6 and reached.metrics["target_reached_step"] == 6 and len(reached.history) == 1
    assert reached.history[0]["val_accuracy"] >= 0.01
    unreachable = train(config(training={"epochs": 2, "stop_at": {"val_accuracy": 1.0}}), SimulatedWorld(4))
    assert unreachable.total_steps == 12 and "target_reached_step" not in unreachable.metrics
    assert StopAtConfig(val_accuracy=0.9).describe() == "validation accuracy >= 0.9"
    with pytest.raises(ConfigError, match=r"training.stop_at.val_accuracy needs a validation split \(data.validation_split > 0\)"):
        config(data={"validation_split": 0.0}, training={"stop_at": {"val_accuracy": 0.9}})


@pytest.mark.parametrize("training, lr, message", [
    ({"epochs": 2, "steps": 10}, {}, "give one budget, epochs, steps or samples, not epochs=2 and steps=10"),
    ({"stop_at": {"train_loss": 0.1, "val_accuracy": 0.9}}, {}, "give one target"),
    ({"epochs": None, "samples": 31}, {}, r"training.samples \(31\) is less than one global batch \(32\)"),
    ({"epochs": 1}, {"warmup_epochs": 2}, r"lr.warmup_epochs \(2\) is longer than the budget \(training.epochs 1\)"),
    ({"stop_at": {"train_loss": 0.1, "train_accuracy": 0.9}}, {}, "give one target"),
])
def test_contradictory_or_impossible_budgets_are_config_errors(training, lr, message):
    with pytest.raises(ConfigError, match=message):
        config(training=training, lr=lr)


def test_a_warmup_longer_than_a_step_budget_is_caught_against_the_real_epoch_length():
    run = config(training={"epochs": None, "steps": 5}, lr={"warmup_epochs": 1})
    with pytest.raises(ConfigError, match=r"lr.warmup_epochs \(1 = 6 steps\) is longer than the budget \(5 steps = 5 steps"):
        run.schedule(6)


def test_goyal_case_linear_rule_at_4096_without_warmup_is_never_ok():
    result = train(run_config_from_dict(goyal_blow_up_run()), SimulatedWorld(32))
    assert result.status in ("diverged", "collapsed"), result.reason
    assert result.initial_loss == pytest.approx(math.log(10), abs=0.5)


def test_validation_every_n_steps_records_points_at_multiples_of_n_beside_the_epoch_history():
    """6 steps an epoch, 18 in all: validation every 5 steps gives points at steps 5, 10 and 15;
    every 6 steps they fall on the epoch ends and equal Keras's epoch-end validation, and the
    training means of the epochs are those of a run without points (its metrics are its own)."""
    plain = train(config(training={"epochs": 3}), SimulatedWorld(4))
    every_5 = train(config(training={"epochs": 3, "validation_every_steps": 5}), SimulatedWorld(4))
    assert [point["step"] for point in every_5.validation_points] == [5, 10, 15]
    assert all(set(point) == {"step", "val_loss", "val_accuracy"} for point in every_5.validation_points)
    assert [row["epoch"] for row in every_5.history] == [1, 2, 3] and [row["step"] for row in every_5.history] == [6, 12, 18]
    assert plain.validation_points == [] and "step" not in plain.history[0]
    every_6 = train(config(training={"epochs": 3, "validation_every_steps": 6}), SimulatedWorld(4))
    assert [point["step"] for point in every_6.validation_points] == [6, 12, 18]
    for point, row, plain_row in zip(every_6.validation_points, every_6.history, plain.history):
        assert point["val_accuracy"] == pytest.approx(row["val_accuracy"], abs=1e-6)
        assert point["val_loss"] == pytest.approx(row["val_loss"], rel=1e-5)
        assert (row["loss"], row["accuracy"]) == (plain_row["loss"], plain_row["accuracy"])
    assert json.loads(json.dumps(every_5.to_dict()))["validation_points"] == every_5.validation_points
    assert RunResult.from_dict(every_5.to_dict()).validation_points == every_5.validation_points


def test_stop_at_a_validation_target_stops_at_the_first_validation_point_reaching_it():
    """The target is the first point that beats every point before it: the run stops at that
    point's step, inside its epoch (not at the epoch's end, a multiple of 6)."""
    unstopped = train(config(training={"epochs": 3, "validation_every_steps": 5}), SimulatedWorld(4))
    values = [point["val_accuracy"] for point in unstopped.validation_points]
    first = next(i for i in range(1, len(values)) if values[i] > max(values[:i]))
    target = values[first]
    step = unstopped.validation_points[first]["step"]
    stopped = train(config(training={"epochs": 3, "validation_every_steps": 5, "stop_at": {"val_accuracy": target}}),
                    SimulatedWorld(4))
    assert step % 6 and stopped.total_steps == step and stopped.metrics["target_reached_step"] == step
    assert [point["step"] for point in stopped.validation_points] == [5 * (i + 1) for i in range(first + 1)]
    assert stopped.validation_points[-1]["val_accuracy"] == pytest.approx(target, abs=1e-6)
    assert stopped.history[-1]["step"] == step and len(stopped.history) == math.ceil(step / 6)
    with pytest.raises(ConfigError, match=r"training.validation_every_steps needs a validation split"):
        config(data={"validation_split": 0.0}, training={"validation_every_steps": 5})


def test_a_resumed_run_keeps_the_validation_points_of_its_checkpoint(tmp_path):
    run = config(training={"epochs": 3, "validation_every_steps": 4})
    uninterrupted = train(run, SimulatedWorld(4))
    with pytest.raises(KeyboardInterrupt):
        train(run, SimulatedWorld(4), run_dir=tmp_path, callbacks=[StopAfterFirstEpoch()])
    resumed = train(run, SimulatedWorld(4), run_dir=tmp_path, resume=True)
    assert [point["step"] for point in resumed.validation_points] == [4, 8, 12, 16]
    for a, b in zip(resumed.validation_points, uninterrupted.validation_points):
        assert a["val_accuracy"] == pytest.approx(b["val_accuracy"], abs=1e-6)


def test_validation_every_steps_enters_a_run_id_only_when_set():
    from lbtrain.studies.plan import run_id

    assert "validation_every_steps" not in config().identity()["training"]
    assert run_id(config(), "a") != run_id(config(training={"validation_every_steps": 5}), "a")


# training.jit_compile: the compiled step against the uncompiled one, and resolve_jit_compile.
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
JIT_TWO_RANKS = shared_horovod_job("test_trainer:jit_cnn", "jit_two_ranks.py",
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
