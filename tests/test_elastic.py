"""lbtrain.elastic: the world-size schedule's segments and the learning rate across world changes,
against a NumPy reference of the rule (scaling rule on the new global batch, decay clocked in
samples, linear re-warmup of a jump up), and a simulated elastic run end to end."""

import math

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.config import ConfigError, run_config_from_dict
from lbtrain.elastic import ElasticLearningRate, elastic_learning_rate, plan_segments, replay_changes
from lbtrain.schedules import build_schedule

BASE_LR, BASE_BATCH, B = 0.05, 32, 32


def cosine_with_warmup(world_size: int, total_samples: int, warmup_samples: int):
    """The reference recipe at ``world_size`` as a function of the (fractional) step: linear
    scaling, gradual warmup from the unscaled LR, cosine over the budget, all in that world's steps."""
    batch = world_size * B
    target, warmup, total = BASE_LR * batch / BASE_BATCH, round(warmup_samples / batch), total_samples // batch

    def lr(step: float) -> float:
        if step < warmup:
            return BASE_LR + (target - BASE_LR) * (step + 1) / warmup
        return target * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))
    return lr


def keras_recipe(world_size: int, total_samples: int, samples_per_epoch: int):
    batch = world_size * B
    return build_schedule({"rule": "linear", "warmup_epochs": 1, "decay": {"type": "cosine"}},
                          steps_per_epoch=samples_per_epoch // batch, base_lr=BASE_LR, base_batch=BASE_BATCH,
                          global_batch=batch, total_epochs=total_samples / samples_per_epoch)


def test_segments_by_steps_and_by_samples():
    by_steps = plan_segments({0: 4, 8: 2, 24: 4}, "steps", B, 4096)
    assert [(s.start_step, s.steps, s.world_size, s.start_samples) for s in by_steps] == [
        (0, 8, 4, 0), (8, 16, 2, 1024), (24, 16, 4, 2048)]
    # 1000 samples is mid-step at batch 128: the change waits for the end of step 8 (1024 samples)
    by_samples = plan_segments({0: 4, 1000: 2, 5000: 1}, "samples", B, 4096)
    assert [(s.start_step, s.steps, s.world_size, s.start_samples) for s in by_samples] == [(0, 8, 4, 0), (8, 48, 2, 1024)]
    assert plan_segments({0: 2, 3: 2}, "steps", B, 640)[-1].end_step == 10


def test_follow_policy_matches_the_reference_rule_at_every_step():
    """Shrink 4 -> 2 after 1024 samples, grow 2 -> 4 after 2048, re-warmup over 4 steps: every
    step's LR is the recipe of the current world at samples / (W b), ramped after the jump up."""
    total, per_epoch = 4096, 1024
    schedule = elastic_learning_rate(lambda w: keras_recipe(w, total, per_epoch), [2, 4], B, 4, rewarmup_steps=4)
    segments = plan_segments({0: 4, 8: 2, 24: 4}, "steps", B, total)
    reference = {w: cosine_with_warmup(w, total, per_epoch) for w in (2, 4)}
    applied, expected, changes = [], [], []
    for previous, segment in zip([None, *segments], segments):
        if previous is not None:
            changes.append(schedule.change_world(segment.start_step, segment.world_size, segment.start_samples))
        for step in range(segment.start_step, segment.end_step):
            applied.append(float(schedule(step)))
            rule = reference[segment.world_size]((segment.start_samples + (step - segment.start_step) * segment.world_size * B)
                                                 / (segment.world_size * B))
            expected.append(rule)
    old = changes[1].old_lr
    for step in range(24, 28):  # the jump up 0.05 -> 0.1 is ramped from the old LR
        expected[step] = old + (expected[step] - old) * (step - 24 + 1) / 4
    np.testing.assert_allclose(applied, expected, rtol=1e-5)
    # the shrink is at the decay's quarter in samples (1024 of 4096), not at step 8 of world 2's 64
    assert changes[0].old_lr == pytest.approx(0.2 * 0.5 * (1 + math.cos(math.pi / 4)), rel=1e-5)
    assert changes[0].new_lr == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi / 4)), rel=1e-5)
    assert changes[1].old_lr == pytest.approx(0.05, rel=1e-5) and changes[1].new_lr == pytest.approx(0.1, rel=1e-5)
    assert changes[1].applied_lr == pytest.approx(0.0625, rel=1e-5)
    assert [(c.step, c.samples, c.old_world_size, c.new_world_size) for c in changes] == [(8, 1024, 4, 2), (24, 2048, 2, 4)]


