"""Throughput benchmarking (``lbtrain bench``): lbtrain's tf_cnn_benchmarks.

Every configuration (a model, a per-worker batch, a world) trains with momentum SGD on
synthetic data held in memory (one random batch, repeated: the training step alone), in
a fresh process, so each has its own TensorFlow thread pools and devices and, for Horovod, its
own ``horovodrun``. The same process then measures the input pipeline the trainer would build
for that run (``lbtrain.data.make_input_pipeline`` over synthetic arrays of the same shape, the
world's shard and batch) alone, without training, and the step fed by that pipeline (a run as
``lbtrain train`` makes it); ``bound`` says which of the pipeline and the step limits the run
(``bound_by``). The worlds:

- ``single``: one worker in one process;
- ``simulated:W``: ``SimulatedWorld(W)``, one process feeding ``W x b`` with ghost batch norm;
- ``horovod:N``: ``horovodrun -np N --gloo`` on this machine, the bench in every rank;
- ``independent:N``: N single-worker processes started together, nothing exchanged: the
  machine's own limit for ``horovod:N`` (same per-rank step, same cores, no communication);
- ``mirrored:N``: ``tf.distribute.MirroredStrategy`` over N logical CPU devices (N GPUs on GPU).

Models: the zoo (``mlp``, ``cnn``, ``resnet``), Keras's ResNet-50 (``resnet50``) and any name
``lbtrain.models.model_source`` resolves (a reference ``package.module:function``, a registered
name, ``keras.applications.<Name>``), each child resolving it again (it inherits the current
folder and the environment). They are built for ``Settings.input_shape`` and ``classes`` (default:
Fashion-MNIST's shape, ImageNet's for ``resnet50``); a model that does not resolve, does not
build, or whose output does not fit is a one-line error before anything runs (``check_models``,
``check_models_fit``).

Each process runs ``threads`` intra-op and inter-op threads (``configure_threads``). Reported
per configuration: images/s over all workers; scaling efficiency = images/s / (processes x the
single worker's images/s at the same model, batch and threads); on CPU the fraction of the
machine's float32 matmul peak, measured in the same run, that the training FLOPs reach
(3 x the forward FLOPs counted from the Dense and Conv layers' shapes). A Horovod configuration
can also record Horovod's timeline over its measured steps (``allreduce_share``), bind each
process to a core and run Horovod's own threads at ``SCHED_IDLE`` (``Settings``): where no core
is spare, those threads otherwise preempt the compute threads (README, Performance).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

from lbtrain.files import csv_text, write_atomic, write_json_atomic
from lbtrain.launch.error_line import error_line
from lbtrain.launch.horovodrun import horovodrun_command
from lbtrain.results import BENCH_CSV, BENCH_FIGURE, BENCH_JSON

logger = logging.getLogger(__name__)

DEVICES = ("cpu", "gpu")
DEFAULT_MODELS = ("mlp", "cnn", "resnet")
# Keras's ResNet-50 (tf_cnn_benchmarks' reference model), benchmarked by default only on a GPU.
GPU_MODELS = ("resnet50",)
DEFAULT_BATCHES = (64,)
DEFAULT_WORLDS = ("single", "simulated:4", "mirrored:2", "independent:2", "horovod:2")
DEFAULT_OUTPUT = Path("results/benchmarks/bench")
# The models see Fashion-MNIST's shape (unless told otherwise); ResNet-50 ImageNet's.
ZOO_INPUT = ((28, 28, 1), 10)
RESNET50_INPUT = ((224, 224, 3), 1000)
MIN_STEPS = 5
RESULT_PREFIX = "lbtrain-bench-result "
COLUMNS = ("model", "input_shape", "classes", "per_worker_batch", "world", "workers", "processes", "threads", "device", "global_batch", "steps",
           "seconds", "images_per_second", "pipeline_images_per_second", "fed_images_per_second", "bound", "scaling_efficiency",
           "train_mflops_per_sample", "achieved_gflops", "peak_fraction", "allreduce_share", "status")
# The input pipeline must deliver at least this many times the step's images/s to keep it fed
# (``bound_by``): it runs beside the step on the same cores, and its prefetch hides only slack.
INPUT_BOUND_MARGIN = 1.2
# Batches of one epoch of the pipeline's synthetic arrays, per shard: enough to cross epoch
# boundaries (a reshuffle) while the arrays stay small.
PIPELINE_EPOCH_BATCHES = 4
# Horovod's timeline activities that move gradient bytes (per controller / library).
ALLREDUCE_ACTIVITIES = ("ALLREDUCE", "NCCL_ALLREDUCE", "MPI_ALLREDUCE", "GLOO_ALLREDUCE")


class BenchError(ValueError):
    """Bad input to the benchmark (a model, world or device that cannot run here)."""


@dataclasses.dataclass(frozen=True)
class WorldKind:
    """How ``lbtrain bench`` sets up a kind of world of N workers: ``launch`` says how its
    processes start (``child``: one process; ``independent``: N single-worker processes side by
    side, the machine's own limit; ``horovodrun``: N Horovod ranks); ``feeds_all_workers``: one
    process feeds all N workers' batches (a simulated world, a mirrored strategy);
    ``mirrored_devices``: those batches go through a ``MirroredStrategy`` over N logical devices;
    ``baseline``: the single worker every ratio divides by."""

    name: str
    launch: str = "child"
    feeds_all_workers: bool = False
    mirrored_devices: bool = False
    baseline: bool = False


WORLD_KINDS = {kind.name: kind for kind in (
    WorldKind("single", baseline=True),
    WorldKind("simulated", feeds_all_workers=True),
    WorldKind("horovod", launch="horovodrun"),
    WorldKind("independent", launch="independent"),
    WorldKind("mirrored", feeds_all_workers=True, mirrored_devices=True),
)}


@dataclasses.dataclass(frozen=True)
class WorldSpec:
    """A world to benchmark: ``kind`` (one of ``WORLD_KINDS``) with ``size`` workers."""

    kind: str
    size: int = 1

    @classmethod
    def parse(cls, text: str) -> WorldSpec:
        """``single`` or ``KIND:N``.

        >>> WorldSpec.parse("horovod:2")
        WorldSpec(kind='horovod', size=2)
        >>> WorldSpec.parse("simulated")
        Traceback (most recent call last):
          ...
        lbtrain.bench.BenchError: world 'simulated' needs a size: simulated:N
        """
        kind, _, size = text.strip().partition(":")
        if kind not in WORLD_KINDS:
            allowed = [name if known.baseline else f"{name}:N" for name, known in WORLD_KINDS.items()]
            raise BenchError(f"unknown world {text!r} (allowed: {', '.join(allowed)})")
        if WORLD_KINDS[kind].baseline:
            if size not in ("", "1"):
                raise BenchError(f"world {kind!r} has one worker, got {text!r}")
            return cls(kind)
        if not size:
            raise BenchError(f"world {text!r} needs a size: {kind}:N")
        if not size.isdigit() or int(size) < 1:
            raise BenchError(f"world {text!r}: the size must be a whole number >= 1")
        return cls(kind, int(size))

    @property
    def label(self) -> str:
        return self.kind if self.setup.baseline else f"{self.kind}:{self.size}"

    @property
    def processes(self) -> int:
        """How many processes compute side by side."""
        return self.size if self.setup.launch != "child" else 1

    @property
    def setup(self) -> WorldKind:
        """How this kind of world is set up."""
        return WORLD_KINDS[self.kind]


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration: a model, a per-worker batch and a world."""

    model: str
    per_worker_batch: int
    world: WorldSpec


@dataclasses.dataclass(frozen=True)
class Settings:
    """How every configuration is measured.

    - ``device``: ``cpu`` (GPUs hidden) or ``gpu``; ``threads``: each process's intra- and
      inter-op threads (None: TensorFlow's default);
    - ``steps``: measured steps per worker; None: about ``seconds`` each (from a timed probe
      after ``warmup_steps``), the worlds of a model and batch taking the single worker's count
      (divided by W for the one-process worlds of W workers);
    - Horovod worlds: ``horovod_env`` is added to ``horovodrun``'s environment (Horovod's
      knobs); ``timeline`` records a Horovod timeline over the measured steps;
      ``allreduce_groups`` allreduces the gradients in that many groups, each once all its
      gradients are ready (None: Horovod's per-tensor allreduce, as the trainer's ``HorovodWorld``);
      ``idle_horovod_threads`` runs the threads Horovod starts (its background loop, Gloo's) at
      ``SCHED_IDLE``: only while the process's own compute waits;
    - ``pin_cores`` binds the i-th process of a world (rank or index) to core i mod the cores;
      in a Horovod world, ``pin_cores`` and ``idle_horovod_threads`` None leave both to
      ``HorovodWorld``'s ``auto`` (``lbtrain.worlds.horovod.place_threads``);
    - ``input_shape`` (one sample's, no batch axis) and ``classes``: the synthetic data every
      model is built for and fed (None: ``ZOO_INPUT``'s, ``RESNET50_INPUT``'s for ``resnet50``);
    - ``input_pipeline``: after the step alone, also measure the trainer's input pipeline alone
      and the step fed by it (False: the step alone, in about half the time).
    """

    device: str = "cpu"
    threads: int | None = 1
    seconds: float = 2.0
    steps: int | None = None
    warmup_steps: int = 5
    seed: int = 0
    horovod_env: dict[str, str] = dataclasses.field(default_factory=dict)
    timeline: bool = False
    pin_cores: bool | None = False
    allreduce_groups: int | None = None
    idle_horovod_threads: bool | None = False
    input_shape: tuple[int, ...] | None = None
    classes: int | None = None
    input_pipeline: bool = True


def bench_input(model: str, settings: Settings = Settings()) -> tuple[tuple[int, ...], int]:
    """``(input_shape, classes)`` of the synthetic data ``model`` is built for and fed.

    >>> bench_input("my_pkg.models:build", Settings(classes=3))
    ((28, 28, 1), 3)
    >>> bench_input("resnet50", Settings(input_shape=(64, 64, 3)))
    ((64, 64, 3), 1000)
    """
    default_shape, default_classes = RESNET50_INPUT if model == "resnet50" else ZOO_INPUT
    shape = default_shape if settings.input_shape is None else tuple(int(d) for d in settings.input_shape)
    return shape, default_classes if settings.classes is None else int(settings.classes)


# ---------------------------------------------------------------- what a model costs


def forward_macs_per_sample(model) -> int:
    """Multiply-accumulates of one sample's forward pass through the Dense and Conv layers of a
    functional Keras model (nested models included): per layer, the output's positions (all
    axes but batch and channels) x the kernel's size. Other layers count 0."""
    import tensorflow as tf

    counted = (tf.keras.layers.Dense, tf.keras.layers.Conv1D, tf.keras.layers.Conv2D, tf.keras.layers.Conv3D)
    total = 0
    for layer in model.layers:
        if isinstance(layer, tf.keras.Model):
            total += forward_macs_per_sample(layer)
        elif isinstance(layer, counted):
            positions = math.prod(int(d) for d in layer.output.shape[1:-1])
            total += positions * math.prod(int(d) for d in layer.kernel.shape)
    return total


def training_flops_per_sample(model) -> float | None:
    """FLOPs of one sample's training step, ~3x the forward pass (the backward pass computes
    gradients of activations and of weights, each about one forward pass): 3 x 2 x MACs.
    None where the layers' shapes cannot be read (a subclassed model's layers have no graph)."""
    try:
        return 6.0 * forward_macs_per_sample(model)
    except (AttributeError, ValueError, RuntimeError):
        return None


def matmul_peak_flops(size: int = 2048, chain: int = 4, repeats: int = 5) -> float:
    """This process's float32 matmul FLOP/s: the best of ``repeats`` timed chains of ``chain``
    ``size x size`` products (2 x size^3 FLOPs each) in one ``tf.function``, with the threads
    TensorFlow is configured for."""
    import tensorflow as tf

    left = tf.random.normal((size, size), seed=1)
    right = tf.random.normal((size, size), seed=2) / math.sqrt(size)  # keeps the chain's scale

    @tf.function
    def products(matrix):
        for _ in range(chain):
            matrix = tf.matmul(matrix, right)
        return tf.reduce_sum(matrix)

    products(left).numpy()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        products(left).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 * chain / best


# ---------------------------------------------------------------- one configuration, in its process


def build_bench_model(name: str, seed: int, input_shape: Sequence[int] | None = None, classes: int | None = None):
    """Model ``name`` (any name ``lbtrain.models.build_model`` takes, or ``resnet50``: Keras's
    ResNet-50, random weights, logits) built for ``input_shape`` and ``classes`` (None: those
    of ``bench_input``); returns ``(model, input_shape, classes)``."""
    from lbtrain.models import build_model

    shape, width = bench_input(name, Settings(input_shape=None if input_shape is None else tuple(input_shape), classes=classes))
    reference = "keras.applications.ResNet50" if name == "resnet50" else name
    return build_model(reference, shape, width, seed=seed), shape, width


def fit_problem(name: str, model, input_shape: Sequence[int], classes: int) -> str | None:
    """Why ``model`` cannot train on the bench's synthetic data (a batch of ``input_shape`` in,
    one vector of ``classes`` logits, or one for 2 classes, per sample out), or None."""
    import tensorflow as tf

    try:
        output = model(tf.zeros((2, *input_shape)), training=False)
    except Exception as error:  # the user's model raises what it raises
        first_line = (str(error).strip().splitlines() or [""])[0]
        return (f"model {name!r} does not take inputs of shape {tuple(input_shape)} ({type(error).__name__}: {first_line}); "
                "set the synthetic data's shape with --input-shape")
    if isinstance(output, (list, tuple, dict)):
        return f"model {name!r} has {len(output)} outputs; the bench trains a model with one output of logits"
    shape = tuple(output.shape)
    if len(shape) != 2:
        return (f"model {name!r} outputs shape {shape[1:]} per sample; the bench needs one vector of {classes} logits per sample "
                "(add a Flatten or pooling before the last Dense)")
    if shape[-1] != classes and not (shape[-1] == 1 and classes == 2):
        return (f"model {name!r} has {shape[-1]} outputs but the bench's synthetic labels are {classes} classes; make its last "
                f"layer Dense({classes}) or run with --classes {shape[-1]}")
    return None


def _loss(model, input_shape: Sequence[int]):
    """Cross-entropy for ``model``'s output (``lbtrain.objectives``'s choice): binary for one
    output, on probabilities where the last layer applies softmax or sigmoid, else on logits."""
    import tensorflow as tf

    from lbtrain.objectives import output_activation

    activation = output_activation(model)
    outputs = getattr(model, "outputs", None)
    width = outputs[0].shape[-1] if outputs else model(tf.zeros((1, *input_shape)), training=False).shape[-1]
    if int(width) == 1:
        return tf.keras.losses.BinaryCrossentropy(from_logits=activation != "sigmoid")
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=activation != "softmax")


