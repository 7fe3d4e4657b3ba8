"""Keras callbacks for large-batch training.

lbtrain's own runs keep the learning rate in a schedule object (``lbtrain.schedules``);
``LearningRateWarmup`` is for models compiled with a float learning rate, the way Horovod's
examples warm up, and ``LearningRateLogger`` records the rate actually applied either way.
The trainer adds ``Throughput``, ``DivergenceGuard``, ``BudgetStop`` and ``GeneralizationGap`` to every run,
``ValidationPoints`` when ``training.validation_every_steps`` asks for validation between epoch ends,
and ``GradientNoiseScale`` when the run's ``analysis.noise_scale`` asks for it and its world
cannot measure it inside the train step (``lbtrain.train_step``): one simulated worker with batch
norm, whose batch a split would change.
"""

from __future__ import annotations

import logging
import math
import sys
import time

import numpy as np
import tensorflow as tf

from lbtrain._keras import applied_learning_rate, optimizer_step, set_learning_rate
from lbtrain.measures.noise_scale import simple_noise_scale, two_batch_estimates
from lbtrain.schedules import epochs_to_steps, warmup_lr
from lbtrain.verdict import DEFAULT_DIVERGENCE_FACTOR, step_divergence

logger = logging.getLogger(__name__)


def _horovod_size() -> int:
    """``hvd.size()`` if Horovod is initialized, else ValueError. Horovod is looked up in
    ``sys.modules``, not imported: a process that calls ``hvd.init()`` has imported it."""
    horovod = sys.modules.get("horovod.tensorflow")
    if horovod is None or not horovod.is_initialized():
        raise ValueError("LearningRateWarmup: pass world_size (the number of workers initial_lr was scaled for); "
                         "it defaults to hvd.size() only once hvd.init() has been called")
    return horovod.size()


def _horovod_rank() -> int:
    """``hvd.rank()`` if Horovod is initialized, else 0 (one process is rank 0)."""
    horovod = sys.modules.get("horovod.tensorflow")
    return horovod.rank() if horovod is not None and horovod.is_initialized() else 0


