"""Asynchronous parameter-server training as an lbtrain world: ``mode: parameter_server``.

A job is one coordinator (the chief), W workers and P parameter servers (``ps``), found through
``$TF_CONFIG`` (``lbtrain.launch.cluster.launch_parameter_server`` starts them all on this machine with free ports; on
a cluster each node sets its own). The workers and parameter servers only run a
``tf.distribute.Server`` (``serve``); the chief builds the model and optimizer under
``tf.distribute.ParameterServerStrategy``, which places every variable on a parameter server
(round-robin over the P tasks), and dispatches train steps to the workers through a
``tf.distribute.coordinator.ClusterCoordinator``. Each step runs on whichever worker is free:
it reads the current weights from the parameter servers, computes the gradient of one worker
batch of b samples and applies it there with the optimizer, without waiting for the other
workers: asynchronous SGD as in Downpour SGD (Dean et al. 2012, "Large Scale Distributed Deep
Networks") and the parameter server of Li et al. 2014 ("Scaling Distributed Machine Learning
with the Parameter Server"). The chief is the root: the only task that logs and writes files.

Measured staleness: an update clock on a parameter server (``UpdateClock``: a step counter and
a ``tf.CriticalSection`` that makes its fetch-and-add atomic). Each step reads the clock before
it reads the weights, and after its update has landed takes a ticket (the clock's value,
incremented in the same critical section); the difference is how many other workers' updates
landed between this worker's read of the weights and its own update: the gradient's delay
``tau`` of Lian et al. 2015. The history logs the epoch's mean (``staleness``) and maximum
(``staleness_max``).

Why a coordinator loop rather than Keras's ``fit``: ``fit`` under this strategy refuses
batch-level callbacks (keras/src/callbacks.py, ``_disallow_batch_hooks_in_ps_strategy``), and
fetching a step's logs to hand them to one waits for that step, which would serialize the
workers. lbtrain's divergence guard and budget need every step's loss, so ``fit`` here
schedules a whole epoch of steps, waits for them (``ClusterCoordinator.join``), then replays
the steps' logs to the same Keras callbacks in the order the updates landed (the guard sees
every update's loss, from the first; it can end training only at the end of that epoch).

Data and budget: the chief reads lbtrain's stream of global batches (W x b, the layout of
``lbtrain.data.make_input_pipeline``) and sends worker r's b samples of global batch t as one
step, so an epoch visits the same samples as a synchronous run of W workers, in
``W x steps_per_epoch`` updates of b samples each. Steps, the LR clock, warmup and decay,
budgets and the recorded ``total_steps`` count those updates (``World.updates_per_step``); the
learning rate is the one the run's rule gives the global batch W x b, as in every mode, so the
same YAML trains synchronously and asynchronously at the same LR. A ``training.samples`` budget
(counted in global batches) is refused; ``training.steps`` counts updates.

Evaluation runs on the chief (the coordinator reads the weights from the parameter servers), on
the whole set in order. Batch norm has no replicas here: every worker's step normalizes its own
b samples and moves the one copy of the moving statistics on a parameter server.

Stacks: tf.keras 2 (TensorFlow 2.15) only. Keras 3 builds and trains the model under this
strategy, but its ``Variable.assign_add`` is ``assign(self + value)`` (keras/src/backend/common/
variables.py), a read-modify-write that two workers race on: updates to the weights, the
momentum and the optimizer's step counter are lost (measured: 13 of 16 steps counted). TF 2.15's
optimizers update with one ``AssignAddVariableOp``/``ResourceApply*`` op per variable.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

import numpy as np
import tensorflow as tf

from lbtrain._keras import KERAS_3, KERAS_VERSION, tensorflow_variables
from lbtrain.config import ConfigError, RunConfig
from lbtrain.worlds.peers import wait_for_peers
from lbtrain.worlds.strategy import FullBatchStrategyWorld, refuse_jit_compile, settings_outside_keras_step

logger = logging.getLogger(__name__)

MODE = "parameter_server"
TASK_TYPES = ("chief", "worker", "ps")
PARAMETER_SERVER_KERAS_3 = (f"mode: parameter_server needs tf.keras 2 (TensorFlow 2.15); this is Keras {KERAS_VERSION}, whose "
                            "variables add by read-modify-write (assign(v + x)), so concurrent workers lose updates and "
                            "optimizer steps: use mode: simulated with training.staleness here")


def launch_problem() -> str | None:
    """Why this TensorFlow/Keras cannot run ``mode: parameter_server``, or None."""
    return PARAMETER_SERVER_KERAS_3 if KERAS_3 else None


def unsupported_setting(config: RunConfig) -> str | None:
    """The first field of ``config`` that ``mode: parameter_server`` cannot train, as a one-line
    message, or None: the settings that need lbtrain's own synchronous train steps or a model
    probed where it trains (``lbtrain.worlds.strategy.settings_outside_keras_step``), and a ``samples``
    budget (counted in global batches, while this mode counts updates of one worker batch), and
    ``training.jit_compile: true`` (its workers' step reads the variables on the parameter servers)."""
    for field, value in settings_outside_keras_step(config):
        simulated = "use mode: simulated (training.staleness simulates asynchronous SGD)" if field == "training.staleness" \
            else "use mode: simulated or horovod"
        return f"{field} is {value!r}, which mode: parameter_server does not support (asynchronous plain SGD steps): {simulated}"
    if config.training.samples is not None:
        return (f"training.samples is {config.training.samples}, which mode: parameter_server does not support (its steps "
                "are updates of one worker batch): give training.epochs or training.steps")
    return refuse_jit_compile(config, MODE)


def this_task(variable: str = "TF_CONFIG") -> tuple[dict[str, list[str]], str, int]:
    """The cluster, this task's type and its index, from ``$TF_CONFIG``."""
    text = os.environ.get(variable)
    if not text:
        raise ConfigError(f"mode: parameter_server needs ${variable} (each task's cluster and role; lbtrain run sets it)")
    try:
        config = json.loads(text)
        spec = {task: list(addresses) for task, addresses in config["cluster"].items()}
        task_type, index = config["task"]["type"], int(config["task"]["index"])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"${variable} is not {{\"cluster\": {{\"chief\": [...], \"worker\": [...], \"ps\": [...]}}, "
                          f"\"task\": {{\"type\": T, \"index\": I}}}}: {text!r}") from None
    if task_type not in TASK_TYPES or not 0 <= index < len(spec.get(task_type, [])):
        raise ConfigError(f"${variable}: task must be a chief, worker or ps listed in the cluster, got {config['task']!r}")
    return spec, task_type, index


