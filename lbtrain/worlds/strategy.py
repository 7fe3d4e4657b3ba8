"""What ``mode: mirrored`` and ``mode: multiworker`` share: TensorFlow's own synchronous strategies as lbtrain worlds.

- ``MirroredWorld(W)``: ``tf.distribute.MirroredStrategy`` over W devices of one process, W
  GPUs where there are any, else W logical CPU devices (which must be configured before
  TensorFlow's runtime starts, hence one fresh process per run: ``lbtrain train --mode mirrored``).
- ``MultiWorkerWorld(W)``: ``tf.distribute.MultiWorkerMirroredStrategy``, one replica in each of
  W processes that find each other through ``$TF_CONFIG`` (``lbtrain.launch.cluster.launch_multiworker`` starts them on
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
precise batch-norm statistics (``lbtrain.precise_bn`` probes the model outside the strategy),
the in-step and flatness measurements of ``analysis``, and ``training.jit_compile: true`` (XLA
cannot compile a tf.distribute step: ``jit_compile_problem``). ``mode: multiworker`` needs tf.keras 2
(TensorFlow 2.15): Keras 3's ``fit`` fails under ``MultiWorkerMirroredStrategy``
(keras-team/keras#20585, tensorflow/tensorflow#72388).
"""

from __future__ import annotations

from typing import Any, ContextManager

import tensorflow as tf

from lbtrain._keras import tensorflow_variables
from lbtrain.config import ConfigError, RunConfig
from lbtrain.measures.noise_scale import NoiseScaleSettings
from lbtrain.worlds.base import World, jit_compile_refusal


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


def jit_compile_problem(mode: str) -> str:
    """Why ``mode``'s train step cannot be compiled with XLA (``training.jit_compile``). Measured
    on CPU: under ``MirroredStrategy`` (TF 2.15 and 2.21) the compiled step of one replica reads
    another device's copy of the variables, which an XLA cluster cannot ("Trying to access
    resource ... located in device CPU:1", tensorflow.org/xla/known_issues); under
    ``MultiWorkerMirroredStrategy`` (TF 2.15) "Collectives are not yet implemented for CPU devices
    when compiling with XLA"; a parameter server's workers read variables on the parameter
    servers. Keras 3's own ``jit_compile="auto"`` turns XLA off under tf.distribute too."""
    return f"mode: {mode} cannot compile its step with XLA (XLA cannot compile a tf.distribute step, whose variables and all-reduce span devices)"


def refuse_jit_compile(config: RunConfig, mode: str) -> str | None:
    """The one-line refusal of ``training.jit_compile: true`` in ``mode``, or None."""
    return jit_compile_refusal(jit_compile_problem(mode)) if config.training.jit_compile is True else None


def unsupported_by_strategy(config: RunConfig, mode: str) -> str | None:
    """The first field of ``config`` that ``mode`` (``mirrored`` or ``multiworker``) cannot train,
    as a one-line message, or None (``settings_outside_keras_step``: Keras's ``fit`` runs the
    strategy's plain synchronous step, which XLA cannot compile: ``refuse_jit_compile``)."""
    for field, value in settings_outside_keras_step(config):
        return (f"{field} is {value!r}, which mode: {mode} does not support (tf.distribute trains Keras's plain "
                f"synchronous step): use mode: simulated{' or horovod' if field != 'training.staleness' else ''}")
    return refuse_jit_compile(config, mode)


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

    @property
    def jit_compile_problem(self) -> str:
        return jit_compile_problem(self.mode)

    def input_shard(self) -> tuple[int, int]:
        return 0, 1

    def process_batch(self, per_worker_batch: int) -> int:
        return self.size * per_worker_batch

    def scope(self) -> ContextManager:
        return self.strategy.scope()

    def prepare_model(self, model: tf.keras.Model, per_worker_batch: int, noise_scale: NoiseScaleSettings | None = None,
                      accumulation_steps: int = 1, staleness: int = 0, jit_compile: bool = False) -> tf.keras.Model:
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