class LearningRateWarmup(tf.keras.callbacks.Callback):
    """Gradual warmup for a float learning rate (Goyal et al. 2017), numerically equal to
    Horovod's ``LearningRateWarmupCallback``.

    Before each batch of the first ``warmup_epochs`` epochs, with ``S = steps_per_epoch``
    and ``start = initial_lr / world_size``, the rate is ``lbtrain.schedules.warmup_lr`` (the
    formula ``Warmup`` uses too) at step ``epoch * S + batch`` of ``warmup_epochs * S``::

        lr = start + (initial_lr - start) * (epoch * S + batch + 1) / (warmup_epochs * S)

    This is Horovod's formula: with ``e = epoch + (batch + 1) / S`` Horovod sets
    ``initial_lr / world_size * (e * (world_size - 1) / warmup_epochs + 1)``, which is
    ``start + (initial_lr - start) * e / warmup_epochs`` since ``initial_lr - start =
    initial_lr * (world_size - 1) / world_size``. So training starts just above ``start`` (the
    unscaled LR) and reaches ``initial_lr`` (the scaled LR) at the last batch of warmup. The
    warmup lasts ``warmup_epochs * S`` steps rounded to whole steps, as the schedules round them
    (``lbtrain.schedules.epochs_to_steps``): a fractional number of epochs ends mid-epoch, where
    Horovod's callback warms up to the end of the epoch, past the target. The first batch after
    warmup gets exactly ``initial_lr`` (also when ``steps_per_execution`` makes Keras call batch
    hooks every k steps), and then the rate is left alone; every epoch's logs get ``lr``, as
    Horovod's do. As Horovod's callback, ``warmup_epochs`` defaults to 5 and the world size to
    ``hvd.size()`` when Horovod is initialized; unlike it, this one also runs without Horovod
    (pass ``world_size``, so simulated worlds warm up too) and applies no momentum correction:
    Keras 2.15's optimizers hold ``momentum`` as a Python float compiled into the train step, so
    ``momentum_correction=True`` is refused with that reason.

    The optimizer's learning rate must be a float (a variable this callback sets): with a
    ``LearningRateSchedule`` Keras recomputes the rate every step and would undo the warmup,
    so training stops with an error pointing to ``lbtrain.schedules.Warmup``, the schedule form.

    Args:
      initial_lr: the scaled learning rate reached at the end of warmup.
      warmup_epochs: length of the warmup in epochs (default 5, as Horovod's).
      world_size: the number of workers the rate was scaled for; None means ``hvd.size()``,
        which needs ``hvd.init()`` to have been called.
      steps_per_epoch: batches per epoch; by default read from ``fit``'s parameters.
      momentum_correction: Horovod's argument; only False is possible here (see above).
      verbose: 1 prints Horovod's line at the end of the epoch in which warmup ended, on rank 0
        (``Epoch N: finished gradual learning rate warmup to X.``, N counted from 1, X the rate
        now set), also when ``fit`` ends there. For a whole number of warmup epochs that is the
        epoch Horovod's callback prints it at; for a fractional one, which Horovod's never
        announces, the epoch where this warmup's last step falls.
    """

    def __init__(self, initial_lr: float, warmup_epochs: float = 5, world_size: int | None = None,
                 steps_per_epoch: int | None = None, *, momentum_correction: bool = False, verbose: int = 0):
        super().__init__()
        if not initial_lr > 0:
            raise ValueError(f"initial_lr must be positive, got {initial_lr!r}")
        if not warmup_epochs > 0:
            raise ValueError(f"warmup_epochs must be positive, got {warmup_epochs!r}")
        if momentum_correction:
            raise ValueError("LearningRateWarmup applies no momentum correction (Keras 2.15's optimizers compile momentum "
                             "into the train step as a float): pass momentum_correction=False")
        if isinstance(world_size, bool):
            raise ValueError(f"world_size must be a positive integer, got {world_size!r} (Horovod's third argument is "
                             "momentum_correction: pass it by keyword)")
        if world_size is None:
            world_size = _horovod_size()
        if not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        self.initial_lr = float(initial_lr)
        self.warmup_epochs = warmup_epochs
        self.world_size = int(world_size)
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._epoch, self._warmed_up, self._last_warmup_step, self._announced = 0, False, None, False

    def learning_rate(self, epoch: int, batch: int) -> float:
        """The warmup rate for ``batch`` of ``epoch`` (the formula above)."""
        return warmup_lr(
            epoch * self.steps_per_epoch + batch,
            self.warmup_steps,
            self.initial_lr / self.world_size,
            self.initial_lr,
        )

    @property
    def warmup_steps(self) -> int:
        """``warmup_epochs * S`` in whole steps (``lbtrain.schedules.epochs_to_steps``), at least one."""
        return max(1, epochs_to_steps(self.warmup_epochs, self.steps_per_epoch))

    def on_train_begin(self, logs=None):
        if isinstance(self.model.optimizer.get_config()["learning_rate"], dict):
            raise ValueError(
                "LearningRateWarmup sets a float learning rate, but the optimizer's is a LearningRateSchedule, "
                "which Keras re-evaluates every step; compile with a float, or put the warmup into the schedule "
                "with lbtrain.schedules.Warmup(target_lr, warmup_steps, after=schedule)")
        if self.steps_per_epoch is None:
            if not self.params.get("steps"):
                raise ValueError("LearningRateWarmup: pass steps_per_epoch, fit() did not report its steps")
            self.steps_per_epoch = self.params["steps"]
        self._warmed_up, self._last_warmup_step, self._announced = False, None, False

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        """Sets the warmup rate while the step is within the warmup's ``warmup_epochs * S``
        steps (a fractional last epoch ends mid-epoch), and ``initial_lr`` at the first batch
        after it: with ``steps_per_execution = k`` Keras calls this every k steps, so the last
        warmup rate would otherwise stay below the target."""
        if self._warmed_up:
            return
        step = self._epoch * self.steps_per_epoch + batch
        if step < self.warmup_steps:
            set_learning_rate(self.model.optimizer, self.learning_rate(self._epoch, batch))
            self._last_warmup_step = step
            return
        self._warmed_up = True
        # The last warmup step sets the target itself; only a warmup whose last steps were skipped
        # (steps_per_execution) ends here. A fit resumed after warmup, and a rate another callback
        # set at this epoch's start, are left alone.
        if self._last_warmup_step is None:
            return
        if self._last_warmup_step < self.warmup_steps - 1:
            set_learning_rate(self.model.optimizer, self.initial_lr)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = applied_learning_rate(self.model.optimizer)
        warmup_ended = self._last_warmup_step is not None and (epoch + 1) * self.steps_per_epoch >= self.warmup_steps
        if self.verbose and warmup_ended and not self._announced and _horovod_rank() == 0:
            self._announced = True
            # Horovod's line and stream (horovod/_keras/callbacks.py), as Keras's own verbose callbacks print.
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {self.initial_lr:g}.", flush=True)


