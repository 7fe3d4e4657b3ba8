"""Elastic worlds: the learning rate of a run whose number of workers changes while it trains.

When a synchronous job loses or gains workers, its global batch ``B = W b`` changes with the
world size ``W`` (each worker keeps its batch ``b``). lbtrain's rule for the learning rate across
such a change (``ElasticLearningRate``, policy ``follow``):

- **The scaling rule is applied to the new global batch.** The LR is the run's recipe built for
  world ``W`` (``RunConfig.schedule`` at ``W``: its target ``base_lr * (W b / base_batch) **
  alpha``, its warmup and decay lengths in that world's steps).
- **The decay clock counts samples, not steps.** A step at world ``W`` advances the clock by
  ``W b`` samples; the LR at a step is the world-``W`` schedule at the fractional step
  ``samples_seen / (W b)``. So the schedule is continuous in data seen: a run that shrinks from
  4 to 2 workers halfway through its budget is halfway through its decay, not a quarter of the
  way (as it would be if the clock counted the world-2 steps), and warmup ends after the same
  number of samples in every world.
- **A jump up is re-warmed.** When the new LR is above the old one (the world grew), the rate
  ramps linearly from the old LR to the rule's over ``rewarmup_steps`` steps, with the gradual
  warmup's convention (``lbtrain.schedules.warmup_lr``: ``old + (rule(n) - old) * (n - s + 1) /
  R`` at step ``n`` of a change at step ``s``): Goyal et al. 2017 (sec. 2.2) found a sudden large
  LR is what breaks a large batch early in training, and the momentum buffers built at the
  smaller LR are the same situation. A drop (the world shrank) applies at once, as a decay does.

Policy ``keep`` is what a Horovod elastic job does unless its script changes the LR: the
schedule built for the initial world, clocked by the optimizer's steps, whatever the world size.
It is the naive arm of the elasticity study.

A world-size schedule (``plan_segments``) splits a simulated run into segments of one world
size each, so the same LR logic can be studied on one machine exactly.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf

from lbtrain._registration import keras_serializable

logger = logging.getLogger(__name__)

LearningRateSchedule = tf.keras.optimizers.schedules.LearningRateSchedule

LR_POLICIES = ("follow", "keep")
SCHEDULE_UNITS = ("steps", "samples")


@dataclasses.dataclass(frozen=True)
class WorldChange:
    """One change of world size, as the run's metrics record it: at optimizer step ``step``
    (the first update in the new world), after ``samples`` training samples, from ``old_world_size``
    to ``new_world_size`` workers; ``old_lr`` the rate the old world would have applied at that
    step, ``new_lr`` the rate the policy gives the new world there, ``applied_lr`` the rate the
    step applies (below ``new_lr`` only while a re-warmup ramps up)."""

    step: int
    samples: int
    old_world_size: int
    new_world_size: int
    old_lr: float
    new_lr: float
    applied_lr: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class WorldSegment:
    """``steps`` optimizer steps at ``world_size`` workers, from step ``start_step`` after
    ``start_samples`` training samples."""

    start_step: int
    steps: int
    world_size: int
    start_samples: int

    @property
    def end_step(self) -> int:
        return self.start_step + self.steps


def plan_segments(world_sizes: Mapping[int, int], unit: str, per_worker_batch: int, total_samples: int) -> list[WorldSegment]:
    """The segments of a run trained on ``total_samples`` samples whose world size is
    ``world_sizes[k]`` from point ``k`` on (``unit``: ``steps``, the optimizer steps done, or
    ``samples``, the training samples seen; a change due in the middle of a step takes effect at
    the next step). The run stops before the step that would pass ``total_samples`` (as a fixed
    world's ``samples // global_batch``). A change due after the end is dropped; segments of no
    step are left out.

    >>> [(s.start_step, s.steps, s.world_size, s.start_samples) for s in plan_segments({0: 4, 3: 2}, "steps", 8, 320)]
    [(0, 3, 4, 0), (3, 14, 2, 96)]
    """
    if unit not in SCHEDULE_UNITS:
        raise ValueError(f"unit must be one of {', '.join(SCHEDULE_UNITS)}, got {unit!r}")
    points = sorted(world_sizes.items())
    if not points or points[0][0] != 0:
        raise ValueError("a world-size schedule starts at 0")
    segments: list[WorldSegment] = []
    step = samples = 0
    for index, (_, size) in enumerate(points):
        batch = size * per_worker_batch
        room = (total_samples - samples) // batch
        if index + 1 < len(points):
            until = points[index + 1][0]
            due = until - step if unit == "steps" else math.ceil((until - samples) / batch)
            room = min(room, max(due, 0))
        if room > 0:
            segments.append(WorldSegment(step, room, size, samples))
            step, samples = step + room, samples + room * batch
    past = [point for point, _ in points[1:] if (point >= step if unit == "steps" else point >= samples)]
    if past:
        # Not an error (a schedule may be shared by budgets of several lengths), but never silent.
        logger.warning("training.elastic.world_sizes: %s past the run's end (%d %s), so the world does not change there",
                       ", ".join(f"point {point}" for point in past), step if unit == "steps" else samples, unit)
    return segments


@keras_serializable()
class ElasticLearningRate(LearningRateSchedule):
    """The learning rate of a run whose world size changes (the module doc gives the rule).

    ``schedules[W]`` is the run's recipe built for world size ``W`` (scaled for the global batch
    ``W b``, warmup and decay in world-``W`` steps); ``per_worker_batch`` is ``b``. Within a
    segment that began at step ``s`` after ``S`` samples, in world ``W``, policy ``follow`` gives::

        lr(n) = schedules[W]((S + (n - s) W b) / (W b))

    and, for the first ``rewarmup_steps = R`` steps after a change that raised the LR from
    ``old``, ``old + (lr(n) - old) * (n - s + 1) / R``. Policy ``keep`` gives
    ``schedules[W0](n)``, ``W0`` being ``initial_world_size``. With no change, ``follow`` is
    exactly ``schedules[W0]``.

    The segment lives in variables that ``change_world`` sets (eagerly, between ``fit`` calls or
    in a reset callback), so a traced train step reads the current one; hence
    ``changes_within_fit``: ``lbtrain.callbacks.LearningRateLogger`` reads its rate at each step.
    """

    changes_within_fit = True

    def __init__(self, schedules: Mapping[int, LearningRateSchedule], per_worker_batch: int, initial_world_size: int,
                 policy: str = "follow", rewarmup_steps: int = 0, name: str | None = None):
        super().__init__()
        if policy not in LR_POLICIES:
            raise ValueError(f"policy must be one of {', '.join(LR_POLICIES)}, got {policy!r}")
        if initial_world_size not in schedules:
            raise ValueError(f"no schedule for the initial world size {initial_world_size} (have {sorted(schedules)})")
        if per_worker_batch < 1 or rewarmup_steps < 0:
            raise ValueError("per_worker_batch must be positive and rewarmup_steps non-negative")
        self.schedules = {int(size): schedule for size, schedule in sorted(schedules.items())}
        self.sizes = tuple(self.schedules)
        self.per_worker_batch, self.initial_world_size = int(per_worker_batch), int(initial_world_size)
        self.policy, self.rewarmup_steps, self.name = policy, int(rewarmup_steps), name
        self.world_size = self.initial_world_size
        self._index = tf.Variable(self.sizes.index(self.initial_world_size), dtype=tf.int32, trainable=False, name="world_index")
        self._segment_step = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="segment_step")
        self._segment_samples = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="segment_samples")
        self._ramp_from = tf.Variable(0.0, dtype=tf.float32, trainable=False, name="ramp_from")
        self._ramp_end = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="ramp_end")

    def samples_at(self, step: int) -> int:
        """Training samples seen before optimizer step ``step`` of the current segment."""
        segment_step, segment_samples = float(self._segment_step.numpy()), float(self._segment_samples.numpy())
        return int(round(segment_samples + (step - segment_step) * self.world_size * self.per_worker_batch))

    def _rule(self, step: tf.Tensor) -> tf.Tensor:
        """The policy's rate at ``step`` (float64), before any re-warmup."""
        if self.policy == "keep":
            return tf.cast(self.schedules[self.initial_world_size](step), tf.float32)
        batches = [float(size * self.per_worker_batch) for size in self.sizes]
        branches = []
        for size, batch in zip(self.sizes, batches):
            def branch(schedule=self.schedules[size], batch=batch):
                samples = self._segment_samples + (tf.cast(step, tf.float64) - self._segment_step) * batch
                return tf.cast(schedule(samples / batch), tf.float32)
            branches.append(branch)
        return tf.switch_case(tf.convert_to_tensor(self._index), branches)

    def __call__(self, step):
        with tf.name_scope(self.name or "ElasticLearningRate"):
            step = tf.convert_to_tensor(step)
            rule = self._rule(step)
            position = tf.cast(step, tf.float64)
            ramp = tf.cast((position - self._segment_step + 1.0) / tf.maximum(self._ramp_end - self._segment_step, 1.0), tf.float32)
            ramped = self._ramp_from + (rule - self._ramp_from) * ramp
            return tf.where(position < self._ramp_end, ramped, rule)

    def change_world(self, step: int, world_size: int, samples: int | None = None) -> WorldChange:
        """Moves to ``world_size`` workers from optimizer step ``step`` on, after ``samples``
        training samples (default: what the current segment has seen by then); returns the
        change as the run records it."""
        if world_size not in self.schedules:
            raise ValueError(f"no schedule for world size {world_size} (have {list(self.sizes)})")
        samples = self.samples_at(step) if samples is None else int(samples)
        old_size, old_lr = self.world_size, float(self(step))
        self.world_size = int(world_size)
        self._index.assign(self.sizes.index(self.world_size))
        self._segment_step.assign(float(step))
        self._segment_samples.assign(float(samples))
        self._ramp_end.assign(float(step))
        new_lr = float(self(step))
        if self.policy == "follow" and self.rewarmup_steps and new_lr > old_lr:
            self._ramp_from.assign(old_lr)
            self._ramp_end.assign(float(step + self.rewarmup_steps))
        return WorldChange(step, samples, old_size, self.world_size, old_lr, new_lr, float(self(step)))

    def segment(self) -> dict[str, float]:
        """The current segment as plain values: world size, step and samples at its start,
        re-warmup start LR and end step (what an elastic job's state carries, ``set_segment``)."""
        return {"world_size": self.world_size, "step": float(self._segment_step.numpy()),
                "samples": float(self._segment_samples.numpy()), "ramp_from": float(self._ramp_from.numpy()),
                "ramp_end": float(self._ramp_end.numpy())}

    def set_segment(self, segment: Mapping[str, float]) -> None:
        """Continues in ``segment`` (as ``segment`` returned it, on this or another process)."""
        self.world_size = int(segment["world_size"])
        self._index.assign(self.sizes.index(self.world_size))
        self._segment_step.assign(float(segment["step"]))
        self._segment_samples.assign(float(segment["samples"]))
        self._ramp_from.assign(float(segment["ramp_from"]))
        self._ramp_end.assign(float(segment["ramp_end"]))

    def get_config(self) -> dict:
        """The recipe and the current ``segment``, so a saved optimizer reloads where it was."""
        return {
            "schedules": {str(size): tf.keras.optimizers.schedules.serialize(schedule) for size, schedule in self.schedules.items()},
            "per_worker_batch": self.per_worker_batch, "initial_world_size": self.initial_world_size,
            "policy": self.policy, "rewarmup_steps": self.rewarmup_steps, "name": self.name, "segment": self.segment(),
        }

    @classmethod
    def from_config(cls, config: dict) -> "ElasticLearningRate":
        config = dict(config)
        segment = config.pop("segment", None)
        schedules = {int(size): tf.keras.optimizers.schedules.deserialize(spec) for size, spec in config["schedules"].items()}
        schedule = cls(**{**config, "schedules": schedules})
        if segment is not None:
            schedule.set_segment(segment)
        return schedule


