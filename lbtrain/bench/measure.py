"""One configuration measured inside its own process (``python -m lbtrain.bench JOB_JSON``; under
horovodrun, one rank): momentum SGD on synthetic data held in memory (one random batch,
repeated: the training step alone), then the input pipeline the trainer would build for that run
(``lbtrain.data.make_input_pipeline`` over synthetic arrays of the same shape, the world's shard
and batch) alone, without training, and the step fed by that pipeline (a run as ``lbtrain
train`` makes it). Each process runs ``threads`` intra-op and inter-op threads
(``configure_threads``). A Horovod configuration can also record Horovod's timeline over its
measured steps, bind each process to a core and run Horovod's own threads at ``SCHED_IDLE``
(``Settings``)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from lbtrain.bench.cases import MIN_STEPS, bench_input
from lbtrain.bench.flops import matmul_peak_flops, training_flops_per_sample
from lbtrain.bench.processes import RESULT_PREFIX
from lbtrain.bench.settings import Settings
from lbtrain.bench.worlds import WORLD_KINDS, BenchError

# Batches of one epoch of the pipeline's synthetic arrays, per shard: enough to cross epoch
# boundaries (a reshuffle) while the arrays stay small.
PIPELINE_EPOCH_BATCHES = 4


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
    elif WORLD_KINDS[job["kind"]].starter.barrier:
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
    if kind.starter.horovod_ranks:
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
    if not WORLD_KINDS[job["kind"]].starter.horovod_ranks or job["groups"] is None:
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
    if kind.starter.barrier:
        _wait_for_all(job["barrier"], job["index"], job["size"])
    seconds = _timed_fit(model, data, steps, callbacks, job.get("timeline"))
    images = steps * workers * job["batch"] * (world.size if kind.starter.horovod_ranks else 1)
    result = {"rank": world.rank, "steps": steps, "seconds": seconds, "images": images, "train_flops_per_sample": flops}
    if job["pipeline"]:
        pipeline = trainer_pipeline(world, workers * job["batch"], job["batch"], input_shape, classes, job["seed"])
        # Independent processes wait for each other: none measures while another still measures the step.
        if kind.starter.barrier:
            _wait_for_all(job["barrier"], job["index"], job["size"], stage="pipeline")
        result["pipeline_seconds"] = _timed_pipeline(pipeline, steps, job["warmup"])
        if kind.starter.barrier:
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


def child_main(argv: Sequence[str]) -> int:
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
