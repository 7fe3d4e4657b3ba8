"""Learning-rate schedules: gradual warmup composed with Keras's decays, scaled for the batch.

``Warmup`` is the one place warmup lives; decays are Keras's own ``ExponentialDecay``,
``PiecewiseConstantDecay``, ``CosineDecay`` and ``PolynomialDecay``, built by
``build_schedule`` from a config mapping with epochs converted to steps exactly once. lbtrain's
own schedules are written in ``lbtrain._keras.ops`` (``keras.ops`` on Keras 3, TensorFlow's ops
on tf.keras 2), as Keras 3's decays are, so every schedule here runs inside a compiled train
step on TensorFlow, JAX or PyTorch, and this module imports no TensorFlow on Keras 3's JAX or
PyTorch backend. Every
class here is registered with Keras (``lbtrain._registration.keras_serializable``), so a model
saved with one (SavedModel, ``.keras`` or H5) loads in a fresh process after ``import lbtrain``
with no ``custom_objects``, and ``hvd.DistributedOptimizer`` (which rebuilds the optimizer
from its config) keeps it.

The decay's clock runs from step 0, as in Goyal et al. 2017: warmup replaces the first steps
of the decayed schedule instead of delaying it, so a run with warmup and one without follow
the same LR from the end of warmup on. ``decay_clock: after_warmup`` starts the decay after
warmup instead.

Example::

    schedule = build_schedule(
        {"rule": "linear", "warmup_epochs": 5, "decay": {"type": "cosine"}},
        steps_per_epoch=100, base_lr=0.1, base_batch=256, global_batch=8192, total_epochs=90)
    schedule(0)     # 0.1 + (3.2 - 0.1) / 500: warmup starts just above the unscaled LR
    schedule(499)   # 3.2, the linearly scaled LR
    schedule(500)   # 3.2 * 0.5 * (1 + cos(pi * 500 / 9000)): the 90-epoch cosine at step 500
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

import numpy as np

from lbtrain._keras import BACKEND, LearningRateSchedule, keras, ops, tf
from lbtrain._registration import keras_serializable
from lbtrain.recipe import DECAY_CLOCKS, SCHEDULE_KEYS, WARMUP_TYPES
from lbtrain.scaling import scale_learning_rate, scaling_exponent


class ScheduleError(ValueError):
    """A schedule spec or argument that cannot be built; the message names the field."""


def _is_number(value: Any) -> bool:
    """A Python or NumPy real number (``np.float32(0.1)`` included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_positive(name: str, value: Any) -> float:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise ScheduleError(f"{name} must be a positive number, got {value!r}")
    return float(value)


# Registered as ``lbtrain>Constant`` (its name before the rename, so models saved then still
# load); the class name differs from Keras's ``Constant`` initializer because Keras's H5 loader
# looks the schedule up by class name, before its own classes (see ``lbtrain._registration``).
@keras_serializable("Constant")
class ConstantLearningRate(LearningRateSchedule):
    """``lr(s) = learning_rate`` for every step: a float as a schedule, so every run's LR
    is a schedule object that can be logged, plotted and serialized alike. ``Constant`` is
    the same class."""

    def __init__(self, learning_rate: float, name: str | None = None):
        super().__init__()
        self.learning_rate = _check_positive("learning_rate", learning_rate)
        self.name = name

    def __call__(self, step):
        return ops.convert_to_tensor(self.learning_rate, "float32")

    def get_config(self) -> dict:
        return {"learning_rate": self.learning_rate, "name": self.name}


Constant = ConstantLearningRate


def warmup_lr(step, warmup_steps, start_lr, target_lr):
    """The gradual-warmup learning rate at ``step`` (Goyal et al. 2017, "Accurate, Large
    Minibatch SGD", sec. 2.2)::

        lr(step) = start_lr + (target_lr - start_lr) * (step + 1) / warmup_steps

    so ``lr(0)`` is one step above ``start_lr`` and ``lr(warmup_steps - 1) = target_lr``. Plain
    arithmetic: works on Python floats, NumPy arrays and float tensors of any backend alike
    (cast an integer step tensor to float first). Only meaningful for ``0 <= step < warmup_steps``.

    Horovod's ``LearningRateWarmupCallback`` is this line with ``start_lr = initial_lr /
    world_size``, ``target_lr = initial_lr``, ``step = epoch * steps_per_epoch + batch`` and
    ``warmup_steps = warmup_epochs * steps_per_epoch``.

    Example::

        warmup_lr(0, 500, 0.1, 3.2)     # 0.1062
        warmup_lr(499, 500, 0.1, 3.2)   # 3.2
    """
    return start_lr + (target_lr - start_lr) * ((step + 1) / warmup_steps)




@keras_serializable()
class Warmup(LearningRateSchedule):
    """Gradual warmup (Goyal et al. 2017, "Accurate, Large Minibatch SGD", sec. 2.2).

    For ``s < warmup_steps``, ``lr(s) = warmup_lr(s, warmup_steps, start, target)``::

        lr(s) = start + (target - start) * (s + 1) / warmup_steps

    so ``lr(0) > 0`` and ``lr(warmup_steps - 1) = target``: one step before the ramps of Keras's
    ``CosineDecay(warmup_target=...)``, Model Garden, optax and timm, ``start + (target - start) *
    s / warmup_steps``, which reach it at step ``warmup_steps``. Afterwards ``lr(s) = after(s)``: the
    decay's clock runs from step 0 (Goyal et al.), so from the end of warmup on the rate is
    exactly ``after``'s, as without warmup. With ``offset_after`` it is ``after(s -
    warmup_steps)`` instead (the decay starts counting at the first step after warmup). With no
    ``after`` it is ``target``.

    The start is ``start_lr`` if given; else ``target_lr / scaling_factor`` if given
    (Horovod's and Goyal's convention: start at the unscaled LR, ``k`` being the scaling
    factor the target was scaled by); else 0 (``lr(s) = target * (s + 1) / warmup_steps``).

    ``warmup_type="constant"`` is Goyal et al.'s *constant* warmup instead: ``lr(s) = start`` for
    ``s < warmup_steps``, then the jump to ``after(s)`` (they found it fails at 8k where the
    gradual ramp holds: the jump itself is the shock).

    Args:
      target_lr: the (scaled) learning rate reached at the end of warmup.
      warmup_steps: length of the warmup in steps; 0 means no warmup.
      after: the schedule that follows, usually a decay starting at ``target_lr``.
      start_lr: the warmup's starting point (before the ``+1`` step).
      offset_after: whether ``after`` counts steps from the end of warmup (default False:
        from step 0).
      scaling_factor: ``k``; only used to derive the start, exclusive with ``start_lr``.
      warmup_type: ``gradual`` (the ramp) or ``constant`` (the start held).
    """

    def __init__(
        self,
        target_lr: float,
        warmup_steps: int,
        after: LearningRateSchedule | None = None,
        start_lr: float | None = None,
        offset_after: bool = False,
        scaling_factor: float | None = None,
        name: str | None = None,
        warmup_type: str = "gradual",
    ):
        super().__init__()
        if warmup_type not in WARMUP_TYPES:
            raise ScheduleError(f"warmup_type must be one of {', '.join(WARMUP_TYPES)}, got {warmup_type!r}")
        self.warmup_type = warmup_type
        self.target_lr = _check_positive("target_lr", target_lr)
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
            raise ScheduleError(f"warmup_steps must be a non-negative integer, got {warmup_steps!r}")
        self.warmup_steps = int(warmup_steps)
        if after is not None and not isinstance(after, LearningRateSchedule):
            raise ScheduleError(f"after must be a LearningRateSchedule or None, got {type(after).__name__}")
        self.after = after
        if start_lr is not None and scaling_factor is not None:
            raise ScheduleError("give start_lr or scaling_factor, not both")
        if start_lr is not None:
            if not _is_number(start_lr) or not 0 <= start_lr <= self.target_lr:
                raise ScheduleError(f"start_lr must be a number in [0, target_lr={self.target_lr}], got {start_lr!r}")
            self.start_lr = float(start_lr)
        elif scaling_factor is not None:
            self.start_lr = self.target_lr / _check_positive("scaling_factor", scaling_factor)
        else:
            self.start_lr = 0.0
        self.offset_after = bool(offset_after)
        self.name = name

    def __call__(self, step):
        step = ops.convert_to_tensor(step)
        if self.after is None:
            after = ops.convert_to_tensor(self.target_lr, "float32")
        else:
            after_step = ops.maximum(step - self.warmup_steps, 0) if self.offset_after else step
            after = ops.cast(self.after(after_step), "float32")
        if self.warmup_steps == 0:
            return after
        if self.warmup_type == "constant":
            warm = ops.convert_to_tensor(self.start_lr, "float32")
        else:
            warm = warmup_lr(ops.cast(step, "float32"), self.warmup_steps, self.start_lr, self.target_lr)
        return ops.where(step < self.warmup_steps, warm, after)

    def get_config(self) -> dict:
        return {
            "target_lr": self.target_lr,
            "warmup_steps": self.warmup_steps,
            "after": None if self.after is None else keras.optimizers.schedules.serialize(self.after),
            "start_lr": self.start_lr,
            "offset_after": self.offset_after,
            "name": self.name,
            "warmup_type": self.warmup_type,
        }

    @classmethod
    def from_config(cls, config: dict) -> "Warmup":
        config = dict(config)
        if config.get("after") is not None:
            config["after"] = keras.optimizers.schedules.deserialize(config["after"])
        return cls(**config)


@keras_serializable()
class PerUpdate(LearningRateSchedule):
    """``lr(s) = schedule(floor(s / k))``: ``schedule`` clocked in optimizer updates under Keras 3's
    gradient accumulation.

    With ``gradient_accumulation_steps=k`` a Keras 3 optimizer applies one update every ``k``
    batches, and calls its schedule with the number of *batches* (Keras's choice: "learning rate
    schedules will look at the real iterations value"), so a warmup of ``n`` steps would end after
    ``n / k`` updates. lbtrain's LARS and LAMB clock their schedule in updates by themselves; for
    Keras's own optimizers wrap it: ``SGD(PerUpdate(schedule, 4), gradient_accumulation_steps=4)``.
    tf.keras 2 has no gradient accumulation, and lbtrain's ``training.accumulation_steps`` counts
    updates already.
    """

    def __init__(self, schedule: LearningRateSchedule, gradient_accumulation_steps: int, name: str | None = None):
        super().__init__()
        if not isinstance(schedule, LearningRateSchedule):
            raise ScheduleError(f"schedule must be a LearningRateSchedule, got {type(schedule).__name__}")
        steps = gradient_accumulation_steps
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ScheduleError(f"gradient_accumulation_steps must be a positive integer, got {steps!r}")
        self.schedule, self.gradient_accumulation_steps, self.name = schedule, int(steps), name

    def __call__(self, step):
        return self.schedule(ops.floor_divide(ops.convert_to_tensor(step), self.gradient_accumulation_steps))

    def get_config(self) -> dict:
        return {"schedule": keras.optimizers.schedules.serialize(self.schedule),
                "gradient_accumulation_steps": self.gradient_accumulation_steps, "name": self.name}

    @classmethod
    def from_config(cls, config: dict) -> "PerUpdate":
        return cls(**{**config, "schedule": keras.optimizers.schedules.deserialize(config["schedule"])})


# ---------------------------------------------------------------- building from a config


def epochs_to_steps(epochs: float, steps_per_epoch: int) -> int:
    """``round(epochs * steps_per_epoch)``: the one place a schedule's epochs become steps."""
    return int(round(epochs * steps_per_epoch))


def _exponential(lr, spec, steps_per_epoch, decay_epochs, path):
    rate = _check_positive(f"{path}.rate", spec["rate"])
    period = epochs_to_steps(_check_positive(f"{path}.period_epochs", spec["period_epochs"]), steps_per_epoch)
    if period < 1:
        raise ScheduleError(f"{path}.period_epochs is shorter than one step ({spec['period_epochs']} epochs)")
    return keras.optimizers.schedules.ExponentialDecay(lr, period, rate, staircase=bool(spec["staircase"]))


def _step(lr, spec, steps_per_epoch, decay_epochs, path):
    boundaries = spec["boundaries"]
    if not isinstance(boundaries, (list, tuple)) or not boundaries:
        raise ScheduleError(f"{path}.boundaries must be a non-empty list of epochs, got {boundaries!r}")
    steps = [epochs_to_steps(_check_positive(f"{path}.boundaries", b), steps_per_epoch) for b in boundaries]
    if steps[0] < 1 or any(later <= earlier for earlier, later in zip(steps, steps[1:])):
        raise ScheduleError(f"{path}.boundaries must be strictly increasing and at least one step (in steps: {steps})")
    # Keras keeps value i while step <= boundary i; moving each boundary back one step makes
    # the new value apply from the first step of the boundary epoch, as users read "epoch 30".
    steps = [step - 1 for step in steps]
    multipliers = spec["multipliers"]
    if multipliers is None:
        factor = _check_positive(f"{path}.factor", spec["factor"])
        multipliers = [factor**i for i in range(len(steps) + 1)]
    elif not isinstance(multipliers, (list, tuple)) or len(multipliers) != len(steps) + 1:
        raise ScheduleError(
            f"{path}.multipliers must be a list of len(boundaries) + 1 = {len(steps) + 1} numbers, got {multipliers!r}"
        )
    values = [lr * _check_positive(f"{path}.multipliers", m) for m in multipliers]
    return keras.optimizers.schedules.PiecewiseConstantDecay(steps, values)


def _decay_length(spec, steps_per_epoch, decay_epochs, path) -> int:
    epochs = spec["decay_epochs"] if spec["decay_epochs"] is not None else decay_epochs
    if epochs is None:
        raise ScheduleError(f"{path}.decay_epochs is required when the total number of epochs is not known")
    if spec["decay_epochs"] is None and epochs <= 0:
        raise ScheduleError(f"{path}: no epochs are left to decay over after warmup ({epochs:g}); set decay_epochs or train longer")
    steps = epochs_to_steps(_check_positive(f"{path}.decay_epochs", epochs), steps_per_epoch)
    if steps < 1:
        raise ScheduleError(f"{path}.decay_epochs is shorter than one step ({epochs} epochs)")
    return steps


def _cosine(lr, spec, steps_per_epoch, decay_epochs, path):
    alpha = spec["alpha"]
    if not _is_number(alpha) or not 0 <= alpha <= 1:
        raise ScheduleError(f"{path}.alpha must be a number in [0, 1], got {alpha!r}")
    steps = _decay_length(spec, steps_per_epoch, decay_epochs, path)
    return keras.optimizers.schedules.CosineDecay(lr, steps, alpha=float(alpha))


def _polynomial(lr, spec, steps_per_epoch, decay_epochs, path):
    end_factor = spec["end_factor"]
    if not _is_number(end_factor) or not 0 <= end_factor <= 1:
        raise ScheduleError(f"{path}.end_factor must be a number in [0, 1], got {end_factor!r}")
    steps = _decay_length(spec, steps_per_epoch, decay_epochs, path)
    power = _check_positive(f"{path}.power", spec["power"])
    return keras.optimizers.schedules.PolynomialDecay(lr, steps, lr * end_factor, power=power)


# Each decay: its builder and its keys with defaults (None-valued keys are optional, a
# missing required key is marked by _REQUIRED).
_REQUIRED = object()
DECAYS: dict[str, tuple] = {
    "none": (None, {}),
    "exponential": (_exponential, {"rate": _REQUIRED, "period_epochs": 1.0, "staircase": False}),
    "step": (_step, {"boundaries": _REQUIRED, "factor": 0.1, "multipliers": None}),
    "cosine": (_cosine, {"decay_epochs": None, "alpha": 0.0}),
    "polynomial": (_polynomial, {"decay_epochs": None, "end_factor": 0.0, "power": 1.0}),
}



def _with_defaults(spec: Any, defaults: Mapping[str, Any], path: str) -> dict:
    if not isinstance(spec, Mapping):
        raise ScheduleError(f"{path} must be a mapping, got {type(spec).__name__}")
    unknown = sorted(set(spec) - set(defaults))
    if unknown:
        raise ScheduleError(f"{path}: unknown key {unknown[0]!r} (allowed: {', '.join(defaults) or 'none'})")
    merged = {**defaults, **spec}
    missing = [key for key, value in merged.items() if value is _REQUIRED]
    if missing:
        raise ScheduleError(f"{path}.{missing[0]} is required")
    return merged


def build_decay(
    spec: Mapping[str, Any] | None,
    *,
    initial_lr: float,
    steps_per_epoch: int,
    decay_epochs: float | None = None,
    path: str = "decay",
) -> LearningRateSchedule | None:
    """The Keras decay schedule of ``spec`` (``{type, ...}``) starting at ``initial_lr``;
    None for ``type: none``. ``decay_epochs`` is the default length of cosine/polynomial."""
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise ScheduleError(f"{path} must be a mapping, got {type(spec).__name__}")
    spec = dict(spec)
    kind = spec.pop("type", None)
    if kind not in DECAYS:
        raise ScheduleError(f"{path}.type: unknown decay {kind!r} (allowed: {', '.join(DECAYS)})")
    builder, defaults = DECAYS[kind]
    merged = _with_defaults(spec, defaults, path)
    return None if builder is None else builder(initial_lr, merged, steps_per_epoch, decay_epochs, path)


def build_schedule(
    spec: Mapping[str, Any],
    *,
    steps_per_epoch: int,
    base_lr: float,
    base_batch: int,
    global_batch: int,
    total_epochs: float | None = None,
    path: str = "lr",
) -> LearningRateSchedule:
    """The scaled, warmed-up, decayed schedule of one run.

    ``spec`` keys (defaults in ``SCHEDULE_KEYS``): ``rule`` (linear | sqrt | none | float
    exponent), ``warmup_epochs`` (0), ``warmup_start`` (None: the unscaled ``base_lr``, as
    Horovod's warmup callback), ``warmup_type`` (``gradual`` or Goyal's ``constant``), ``decay`` (``{type: none | exponential | step | cosine |
    polynomial, ...}``), ``decay_clock`` (``from_step_0``: the decay counts steps from the
    run's first step, so warmup only replaces the decay's first steps and from the end of
    warmup on the LR is exactly the same schedule's without warmup, as in Goyal et al. 2017;
    ``after_warmup``: decay step 0 is the first step after warmup, step-decay boundaries count
    from there too).

    The target is ``base_lr * (global_batch / base_batch) ** alpha``; decays start from it.
    Cosine and polynomial decays last ``decay_epochs`` if given, else the rest of training
    (``total_epochs`` from step 0, ``total_epochs - warmup_epochs`` after warmup).
    """
    merged = _with_defaults(spec, SCHEDULE_KEYS, path)
    try:
        scaling_exponent(merged["rule"])
    except ValueError as error:
        raise ScheduleError(f"{path}.{error}") from None
    target = scale_learning_rate(base_lr, base_batch, global_batch, merged["rule"])
    warmup_epochs = merged["warmup_epochs"]
    if not _is_number(warmup_epochs) or not warmup_epochs >= 0:
        raise ScheduleError(f"{path}.warmup_epochs must be a non-negative number, got {warmup_epochs!r}")
    warmup_steps = epochs_to_steps(warmup_epochs, steps_per_epoch)
    clock = merged["decay_clock"]
    if clock not in DECAY_CLOCKS:
        allowed = ", ".join(repr(value) for value in DECAY_CLOCKS)
        raise ScheduleError(f"{path}.decay_clock must be one of {allowed}, got {clock!r}")
    after_warmup = clock == "after_warmup"
    decay_epochs = None
    if total_epochs is not None:
        decay_epochs = total_epochs - warmup_epochs if after_warmup else total_epochs
    decay = build_decay(
        merged["decay"], initial_lr=target, steps_per_epoch=steps_per_epoch, decay_epochs=decay_epochs, path=f"{path}.decay"
    )
    if warmup_steps == 0:
        return decay or ConstantLearningRate(target)
    start = merged["warmup_start"]
    if start is None:
        start = min(base_lr, target)
    elif not _is_number(start) or not 0 <= start <= target:
        raise ScheduleError(f"{path}.warmup_start must be a number in [0, {target:g}] (the scaled LR), got {start!r}")
    if merged["warmup_type"] not in WARMUP_TYPES:
        raise ScheduleError(f"{path}.warmup_type must be one of {', '.join(WARMUP_TYPES)}, got {merged['warmup_type']!r}")
    return Warmup(target, warmup_steps, after=decay, start_lr=start, offset_after=after_warmup, warmup_type=merged["warmup_type"])


def schedule_values(schedule: LearningRateSchedule | float, steps: int) -> np.ndarray:
    """``[lr(0), ..., lr(steps - 1)]`` as float64, evaluated in one graph on TensorFlow (fast for
    long runs), in one vectorized call (``keras.ops.vectorized_map``, JAX's ``vmap``) elsewhere."""
    if not isinstance(schedule, LearningRateSchedule):
        return np.full(steps, float(schedule))
    if BACKEND == "tensorflow":
        values = tf.function(lambda s: tf.map_fn(lambda i: tf.cast(schedule(i), tf.float32), s, fn_output_signature=tf.float32))
        return values(tf.range(steps, dtype=tf.int64)).numpy().astype(np.float64)
    values = keras.ops.vectorized_map(lambda step: ops.cast(schedule(step), "float32"), keras.ops.arange(steps))
    return keras.ops.convert_to_numpy(values).astype(np.float64)


__all__ = [
    "Constant",
    "ConstantLearningRate",
    "PerUpdate",
    "DECAYS",
    "DECAY_CLOCKS",
    "SCHEDULE_KEYS",
    "ScheduleError",
    "WARMUP_TYPES",
    "Warmup",
    "build_decay",
    "build_schedule",
    "epochs_to_steps",
    "schedule_values",
    "warmup_lr",
]
