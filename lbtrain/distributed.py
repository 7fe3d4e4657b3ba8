"""The world a run trains in: real Horovod workers, or W workers simulated in one process.

Both sit behind one small interface, ``World``, so the trainer has one code path:

- ``HorovodWorld``: Horovod's four steps (init, pin a GPU per local rank, wrap the optimizer,
  broadcast from rank 0) plus metric averaging. Each process feeds ``per_worker_batch``
  samples a step from its shard of the stream.
- ``SimulatedWorld(W)``: one process feeds the whole global batch ``W * per_worker_batch``;
  every BatchNormalization layer normalizes per worker's share (ghost BN, Hoffer et al.
  2017, with ``virtual_batch_size = per_worker_batch``), and the mean loss over the global
  batch has exactly the average of the W workers' gradients. One update therefore equals
  W-worker synchronous SGD (Goyal et al. 2017 sec. 3: the allreduce averages gradients). If
  the global batch does not fit in memory, ``micro_batches=k`` accumulates the gradient over k
  pieces, each holding W/k whole workers' batches, and applies their mean once.
"""

from __future__ import annotations

import abc
import os
from typing import Any

import numpy as np
import tensorflow as tf

from lbtrain.config import ConfigError
from lbtrain.layers import is_batch_norm
from lbtrain.models import set_virtual_batch_size

# Set by horovodrun (Gloo), mpirun (Open MPI) and MPICH/Intel MPI respectively.
LAUNCHER_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


class World(abc.ABC):
    """What the trainer needs to know of the workers it trains with."""

    size: int
    rank: int
    local_rank: int

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

    def prepare_model(self, model: tf.keras.Model, per_worker_batch: int) -> tf.keras.Model:
        """The model this process trains (may be a rebuilt copy with the same weights)."""
        return model

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


class SimulatedWorld(World):
    """``size`` synchronous workers simulated exactly in one process (see the module doc)."""

    def __init__(self, size: int, micro_batches: int = 1):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"world size must be a positive integer, got {size!r}")
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1 or size % micro_batches:
            raise ValueError(f"micro_batches must be a positive integer dividing the world size {size}, got {micro_batches!r}")
        self.size, self.rank, self.local_rank = size, 0, 0
        self.micro_batches = micro_batches

    def __repr__(self) -> str:
        return f"SimulatedWorld(size={self.size}, micro_batches={self.micro_batches})"

    def input_shard(self) -> tuple[int, int]:
        return 0, 1

    def process_batch(self, per_worker_batch: int) -> int:
        return self.size * per_worker_batch

    def prepare_model(self, model: tf.keras.Model, per_worker_batch: int) -> tf.keras.Model:
        has_batch_norm = any(is_batch_norm(layer) for layer in model.layers)
        if self.size > 1 and has_batch_norm:
            model = set_virtual_batch_size(model, per_worker_batch)
        if self.micro_batches > 1:
            model = MicroBatchModel(model, self.size, self.micro_batches, per_worker_batch)
        return model


class MicroBatchModel(tf.keras.Model):
    """A model whose train step accumulates gradients over ``micro_batches`` pieces of the
    global batch and applies their mean once (the mean loss over the whole batch has the same
    gradient, since the pieces are of equal size).

    The pieces follow workers: the global batch is laid out ``[per_worker_batch, world_size]``
    (position ``i * W + r`` is worker r's i-th sample, see ``lbtrain.data``), and piece j holds
    workers ``j*W/k .. (j+1)*W/k - 1`` in the same layout, so ghost batch norm still sees each
    worker's own samples. Moving batch-norm statistics are updated once per piece.
    """

    def __init__(self, model: tf.keras.Model, world_size: int, micro_batches: int, per_worker_batch: int):
        super().__init__(inputs=model.inputs, outputs=model.outputs, name=model.name)
        self.world_size = world_size
        self.micro_batches = micro_batches
        self.per_worker_batch = per_worker_batch

    def _pieces(self, tensor: tf.Tensor) -> tf.Tensor:
        features = tf.shape(tensor)[1:]
        workers_per_piece = self.world_size // self.micro_batches
        grid = tf.reshape(tensor, tf.concat([[self.per_worker_batch, self.micro_batches, workers_per_piece], features], 0))
        rank = len(tensor.shape)
        grid = tf.transpose(grid, [1, 0, 2, *range(3, rank + 2)])
        return tf.reshape(grid, tf.concat([[self.micro_batches, self.per_worker_batch * workers_per_piece], features], 0))

    def train_step(self, data):
        x, y, _ = tf.keras.utils.unpack_x_y_sample_weight(data)
        x_pieces, y_pieces = self._pieces(x), self._pieces(y)
        variables = self.trainable_variables

        def accumulate(piece, totals):
            with tf.GradientTape() as tape:
                prediction = self(x_pieces[piece], training=True)
                loss = self.compute_loss(x_pieces[piece], y_pieces[piece], prediction)
            self.compute_metrics(x_pieces[piece], y_pieces[piece], prediction, None)
            gradients = tape.gradient(loss, variables)
            return piece + 1, [total + gradient for total, gradient in zip(totals, gradients)]

        # A while loop, not a Python loop: the pieces run one after another, so only one
        # piece's activations are alive at a time.
        _, totals = tf.while_loop(
            lambda piece, _: piece < self.micro_batches,
            accumulate,
            (tf.constant(0), [tf.zeros_like(variable) for variable in variables]),
        )
        self.optimizer.apply_gradients(zip([total / self.micro_batches for total in totals], variables))
        return self.get_metrics_result()


class HorovodWorld(World):
    """The real workers of a job started by ``horovodrun`` (or ``mpirun``)."""

    def __init__(self):
        import horovod.tensorflow.keras as hvd

        self._hvd = hvd
        hvd.init()
        gpus = tf.config.list_physical_devices("GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if gpus:
            tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
        self.size, self.rank, self.local_rank = hvd.size(), hvd.rank(), hvd.local_rank()

    def __repr__(self) -> str:
        return f"HorovodWorld(size={self.size}, rank={self.rank})"

    def input_shard(self) -> tuple[int, int]:
        return self.rank, self.size

    def process_batch(self, per_worker_batch: int) -> int:
        return per_worker_batch

    def wrap_optimizer(self, optimizer):
        return self._hvd.DistributedOptimizer(optimizer)

    def callbacks(self):
        return [self._hvd.callbacks.BroadcastGlobalVariablesCallback(0), self._hvd.callbacks.MetricAverageCallback()]

    def allreduce_mean(self, value):
        tensor = tf.constant(np.asarray(value, dtype=np.float64))
        return self._hvd.allreduce(tensor, op=self._hvd.Average).numpy()

    def broadcast_object(self, obj):
        import horovod.tensorflow as hvd_tf

        return hvd_tf.broadcast_object(obj, root_rank=0)


def launched_by_horovod() -> bool:
    """Whether this process was started by horovodrun/mpirun (their environment is set)."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


def current_world(world_size: int, micro_batches: int = 1) -> World:
    """Horovod's world when launched by horovodrun/mpirun, else a simulated one of ``world_size``.

    Under Horovod the number of processes must equal ``world_size``."""
    if not launched_by_horovod():
        return SimulatedWorld(world_size, micro_batches)
    world = HorovodWorld()
    if world.size != world_size:
        raise ConfigError(f"training.world_size is {world_size} but the launcher started {world.size} processes")
    return world


def configure_threads(intra_op: int | None = None, inter_op: int | None = None) -> None:
    """TensorFlow's thread pools; call before TensorFlow runs its first op."""
    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