def replay_changes(schedule: ElasticLearningRate, segments: Sequence[WorldSegment], until_step: int) -> list[WorldChange]:
    """Applies to ``schedule`` every change of ``segments`` that starts at or before
    ``until_step`` (a run resumed there continues in the segment it was in, its re-warmup
    included); returns the changes."""
    changes = []
    for previous, segment in zip(segments, segments[1:]):
        if segment.start_step > until_step:
            break
        if segment.world_size != previous.world_size:
            changes.append(schedule.change_world(segment.start_step, segment.world_size, segment.start_samples))
    return changes


def plan_run(config: Any, num_samples: int, updates_per_step: int = 1) -> tuple[list[WorldSegment] | None, ElasticLearningRate]:
    """An elastic run's segments and learning rate, from its resolved ``RunConfig`` and its number
    of training samples: its budget in samples (``RunConfig.elastic_samples``) cut where
    ``training.elastic.world_sizes`` changes the world (None for real workers, whose world changes
    when they come and go), and the recipe built for each world size it may take
    (``RunConfig.at_world_size``). ``updates_per_step``: the world's optimizer updates per global
    batch (``World.updates_per_step``)."""
    from lbtrain.data import steps_per_epoch

    settings, elastic = config.training, config.training.elastic
    samples = config.elastic_samples(steps_per_epoch(num_samples, settings.update_batch, settings.world_size) * updates_per_step)
    segments, sizes = None, elastic.sizes
    if elastic.world_sizes is not None:
        segments = plan_segments(elastic.world_sizes, elastic.unit, settings.update_batch, samples)
        sizes = [segment.world_size for segment in segments]

    def schedule_for(size: int) -> LearningRateSchedule:
        return config.at_world_size(size, samples).schedule(steps_per_epoch(num_samples, settings.update_batch, size) * updates_per_step)

    return segments, elastic_learning_rate(schedule_for, sizes, settings.update_batch, settings.world_size,
                                           policy=elastic.lr, rewarmup_steps=elastic.rewarmup_steps)


def elastic_learning_rate(schedule_for: Callable[[int], LearningRateSchedule], sizes: Sequence[int], per_worker_batch: int,
                          initial_world_size: int, policy: str = "follow", rewarmup_steps: int = 0) -> ElasticLearningRate:
    """An ``ElasticLearningRate`` over the world sizes ``sizes``, ``schedule_for(W)`` giving the
    run's recipe built for ``W`` workers."""
    return ElasticLearningRate({size: schedule_for(size) for size in sorted({*sizes, initial_world_size})}, per_worker_batch,
                               initial_world_size, policy=policy, rewarmup_steps=rewarmup_steps)


__all__ = ["ElasticLearningRate", "LR_POLICIES", "SCHEDULE_UNITS", "WorldChange", "WorldSegment", "elastic_learning_rate",
           "plan_run", "plan_segments", "replay_changes"]