def _set_up_devices(job: dict) -> None:
    """Threads, visible GPUs, and the logical CPUs of a mirrored world: before TensorFlow runs an op."""
    import tensorflow as tf

    from lbtrain.worlds.base import configure_threads

    configure_threads(job["threads"], job["threads"])
    if job["device"] == "cpu":
        tf.config.set_visible_devices([], "GPU")
    elif WORLD_KINDS[job["kind"]].launch == "independent":
        gpus = tf.config.list_physical_devices("GPU")
        tf.config.set_visible_devices(gpus[job["index"] % len(gpus)], "GPU")
    if WORLD_KINDS[job["kind"]].mirrored_devices and job["device"] == "cpu":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * job["size"])


def _world_and_strategy(job: dict):
    """The lbtrain world of this process and the tf.distribute strategy to build under."""
    import tensorflow as tf

    from lbtrain.worlds.horovod import HorovodWorld
    from lbtrain.worlds.simulated import SimulatedWorld

    kind = WORLD_KINDS[job["kind"]]
    if kind.launch == "horovodrun":
        # run_job has bound the whole process already, before TensorFlow started (``job["pin"]``);
        # None leaves it to HorovodWorld (auto)
        return HorovodWorld(idle_threads=job["idle"], pin_cores=None if job["pin"] is None else False), tf.distribute.get_strategy()
    if kind.mirrored_devices:
        devices = [device.name for device in tf.config.list_logical_devices("GPU" if job["device"] == "gpu" else "CPU")]
        if len(devices) < job["size"]:
            raise BenchError(f"mirrored:{job['size']} needs {job['size']} devices, this process has {len(devices)}")
        return SimulatedWorld(1), tf.distribute.MirroredStrategy(devices[:job["size"]])
    return SimulatedWorld(job["size"] if kind.feeds_all_workers else 1), tf.distribute.get_strategy()


