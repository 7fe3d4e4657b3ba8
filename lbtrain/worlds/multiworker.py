"""``mode: multiworker``: one of the W processes of a ``tf.distribute.MultiWorkerMirroredStrategy`` job.

One replica in each of W processes that find each other through ``$TF_CONFIG``
(``lbtrain.launch.cluster.launch_multiworker`` starts them on this machine; on a cluster each
node sets its own ``TF_CONFIG``). Task 0 is the root (the chief): the only one that logs and
writes files. What it shares with ``mode: mirrored`` is in ``lbtrain.worlds.strategy``. It needs
tf.keras 2 (TensorFlow 2.15): Keras 3's ``fit`` fails under ``MultiWorkerMirroredStrategy``
(keras-team/keras#20585, tensorflow/tensorflow#72388).
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import numpy as np
import tensorflow as tf

from lbtrain._keras import KERAS_3, KERAS_VERSION
from lbtrain.config import ConfigError, RunConfig
from lbtrain.worlds.peers import wait_for_peers
from lbtrain.worlds.strategy import StrategyWorld, unsupported_by_strategy

MODE = "multiworker"
MULTIWORKER_KERAS_3 = (f"mode: multiworker needs tf.keras 2 (TensorFlow 2.15); this is Keras {KERAS_VERSION}, whose fit "
                       "fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): use mode: mirrored or simulated here")


def launch_problem() -> str | None:
    """Why this TensorFlow/Keras cannot run ``mode: multiworker``, or None."""
    return MULTIWORKER_KERAS_3 if KERAS_3 else None


def unsupported_setting(config: RunConfig) -> str | None:
    """The first field of ``config`` this mode cannot train, as a one-line message, or None."""
    return unsupported_by_strategy(config, MODE)


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

    mode = MODE
    collective_checkpoints = True

    def __init__(self, size: int):
        """Joins the job ``$TF_CONFIG`` describes (one replica per process: this process's GPU
        ``index mod count`` where there are GPUs); ``size`` must be its number of workers. Build
        it before TensorFlow runs an op (collectives are configured at start-up)."""
        problem = launch_problem()
        if problem is not None:
            raise ConfigError(problem)
        workers, index = _cluster()
        if len(workers) != size:
            raise ConfigError(f"training.world_size is {size} but $TF_CONFIG lists {len(workers)} workers")
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            tf.config.set_visible_devices(gpus[index % len(gpus)], "GPU")
        # TensorFlow's own wait for the other workers has no deadline (lbtrain.worlds.peers).
        wait_for_peers({f"worker {other}": address for other, address in enumerate(workers) if other != index},
                       what=f"mode: multiworker: worker {index}", own=workers[index])
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
