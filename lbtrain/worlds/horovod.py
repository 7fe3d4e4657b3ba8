"""``mode: horovod``: the real workers of a job started by ``horovodrun`` (or ``mpirun``).

``HorovodWorld``: Horovod's four steps (init, pin a GPU per local rank, wrap the optimizer,
broadcast from rank 0) plus metric averaging. Each process feeds ``per_worker_batch`` samples a
step from its shard of the stream. ``lbtrain.launch.horovodrun`` starts the ranks.
"""

from __future__ import annotations

import atexit
import os

import numpy as np
import tensorflow as tf

from lbtrain.config import ConfigError, RunConfig
from lbtrain.train_step import GradientStepModel, NoiseScaleTracker
from lbtrain.worlds.base import World

MODE = "horovod"


def unsupported_setting(config: RunConfig) -> str | None:
    """The first field of ``config`` real Horovod workers cannot train, as a one-line message, or None."""
    if config.training.staleness:
        return (f"training.staleness {config.training.staleness} is simulated only: real Horovod workers are "
                "synchronous (use mode: simulated)")
    return None


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


class HorovodWorld(World):
    """The real workers of a job started by ``horovodrun`` (or ``mpirun``)."""

    def __init__(self, *, pin_cores: bool | None = None, idle_threads: bool | None = None):
        """Initializes Horovod. The gradient compression of ``wrap_optimizer`` comes from
        ``$LBTRAIN_HOROVOD_COMPRESSION`` (``none``, the default, or ``fp16``), which ``mode:
        horovod`` sets from the experiment's ``horovod.compression``.

        Where no core is spare (as many ranks as cores, one compute thread each), Horovod's own
        threads (its background loop waking every cycle, Gloo's I/O) preempt the compute
        threads all through the step; two opt-in remedies, whose effect ``lbtrain bench`` measures
        (np=2 against two independent processes; docs: Benchmarks):

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


def build_world(world_size: int) -> HorovodWorld:
    """This rank's world (the job's size is horovodrun's ``-np``; ``current_world`` checks it)."""
    return HorovodWorld()