def _synthetic_batches(batch: int, input_shape: Sequence[int], classes: int, seed: int):
    """One random batch (standard-normal inputs, uniform labels), repeated forever."""
    import tensorflow as tf

    images = tf.random.normal((batch, *input_shape), seed=seed)
    labels = tf.random.uniform((batch,), maxval=classes, dtype=tf.int32, seed=seed)
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch, drop_remainder=True).take(1).cache().repeat()


def trainer_pipeline(world, process_batch: int, per_worker_batch: int, input_shape: Sequence[int], classes: int, seed: int):
    """The training input ``lbtrain.trainer`` builds in this process of ``world``:
    ``make_input_pipeline`` of the process's shard (``World.input_shard``) at ``process_batch``
    samples a batch, through ``World.training_input``, over lbtrain's ``synthetic`` arrays of
    ``input_shape`` and ``classes`` (``PIPELINE_EPOCH_BATCHES`` batches an epoch per shard). The
    pipeline gathers samples from arrays in memory, so its cost depends on the samples' shape and
    the batch, not on their values: synthetic arrays of the run's shape cost what its data would."""
    from lbtrain.data import load_dataset, make_input_pipeline

    shard, shards = world.input_shard()
    data = load_dataset("synthetic", input_shape=[int(d) for d in input_shape], num_classes=int(classes),
                        train_size=PIPELINE_EPOCH_BATCHES * shards * process_batch, test_size=1, generator_seed=seed)
    pipeline = make_input_pipeline(data.x_train, data.y_train, per_worker_batch=process_batch, rank=shard, world_size=shards,
                                   seed=seed, training=True)
    return world.training_input(pipeline, per_worker_batch)