def test_without_a_change_follow_is_the_fixed_schedule_and_keep_ignores_the_world():
    total, per_epoch = 4096, 1024
    fixed = keras_recipe(4, total, per_epoch)
    follow = elastic_learning_rate(lambda w: keras_recipe(w, total, per_epoch), [2, 4], B, 4)
    keep = elastic_learning_rate(lambda w: keras_recipe(w, total, per_epoch), [2, 4], B, 4, policy="keep")
    steps = range(0, 32, 3)
    np.testing.assert_allclose([float(follow(s)) for s in steps], [float(fixed(s)) for s in steps], rtol=1e-6)
    change = keep.change_world(8, 2, 1024)
    assert change.new_lr == change.old_lr == pytest.approx(float(fixed(8)))
    np.testing.assert_allclose([float(keep(s)) for s in range(8, 40)], [float(fixed(s)) for s in range(8, 40)], rtol=1e-6)


def test_the_rate_is_read_inside_a_traced_step_and_replay_restores_a_segment():
    """A tf.function traced before a change reads the new segment (the state is in variables),
    and a schedule rebuilt for a resumed run and replayed to its step gives the same rates."""
    total, per_epoch = 4096, 1024
    recipe = lambda w: keras_recipe(w, total, per_epoch)  # noqa: E731
    segments = plan_segments({0: 4, 8: 2, 24: 4}, "steps", B, total)
    schedule = elastic_learning_rate(recipe, [2, 4], B, 4, rewarmup_steps=4)
    traced = tf.function(lambda step: schedule(step))
    before = float(traced(tf.constant(25, tf.int64)))
    replay_changes(schedule, segments, 26)
    after = float(traced(tf.constant(25, tf.int64)))
    assert after != pytest.approx(before)
    resumed = elastic_learning_rate(recipe, [2, 4], B, 4, rewarmup_steps=4)
    assert len(replay_changes(resumed, segments, 26)) == 2
    np.testing.assert_allclose([float(resumed(s)) for s in range(24, 40)], [float(traced(tf.constant(s, tf.int64))) for s in range(24, 40)], rtol=1e-6)
    reloaded = ElasticLearningRate.from_config(schedule.get_config())
    assert reloaded.get_config() == schedule.get_config() and reloaded.world_size == 4
    np.testing.assert_allclose([float(reloaded(s)) for s in range(24, 40)], [float(resumed(s)) for s in range(24, 40)], rtol=1e-6)


def _run(**elastic):
    return {"data": {"dataset": "fashion_mnist", "train_subset": 1024},
            "lr": {"base_lr": BASE_LR, "base_batch": BASE_BATCH, "warmup_epochs": 1, "decay": {"type": "cosine"}},
            "training": {"world_size": 4, "per_worker_batch": B, "epochs": 2, "elastic": elastic}}


@pytest.mark.parametrize("elastic, training, message", [
    ({"world_sizes": {5: 2}}, {}, "elastic.world_sizes: must give the world size at 0"),
    ({"world_sizes": {0: 2}}, {}, "starts at world size 2 but training.world_size is 4"),
    ({"world_sizes": {0: 4, 10: 0}}, {}, "world sizes are 1 to"),
    ({"world_sizes": {0: 4}, "lr": "linear"}, {}, "elastic.lr"),
    ({"world_sizes": {0: 4}}, {"epochs": None, "steps": 30}, "budget is epochs or samples"),
    ({"world_sizes": {0: 4}}, {"accumulation_steps": 2}, "training.accumulation_steps (2) cannot be combined with training.elastic"),
    ({"min_workers": 1, "max_workers": 2}, {}, "missing discovery"),
    ({"world_sizes": {0: 4}, "max_workers": 2}, {}, "not both (got world_sizes and max_workers)"),
    ({"min_workers": 1, "max_workers": 2, "discovery": ["localhost"]}, {}, "gave 'localhost', not host:slots"),
    ({"min_workers": 1, "max_workers": 2, "discovery": "d.sh"}, {}, "training.world_size (4, the workers the job starts with)"),
    ({"min_workers": 1, "max_workers": 4, "discovery": "d.sh", "cooldown_seconds": [9, 3]}, {}, "0 < low <= high"),
])
def test_bad_elastic_settings_are_one_line_errors(elastic, training, message):
    run = _run(**elastic)
    run["training"].update(training)
    with pytest.raises(ConfigError, match=None) as error:
        run_config_from_dict(run)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_world_size_points_read_back_from_json_keys():
    config = run_config_from_dict(_run(world_sizes={0: 4, 8: 2}))
    assert run_config_from_dict(config.to_dict()).training.elastic.world_sizes == {0: 4, 8: 2}
    assert "elastic" not in run_config_from_dict({"training": {"world_size": 2}}).identity()["training"]