class LearningRateLogger(tf.keras.callbacks.Callback):
    """Records the learning rate applied at every step, for schedules and floats alike.

    After ``fit``: ``steps[i]`` is the optimizer step (``iterations`` before the update) and
    ``rates[i]`` the rate that step applied; each epoch's last rate goes into ``logs["lr"]``
    (so it lands in ``History`` and CSV logs). With ``steps_per_execution > 1`` Keras calls
    back once per execution, and the last step of each execution is recorded.

    Cheap between steps: the step is counted from the optimizer's step read at the epoch's
    start, and the rate of a ``LearningRateSchedule`` is ``schedule(step)``, evaluated at the
    epoch's end (or ``fit``'s) for the epoch's steps. A read of a TensorFlow variable after every
    step costs about 0.2 ms on a busy CPU, 4% of a 5 ms step. A rate that only a read can give is
    read at each step: a float rate (a callback may set it) and a schedule marked
    ``changes_within_fit`` (``lbtrain.elastic.ElasticLearningRate``, whose world changes in a reset
    that leaves ``fit`` without ending its epoch).
    """

    def __init__(self):
        super().__init__()
        self.steps: list[int] = []
        self.rates: list[float] = []
        self._epoch_start = 0
        self._pending: list[int] = []

    def _schedule(self) -> tf.keras.optimizers.schedules.LearningRateSchedule | None:
        """The optimizer's schedule if its rates can be evaluated after the steps, else None."""
        schedule = getattr(self.model.optimizer, "_learning_rate", None)
        if isinstance(schedule, tf.keras.optimizers.schedules.LearningRateSchedule) and not getattr(schedule, "changes_within_fit", False):
            return schedule
        return None

    def _evaluate_pending(self) -> None:
        if self._pending:
            schedule = self._schedule()
            self.rates.extend(float(schedule(step)) for step in self._pending)
            self._pending = []

    def on_epoch_begin(self, epoch, logs=None):
        self._evaluate_pending()
        self._epoch_start = optimizer_step(self.model.optimizer)

    def on_train_batch_end(self, batch, logs=None):
        step = self._epoch_start + batch
        self.steps.append(step)
        if self._schedule() is not None:
            self._pending.append(step)
        else:
            self.rates.append(applied_learning_rate(self.model.optimizer))

    def on_epoch_end(self, epoch, logs=None):
        self._evaluate_pending()
        if logs is not None and self.rates:
            logs["lr"] = self.rates[-1]

    def on_train_end(self, logs=None):
        self._evaluate_pending()


class Throughput(tf.keras.callbacks.Callback):
    """Global samples per second of each epoch's training steps, into ``logs["samples_per_second"]``.

    Timed from the start of the epoch to the start of validation (or the epoch's end when
    there is none), so validation and checkpointing are not counted; the first epoch
    includes tracing. No per-step hook: it costs the training loop nothing. The steps counted
    are the epoch's (``fit``'s ``steps_per_epoch``), or the optimizer's steps in the epoch when
    fewer: an epoch that a budget or an elastic world's segment ended early.
    """

    def __init__(self, global_batch: int):
        super().__init__()
        self.global_batch = global_batch
        self._epoch_start = 0.0
        self._elapsed: float | None = None
        self._start_step: int | None = None

    def _step(self) -> int | None:
        optimizer = getattr(self.model, "optimizer", None)
        return optimizer_step(optimizer) if optimizer is not None else None

    def on_epoch_begin(self, epoch, logs=None):
        self._start_step = self._step()
        self._epoch_start = time.perf_counter()
        self._elapsed = None

    def on_test_begin(self, logs=None):
        if self._elapsed is None:
            self._elapsed = time.perf_counter() - self._epoch_start

    def on_epoch_end(self, epoch, logs=None):
        elapsed = self._elapsed if self._elapsed is not None else time.perf_counter() - self._epoch_start
        if logs is not None and elapsed > 0:
            steps, end = self.params["steps"], self._step()
            if self._start_step is not None and end is not None and 0 < end - self._start_step < steps:
                steps = end - self._start_step
            logs["samples_per_second"] = steps * self.global_batch / elapsed


