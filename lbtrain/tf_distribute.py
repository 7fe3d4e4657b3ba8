"""TensorFlow's own synchronous strategies as lbtrain worlds: ``mode: mirrored`` and ``mode: multiworker``.

- ``MirroredWorld(W)``: ``tf.distribute.MirroredStrategy`` over W devices of one process, W
  GPUs where there are any, else W logical CPU devices (which must be configured before
  TensorFlow's runtime starts, hence one fresh process per run: ``lbtrain train --mode mirrored``).
- ``MultiWorkerWorld(W)``: ``tf.distribute.MultiWorkerMirroredStrategy``, one replica in each of
  W processes that find each other through ``$TF_CONFIG`` (``launch_multiworker`` starts them on
  this machine with free ports; on a cluster each node sets its own ``TF_CONFIG``). Task 0 is the
  root (the chief): the only one that logs and writes files.

In both, every process builds the model and optimizer under ``strategy.scope()`` and feeds the
global batch of W x b samples (``input_shard`` is ``(0, 1)``, ``process_batch`` is W b). lbtrain's
stream lays a global batch out so that position ``i W + r`` is worker r's i-th sample (what
Horovod rank r and ghost batch r of a ``SimulatedWorld`` take, ``lbtrain.data.make_input_pipeline``),
while a strategy splits a batch into W contiguous pieces (rebatching, then the ``DATA`` auto-shard
policy across workers: worker r keeps piece r, ``tf.data.experimental.AutoShardPolicy``).
``training_input`` therefore reorders each batch to ``[worker 0's b samples, worker 1's, ...]``
(``contiguous_worker_batches``) before the strategy splits it, so replica r trains on exactly the
samples of worker r in the other worlds. Each replica's loss is scaled by 1 / (W b) and the
strategy sums the replicas' gradients (an all-reduce), which is the mean of the W workers'
gradients: the same update as a simulated world and Horovod up to the summation order of floats.

Batch norm: a strategy's replicas normalize their own b samples (Keras's BatchNormalization is
not synchronized across replicas), i.e. ghost batch norm at the per-worker batch, the semantics of
lbtrain's simulated world and of Horovod. The moving statistics are ``ON_READ`` variables
(tf.keras 2.15): each replica moves its own copy and reading one averages the replicas, so before
every evaluation ``share_replica_statistics`` gives each replica that average (as a simulated world's
ghost BN, whose moving statistics move by the mean over groups).

What these worlds do not do (a one-line ``ConfigError`` naming the field, ``unsupported_setting``):
micro-batches, gradient accumulation and staleness (steps of lbtrain's own train step, not Keras's),
precise batch-norm statistics (``lbtrain.precise_bn`` probes the model outside the strategy), and
the in-step and flatness measurements of ``analysis``. ``mode: multiworker`` needs tf.keras 2
(TensorFlow 2.15): Keras 3's ``fit`` fails under ``MultiWorkerMirroredStrategy``
(keras-team/keras#20585, tensorflow/tensorflow#72388).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import socket
import subprocess
import tempfile
import time
from typing import Any, ContextManager, Sequence

import numpy as np
import tensorflow as tf

from lbtrain._keras import KERAS_3, KERAS_VERSION, tensorflow_variables
from lbtrain.config import ConfigError, RunConfig
from lbtrain.distributed import World
from lbtrain.train_step import NoiseScaleSettings

TF_DISTRIBUTE_MODES = ("mirrored", "multiworker")
MULTIWORKER_KERAS_3 = (f"mode: multiworker needs tf.keras 2 (TensorFlow 2.15); this is Keras {KERAS_VERSION}, whose fit "
                       "fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): use mode: mirrored or simulated here")
# Seconds a launched worker gets to exit after SIGTERM before it is killed.
TERMINATE_GRACE_SECONDS = 5.0


def stack_problem(mode: str) -> str | None:
    """Why this TensorFlow/Keras cannot run ``mode``, or None."""
    return MULTIWORKER_KERAS_3 if mode == "multiworker" and KERAS_3 else None


def settings_outside_keras_step(config: RunConfig) -> list[tuple[str, Any]]:
    """The ``(field, value)`` pairs of ``config`` that need more than Keras's plain train step
    and a model evaluated where it trains: lbtrain's own train steps (micro-batches,
    accumulation, staleness, the in-step noise scale), precise batch-norm statistics and the
    flatness measurements, which probe, perturb and read the model outside a strategy."""
    training, analysis = config.training, config.analysis
    fields = {
        "training.micro_batches": (training.micro_batches, training.micro_batches > 1),
        "training.accumulation_steps": (training.accumulation_steps, training.accumulation_steps > 1),
        "training.staleness": (training.staleness, training.staleness > 0),
        "training.precise_bn_samples": (training.precise_bn_samples, training.precise_bn_samples is not None),
        "analysis.noise_scale": (analysis.noise_scale, analysis.noise_scale),
        "analysis.sharpness": (analysis.sharpness, analysis.sharpness),
        "analysis.hessian": (analysis.hessian, analysis.hessian),
        "analysis.pac_bayes": (analysis.pac_bayes, analysis.pac_bayes),
    }
    return [(field, value) for field, (value, used) in fields.items() if used]


def unsupported_setting(config: RunConfig, mode: str) -> str | None:
    """The first field of ``config`` that ``mode`` (``mirrored`` or ``multiworker``) cannot train,
    as a one-line message, or None (``settings_outside_keras_step``: Keras's ``fit`` runs the
    strategy's plain synchronous step)."""
    for field, value in settings_outside_keras_step(config):
        return (f"{field} is {value!r}, which mode: {mode} does not support (tf.distribute trains Keras's plain "
                f"synchronous step): use mode: simulated{' or horovod' if field != 'training.staleness' else ''}")
    return None


def world_before_tensorflow(run: dict[str, Any], mode: str) -> "StrategyWorld":
    """The world of ``mode`` for the run config ``run`` (plain data, as read from its YAML),
    built before the config is validated (validating builds the optimizer, which starts
    TensorFlow's runtime, after which logical devices and collectives can no longer be set up);
    then the whole config is validated and checked against the mode. A problem is a ``ConfigError``."""
    from pydantic import ValidationError

    from lbtrain.config import TrainingConfig, run_config_from_dict

    problem = stack_problem(mode)
    if problem is not None:
        raise ConfigError(problem)
    try:
        training = TrainingConfig.model_validate(run.get("training") or {})
    except ValidationError:
        training = run_config_from_dict(run).training  # raises the ConfigError that names the field
    world = MirroredWorld(training.world_size) if mode == "mirrored" else MultiWorkerWorld(training.world_size)
    problem = unsupported_setting(run_config_from_dict(run), mode)
    if problem is not None:
        raise ConfigError(problem)
    return world


def contiguous_worker_batches(world_size: int, per_worker_batch: int):
    """A ``Dataset.map`` function that reorders a global batch from lbtrain's layout (position
    ``i W + r`` is worker r's i-th sample) to W contiguous pieces (piece r = worker r's samples, in
    order), the pieces a strategy hands to replicas 0..W-1."""

    def reorder(tensor: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(tensor)
        grouped = tf.reshape(tensor, tf.concat([[per_worker_batch, world_size], shape[1:]], 0))
        order = [1, 0, *range(2, tensor.shape.rank + 1)]
        return tf.reshape(tf.transpose(grouped, order), shape)

    return lambda x, y: (reorder(x), reorder(y))


def _data_sharded(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` with the ``DATA`` auto-shard policy: across workers, worker r keeps piece r of
    each batch (the stream is in memory; there are no files to shard)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


class _SharedStatistics(tf.keras.callbacks.Callback):
    """Before ``fit``'s validation: the replicas' batch-norm statistics averaged (``share_replica_statistics``)."""

    def __init__(self, world: "StrategyWorld"):
        super().__init__()
        self.world = world

    def on_test_begin(self, logs=None):
        self.world.share_replica_statistics(self.model)


class FullBatchStrategyWorld(World):
    """A world whose process feeds the whole global batch to a ``tf.distribute`` strategy, which
    hands each worker its share; lbtrain's own train steps are not available in it."""

    strategy: tf.distribute.Strategy
    mode: str

    def input_shard(self) -> tuple[int, int]:
        return 0, 1

    def process_batch(self, per_worker_batch: int) -> int:
        return self.size * per_worker_batch

    def scope(self) -> ContextManager:
        return self.strategy.scope()

    def prepare_model(self, model: tf.keras.Model, per_worker_batch: int, noise_scale: NoiseScaleSettings | None = None,
                      accumulation_steps: int = 1, staleness: int = 0) -> tf.keras.Model:
        """The model as it is (each worker's step is the strategy's plain step on its b samples);
        lbtrain's own steps are refused by name."""
        for field, value, used in (("analysis.noise_scale", True, noise_scale is not None),
                                   ("training.accumulation_steps", accumulation_steps, accumulation_steps > 1),
                                   ("training.staleness", staleness, staleness > 0)):
            if used:
                raise ConfigError(f"{field} is {value!r}, which mode: {self.mode} does not support: use mode: simulated")
        return model


class StrategyWorld(FullBatchStrategyWorld):
    """A world that trains under a synchronous ``tf.distribute`` strategy (see the module doc)."""

    def callbacks(self) -> list[tf.keras.callbacks.Callback]:
        return [_SharedStatistics(self)]

    def training_input(self, dataset: tf.data.Dataset, per_worker_batch: int) -> Any:
        """The global batches reordered into the replicas' pieces and distributed by the strategy
        (replica r receives exactly worker r's samples)."""
        reordered = dataset.map(contiguous_worker_batches(self.size, per_worker_batch), num_parallel_calls=tf.data.AUTOTUNE)
        return self.strategy.experimental_distribute_dataset(_data_sharded(reordered))

    def evaluation_input(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """The whole set, which Keras splits across the replicas; the loss and accuracy it returns
        are sample-weighted means over all of them (the metrics are reduced across replicas)."""
        return _data_sharded(dataset)

    def share_replica_statistics(self, model: tf.keras.Model) -> None:
        """Sets every replica's copy of each ``ON_READ`` variable (batch-norm moving statistics
        under tf.keras 2) to the replicas' mean; under Keras 3 these are plain mirrored variables
        and nothing changes."""
        with self.strategy.scope():
            for variable in tensorflow_variables(model.non_trainable_variables):
                if getattr(variable, "synchronization", None) == tf.VariableSynchronization.ON_READ:
                    variable.assign(variable.read_value())


class MirroredWorld(StrategyWorld):
    """``tf.distribute.MirroredStrategy`` over ``size`` devices of this process (see the module doc)."""

    mode = "mirrored"

    def __init__(self, size: int):
        """Takes the first ``size`` GPUs if TensorFlow sees any GPU, else configures ``size``
        logical CPU devices, which works only before TensorFlow's runtime starts (a
        ``ConfigError`` says so otherwise)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"world size must be a positive integer, got {size!r}")
        gpus = tf.config.list_physical_devices("GPU")
        if gpus and len(gpus) < size:
            raise ConfigError(f"mode: mirrored with training.world_size {size} needs {size} GPUs, this machine has {len(gpus)}")
        if not gpus:
            cpu = tf.config.list_physical_devices("CPU")[0]
            try:
                tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * size)
            except RuntimeError:
                pass  # TensorFlow has started: the devices it has are checked below
        devices = [device.name for device in tf.config.list_logical_devices("GPU" if gpus else "CPU")]
        if len(devices) < size:
            raise ConfigError(f"mode: mirrored with training.world_size {size} needs {size} CPU devices, but TensorFlow "
                              f"started with {len(devices)}: build MirroredWorld({size}) before TensorFlow runs an op "
                              "(lbtrain train --mode mirrored does)")
        self.devices = devices[:size]
        self.strategy = tf.distribute.MirroredStrategy(self.devices)
        self.size, self.rank, self.local_rank = size, 0, 0

    def __repr__(self) -> str:
        return f"MirroredWorld(size={self.size}, devices={self.devices})"


def _cluster(variable: str = "TF_CONFIG") -> tuple[list[str], int]:
    """The workers' addresses and this task's index, from ``$TF_CONFIG``."""
    text = os.environ.get(variable)
    if not text:
        raise ConfigError(f"mode: multiworker needs ${variable} (each process's cluster and task; lbtrain run sets it)")
    try:
        config = json.loads(text)
        workers, task = list(config["cluster"]["worker"]), config["task"]
        index = int(task["index"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"${variable} is not {{\"cluster\": {{\"worker\": [HOST:PORT, ...]}}, \"task\": "
                          f"{{\"type\": \"worker\", \"index\": I}}}}: {text!r}") from None
    if task.get("type") != "worker" or not 0 <= index < len(workers):
        raise ConfigError(f"${variable}: task must be a worker with an index below {len(workers)}, got {task!r}")
    return workers, index


class MultiWorkerWorld(StrategyWorld):
    """One of the W processes of a ``tf.distribute.MultiWorkerMirroredStrategy`` job (see the module doc)."""

    mode = "multiworker"
    collective_checkpoints = True

    def __init__(self, size: int):
        """Joins the job ``$TF_CONFIG`` describes (one replica per process: this process's GPU
        ``index mod count`` where there are GPUs); ``size`` must be its number of workers. Build
        it before TensorFlow runs an op (collectives are configured at start-up)."""
        problem = stack_problem(self.mode)
        if problem is not None:
            raise ConfigError(problem)
        workers, index = _cluster()
        if len(workers) != size:
            raise ConfigError(f"training.world_size is {size} but $TF_CONFIG lists {len(workers)} workers")
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            tf.config.set_visible_devices(gpus[index % len(gpus)], "GPU")
        try:
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        except tf.errors.UnknownError as error:
            raise ConfigError(f"mode: multiworker: worker {index} cannot serve at {workers[index]} "
                              f"(is the port in use?): {error.message.splitlines()[0]}") from None
        self.size, self.rank, self.local_rank = size, index, index

    def __repr__(self) -> str:
        return f"MultiWorkerWorld(size={self.size}, rank={self.rank})"

    def _sum(self, values: np.ndarray) -> np.ndarray:
        """The sum over workers of a float64 array (one collective)."""
        tensor = tf.constant(np.asarray(values, dtype=np.float64))
        per_replica = self.strategy.run(lambda: tf.identity(tensor))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy()

    def allreduce_mean(self, value: Any) -> np.ndarray:
        return self._sum(value) / self.size

    def broadcast_object(self, obj: Any) -> Any:
        """Task 0's ``obj``, pickled and summed across workers byte by byte (the others add zeros)."""
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if self.is_root else np.zeros(0, np.uint8)
        length = int(self._sum([len(payload)])[0])
        local = np.zeros(length)
        local[:len(payload)] = payload
        return pickle.loads(self._sum(local).astype(np.uint8).tobytes())


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on this machine now (the kernel's choice for port 0)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("localhost", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def ports_in_use(ports: Sequence[int]) -> list[int]:
    """Those of ``ports`` that cannot be bound on localhost now."""
    taken = []
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("localhost", port))
            except OSError:
                taken.append(port)
    return taken


def tf_config(ports: Sequence[int], index: int) -> str:
    """``$TF_CONFIG`` of worker ``index`` in a job of workers on ``localhost:PORT``."""
    return json.dumps({"cluster": {"worker": [f"localhost:{port}" for port in ports]}, "task": {"type": "worker", "index": index}})


@dataclasses.dataclass(frozen=True)
class JobExit:
    """How a launched job ended: ``returncode`` 0 when every worker exited 0; else the first
    task that failed (``worker``, its index among the tasks launched, ``task``, its name such as
    ``worker 1`` or ``ps 0``, its exit code and its output; the others were ended)."""

    returncode: int
    worker: int | None = None
    output: str = ""
    task: str = ""


def launch_multiworker(world_size: int, program: Sequence[str], *, base_port: int | None = None,
                       env: dict[str, str] | None = None, poll_seconds: float = 0.2) -> JobExit:
    """Runs ``program`` as the ``world_size`` workers of one job on this machine, each with its
    ``TF_CONFIG`` (ports ``base_port .. base_port + W - 1``, or free ones), as horovodrun starts
    ranks. When a worker exits non-zero the others get SIGTERM (SIGKILL after
    ``TERMINATE_GRACE_SECONDS``), since their collectives would otherwise wait for it; so a dead
    worker ends the job within seconds. The workers' output goes to temporary files."""
    if base_port is not None:
        ports = list(range(base_port, base_port + world_size))
        taken = ports_in_use(ports)
        if taken:
            raise ConfigError(f"multiworker.base_port: port {taken[0]} is in use (the job needs ports {ports[0]}-{ports[-1]})")
    else:
        ports = free_ports(world_size)
    tasks = [(f"worker {index}", tf_config(ports, index)) for index in range(world_size)]
    return supervise(tasks, program, finishing=world_size, env=env, poll_seconds=poll_seconds)


def supervise(tasks: Sequence[tuple[str, str]], program: Sequence[str], *, finishing: int,
              env: dict[str, str] | None = None, poll_seconds: float = 0.2) -> JobExit:
    """Runs ``program`` once per task ``(name, TF_CONFIG)`` on this machine and waits for the
    job: the first ``finishing`` tasks must exit 0, and the job is done when they have; the
    tasks after them are servers that never exit on their own (a parameter-server job's workers
    and parameter servers), ended once the job is done. A finishing task that exits non-zero,
    or a server that exits at all, fails the job: every other task gets SIGTERM (SIGKILL after
    ``TERMINATE_GRACE_SECONDS``), so nothing waits for it. Output goes to temporary files."""
    with tempfile.TemporaryDirectory(prefix="lbtrain-job-") as logs:
        paths = [os.path.join(logs, f"task-{index}.log") for index in range(len(tasks))]
        processes = []
        for path, (_, config) in zip(paths, tasks):
            with open(path, "w") as log:
                processes.append(subprocess.Popen(list(program), stdout=log, stderr=subprocess.STDOUT,
                                                  env={**os.environ, **(env or {}), "TF_CONFIG": config}))
        try:
            while True:
                codes = [process.poll() for process in processes]
                failed = next((index for index, code in enumerate(codes)
                               if code is not None and (code != 0 or index >= finishing)), None)
                if failed is not None:
                    _end(processes)
                    with open(paths[failed]) as log:
                        return JobExit(codes[failed] or 1, failed, log.read(), tasks[failed][0])
                if all(code == 0 for code in codes[:finishing]):
                    return JobExit(0)
                time.sleep(poll_seconds)
        finally:
            _end(processes)


def _end(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to the processes still running, SIGKILL to those still there after the grace period."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