def serve() -> None:
    """Runs this worker's or parameter server's ``tf.distribute.Server`` until the process is
    ended (the coordinator drives it)."""
    spec, task_type, index = this_task()
    server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=task_type, task_index=index, protocol="grpc", start=True)
    server.join()


class UpdateClock(tf.Module):
    """A count of the updates applied, on a parameter server, read at the start of every step
    and advanced by a fetch-and-add when its update has landed. The fetch-and-add runs in a
    ``tf.CriticalSection`` on the counter's device, so no two steps get the same ticket; the
    staleness of a step is its ticket minus the count it read (see the module doc)."""

    def __init__(self) -> None:
        super().__init__(name="update_clock")
        self.count = tf.Variable(tf.zeros((), tf.int64), trainable=False, name="updates_landed")
        with tf.device(self.count.device):
            self.critical_section = tf.CriticalSection(name="update_clock")

    def read(self) -> tf.Tensor:
        return self.count.read_value()

    def ticket(self) -> tf.Tensor:
        """The count before this call's increment (atomic)."""

        def fetch_and_add() -> tf.Tensor:
            value = self.count.read_value()
            with tf.control_dependencies([value]):
                advanced = self.count.assign_add(1, read_value=False)
            with tf.control_dependencies([advanced]):
                return tf.identity(value)

        return self.critical_section.execute(fetch_and_add)