class DivergenceGuard(tf.keras.callbacks.Callback):
    """Stops training when the loss diverges (``lbtrain.verdict.step_divergence``) and says why
    (``reason``; None while healthy).

    The reference is ``initial_loss``, the loss of step 0 before any update (Keras reports a
    step's loss from the forward pass that precedes its update), averaged over ranks; each
    step's own loss is recovered from Keras's running epoch mean ``m_k`` as
    ``(k + 1) m_k - k m_(k-1)``, and checked from the very first step. In one process (a
    simulated world) training stops after the offending step. With several processes each rank
    checks its own steps and one collective at the end of every epoch (after Horovod's
    ``MetricAverageCallback``) tells every rank whether any rank diverged: all ranks then stop
    at the same point, none is left waiting in an allreduce, and a collective per step (which
    would cost more than the step on small models) is avoided. A resumed run passes the step-0
    loss it recorded.

    Args:
      factor: a step loss above ``factor * initial_loss`` is divergence.
      world: the run's world (``allreduce_mean``, ``size``); None for one process.
      initial_loss: the step-0 loss of a resumed run; measured at the first step otherwise.
    """

    def __init__(self, factor: float = DEFAULT_DIVERGENCE_FACTOR, world=None, initial_loss: float | None = None):
        super().__init__()
        if not factor > 1:
            raise ValueError(f"factor must be > 1, got {factor!r}")
        self.factor, self.world, self.initial_loss = factor, world, initial_loss
        self.every_step = world is None or world.input_shard()[1] == 1
        self.reason: str | None = None
        self._local_reason: str | None = None
        self._epoch, self._previous_mean = 0, 0.0

    def _stop(self, reason: str) -> None:
        self.reason = reason
        self.model.stop_training = True

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._previous_mean = epoch, 0.0

    def on_train_batch_end(self, batch, logs=None):
        if self.reason is not None or self._local_reason is not None:
            return
        mean = float((logs or {}).get("loss", math.nan))
        loss = (batch + 1) * mean - batch * self._previous_mean if math.isfinite(mean) else mean
        self._previous_mean = mean
        if self.initial_loss is None:
            initial = self.world.allreduce_mean([loss])[0] if self.world is not None else loss
            self.initial_loss = float(initial)
        reason = step_divergence(loss, self.initial_loss, self.factor)
        if reason is None:
            return
        reason = f"{reason} at epoch {self._epoch + 1}, step {batch + 1}"
        if self.every_step:
            self._stop(reason)
        else:
            self._local_reason = reason

    def on_epoch_end(self, epoch, logs=None):
        if self.reason is not None or self.every_step:
            return
        loss = float((logs or {}).get("loss", math.nan))
        local = self._local_reason or step_divergence(loss, None)
        if self.world.allreduce_mean([0.0 if local is None else 1.0])[0] > 0:
            self._stop(local or f"another rank diverged in epoch {epoch + 1}")


class BudgetStop(tf.keras.callbacks.Callback):
    """Ends training at the budget's last step (``total_steps`` optimizer updates, counted by
    the optimizer, so a resumed run stops at the same step), or at the end of the first epoch
    whose training metric meets ``stop_at`` (Keras's epoch mean, rank-averaged under Horovod,
    so every rank stops together). ``reached_step`` is the step at which the target was met."""

    def __init__(self, total_steps: int, stop_at=None):
        super().__init__()
        self.total_steps, self.stop_at = total_steps, stop_at
        self.reached_step: int | None = None
        self._epoch_start = 0

    def _step(self) -> int:
        return optimizer_step(self.model.optimizer)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self._step()

    def on_train_batch_end(self, batch, logs=None):
        # The optimizer's step after this batch, counted from the epoch's start (no variable read).
        if self._epoch_start + batch + 1 >= self.total_steps:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if self.reached_step is not None:  # met at a validation point inside the epoch (``ValidationPoints``)
            self.model.stop_training = True
            return
        value = (logs or {}).get(self.stop_at.metric) if self.stop_at is not None else None
        if value is not None and math.isfinite(float(value)) and self.stop_at.reached(float(value)):
            self.reached_step = self._step()
            self.model.stop_training = True


