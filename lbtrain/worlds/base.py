"""What the trainer needs to know of the workers it trains with: the ``World`` interface.

A world says which shard of the stream this process reads, how many samples it feeds a step,
how the model and optimizer are prepared (ghost batch norm, gradient averaging, lbtrain's own
train steps), and how values are averaged or broadcast across ranks. One module per mode
implements it (``lbtrain.worlds.simulated``, ``horovod``, ``mirrored``, ``multiworker``,
``parameter_server``); ``lbtrain.worlds.modes`` is the registry that names them. The trainer
has one code path for all of them.

Every world can measure the gradient noise scale inside its train step where it can
(``prepare_model(..., noise_scale=NoiseScaleSettings())``, see ``lbtrain.train_step``), and
accumulate ``accumulation_steps=k`` batches per worker into one update (Goyal et al. 2017 sec. 2):
each process feeds ``k`` times its batch a step (``process_batch(k * per_worker_batch)``) and the
step computes it in k pieces, so W workers of batch b update as synchronous SGD at the global
batch ``W b k``.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, ContextManager

import numpy as np
import tensorflow as tf

from lbtrain.measures.noise_scale import NoiseScaleSettings


class World(abc.ABC):
    """What the trainer needs to know of the workers it trains with."""

    size: int
    rank: int
    local_rank: int
    # Whether saving a checkpoint is a collective (tf.distribute's multi-worker variables): then
    # every process saves, the root into the run folder and the others into a scratch folder.
    collective_checkpoints: bool = False
    # Optimizer updates per step of the global batch: W in a parameter-server world, where each
    # worker's batch is an update of its own; steps, budgets and the LR clock count updates.
    updates_per_step: int = 1
    # ``training.jit_compile`` (``lbtrain.trainer.resolve_jit_compile``): why this world's train
    # step cannot be compiled with XLA (``true`` is then refused, ``auto`` leaves it uncompiled), or
    # None; and whether compiling it means the whole step as one XLA cluster (Keras's
    # ``compile(jit_compile=True)``) or, where the step holds an op XLA cannot compile (Horovod's
    # allreduce), what ``prepare_model(..., jit_compile=True)`` compiles of it.
    jit_compile_problem: str | None = None
    compiles_whole_step: bool = True
    # An elastic job's world (``lbtrain.worlds.horovod_elastic``): its size changes at every reset, and
    # nothing before its elastic run may be a collective.
    elastic: bool = False

    @property
    def is_root(self) -> bool:
        """Rank 0: the only one that logs, writes files and talks to Optuna storage."""
        return self.rank == 0

    @abc.abstractmethod
    def input_shard(self) -> tuple[int, int]:
        """``(index, count)``: which shard of the training stream this process reads."""

    @abc.abstractmethod
    def process_batch(self, per_worker_batch: int) -> int:
        """How many samples this process feeds per step."""

    def prepare_model(self, model: tf.keras.Model, per_worker_batch: int, noise_scale: NoiseScaleSettings | None = None,
                      accumulation_steps: int = 1, staleness: int = 0, jit_compile: bool = False) -> tf.keras.Model:
        """The model this process trains (may be a rebuilt copy with the same weights); with
        ``noise_scale``, one whose train step measures the gradient noise scale where this world
        can (``noise_scale_tracker`` then finds its tracker); with ``accumulation_steps=k``, one
        whose step takes k of each worker's batches and applies one update; with ``staleness``,
        one that applies every gradient that many updates late (where the world can); with
        ``jit_compile`` in a world that does not compile the whole step, one whose step compiles
        what XLA can."""
        return model

    def average_gradients(self, gradients: list[tf.Tensor], variables: list, optimizer) -> list[tf.Tensor]:
        """In a train step: the mean of ``gradients`` over all ranks."""
        return gradients

    def mean_over_ranks(self, value: tf.Tensor) -> tf.Tensor:
        """In a train step: the mean of a scalar tensor over all ranks."""
        return value

    def wrap_optimizer(self, optimizer: tf.keras.optimizers.Optimizer) -> tf.keras.optimizers.Optimizer:
        """The optimizer this process applies (Horovod: averages gradients across ranks)."""
        return optimizer

    def callbacks(self) -> list[tf.keras.callbacks.Callback]:
        """Callbacks that must come first in ``fit`` (broadcast, metric averaging)."""
        return []

    def allreduce_mean(self, value: Any) -> np.ndarray:
        """The mean of ``value`` over all ranks (float64 array)."""
        return np.asarray(value, dtype=np.float64)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        return obj

    def scope(self) -> ContextManager:
        """The context the model and optimizer are built in (a tf.distribute strategy's scope)."""
        return contextlib.nullcontext()

    def training_input(self, dataset: tf.data.Dataset, per_worker_batch: int) -> Any:
        """What ``fit`` takes from this process's training batches (``process_batch`` samples each)."""
        return dataset

    def evaluation_input(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """What ``evaluate`` (and ``fit``'s validation) takes from this process's evaluation batches."""
        return dataset

    def share_replica_statistics(self, model: tf.keras.Model) -> None:
        """Before evaluating: give every replica of this world the same batch-norm moving
        statistics (where replicas keep their own)."""

    def fit(self, model: tf.keras.Model, train_data: Any, *, total_steps: int, **fit_arguments: Any) -> tf.keras.callbacks.History:
        """Trains ``model`` as Keras's ``fit(train_data, **fit_arguments)`` does (its callbacks
        stop it at ``total_steps`` updates); a world that trains otherwise (a parameter-server
        coordinator) drives the same callbacks itself."""
        return model.fit(train_data, **fit_arguments)

    def evaluate(self, model: tf.keras.Model, dataset: tf.data.Dataset) -> tuple[float, float]:
        """Mean loss and accuracy of ``model`` over this process's ``dataset`` (Keras's ``evaluate``
        of ``evaluation_input``)."""
        loss, accuracy = model.evaluate(self.evaluation_input(dataset), verbose=0)
        return loss, accuracy


def jit_compile_refusal(problem: str) -> str:
    """The one-line ``ConfigError`` message for ``training.jit_compile: true`` in a world whose
    step cannot be compiled, ``problem`` saying why (``World.jit_compile_problem``)."""
    return f"training.jit_compile is true, but {problem}: set it to auto or false, or train in mode: simulated or horovod"


def configure_threads(intra_op: int | None = None, inter_op: int | None = None) -> None:
    """TensorFlow's thread pools; call before TensorFlow runs its first op."""
    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