def _timed_pipeline(dataset, steps: int, warmup: int) -> float:
    """Seconds ``dataset`` alone takes to deliver ``steps`` batches, after ``warmup`` batches
    (which start its threads and fill its prefetch buffer); the batches are pulled inside a
    ``tf.function``, as ``fit``'s compiled step pulls them, and nothing is computed on them."""
    import tensorflow as tf

    iterator = iter(dataset)

    @tf.function
    def pull(count):
        for _ in tf.range(count):
            next(iterator)

    pull(tf.constant(warmup))
    start = time.perf_counter()
    pull(tf.constant(steps))
    return time.perf_counter() - start


def bound_by(pipeline_images_per_second: float, step_images_per_second: float, margin: float = INPUT_BOUND_MARGIN) -> str:
    """What limits a run: ``input-bound`` where the input pipeline alone delivers fewer than
    ``margin`` x the images/s the training step alone takes, else ``compute-bound``.

    >>> bound_by(1100.0, 1000.0), bound_by(1200.0, 1000.0), bound_by(50000.0, 1000.0)
    ('input-bound', 'compute-bound', 'compute-bound')
    """
    return "input-bound" if pipeline_images_per_second < margin * step_images_per_second else "compute-bound"


def _timeline_switch(path: str | None) -> tuple[Callable[[], None], Callable[[], None]]:
    """``(start, stop)`` of a Horovod timeline at ``path``; without a path, two no-ops."""
    if not path:
        return (lambda: None), (lambda: None)
    import horovod.tensorflow as hvd

    return (lambda: hvd.start_timeline(path)), hvd.stop_timeline


def _timed_fit(model, data, steps: int, callbacks: list, timeline: str | None = None) -> float:
    """Seconds of ``steps`` steps, timed in a ``fit`` of ``steps + 1`` from the end of its first
    step (which also starts the data iterator and, under Horovod, waits for the other ranks) to
    the end of the epoch (results synced). With ``timeline`` (a path), Horovod records its
    timeline over the same steps."""
    import tensorflow as tf

    seconds: list[float] = []
    start_timeline, stop_timeline = _timeline_switch(timeline)

    class StepTimer(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                start_timeline()
                self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds.append(time.perf_counter() - self.start)
            stop_timeline()

    model.fit(data, epochs=1, steps_per_epoch=steps + 1, verbose=0, callbacks=[*callbacks, StepTimer()])
    return seconds[0]


def _wait_for_all(folder: str, index: int, size: int, stage: str = "ready", timeout: float = 600.0) -> None:
    """A barrier between the independent processes: each marks itself at ``stage`` in ``folder``
    and waits until all ``size`` are (so their measured steps run at the same time)."""
    Path(folder, f"{stage}-{index}").touch()
    deadline = time.monotonic() + timeout
    while len(list(Path(folder).glob(f"{stage}-*"))) < size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"independent processes: only some of {size} got ready within {timeout:.0f} s")
        time.sleep(0.001)


def _wrap_optimizer(world, optimizer, job: dict):
    """The world's optimizer; in a Horovod world with ``groups``, Horovod's
    ``DistributedOptimizer(groups=...)``, whose allreduce of a group waits for all its gradients."""
    if WORLD_KINDS[job["kind"]].launch != "horovodrun" or job["groups"] is None:
        return world.wrap_optimizer(optimizer)
    import horovod.tensorflow.keras as hvd

    return hvd.DistributedOptimizer(optimizer, groups=job["groups"])


def _process_index(job: dict) -> int:
    """This process's place in its world: the local rank under horovodrun, else its index."""
    return int(os.environ.get("HOROVOD_LOCAL_RANK", job.get("index", 0)))


def run_job(job: dict) -> dict:
    """Measures one configuration in this process (a child of ``run_benchmark``; under
    horovodrun, one rank): warm-up, a timed probe that sets the steps (unless given), the
    measured steps on one batch in memory (``_timed_fit``: the step alone); then the trainer's
    input pipeline for this world (``trainer_pipeline``) alone for as many batches
    (``_timed_pipeline``), and the same steps fed by it. Returns the images, steps and seconds
    of each (all ranks' images under Horovod) and the training FLOPs per sample."""
    if job["pin"]:
        os.sched_setaffinity(0, {_process_index(job) % os.cpu_count()})
    import tensorflow as tf

    _set_up_devices(job)
    world, strategy = _world_and_strategy(job)
    with strategy.scope():
        model, input_shape, classes = build_bench_model(job["model"], job["seed"], job.get("input_shape"), job.get("classes"))
        flops = training_flops_per_sample(model)
        loss = _loss(model, input_shape)
        model = world.prepare_model(model, job["batch"])
        optimizer = _wrap_optimizer(world, tf.keras.optimizers.SGD(0.01, momentum=0.9), job)
        model.compile(optimizer=optimizer, loss=loss)
    kind = WORLD_KINDS[job["kind"]]
    workers = job["size"] if kind.feeds_all_workers else 1
    data = _synthetic_batches(workers * job["batch"], input_shape, classes, job["seed"] + world.rank)
    callbacks = world.callbacks()
    model.fit(data, epochs=1, steps_per_epoch=job["warmup"], verbose=0, callbacks=callbacks)
    steps = job["steps"]
    if steps is None:
        probe = _timed_fit(model, data, MIN_STEPS, callbacks) / MIN_STEPS
        steps = world.broadcast_object(max(MIN_STEPS, math.ceil(job["seconds"] / probe)))
    if kind.launch == "independent":
        _wait_for_all(job["barrier"], job["index"], job["size"])
    seconds = _timed_fit(model, data, steps, callbacks, job.get("timeline"))
    images = steps * workers * job["batch"] * (world.size if kind.launch == "horovodrun" else 1)
    result = {"rank": world.rank, "steps": steps, "seconds": seconds, "images": images, "train_flops_per_sample": flops}
    if job["pipeline"]:
        pipeline = trainer_pipeline(world, workers * job["batch"], job["batch"], input_shape, classes, job["seed"])
        # Independent processes wait for each other: none measures while another still measures the step.
        if kind.launch == "independent":
            _wait_for_all(job["barrier"], job["index"], job["size"], stage="pipeline")
        result["pipeline_seconds"] = _timed_pipeline(pipeline, steps, job["warmup"])
        if kind.launch == "independent":
            _wait_for_all(job["barrier"], job["index"], job["size"], stage="fed")
        result["fed_seconds"] = _timed_fit(model, pipeline, steps, callbacks)
    return result