class ValidationPoints(tf.keras.callbacks.Callback):
    """Validation every ``every`` optimizer steps (``training.validation_every_steps``), beside
    Keras's validation at epoch ends: after the update that makes the optimizer's step a multiple
    of ``every``, ``evaluate()`` gives ``{"val_loss": ..., "val_accuracy": ...}`` on the whole
    validation split, appended to ``points`` as ``{"step": step, **values}``. ``evaluate`` must not
    touch the model's compiled metrics (the trainer's computes its own sums), so the epoch's
    training means are unchanged, and must give every rank the same numbers (the trainer's
    averages the per-rank sums over ranks, as the epoch-end validation is averaged): every rank
    then takes the same decision at the same step.

    With a ``stop_at`` on ``val_accuracy`` and a ``budget`` (the run's ``BudgetStop``), the first
    point that meets the target sets ``budget.reached_step`` to its step and stops training there,
    not at the end of its epoch. Each epoch's log gets ``step`` (the optimizer's step at its end), so
    a last epoch cut short by a point says where it ended. ``points`` starts from ``previous`` (a
    resumed run's, restored with its checkpoint)."""

    def __init__(self, every: int, evaluate, stop_at=None, budget: BudgetStop | None = None, previous=()):
        super().__init__()
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.every, self.evaluate, self.stop_at, self.budget = every, evaluate, stop_at, budget
        self.points: list[dict[str, float]] = [dict(point) for point in previous]
        self._epoch_start = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = optimizer_step(self.model.optimizer)

    def on_train_batch_end(self, batch, logs=None):
        step = self._epoch_start + batch + 1  # the optimizer's step after this batch (no variable read)
        if step % self.every or (self.points and self.points[-1]["step"] >= step):
            return
        point = {"step": step, **{key: float(value) for key, value in self.evaluate().items()}}
        self.points.append(point)
        value = point.get(self.stop_at.metric) if self.stop_at is not None else None
        if (self.budget is not None and self.budget.reached_step is None and value is not None and math.isfinite(value)
                and self.stop_at.reached(value)):
            self.budget.reached_step = step
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["step"] = optimizer_step(self.model.optimizer)


class GeneralizationGap(tf.keras.callbacks.Callback):
    """Per epoch, the gap between training and validation (Keskar et al. 2017):
    ``logs["gap_accuracy"] = accuracy - val_accuracy`` and ``logs["gap_loss"] = val_loss - loss``.

    Training figures are Keras's running means over the epoch (in training mode), so this
    is the live signal; the trainer's final gap comes from a full evaluation of both sets.
    """

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and "val_accuracy" in logs and "accuracy" in logs:
            logs["gap_accuracy"] = float(logs["accuracy"]) - float(logs["val_accuracy"])
            logs["gap_loss"] = float(logs["val_loss"]) - float(logs["loss"])


SINGLE_WORKER_PIECES = 8


