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
  pieces, each holding W/k whole workers' batches, and applies their mean once
  (``lbtrain.train_step.GradientStepModel``).

Either world can measure the gradient noise scale inside its train step
(``prepare_model(..., noise_scale=NoiseScaleSettings())``, see ``lbtrain.train_step``), and
accumulate ``accumulation_steps=k`` batches per worker into one update (Goyal et al. 2017 sec. 2):
each process feeds ``k`` times its batch a step (``process_batch(k * per_worker_batch)``) and the
step computes it in k pieces, so W workers of batch b update as synchronous SGD at the global
batch ``W b k``. A simulated world also applies gradients ``staleness=tau`` updates late
(asynchronous SGD with a constant delay, ``lbtrain.train_step.StaleGradients``).
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import os
from typing import Any, ContextManager

import numpy as np
import tensorflow as tf

from lbtrain.config import ConfigError
from lbtrain.layers import is_batch_norm
from lbtrain.models import set_virtual_batch_size
from lbtrain.train_step import GradientStepModel, NoiseScaleSettings, NoiseScaleTracker, measurement_pieces

# Set by horovodrun (Gloo), mpirun (Open MPI) and MPICH/Intel MPI respectively.
LAUNCHER_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def _switch(variable: str) -> bool:
    """An on/off environment variable: ``1`` or ``0`` (unset is off)."""
    value = os.environ.get(variable, "0")
    if value not in ("0", "1"):
        raise ConfigError(f"${variable} is {value!r} (allowed: 0, 1)")
    return value == "1"