def test_elastic_is_refused_outside_a_simulated_world():
    from lbtrain.worlds.modes import get_mode

    config = run_config_from_dict(_run(world_sizes={0: 4, 8: 2}))
    assert get_mode("mirrored").unsupported_setting(config).startswith(
        "training.elastic.world_sizes (a world-size schedule) is simulated only, not in mode: mirrored")
    assert get_mode("horovod").unsupported_setting(config).startswith(
        "training.elastic.world_sizes (a world-size schedule) is simulated only, not in mode: horovod")
    assert get_mode("simulated").unsupported_setting(config) is None
    workers = _run(min_workers=1, max_workers=4, discovery=["localhost:4"])
    assert get_mode("simulated").unsupported_setting(run_config_from_dict(workers)).startswith(
        "training.elastic.discovery (real workers coming and going) needs mode: horovod, not mode: simulated")


def test_a_simulated_elastic_run_applies_the_rule_and_resumes_to_the_same_weights(tmp_path):
    """End to end, the cnn with ghost batch norm: the LR applied at every step
    (``LearningRateLogger``) is the reference rule's, the changes are in the result, and a run
    killed mid-segment (after its epoch-8 checkpoint) and resumed replays the changes and ends
    with the weights of an uninterrupted one."""
    from lbtrain.callbacks import LearningRateLogger
    from lbtrain.trainer import train
    from lbtrain.worlds.simulated import SimulatedWorld

    run = _run(world_sizes={0: 4, 12: 2, 16: 4}, rewarmup_steps=2)
    run["model"] = {"name": "cnn"}
    config = run_config_from_dict(run)
    logger = LearningRateLogger()
    whole = train(config, SimulatedWorld(4), run_dir=tmp_path / "whole", callbacks=[logger])
    assert whole.status == "ok"
    # 2 epochs of 1024 samples at batch 128 = 2048 samples: 12 steps at 4 (1536), 4 at 2 (256), 2 at 4 (256)
    assert whole.total_steps == 18 and logger.steps == list(range(18))
    assert [(c["step"], c["samples"], c["old_world_size"], c["new_world_size"]) for c in whole.world_changes] == [
        (12, 1536, 4, 2), (16, 1792, 2, 4)]
    reference = {w: cosine_with_warmup(w, 2048, 1024) for w in (2, 4)}
    expected = [reference[4](s) for s in range(12)] + [reference[2]((1536 + (s - 12) * 64) / 64) for s in range(12, 16)]
    grown = [reference[4]((1792 + (s - 16) * 128) / 128) for s in range(16, 18)]
    old = whole.world_changes[1]["old_lr"]
    assert grown[0] > old
    expected += [old + (grown[0] - old) / 2, grown[1]]
    np.testing.assert_allclose(logger.rates, expected, rtol=1e-5)

    with pytest.raises(_Killed):
        train(config, SimulatedWorld(4), run_dir=tmp_path / "resumed", callbacks=[_KillAfter(8)])
    resumed = train(config, SimulatedWorld(4), run_dir=tmp_path / "resumed", resume=True)
    assert resumed.total_steps == 18 and resumed.world_changes == whole.world_changes
    assert [row["epoch"] for row in resumed.history] == [row["epoch"] for row in whole.history]
    for a, b in zip(whole.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class _Killed(Exception):
    pass


class _KillAfter(tf.keras.callbacks.Callback):
    """Ends the process's training as a kill would, at the first epoch end at or after optimizer
    step ``step`` (after the run's checkpoint of that epoch, which comes earlier in the list)."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def on_epoch_end(self, epoch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= self.step:
            raise _Killed()


def test_a_simulated_elastic_run_resumed_after_its_target_trains_no_further(tmp_path):
    """A run that stopped at its ``stop_at`` target mid-schedule, resumed from its last
    checkpoint (as after a kill between the checkpoint and metrics.json), ends where it ended."""
    from lbtrain.trainer import train
    from lbtrain.worlds.simulated import SimulatedWorld

    run = _run(world_sizes={0: 4, 12: 2})
    run["training"]["stop_at"] = {"train_accuracy": 0.01}  # met at the first epoch's end
    config = run_config_from_dict(run)
    first = train(config, SimulatedWorld(4), run_dir=tmp_path / "run")
    assert first.status == "ok" and first.total_steps == 8 and len(first.history) == 1
    again = train(config, SimulatedWorld(4), run_dir=tmp_path / "run", resume=True)
    assert again.total_steps == 8 and [row["epoch"] for row in again.history] == [row["epoch"] for row in first.history]
    for a, b in zip(first.model.get_weights(), again.model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_schedule_point_past_the_budget_is_warned_about_not_dropped_silently(caplog):
    with caplog.at_level("WARNING", logger="lbtrain.elastic"):
        segments = plan_segments({0: 4, 3: 2, 500: 8}, "steps", 8, 320)
    assert [(s.start_step, s.steps, s.world_size) for s in segments] == [(0, 3, 4), (3, 14, 2)]
    assert [record.getMessage() for record in caplog.records] == [
        "training.elastic.world_sizes: point 500 past the run's end (17 steps), so the world does not change there"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="lbtrain.elastic"):
        plan_segments({0: 4, 3: 2}, "steps", 8, 320)
    assert caplog.records == []