def check_job(job: dict) -> dict:
    """Builds each of ``job["models"]`` (``name``, ``input_shape``, ``classes``) in this process
    (a child of ``check_models_fit``: it resolves the names as the measuring children will, GPUs
    hidden) and, with ``ghost_bn_batch``, gives it ghost batch norm as a simulated world does;
    returns ``{"problems": {name: one line}}`` for those that cannot be benchmarked."""
    import tensorflow as tf

    from lbtrain.models import ModelError, set_virtual_batch_size

    tf.config.set_visible_devices([], "GPU")
    problems = {}
    for spec in job["models"]:
        name = spec["name"]
        try:
            model, input_shape, classes = build_bench_model(name, job["seed"], spec["input_shape"], spec["classes"])
        except (ModelError, BenchError) as error:
            problems[name] = f"{error} (the bench's synthetic data: --input-shape, --classes)"
            continue
        problem = fit_problem(name, model, input_shape, classes)
        if problem is None and job.get("ghost_bn_batch"):
            try:
                set_virtual_batch_size(model, job["ghost_bn_batch"])
            except ModelError as error:
                problem = f"{name!r} in a simulated world: {error}"
        if problem is not None:
            problems[name] = problem
        tf.keras.backend.clear_session()
    return {"problems": problems}


def _child_main(argv: Sequence[str]) -> int:
    """``python -m lbtrain.bench JOB_JSON`` (or ``--peak``, or ``--check CHECK_JSON``): prints
    the result on one line."""
    if argv[0] == "--peak":
        result: dict[str, Any] = {"flops": matmul_peak_flops()}
    elif argv[0] == "--check":
        result = check_job(json.loads(argv[1]))
    else:
        result = run_job(json.loads(argv[0]))
        if result["rank"] != 0:
            return 0
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- launching configurations


class CaseFailed(RuntimeError):
    """A configuration's process failed; the message is its last words."""


def _child_command(*arguments: str) -> list[str]:
    """The command that runs this module's ``_child_main`` with ``arguments``."""
    return [sys.executable, "-m", "lbtrain.bench", *arguments]


def _result_of(process: subprocess.CompletedProcess) -> dict:
    """The result line of a finished child, or ``CaseFailed`` with its error line
    (``lbtrain.launch.error_line``: a rank's own under horovodrun)."""
    for line in process.stdout.splitlines():
        _, marker, payload = line.partition(RESULT_PREFIX)
        if marker:
            return json.loads(payload)
    raise CaseFailed(f"exit code {process.returncode}: {error_line(process.stderr + process.stdout)}")


def _run(command: list[str], env: dict[str, str] | None = None) -> dict:
    """Runs ``command`` to its end; its result line (``_result_of``)."""
    return _result_of(subprocess.run(command, capture_output=True, text=True, env=env))


def _job(case: Case, settings: Settings, steps: int | None) -> dict:
    """What a child needs to measure ``case`` (JSON-ready; ``run_job`` reads it)."""
    input_shape, classes = bench_input(case.model, settings)
    return {"model": case.model, "input_shape": list(input_shape), "classes": classes,
            "batch": case.per_worker_batch, "kind": case.world.kind, "size": case.world.size,
            "device": settings.device, "threads": settings.threads, "steps": settings.steps if steps is None else steps,
            "seconds": settings.seconds, "warmup": settings.warmup_steps, "seed": settings.seed, "pin": settings.pin_cores,
            "groups": settings.allreduce_groups, "idle": settings.idle_horovod_threads, "pipeline": settings.input_pipeline}


def _wait_for_children(children: list[subprocess.Popen]) -> None:
    """Waits for every child; once one fails, ends the others (they would wait at the barrier)."""
    while any(child.poll() is None for child in children):
        if any(child.returncode for child in children):
            for child in children:
                if child.poll() is None:
                    child.terminate()
        time.sleep(0.05)


def _run_independent(job: dict) -> dict:
    """``size`` single-worker processes at once; images/s = all their images / the longest
    measured time (as a synchronous world, the group is done when its slowest process is)."""
    with tempfile.TemporaryDirectory(prefix="lbtrain-bench-") as barrier:
        outputs = [(Path(barrier, f"out-{index}"), Path(barrier, f"err-{index}")) for index in range(job["size"])]
        children = []
        for index, (out, err) in enumerate(outputs):
            with out.open("w") as stdout, err.open("w") as stderr:
                command = _child_command(json.dumps({**job, "barrier": barrier, "index": index}))
                children.append(subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True))
        _wait_for_children(children)
        # A child that failed comes first, so that its error is reported rather than a terminated one's.
        results = [_result_of(subprocess.CompletedProcess(child.args, child.returncode, out.read_text(), err.read_text()))
                   for child, (out, err) in sorted(zip(children, outputs), key=lambda pair: pair[0].returncode <= 0)]
    return {**results[0], "images": sum(r["images"] for r in results), "seconds": max(r["seconds"] for r in results),
            "process_seconds": [r["seconds"] for r in results],
            **{key: max(r[key] for r in results) for key in ("pipeline_seconds", "fed_seconds") if key in results[0]}}


def _run_horovod(job: dict, settings: Settings) -> dict:
    """``horovodrun -np N --gloo`` on this machine; with ``settings.timeline`` also the share
    of the measured time that Horovod spent in allreduce (its timeline)."""
    size = job["size"]
    with tempfile.TemporaryDirectory(prefix="lbtrain-bench-") as folder:
        env = {**os.environ, **settings.horovod_env}
        if settings.timeline:
            env["HOROVOD_TIMELINE"] = "DYNAMIC"
            job = {**job, "timeline": str(Path(folder) / "timeline.json")}
        command = horovodrun_command(size, _child_command(json.dumps(job)), args=["--gloo"])
        result = _run(command, env)
        if settings.timeline:
            result["allreduce_share"] = allreduce_seconds(read_timeline(job["timeline"])) / result["seconds"]
    return result


def measure_case(case: Case, settings: Settings, steps: int | None = None) -> dict:
    """Runs one configuration in its own process(es) for ``steps`` measured steps per worker
    (default ``settings.steps``; None: about ``settings.seconds``); returns its result
    (``images``, ``seconds``, ``steps``, ``train_flops_per_sample``, ...). Raises ``CaseFailed``."""
    job = _job(case, settings, steps)
    if case.world.setup.launch == "horovodrun":
        return _run_horovod(job, settings)
    if case.world.setup.launch == "independent":
        return _run_independent(job)
    return _run(_child_command(json.dumps(job)))