class ParameterServerWorld(FullBatchStrategyWorld):
    """The chief (coordinator) of a parameter-server job of ``size`` workers (see the module doc)."""

    mode = MODE

    def __init__(self, size: int):
        """Connects to the job ``$TF_CONFIG`` describes, whose chief this process must be and
        whose workers must number ``size``. Build it before TensorFlow runs an op."""
        problem = launch_problem()
        if problem is not None:
            raise ConfigError(problem)
        spec, task_type, _ = this_task()
        if task_type != "chief":
            raise ConfigError(f"ParameterServerWorld runs on the chief; this task is a {task_type} (use serve())")
        if len(spec.get("worker", [])) != size or not spec.get("ps"):
            raise ConfigError(f"training.world_size is {size} but $TF_CONFIG lists {len(spec.get('worker', []))} workers "
                              f"and {len(spec.get('ps', []))} parameter servers (at least one is needed)")
        # TensorFlow's own wait for the workers and parameter servers has no deadline (lbtrain.worlds.peers).
        wait_for_peers({f"{task} {index}": address for task in ("worker", "ps") for index, address in enumerate(spec[task])},
                       what="mode: parameter_server: the chief")
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        try:
            self.strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        except tf.errors.UnknownError as error:
            raise ConfigError(f"mode: parameter_server: the chief cannot serve at {spec['chief'][0]} "
                              f"(is the port in use?): {error.message.splitlines()[0]}") from None
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
        self.size, self.rank, self.local_rank = size, 0, 0
        self.parameter_servers = len(spec["ps"])
        self.updates_per_step = size
        with self.strategy.scope():
            self.clock = UpdateClock()

    def __repr__(self) -> str:
        return f"ParameterServerWorld(size={self.size}, parameter_servers={self.parameter_servers})"

    def _step_function(self, model: tf.keras.Model) -> tf.types.experimental.GenericFunction:
        """One worker's step on a batch ``(x, y)``: reads the clock, then the weights, applies its
        gradient, takes a ticket once every variable has its update; returns the batch's loss,
        accuracy, staleness and ticket."""
        clock, variables = self.clock, model.trainable_variables

        def step(x: tf.Tensor, y: tf.Tensor) -> dict[str, tf.Tensor]:
            start = clock.read()
            with tf.control_dependencies([start]):
                with tf.GradientTape() as tape:
                    logits = model(x, training=True)
                    loss = model.compute_loss(x, y, logits)
            gradients = tape.gradient(loss, variables)
            model.optimizer.apply_gradients(zip(gradients, variables))
            # A read of a variable follows its update (automatic control dependencies order the
            # ops on one resource); the ticket follows the reads of all of them.
            with tf.control_dependencies([variable.read_value() for variable in tensorflow_variables(variables)]):
                ticket = clock.ticket()
            correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=y.dtype), y), tf.float64)
            return {"loss": tf.cast(loss, tf.float64), "accuracy": tf.reduce_mean(correct),
                    "staleness": ticket - start, "ticket": ticket}

        return tf.function(lambda x, y: self.strategy.run(step, args=(x, y)))

    def fit(self, model: tf.keras.Model, train_data: tf.data.Dataset, *, total_steps: int, epochs: int, initial_epoch: int,
            steps_per_epoch: int, validation_data: tf.data.Dataset | None, callbacks: list[tf.keras.callbacks.Callback],
            verbose: int, **_: Any) -> tf.keras.callbacks.History:
        """Trains ``steps_per_epoch`` asynchronous updates an epoch (the coordinator loop of the
        module doc) until ``epochs``, the ``total_steps``-th update or a callback stops training
        (every scheduled step applies its update, so no epoch schedules past the budget); the callbacks see every
        step's logs in the order the updates landed, then the epoch's (loss, accuracy, mean and
        maximum staleness, validation). ``verbose`` logs one line an epoch (INFO)."""
        history = tf.keras.callbacks.History()
        callback_list = tf.keras.callbacks.CallbackList([*callbacks, history], model=model, epochs=epochs,
                                                        steps=math.ceil(steps_per_epoch / self.size), verbose=0)
        step, batches = self._step_function(model), iter(train_data)
        model.stop_training = False
        callback_list.on_train_begin()
        logs: dict[str, float] = {}
        for epoch in range(initial_epoch, epochs):
            callback_list.on_epoch_begin(epoch)
            remaining = total_steps - int(model.optimizer.iterations.numpy())
            steps = self._run_steps(step, batches, min(steps_per_epoch, remaining))
            logs = self._replay(callback_list, steps)
            if validation_data is not None:
                callback_list.on_test_begin()
                loss, accuracy = self.evaluate(model, validation_data)
                callback_list.on_test_end({"loss": loss, "accuracy": accuracy})
                logs.update(val_loss=loss, val_accuracy=accuracy)
            callback_list.on_epoch_end(epoch, logs)
            if verbose:
                logger.info("epoch %d/%d: %s", epoch + 1, epochs, ", ".join(f"{key} {value:.4g}" for key, value in sorted(logs.items())))
            if model.stop_training:
                break
        callback_list.on_train_end(logs)
        return history

    def _run_steps(self, step: tf.types.experimental.GenericFunction, batches, count: int) -> list[dict[str, float]]:
        """Schedules ``count`` steps, worker r's b samples of each global batch in turn, waits
        for all of them and returns their logs in the order their updates landed."""
        scheduled = []
        while len(scheduled) < count:
            x, y = next(batches)
            for worker in range(self.size):
                if len(scheduled) < count:
                    scheduled.append(self.coordinator.schedule(step, args=(x[worker::self.size], y[worker::self.size])))
        self.coordinator.join()
        fetched = [{key: value.item() for key, value in remote.fetch().items()} for remote in scheduled]
        return sorted(fetched, key=lambda logs: logs["ticket"])

    @staticmethod
    def _replay(callback_list: tf.keras.callbacks.CallbackList, steps: list[dict[str, float]]) -> dict[str, float]:
        """Hands each step's logs to the batch hooks as Keras's running epoch means (what
        ``DivergenceGuard`` and ``fit``'s own logs expect); returns the epoch's logs."""
        loss_total = accuracy_total = 0.0
        for index, logs in enumerate(steps):
            loss_total, accuracy_total = loss_total + logs["loss"], accuracy_total + logs["accuracy"]
            callback_list.on_train_batch_begin(index)
            callback_list.on_train_batch_end(index, {"loss": loss_total / (index + 1), "accuracy": accuracy_total / (index + 1)})
        staleness = [logs["staleness"] for logs in steps]
        count = max(len(steps), 1)
        return {"loss": loss_total / count, "accuracy": accuracy_total / count,
                "staleness": float(np.mean(staleness)) if staleness else 0.0,
                "staleness_max": float(max(staleness, default=0))}

    def evaluate(self, model: tf.keras.Model, dataset: tf.data.Dataset) -> tuple[float, float]:
        """Mean loss and accuracy over every sample of ``dataset``, computed on the chief."""

        @tf.function
        def sums(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            logits = model(x, training=False)
            losses = model.loss(y, logits) * tf.cast(tf.shape(y)[0], tf.float32)
            correct = tf.equal(tf.argmax(logits, axis=-1, output_type=y.dtype), y)
            return tf.cast(losses, tf.float64), tf.reduce_sum(tf.cast(correct, tf.float64))

        loss = correct = count = 0.0
        for x, y in dataset:
            batch_loss, batch_correct = sums(x, y)
            loss, correct, count = loss + float(batch_loss), correct + float(batch_correct), count + len(y)
        return loss / count, correct / count


def build_world(world_size: int) -> ParameterServerWorld | None:
    """The chief's world, connected to the job ``$TF_CONFIG`` describes; on a worker or parameter
    server: serves until the process is ended and returns None if the server ever stops."""
    if this_task()[1] != "chief":
        serve()
        return None
    return ParameterServerWorld(world_size)
