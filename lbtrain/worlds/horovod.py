"""``mode: horovod``: the real workers of a job started by ``horovodrun`` (or ``mpirun``).

``HorovodWorld``: Horovod's four steps (init, pin a GPU per local rank, wrap the optimizer,
broadcast from rank 0) plus metric averaging. Each process feeds ``per_worker_batch`` samples a
step from its shard of the stream. ``lbtrain.launch.horovodrun`` starts the ranks.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
from typing import Sequence

import numpy as np
import tensorflow as tf

from lbtrain.config import ConfigError, RunConfig
from lbtrain.train_step import GradientStepModel, NoiseScaleTracker
from lbtrain.worlds.base import World

MODE = "horovod"
logger = logging.getLogger(__name__)


def unsupported_setting(config: RunConfig) -> str | None:
    """The first field of ``config`` real Horovod workers cannot train, as a one-line message, or None."""
    if config.training.staleness:
        return (f"training.staleness {config.training.staleness} is simulated only: real Horovod workers are "
                "synchronous (use mode: simulated)")
    return None


def _setting(variable: str) -> bool | None:
    """An on/off environment variable: ``1`` or ``0``; unset (or empty) is None, ``auto``."""
    value = os.environ.get(variable, "")
    if value not in ("", "0", "1"):
        raise ConfigError(f"${variable} is {value!r} (allowed: 0, 1)")
    return None if value == "" else value == "1"


def _thread_ids() -> set[int]:
    """The ids of this process's threads (Linux's /proc/self/task)."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity mask; every core where the system has none)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def rank_cores(local_rank: int, local_size: int, cores: Sequence[int]) -> tuple[int, ...]:
    """The cores of local rank ``local_rank`` of ``local_size``: its own contiguous share of
    ``cores`` (the first ranks get one fewer where they do not divide evenly); with more ranks
    than cores, the ``local_rank``-th core (mod their number), shared.

    >>> rank_cores(1, 2, [0, 1]), rank_cores(1, 2, range(8)), rank_cores(2, 3, range(8)), rank_cores(3, 4, [0, 1])
    ((1,), (4, 5, 6, 7), (5, 6, 7), (1,))
    """
    cores = list(cores)
    if local_size >= len(cores):
        return (cores[local_rank % len(cores)],)
    return tuple(cores[local_rank * len(cores) // local_size:(local_rank + 1) * len(cores) // local_size])


def _pin_to_cores(cores: tuple[int, ...]) -> None:
    """Binds every thread of this process to ``cores``; threads started later inherit them."""
    for thread in _thread_ids():
        os.sched_setaffinity(thread, set(cores))


@dataclasses.dataclass(frozen=True)
class ThreadPlacement:
    """What a rank does with its threads (``place_threads``): ``pin_cores`` and
    ``idle_threads`` as chosen, which of them were ``auto`` and ``why``, one line for the log."""

    pin_cores: bool
    idle_threads: bool
    automatic: tuple[str, ...]
    why: str

    def describe(self) -> str:
        """One log line: what was chosen, why, and how to turn an automatic choice off."""
        chosen = ", ".join(f"{name} {'on' if getattr(self, name) else 'off'} ({'auto' if name in self.automatic else 'set'})"
                           for name in ("pin_cores", "idle_threads"))
        text = f"Horovod threads: {self.why}: {chosen}"
        if any(getattr(self, name) for name in self.automatic):
            text += " (horovod.pin_cores / horovod.idle_threads: false, or $LBTRAIN_HOROVOD_PIN_CORES / $LBTRAIN_HOROVOD_IDLE_THREADS=0, turn them off)"
        return text


def place_threads(pin_cores: bool | None, idle_threads: bool | None, *, local_ranks: int, threads_per_rank: int,
                  cores: int, gpus: int = 0, linux: bool = True) -> ThreadPlacement:
    """Resolves ``pin_cores`` and ``idle_threads`` (None: auto) for ``local_ranks`` ranks on one
    host, each running ``threads_per_rank`` TensorFlow compute (intra-op) threads, with
    ``cores`` cores to share and ``gpus`` GPUs.

    Auto turns both on exactly when the ranks compute on CPUs and ``local_ranks x
    threads_per_rank >= cores``: no core is spare, so Horovod's own threads (its background
    loop, Gloo's I/O) preempt the compute all through the step, and the ranks' threads wander
    between cores. Pinned, each rank computes on its own cores; idle, Horovod's threads run only
    when their rank's compute waits, which is when an allreduce is due (np=2 on 2 cores:
    ``benchmarks/bench_horovod.py``). With a core spare, or on GPUs (where an idle
    communication thread could starve behind the input pipeline), auto leaves both off; so it
    does without Linux's scheduler calls (``linux``). Only this job's threads count: on a
    machine shared with other busy processes, idle threads wait behind their work too.

    >>> place_threads(None, None, local_ranks=2, threads_per_rank=1, cores=2).why
    '2 ranks x 1 TensorFlow thread on 2 cores leave no core spare'
    >>> place_threads(None, False, local_ranks=2, threads_per_rank=1, cores=8)
    ThreadPlacement(pin_cores=False, idle_threads=False, automatic=('pin_cores',), why='2 ranks x 1 TensorFlow thread on 8 cores leave 6 spare')
    """
    demand = local_ranks * threads_per_rank
    counts = f"{local_ranks} rank{'s' * (local_ranks != 1)} x {threads_per_rank} TensorFlow thread{'s' * (threads_per_rank != 1)} on {cores} core{'s' * (cores != 1)}"
    if not linux:
        busy, why = False, "no Linux scheduler calls on this system"
    elif gpus:
        busy, why = False, f"the ranks train on GPUs ({counts})"
    elif demand >= cores:
        busy, why = True, f"{counts} leave no core spare"
    else:
        busy, why = False, f"{counts} leave {cores - demand} spare"
    automatic = tuple(name for name, value in (("pin_cores", pin_cores), ("idle_threads", idle_threads)) if value is None)
    return ThreadPlacement(pin_cores=busy if pin_cores is None else pin_cores,
                           idle_threads=busy if idle_threads is None else idle_threads, automatic=automatic, why=why)


class HorovodWorld(World):
    """The real workers of a job started by ``horovodrun`` (or ``mpirun``)."""

    # Horovod's allreduce has no XLA kernel (an XLA cluster around it fails: "No registered
    # 'HorovodAllreduce' OpKernel for XLA_CPU_JIT devices"; Horovod's XLA ops are a CUDA build's
    # opt-in, HOROVOD_ENABLE_XLA_OPS): ``training.jit_compile`` compiles the forward and backward
    # pass, and the allreduce and the update run outside XLA (``prepare_model``).
    compiles_whole_step = False

    def __init__(self, *, pin_cores: bool | None = None, idle_threads: bool | None = None):
        """Initializes Horovod. The gradient compression of ``wrap_optimizer`` comes from
        ``$LBTRAIN_HOROVOD_COMPRESSION`` (``none``, the default, or ``fp16``), which ``mode:
        horovod`` sets from the experiment's ``horovod.compression``.

        Where no core is spare, Horovod's own threads (its background loop waking every cycle,
        Gloo's I/O) preempt the compute threads all through the step; two remedies
        (``place_threads`` says when auto turns them on):

        - ``idle_threads``: the threads ``hvd.init()`` starts run at Linux's ``SCHED_IDLE``, so
          they run only while their rank's compute waits (which is when an allreduce is due);
        - ``pin_cores``: every thread of the process (and those it starts later) is bound to
          the local rank's own share of the cores this process may use (``rank_cores``).

        Each is True, False or None: ``$LBTRAIN_HOROVOD_IDLE_THREADS`` /
        ``$LBTRAIN_HOROVOD_PIN_CORES`` (``1`` or ``0``; unset: auto), which ``mode: horovod``
        sets from ``horovod.idle_threads`` / ``horovod.pin_cores`` unless they are ``auto``.
        Rank 0 logs what auto chose and why (one INFO line); ``placement`` keeps it."""
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
        idle_threads = _setting(HOROVOD_IDLE_THREADS_VARIABLE) if idle_threads is None else idle_threads
        pin_cores = _setting(HOROVOD_PIN_CORES_VARIABLE) if pin_cores is None else pin_cores
        linux = hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")
        if (idle_threads or pin_cores) and not linux:
            raise ConfigError("horovod.idle_threads and horovod.pin_cores need Linux's scheduler calls (not on this system)")
        self._hvd = hvd
        before = _thread_ids() if linux else set()
        # Horovod's timeline writer would run idle with its other threads and lose the last
        # events at exit; started dynamically and stopped at exit, the timeline is complete.
        # "DYNAMIC" already means that the caller starts it (lbtrain bench): nothing to do here.
        # (Decided before hvd.init(), so an idle_threads left to auto counts as possibly on.)
        timeline = os.environ.get("HOROVOD_TIMELINE") if idle_threads is not False and linux else None
        timeline = None if timeline == "DYNAMIC" else timeline
        if timeline:
            os.environ["HOROVOD_TIMELINE"] = "DYNAMIC"  # started by hvd.start_timeline below
        hvd.init()
        horovod_threads = _thread_ids() - before if linux else set()
        self.size, self.rank, self.local_rank = hvd.size(), hvd.rank(), hvd.local_rank()
        gpus = tf.config.list_physical_devices("GPU")
        cores = usable_cores()
        self.placement = place_threads(
            pin_cores, idle_threads, local_ranks=hvd.local_size(), gpus=len(gpus), cores=len(cores), linux=linux,
            threads_per_rank=tf.config.threading.get_intra_op_parallelism_threads() or len(cores))
        if self.placement.automatic and self.rank == 0:
            logger.info(self.placement.describe())
        if self.placement.idle_threads:
            for thread in horovod_threads:
                os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
        if timeline:
            os.environ["HOROVOD_TIMELINE"] = timeline
            hvd.start_timeline(timeline, mark_cycles=os.environ.get("HOROVOD_TIMELINE_MARK_CYCLES") == "1")
            atexit.register(hvd.stop_timeline)
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if gpus:
            tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
        self.cores = rank_cores(self.local_rank, hvd.local_size(), cores) if self.placement.pin_cores else None
        if self.cores is not None:
            _pin_to_cores(self.cores)

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

    def prepare_model(self, model, per_worker_batch, noise_scale=None, accumulation_steps=1, staleness=0, jit_compile=False):
        """With ``accumulation_steps=k > 1``: a ``GradientStepModel`` whose step takes this rank's
        k batches (fed as one of ``k * per_worker_batch``) one after another, averages their
        gradients locally and allreduces once, so one update is synchronous SGD at ``size *
        per_worker_batch * k`` and the optimizer counts updates. (Horovod's own
        ``backward_passes_per_step`` advances ``optimizer.iterations`` on every backward pass,
        horovod/tensorflow/gradient_aggregation_eager.py, so the LR schedule and the step budget
        would count passes.) With ``noise_scale`` (and more than one batch per update): one whose
        step takes each batch of this rank as the small batch and the allreduced gradient as the
        big batch. ``staleness`` exists only in a simulated world. With ``jit_compile``: one whose
        step compiles each batch's forward and backward pass with XLA, outside of which it
        allreduces and applies the gradient (``GradientStepModel``'s ``compiled_gradients``)."""
        if staleness:
            raise ConfigError(f"training.staleness ({staleness}) is simulated in one process: use mode: simulated "
                              f"(Horovod's workers are synchronous)")
        tracker = None
        if noise_scale is not None and self.size * accumulation_steps > 1:
            tracker = NoiseScaleTracker(per_worker_batch, self.size * per_worker_batch * accumulation_steps, noise_scale.decay)
        if accumulation_steps == 1 and tracker is None and not jit_compile:
            return model
        return GradientStepModel(model, world=self, per_worker_batch=per_worker_batch, pieces=accumulation_steps,
                                 accumulation_steps=accumulation_steps, noise_scale=tracker, compiled_gradients=jit_compile)

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