def measure_peak_flops() -> float:
    """The machine's float32 matmul FLOP/s, measured in a fresh process with TensorFlow's
    default threads (all cores)."""
    return _run(_child_command("--peak"))["flops"]


# ---------------------------------------------------------------- Horovod's timeline


def read_timeline(path: str | os.PathLike) -> list[dict]:
    """The events of a Horovod timeline (Chrome trace JSON: an array Horovod may leave
    unclosed)."""
    text = Path(path).read_text().strip().rstrip(",")
    if not text.endswith("]"):
        text += "]"
    return json.loads(text)


def allreduce_seconds(events: Iterable[dict]) -> float:
    """Seconds during which at least one allreduce activity (``ALLREDUCE_ACTIVITIES``) was in
    progress: the union of their begin/end intervals over all tensors (fused tensors overlap).

    >>> allreduce_seconds([{"ph": "B", "name": "ALLREDUCE", "pid": 1, "ts": 0},
    ...                    {"ph": "B", "name": "ALLREDUCE", "pid": 2, "ts": 500},
    ...                    {"ph": "E", "pid": 1, "ts": 1000}, {"ph": "E", "pid": 2, "ts": 1500},
    ...                    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "pid": 1, "ts": 2000},
    ...                    {"ph": "E", "pid": 1, "ts": 9000}])
    0.0015
    """
    open_events: dict[tuple, list[tuple[str, float]]] = {}
    intervals: list[tuple[float, float]] = []
    for event in sorted(events, key=lambda e: e.get("ts", 0)):
        key = (event.get("pid"), event.get("tid"))
        if event.get("ph") == "B":
            open_events.setdefault(key, []).append((event.get("name", ""), event["ts"]))
        elif event.get("ph") == "E" and open_events.get(key):
            name, start = open_events[key].pop()
            if name in ALLREDUCE_ACTIVITIES:
                intervals.append((start, event["ts"]))
        elif event.get("ph") == "X" and event.get("name") in ALLREDUCE_ACTIVITIES:
            intervals.append((event["ts"], event["ts"] + event.get("dur", 0)))
    return _union_length(intervals) / 1e6