class GradientNoiseScale(tf.keras.callbacks.Callback):
    """McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", app. A.1): the
    simple gradient noise scale ``B_simple = tr(Sigma) / |G|^2``, from two batch sizes, on
    fresh batches beside training. Each measurement costs a global batch of extra gradients;
    ``lbtrain.train_step`` measures the same inside the step at almost no cost, and the trainer
    uses this callback only where that cannot be done (a single simulated worker with batch norm).

    Every ``every`` steps each worker takes the gradient ``g_r`` of the loss on its own fresh
    batch of ``B_small = per_worker_batch`` training samples; their mean is the gradient of the
    global batch ``B_big = world_size * per_worker_batch``. Since ``E|g_B|^2 = |G|^2 + tr(Sigma)/B``::

        |G_small|^2 = mean_r |g_r|^2          |G_big|^2 = |mean_r g_r|^2
        |G|^2 = (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
        S     = (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)

    are unbiased estimates of ``|G|^2`` and ``S = tr(Sigma)``; each is averaged with a
    bias-corrected exponential moving average (``decay``) and ``B_simple`` is their ratio. Each
    epoch logs ``noise_scale`` (B_simple), ``noise_trace`` (S), ``gradient_norm_sq`` (|G|^2) and
    ``noise_scale_undetermined``: 1 where the averaged |G|^2 estimate is not positive (or the
    S estimate negative), and then ``noise_scale`` is NaN, never negative or infinite
    (``lbtrain.measures.noise_scale.simple_noise_scale`` names the reason).

    Under Horovod each rank computes its own ``g_r`` and one allreduce averages ``|g_r|^2`` and
    ``g_r``; a simulated world computes all ``world_size`` of them in turn. Worker r's batch is
    drawn by ``numpy.random.default_rng([seed, measurement, r])`` in both, so the two agree. In a
    world of one worker the batch is split into 8 pieces (``B_small = B/8``): the estimator needs
    ``B_big`` well above ``B_small``, and halves make ``|G|^2`` too noisy to divide by.
    Gradients are taken in training mode (as the train step does); batch-norm statistics are
    restored afterwards, so training is unchanged.
    """

    def __init__(self, x, y, world, per_worker_batch: int, every: int = 10, decay: float = 0.95, seed: int = 0):
        super().__init__()
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        if not 0 <= decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {decay!r}")
        self.x, self.y, self.world, self.every, self.decay, self.seed = x, y, world, every, decay, seed
        shard, shards = world.input_shard()
        if world.size == 1:
            pieces = min(SINGLE_WORKER_PIECES, per_worker_batch)
            self.small_batch, self.workers, self.count = per_worker_batch // pieces, list(range(pieces)), pieces
        else:
            self.small_batch, self.count = per_worker_batch, world.size
            self.workers = list(range(world.size)) if shards == 1 else [shard]
        if self.small_batch < 1 or self.small_batch > len(x):
            raise ValueError(f"per_worker_batch {per_worker_batch} leaves no valid small batch for {len(x)} samples")
        self.big_batch = self.small_batch * self.count
        self.measurements: list[tuple[int, float, float]] = []
        self._averages = [0.0, 0.0]
        self._gradient = None

    def _batch(self, measurement: int, worker: int):
        indices = np.random.default_rng([self.seed, measurement, worker]).choice(len(self.x), self.small_batch, replace=False)
        return self.x[indices], self.y[indices]

    def _gradient_function(self):
        model, variables = self.model, self.model.trainable_variables
        loss = tf.keras.losses.get(model.loss)

        @tf.function(reduce_retracing=True)
        def gradient(inputs, targets):
            with tf.GradientTape() as tape:
                value = loss(targets, model(inputs, training=True))
                if model.losses:
                    value += tf.add_n(model.losses)
            return tf.concat([tf.reshape(tf.cast(g, tf.float64), [-1]) for g in tape.gradient(value, variables)], 0)

        return gradient

    def measure(self, measurement: int) -> tuple[float, float]:
        """One two-batch estimate ``(S, |G|^2)`` at the current weights."""
        if self._gradient is None:
            self._gradient = self._gradient_function()
        state = [variable.numpy() for variable in self.model.non_trainable_variables]
        gradients = [self._gradient(*self._batch(measurement, worker)).numpy() for worker in self.workers]
        for variable, value in zip(self.model.non_trainable_variables, state):
            variable.assign(value)
        local = np.concatenate([[np.mean([g @ g for g in gradients])], np.mean(gradients, axis=0)])
        total = self.world.allreduce_mean(local)
        small_sq, big = total[0], total[1:]
        big_sq = float(big @ big)
        trace, norm_sq = two_batch_estimates(small_sq, big_sq, self.small_batch, self.big_batch)
        return float(trace), float(norm_sq)

    def on_train_batch_end(self, batch, logs=None):
        step = int(tf.keras.backend.get_value(self.model.optimizer.iterations))
        if step % self.every:
            return
        trace, norm_sq = self.measure(step // self.every)
        self.measurements.append((step, trace, norm_sq))
        self._averages = [self.decay * average + (1 - self.decay) * value for average, value in zip(self._averages, (trace, norm_sq))]

    def estimate(self) -> dict[str, float]:
        """The bias-corrected averages so far: ``noise_trace``, ``gradient_norm_sq``, their ratio
        ``noise_scale`` (NaN when undetermined) and ``noise_scale_undetermined`` (1 or 0); all
        NaN before the first measurement, so every epoch logs the same keys."""
        if not self.measurements:
            return dict.fromkeys(("noise_scale", "noise_trace", "gradient_norm_sq", "noise_scale_undetermined"), math.nan)
        correction = 1 - self.decay ** len(self.measurements)
        trace, norm_sq = (average / correction for average in self._averages)
        scale, reason = simple_noise_scale(trace, norm_sq)
        return {"noise_scale": scale, "noise_trace": trace, "gradient_norm_sq": norm_sq,
                "noise_scale_undetermined": float(reason is not None)}

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(self.estimate())
