"""Keras callbacks for large-batch training.

lbtrain's own runs keep the learning rate in a schedule object (``lbtrain.schedules``);
``LearningRateWarmup`` is for models compiled with a float learning rate, the way Horovod's
examples warm up, and ``LearningRateLogger`` records the rate actually applied either way.
"""

from __future__ import annotations

import tensorflow as tf


def _optimizer_learning_rate(optimizer: tf.keras.optimizers.Optimizer) -> float:
    """The learning rate the optimizer applied at its last step.

    With a schedule Keras 2.15 stores ``schedule(iterations)`` in a variable at the start of
    every ``apply_gradients``; with a float the variable itself is the rate.
    """
    return float(tf.keras.backend.get_value(optimizer.learning_rate))


class LearningRateWarmup(tf.keras.callbacks.Callback):
    """Gradual warmup for a float learning rate (Goyal et al. 2017), numerically equal to
    Horovod's ``LearningRateWarmupCallback``.

    Before each batch of the first ``warmup_epochs`` epochs::

        e  = epoch + (batch + 1) / steps_per_epoch
        lr = initial_lr / world_size * (e * (world_size - 1) / warmup_epochs + 1)

    so training starts just above ``initial_lr / world_size`` (the unscaled LR) and reaches
    ``initial_lr`` (the scaled LR) at the last batch of warmup; after warmup the rate is left
    alone. Unlike Horovod's callback this one needs no ``hvd.init()`` (the world size is an
    argument, so simulated worlds warm up too) and applies no momentum correction: Keras
    2.15's optimizers hold ``momentum`` as a Python float compiled into the train step.

    Args:
      initial_lr: the scaled learning rate reached at the end of warmup.
      warmup_epochs: length of the warmup in epochs.
      world_size: the number of workers the rate was scaled for.
      steps_per_epoch: batches per epoch; by default read from ``fit``'s parameters.
    """

    def __init__(self, initial_lr: float, warmup_epochs: float, world_size: int, steps_per_epoch: int | None = None):
        super().__init__()
        if not initial_lr > 0:
            raise ValueError(f"initial_lr must be positive, got {initial_lr!r}")
        if not warmup_epochs > 0:
            raise ValueError(f"warmup_epochs must be positive, got {warmup_epochs!r}")
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        self.initial_lr = float(initial_lr)
        self.warmup_epochs = warmup_epochs
        self.world_size = world_size
        self.steps_per_epoch = steps_per_epoch
        self._epoch = 0

    def learning_rate(self, epoch: int, batch: int) -> float:
        """The warmup rate for ``batch`` of ``epoch`` (the formula above)."""
        progress = epoch + (batch + 1) / self.steps_per_epoch
        return self.initial_lr / self.world_size * (progress * (self.world_size - 1) / self.warmup_epochs + 1)

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None:
            if not self.params.get("steps"):
                raise ValueError("LearningRateWarmup: pass steps_per_epoch, fit() did not report its steps")
            self.steps_per_epoch = self.params["steps"]

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self._epoch < self.warmup_epochs:
            tf.keras.backend.set_value(self.model.optimizer.learning_rate, self.learning_rate(self._epoch, batch))


class LearningRateLogger(tf.keras.callbacks.Callback):
    """Records the learning rate applied at every step, for schedules and floats alike.

    After ``fit``: ``steps[i]`` is the optimizer step (``iterations`` before the update) and
    ``rates[i]`` the rate that step applied; each epoch's last rate goes into ``logs["lr"]``
    (so it lands in ``History`` and CSV logs). With ``steps_per_execution > 1`` Keras calls
    back once per execution, and the last step of each execution is recorded.
    """

    def __init__(self):
        super().__init__()
        self.steps: list[int] = []
        self.rates: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        self.steps.append(int(tf.keras.backend.get_value(optimizer.iterations)) - 1)
        self.rates.append(_optimizer_learning_rate(optimizer))

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self.rates:
            logs["lr"] = self.rates[-1]