def _union_length(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


# ---------------------------------------------------------------- the matrix


def check_worlds(worlds: Sequence[WorldSpec], explicit: bool) -> tuple[list[WorldSpec], list[str]]:
    """The worlds that can run here, and a note for each left out. A world that cannot run is
    a ``BenchError`` when asked for explicitly, a note when it came from the defaults."""
    runnable, notes = [], []
    for world in worlds:
        problem = world_problem(world)
        if problem is None:
            runnable.append(world)
        elif explicit:
            raise BenchError(problem)
        else:
            notes.append(f"skipped {world.label}: {problem}")
    return runnable, notes


def world_problem(world: WorldSpec) -> str | None:
    """Why ``world`` cannot run on this stack, or None."""
    if world.setup.launch != "horovodrun":
        return None
    from lbtrain.launch.horovodrun import horovod_launch_problem

    return horovod_launch_problem()


def default_models(device: str) -> list[str]:
    """The zoo models, and ResNet-50 too on a GPU."""
    return [*DEFAULT_MODELS, *(GPU_MODELS if device == "gpu" else ())]


def model_names(models: Sequence[str | Callable[..., Any]]) -> list[str]:
    """The models by name: a factory given as a Python function becomes its reference
    (``lbtrain.registry.reference_of``), which ``check_models`` refuses if no other process can
    import it."""
    from lbtrain.registry import reference_of

    return [model if isinstance(model, str) else reference_of(model) for model in models]


def check_models(models: Sequence[str]) -> None:
    """Resolves every name as the children will (``lbtrain.models.model_source``; ``resnet50``
    is Keras's ResNet-50). Raises ``ModelError`` for a reference that does not import (or names
    nothing callable), ``BenchError`` for an unknown name or a model only this process can build
    (every configuration runs in a fresh process)."""
    from lbtrain.models import MODELS, ModelError, model_source
    from lbtrain.registry import MODEL_REGISTRY, is_reference
    from lbtrain.spelling import did_you_mean

    for name in models:
        if name in GPU_MODELS:
            continue
        try:
            source = model_source(name)
        except ModelError:
            if is_reference(name) or name.startswith(("keras.", "tf.keras.")):
                raise
            known = [*MODELS, *GPU_MODELS, *MODEL_REGISTRY.names()]
            raise BenchError(f"unknown model {name!r} ({did_you_mean(name, known)}allowed: {', '.join(known)}, "
                             "a reference package.module:function, or keras.applications.<Name>)") from None
        if source.process_local:
            raise BenchError(f"model {name!r} can be built only in this process (a lambda, a closure, a function of "
                             "__main__ or registered from one), and the bench builds it in fresh processes: "
                             "define it in a module that can be imported")


def _needs_check(name: str, settings: Settings) -> bool:
    """Whether ``name`` might not build or fit: anything but lbtrain's own models at their own shapes."""
    from lbtrain.models import MODELS

    return name not in (*MODELS, *GPU_MODELS) or settings.input_shape is not None or settings.classes is not None


def check_models_fit(models: Sequence[str], batches: Sequence[int], worlds: Sequence[WorldSpec],
                     settings: Settings = Settings()) -> None:
    """Builds every model that might not fit (``_needs_check``) in a fresh process, as the
    measuring children will, for its synthetic data (``bench_input``), with ghost batch norm if
    a simulated world of several workers is among ``worlds``; raises ``BenchError`` (the first
    model's one line) for one that does not build, does not take the input, or whose output is
    not one logit per class. Runs nothing when no model needs it."""
    if settings.classes is not None and settings.classes < 2:
        raise BenchError(f"classes={settings.classes}: the synthetic labels need at least 2 classes "
                         "(a model with one output: 2 classes, binary)")
    if settings.input_shape is not None and (not settings.input_shape or min(settings.input_shape) < 1):
        raise BenchError(f"input_shape: expected whole numbers >= 1, got {settings.input_shape}")
    names = [name for name in dict.fromkeys(models) if _needs_check(name, settings)]
    if not names:
        return
    ghost = any(world.setup.feeds_all_workers and not world.setup.mirrored_devices and world.size > 1 for world in worlds)
    specs = [dict(zip(("input_shape", "classes"), bench_input(name, settings)), name=name) for name in names]
    job = {"models": specs, "seed": settings.seed, "ghost_bn_batch": min(batches) if ghost and batches else None}
    try:
        problems = _run(_child_command("--check", json.dumps(job)))["problems"]
    except CaseFailed as error:
        raise BenchError(f"building {', '.join(names)} to check them failed: {error}") from None
    for name in names:
        if name in problems:
            raise BenchError(problems[name])


def check_device(device: str) -> None:
    """Raises ``BenchError`` for ``gpu`` on a machine where TensorFlow sees none."""
    if device not in DEVICES:
        raise BenchError(f"unknown device {device!r} (allowed: {', '.join(DEVICES)})")
    if device == "gpu":
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU"):
            raise BenchError("--device gpu: TensorFlow sees no GPU on this machine (run with --device cpu)")


def plan(models: Sequence[str], batches: Sequence[int], worlds: Sequence[WorldSpec]) -> list[Case]:
    """Every model x batch x world, the single worker first in each (model, batch) group (its
    throughput is the others' baseline and its steps theirs)."""
    ordered = sorted(dict.fromkeys(worlds), key=lambda world: not world.setup.baseline)
    return [Case(model, batch, world) for model in models for batch in batches for world in ordered]


def _steps_for(case: Case, settings: Settings, single_steps: dict[tuple[str, int], int]) -> int | None:
    """When the settings fix no steps: the single worker's count for this model and batch
    (divided by W for one process of W workers); None where the settings decide."""
    base = single_steps.get((case.model, case.per_worker_batch))
    if settings.steps is not None or base is None:
        return None
    return base if case.world.processes > 1 or case.world.setup.baseline else max(MIN_STEPS, base // case.world.size)


def make_row(case: Case, settings: Settings, result: dict | None, status: str) -> dict:
    """One CSV row (ratios are filled in by ``add_ratios``): images/s of the step alone
    (``images_per_second``), of the input pipeline alone and of the step fed by it, and which of
    the two bounds the run (``bound_by``)."""
    input_shape, classes = bench_input(case.model, settings)
    row = {"model": case.model, "input_shape": "x".join(str(d) for d in input_shape), "classes": classes,
           "per_worker_batch": case.per_worker_batch, "world": case.world.label,
           "workers": case.world.size, "processes": case.world.processes, "threads": settings.threads,
           "device": settings.device, "global_batch": case.world.size * case.per_worker_batch, "status": status}
    if result is not None:
        step = result["images"] / result["seconds"]
        if "pipeline_seconds" in result:
            pipeline = result["images"] / result["pipeline_seconds"]
            row.update(pipeline_images_per_second=pipeline, fed_images_per_second=result["images"] / result["fed_seconds"],
                       bound=bound_by(pipeline, step))
        row.update(steps=result["steps"], seconds=result["seconds"], images_per_second=step,
                   train_mflops_per_sample=None if result["train_flops_per_sample"] is None else result["train_flops_per_sample"] / 1e6,
                   allreduce_share=result.get("allreduce_share"))
    return row


def add_ratios(rows: list[dict], peak_flops: float | None) -> list[dict]:
    """Adds scaling efficiency (against the ok single-worker row of the same model, batch,
    threads and device) and, given the peak, achieved GFLOP/s and the peak fraction.

    >>> rows = add_ratios([{"model": "m", "per_worker_batch": 8, "world": "single", "processes": 1, "threads": 1,
    ...                     "device": "cpu", "status": "ok", "images_per_second": 100.0, "train_mflops_per_sample": 5.0},
    ...                    {"model": "m", "per_worker_batch": 8, "world": "horovod:2", "processes": 2, "threads": 1,
    ...                     "device": "cpu", "status": "ok", "images_per_second": 180.0, "train_mflops_per_sample": 5.0}],
    ...                   peak_flops=2e9)
    >>> [(row["scaling_efficiency"], row["achieved_gflops"], row["peak_fraction"]) for row in rows]
    [(1.0, 0.5, 0.25), (0.9, 0.9, 0.45)]
    """
    def group(row: dict) -> tuple:
        return row["model"], row.get("input_shape"), row.get("classes"), row["per_worker_batch"], row["threads"], row["device"]

    singles = {group(row): row["images_per_second"] for row in rows if row["world"] == "single" and row["status"] == "ok"}
    for row in rows:
        if row["status"] != "ok":
            continue
        single = singles.get(group(row))
        row["scaling_efficiency"] = None if single is None else row["images_per_second"] / (row["processes"] * single)
        if row.get("train_mflops_per_sample") is None:  # FLOPs not countable (a subclassed model)
            row["achieved_gflops"] = row["peak_fraction"] = None
            continue
        achieved = row["images_per_second"] * row["train_mflops_per_sample"] * 1e6
        row["achieved_gflops"] = achieved / 1e9
        row["peak_fraction"] = achieved / peak_flops if peak_flops else None
    return rows


def run_benchmark(
    models: Sequence[str | Callable[..., Any]],
    batches: Sequence[int],
    worlds: Sequence[WorldSpec],
    settings: Settings = Settings(),
    output: str | os.PathLike | None = DEFAULT_OUTPUT,
    progress: Callable[[int, int, str], None] | None = None,
    check: bool = True,
) -> dict:
    """Measures every configuration of ``plan(models, batches, worlds)`` (and, on CPU, the
    machine's matmul peak first); writes ``bench.csv``, ``bench.json`` and ``bench.png`` into
    ``output`` (unless None). ``progress(done, total, label)`` is called before each step.
    A model is a name (``check_models``) or an importable factory ``build(input_shape,
    num_classes, **options)``, reported by its reference. Every model is resolved, and built
    where it might not fit (``check_models_fit``, unless ``check`` is False: the caller did),
    before anything is measured.
    Returns the report: ``rows``, ``peak_gflops``, ``input_bound_margin`` (``bound_by``'s rule),
    ``machine``, ``settings``."""
    models = model_names(models)
    if check:
        check_models(models)
        check_models_fit(models, batches, worlds, settings)
    cases = plan(models, batches, worlds)
    total = len(cases) + (settings.device == "cpu")
    peak = None
    if settings.device == "cpu":
        _tell(progress, 0, total, "matmul peak")
        peak = measure_peak_flops()
    rows, single_steps = [], {}
    for done, case in enumerate(cases, start=total - len(cases)):
        _tell(progress, done, total, f"{case.model} b{case.per_worker_batch} {case.world.label}")
        try:
            result = measure_case(case, settings, _steps_for(case, settings, single_steps))
        except CaseFailed as error:
            rows.append(make_row(case, settings, None, f"failed: {error}"))
            continue
        if case.world.setup.baseline:
            single_steps[(case.model, case.per_worker_batch)] = result["steps"]
        rows.append(make_row(case, settings, result, "ok"))
    _tell(progress, total, total, "done")
    report = {"benchmark": "lbtrain bench", "rows": add_ratios(rows, peak), "peak_gflops": peak and peak / 1e9,
              "input_bound_margin": INPUT_BOUND_MARGIN, "machine": machine(), "settings": dataclasses.asdict(settings)}
    if output is not None:
        write_report(report, Path(output))
    return report


def _tell(progress: Callable[[int, int, str], None] | None, done: int, total: int, label: str) -> None:
    if progress is not None:
        progress(done, total, label)


def machine() -> dict:
    """What the numbers were measured on, and how busy it was (load averages over the last
    1, 5 and 15 minutes: other work on the machine slows some configurations more than others)."""
    import tensorflow as tf

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "load_average": [round(load, 2) for load in os.getloadavg()]}


# ---------------------------------------------------------------- output


def write_report(report: dict, folder: Path) -> list[Path]:
    """``bench.csv`` (the rows), ``bench.json`` (the whole report) and ``bench.png``."""
    return [write_atomic(folder / BENCH_CSV, csv_text(report["rows"], COLUMNS)),
            write_json_atomic(folder / BENCH_JSON, report),
            plot_throughput(report["rows"], folder / BENCH_FIGURE)]


def plot_throughput(rows: Sequence[dict], path: Path) -> Path:
    """One panel per model: images/s per world (bars, one colour per batch), each bar labelled
    with its scaling efficiency. matplotlib is imported here (Agg canvas, no pyplot)."""
    import io

    from matplotlib.figure import Figure

    from lbtrain.reports.plots import OKABE_ITO

    ok = [row for row in rows if row["status"] == "ok"]
    models = list(dict.fromkeys(row["model"] for row in ok)) or ["(no configuration finished)"]
    batches = list(dict.fromkeys(row["per_worker_batch"] for row in ok))
    figure = Figure(figsize=(4.4 * len(models), 3.6), layout="constrained")
    for axes, model in zip(figure.subplots(1, len(models), squeeze=False).flat, models):
        mine = [row for row in ok if row["model"] == model]
        worlds = list(dict.fromkeys(row["world"] for row in mine))
        width = 0.8 / max(1, len(batches))
        for index, batch in enumerate(batches):
            bars = [row for row in mine if row["per_worker_batch"] == batch]
            xs = [worlds.index(row["world"]) + (index - (len(batches) - 1) / 2) * width for row in bars]
            axes.bar(xs, [row["images_per_second"] for row in bars], width, color=OKABE_ITO[index % len(OKABE_ITO)],
                     label=f"{batch} per worker")
            for x, row in zip(xs, bars):
                if row.get("scaling_efficiency") is not None:
                    axes.annotate(f"{row['scaling_efficiency']:.2f}", (x, row["images_per_second"]), ha="center",
                                  va="bottom", fontsize=7)
        axes.set_xticks(range(len(worlds)), worlds, rotation=30, ha="right", fontsize=8)
        shape = f"\n{mine[0]['input_shape']} in, {mine[0]['classes']} classes" if mine and mine[0].get("input_shape") else ""
        axes.set_title(f"{model}{shape}", fontsize=9)
        axes.set_ylabel("images/s (labels: scaling efficiency)")
        if mine:
            axes.legend(fontsize=7, frameon=False)
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100)
    return write_atomic(path, image.getvalue())