def _thread_ids() -> set[int]:
    """The ids of this process's threads (Linux's /proc/self/task)."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def _pin_to_one_core(index: int) -> int:
    """Binds every thread of this process to one core, the ``index``-th (mod their number) of
    the cores it may use; threads started later inherit it. Returns the core."""
    cores = sorted(os.sched_getaffinity(0))
    core = cores[index % len(cores)]
    for thread in _thread_ids():
        os.sched_setaffinity(thread, {core})
    return core


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
                      accumulation_steps: int = 1, staleness: int = 0) -> tf.keras.Model:
        """The model this process trains (may be a rebuilt copy with the same weights); with
        ``noise_scale``, one whose train step measures the gradient noise scale where this world
        can (``noise_scale_tracker`` then finds its tracker); with ``accumulation_steps=k``, one
        whose step takes k of each worker's batches and applies one update; with ``staleness``,
        one that applies every gradient that many updates late (where the world can)."""
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

    def prepare_model(self, model: tf.keras.Model, per_worker_batch: int, noise_scale: NoiseScaleSettings | None = None,
                      accumulation_steps: int = 1, staleness: int = 0) -> tf.keras.Model:
        """Ghost batch norm at the per-worker batch; a ``GradientStepModel`` when the step runs
        in micro-batches, accumulates batches, measures the noise scale or applies stale
        gradients. The step then takes ``accumulation_steps * micro_batches`` pieces (each of
        ``size / micro_batches`` workers' batches of one accumulated step) one after another.
        The noise scale comes from those pieces if there are several, else from
        ``noise_scale.pieces`` pieces; with one worker and batch norm (whose statistics a split
        would change) this world cannot measure it in the step unless the pieces are the
        worker's accumulated batches."""
        has_batch_norm = any(is_batch_norm(layer) for layer in model.layers)
        if self.size > 1 and has_batch_norm:
            model = set_virtual_batch_size(model, per_worker_batch)
        pieces, tracker = accumulation_steps * self.micro_batches, None
        if noise_scale is not None and not (self.size == 1 and has_batch_norm and pieces == 1):
            if pieces == 1:
                pieces = measurement_pieces(self.size, per_worker_batch, noise_scale.pieces) or 1
            if pieces > 1:
                big_batch = self.size * per_worker_batch * accumulation_steps
                tracker = NoiseScaleTracker(big_batch // pieces, big_batch, noise_scale.decay)
        if pieces == 1 and not staleness:
            return model
        return GradientStepModel(model, world=self, per_worker_batch=per_worker_batch, pieces=pieces,
                                 accumulation_steps=accumulation_steps, noise_scale=tracker,
                                 sequential=self.micro_batches * accumulation_steps > 1, staleness=staleness)


class HorovodWorld(World):
    """The real workers of a job started by ``horovodrun`` (or ``mpirun``)."""

    def __init__(self, *, pin_cores: bool | None = None, idle_threads: bool | None = None):
        """Initializes Horovod. The gradient compression of ``wrap_optimizer`` comes from
        ``$LBTRAIN_HOROVOD_COMPRESSION`` (``none``, the default, or ``fp16``), which ``mode:
        horovod`` sets from the experiment's ``horovod.compression``.

        Where no core is spare (as many ranks as cores, one compute thread each), Horovod's own
        threads (its background loop waking every cycle, Gloo's I/O) preempt the compute
        threads all through the step; two opt-in remedies, measured in README "Horovod against
        the machine's own limit" (np=2 against two independent processes: 0.76 -> 0.94):

        - ``idle_threads``: the threads ``hvd.init()`` starts run at Linux's ``SCHED_IDLE``, so
          they run only while their rank's compute waits (which is when an allreduce is due);
        - ``pin_cores``: every thread of the process (and those it starts later) is bound to
          one core, the local rank's place among the cores this process may use.

        Both default to ``$LBTRAIN_HOROVOD_IDLE_THREADS`` / ``$LBTRAIN_HOROVOD_PIN_CORES``
        (``1`` or ``0``), which ``mode: horovod`` sets from ``horovod.idle_threads`` /
        ``horovod.pin_cores``. Off by default: on a host with spare cores (a GPU node) an idle
        communication thread could starve behind other work."""
        import horovod.tensorflow.keras as hvd

        from lbtrain.config import (
            HOROVOD_COMPRESSION_VARIABLE,
            HOROVOD_IDLE_THREADS_VARIABLE,
            HOROVOD_PIN_CORES_VARIABLE,
        )

        compressions = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}
        name = os.environ.get(HOROVOD_COMPRESSION_VARIABLE, "none")
        if name not in compressions:
            raise ConfigError(f"${HOROVOD_COMPRESSION_VARIABLE} is {name!r} (allowed: {', '.join(compressions)})")
        self.compression = compressions[name]
        self.idle_threads = _switch(HOROVOD_IDLE_THREADS_VARIABLE) if idle_threads is None else idle_threads
        pin_cores = _switch(HOROVOD_PIN_CORES_VARIABLE) if pin_cores is None else pin_cores
        if (self.idle_threads or pin_cores) and not hasattr(os, "sched_setaffinity"):
            raise ConfigError("horovod.idle_threads and horovod.pin_cores need Linux's scheduler calls (not on this system)")
        self._hvd = hvd
        before = _thread_ids()
        # Horovod's timeline writer would run idle with its other threads and lose the last
        # events at exit; started dynamically and stopped at exit, the timeline is complete.
        # "DYNAMIC" already means that the caller starts it (lbtrain bench): nothing to do here.
        timeline = os.environ.get("HOROVOD_TIMELINE") if self.idle_threads else None
        timeline = None if timeline == "DYNAMIC" else timeline
        if timeline:
            os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"  # started by hvd.start_timeline below
        hvd.init()
        if self.idle_threads:
            for thread in _thread_ids() - before:
                os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
        if timeline:
            os.environ["HOROVOD_TIMELINE"] = timeline
            hvd.start_timeline(timeline, mark_cycles=os.environ.get("HOROVOD_TIMELINE_MARK_CYCLES") == "1")
            atexit.register(hvd.stop_timeline)
        gpus = tf.config.list_physical_devices("GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if gpus:
            tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
        self.size, self.rank, self.local_rank = hvd.size(), hvd.rank(), hvd.local_rank()
        self.core = _pin_to_one_core(self.local_rank) if pin_cores else None

    def __repr__(self) -> str:
        return f"HorovodWorld(size={self.size}, rank={self.rank})"

    def input_shard(self) -> tuple[int, int]:
        return self.rank, self.size

    def process_batch(self, per_worker_batch: int) -> int:
        return per_worker_batch

    def wrap_optimizer(self, optimizer):
        return self._hvd.DistributedOptimizer(optimizer, compression=self.compression)

    def callbacks(self):
        return [self._hvd.callbacks.BroadcastGlobalVariablesCallback(0), self._hvd.callbacks.MetricAverageCallback()]

    def allreduce_mean(self, value):
        tensor = tf.constant(np.asarray(value, dtype=np.float64))
        return self._hvd.allreduce(tensor, op=self._hvd.Average).numpy()

    def broadcast_object(self, obj):
        import horovod.tensorflow as hvd_tf

        return hvd_tf.broadcast_object(obj, root_rank=0)

    def prepare_model(self, model, per_worker_batch, noise_scale=None, accumulation_steps=1, staleness=0):
        """With ``accumulation_steps=k > 1``: a ``GradientStepModel`` whose step takes this rank's
        k batches (fed as one of ``k * per_worker_batch``) one after another, averages their
        gradients locally and allreduces once, so one update is synchronous SGD at ``size *
        per_worker_batch * k`` and the optimizer counts updates. (Horovod's own
        ``backward_passes_per_step`` advances ``optimizer.iterations`` on every backward pass,
        horovod/tensorflow/gradient_aggregation_eager.py, so the LR schedule and the step budget
        would count passes.) With ``noise_scale`` (and more than one batch per update): one whose
        step takes each batch of this rank as the small batch and the allreduced gradient as the
        big batch. ``staleness`` exists only in a simulated world."""
        if staleness:
            raise ConfigError(f"training.staleness ({staleness}) is simulated in one process: use mode: simulated "
                              f"(Horovod's workers are synchronous)")
        tracker = None
        if noise_scale is not None and self.size * accumulation_steps > 1:
            tracker = NoiseScaleTracker(per_worker_batch, self.size * per_worker_batch * accumulation_steps, noise_scale.decay)
        if accumulation_steps == 1 and tracker is None:
            return model
        return GradientStepModel(model, world=self, per_worker_batch=per_worker_batch, pieces=accumulation_steps,
                                 accumulation_steps=accumulation_steps, noise_scale=tracker)

    def average_gradients(self, gradients, variables, optimizer):
        # The DistributedOptimizer's own allreduce (its fusion, compression and local-variable
        # handling), which Keras's train step reaches through ``compute_gradients``.
        return optimizer._allreduce(gradients, variables)

    def mean_over_ranks(self, value):
        import horovod.tensorflow as hvd_tf

        return hvd_tf.allreduce(value, op=hvd_tf.Average, name="noise_scale_small_batch")


def launched_by_horovod() -> bool:
    """Whether this process was started by horovodrun/mpirun (their environment is set)."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


WORLD_MODES = ("simulated", "horovod", "mirrored", "multiworker", "parameter_server")


def current_world(world_size: int, micro_batches: int = 1, mode: str | None = None) -> World:
    """The world of ``mode`` (one of ``WORLD_MODES``); without one, Horovod's world when launched
    by horovodrun/mpirun, else a simulated one of ``world_size``. ``mirrored`` and
    ``multiworker`` are ``lbtrain.tf_distribute``'s worlds, ``parameter_server`` the chief of
    ``lbtrain.parameter_server``'s: build them before TensorFlow runs an op.

    Under Horovod and multiworker the number of processes must equal ``world_size``."""
    if mode is None:
        mode = "horovod" if launched_by_horovod() else "simulated"
    if mode not in WORLD_MODES:
        raise ConfigError(f"mode {mode!r} is not a world (allowed: {', '.join(WORLD_MODES)})")
    if mode in ("mirrored", "multiworker"):
        from lbtrain.tf_distribute import MirroredWorld, MultiWorkerWorld

        if micro_batches > 1:
            raise ConfigError(f"training.micro_batches ({micro_batches}) is simulated only, not in mode: {mode}")
        return MirroredWorld(world_size) if mode == "mirrored" else MultiWorkerWorld(world_size)
    if mode == "parameter_server":
        from lbtrain.parameter_server import ParameterServerWorld

        if micro_batches > 1:
            raise ConfigError(f"training.micro_batches ({micro_batches}) is simulated only, not in mode: {mode}")
        return ParameterServerWorld(world_size)
    if mode == "simulated":
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