def format_table(report: dict) -> str:
    """The rows as a fixed-width text table, what its images/s columns are and the rule of
    ``bound``, then the peak."""
    width = max([9, *(len(row["model"]) for row in report["rows"])])
    lines = [f"{'model':<{width}} {'batch':>5} {'world':<14} {'images/s':>10} {'pipeline/s':>10} {'fed/s':>10} {'bound':<13} "
             f"{'efficiency':>10} {'of peak':>8}  status"]
    for row in report["rows"]:
        def number(key: str, spec: str) -> str:
            return "" if row.get(key) is None else format(row[key], spec)

        lines.append(f"{row['model']:<{width}} {row['per_worker_batch']:>5} {row['world']:<14} {number('images_per_second', '.1f'):>10} "
                     f"{number('pipeline_images_per_second', '.1f'):>10} {number('fed_images_per_second', '.1f'):>10} "
                     f"{row.get('bound') or '':<13} {number('scaling_efficiency', '.3f'):>10} {number('peak_fraction', '.3f'):>8}  "
                     f"{row['status']}")
    lines.append(f"images/s: the training step alone (one batch in memory); pipeline/s: the trainer's input pipeline alone; "
                 f"fed/s: the step fed by that pipeline; input-bound where pipeline/s < {INPUT_BOUND_MARGIN:g} x images/s")
    if report["peak_gflops"]:
        lines.append(f"float32 matmul peak of this machine: {report['peak_gflops']:.1f} GFLOP/s ({report['machine']['cpus']} CPUs); "
                     f"a configuration using k of them reaches at most k/{report['machine']['cpus']} of it")
    return "\n".join(lines)


class ProgressBar:
    """Progress while the ``lbtrain`` logger takes INFO records (not under ``--quiet``): a
    one-line bar redrawn in place on a terminal ``stream`` (stderr), otherwise an INFO record
    per step."""

    def __init__(self, stream: TextIO | None = None, width: int = 24):
        self.stream, self.width = stream or sys.stderr, width
        self.tty = self.stream.isatty()

    def __call__(self, done: int, total: int, label: str) -> None:
        if not logger.isEnabledFor(logging.INFO):
            return
        filled = self.width * done // max(1, total)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {label}"
        if not self.tty:
            logger.info(line)
            return
        self.stream.write(f"\r{line:<80}" + ("\n" if done == total else ""))
        self.stream.flush()


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
