"""One training run: ``train(config, world) -> RunResult``.

The same function runs under ``horovodrun -np W`` (``HorovodWorld``) and in one process
(``SimulatedWorld(W)``): data sharded by rank, the learning rate scaled for the *global* batch,
the optimizer wrapped by the world, ``fit`` with lbtrain's callbacks, then the final train
and test loss/accuracy on the full sets, averaged over ranks, and what the run's ``analysis``
section asks for (gradient noise scale per epoch, sharpness of the final weights). Only rank 0
writes files.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import tensorflow as tf

from lbtrain.analysis.sharpness import sharpness
from lbtrain.callbacks import DivergenceGuard, GeneralizationGap, GradientNoiseScale, LearningRateLogger, Throughput
from lbtrain.config import RunConfig
from lbtrain.data import Dataset, load_dataset, make_input_pipeline, steps_per_epoch
from lbtrain.distributed import World
from lbtrain.models import build_model
from lbtrain.optimizers import build_optimizer
from lbtrain.scaling import global_batch_size, scale_learning_rate
from lbtrain.schedules import build_schedule

CHECKPOINT_FOLDER = "checkpoints"
STATUSES = ("ok", "diverged", "failed")


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(item) for item in value]
    return value


@dataclasses.dataclass
class RunResult:
    """What one run produced. ``to_dict`` is plain JSON (NaN/inf become null)."""

    config: dict[str, Any]
    status: str
    reason: str | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    generalization_gap: dict[str, float] = dataclasses.field(default_factory=dict)
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)
    world_size: int = 1
    global_batch: int = 0
    learning_rate: float = 0.0
    steps_per_epoch: int = 0
    total_steps: int = 0
    samples_per_second: float = 0.0
    wall_time_seconds: float = 0.0
    model: tf.keras.Model | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "model"}
        return _finite_or_none(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunResult":
        known = {field.name for field in dataclasses.fields(cls)} - {"model"}
        return cls(**{key: value for key, value in data.items() if key in known})

    @classmethod
    def failed(cls, config: RunConfig, error: BaseException | str) -> "RunResult":
        """A run that raised: the config and the error in one line."""
        reason = error if isinstance(error, str) else f"{type(error).__name__}: {' '.join(str(error).split())}"
        return cls(config=config.to_dict(), status="failed", reason=reason, world_size=config.training.world_size)


class _RunState:
    """What a checkpoint holds: model, optimizer (slots and step), epochs done and the history
    so far (as JSON in a string variable, so it is saved in the same atomic checkpoint)."""

    def __init__(self, model: tf.keras.Model, optimizer: tf.keras.optimizers.Optimizer):
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.history_json = tf.Variable("[]", dtype=tf.string, trainable=False, name="history")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self.epoch, history=self.history_json)

    def restore(self, directory: Path) -> tuple[int, list[dict]]:
        """Restores the latest checkpoint of ``directory`` if any; returns (epochs done, history)."""
        latest = tf.train.latest_checkpoint(str(directory))
        if latest is None:
            return 0, []
        self.checkpoint.restore(latest).assert_existing_objects_matched()
        return int(self.epoch.numpy()), json.loads(self.history_json.numpy().decode())


class _RunCheckpoint(tf.keras.callbacks.Callback):
    """Rank 0 checkpoints the run state after every epoch (TensorFlow writes the files, then
    the index that names them: a kill leaves the previous checkpoint intact). Skipped once the
    run diverged, so a resume never starts from NaN weights."""

    def __init__(self, directory: Path, state: _RunState, guard: DivergenceGuard,
                 previous_history: list[dict[str, float]], world: World):
        super().__init__()
        self.state, self.guard, self.world = state, guard, world
        self.history = list(previous_history)
        self.manager = tf.train.CheckpointManager(state.checkpoint, str(directory), max_to_keep=1)

    def on_epoch_end(self, epoch, logs=None):
        self.history.append(_history_row(epoch, logs or {}))
        if self.guard.reason is not None or not self.world.is_root:
            return
        self.state.epoch.assign(epoch + 1)
        self.state.history_json.assign(json.dumps(_finite_or_none(self.history)))
        self.manager.save(checkpoint_number=epoch + 1)


def _history_row(epoch: int, logs: dict[str, Any]) -> dict[str, float]:
    return {"epoch": epoch + 1, **{key: float(value) for key, value in sorted(logs.items())}}


def evaluate(model: tf.keras.Model, x: np.ndarray, y: np.ndarray, world: World, batch: int) -> dict[str, float]:
    """Loss and accuracy on all of ``(x, y)``: each rank evaluates its shard, the sums are
    averaged over ranks, so the result is the exact mean over every sample."""
    shard, shards = world.input_shard()
    count = len(range(shard, len(x), shards))
    loss = accuracy = 0.0
    if count:
        data = make_input_pipeline(x, y, per_worker_batch=batch, rank=shard, world_size=shards, seed=0, training=False)
        loss, accuracy = model.evaluate(data, verbose=0)
    totals = world.allreduce_mean([loss * count, accuracy * count, count])
    return {"loss": float(totals[0] / totals[2]), "accuracy": float(totals[1] / totals[2])}


def _final_metrics(model: tf.keras.Model, data: Dataset, world: World, batch: int) -> dict[str, float]:
    """``{split}_loss`` and ``{split}_accuracy`` on the full train, test and (if any) validation sets."""
    splits = {"train": (data.x_train, data.y_train), "test": (data.x_test, data.y_test),
              "validation": (data.x_validation, data.y_validation)}
    return {
        f"{split}_{name}": value
        for split, (x, y) in splits.items() if len(x)
        for name, value in evaluate(model, x, y, world, batch).items()
    }


def train(
    config: RunConfig,
    world: World,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    callbacks: Iterable[tf.keras.callbacks.Callback] = (),
    verbose: int = 0,
) -> RunResult:
    """Trains one run and evaluates it.

    Args:
      config: the resolved run.
      world: where it runs; its size must equal ``config.training.world_size``.
      run_dir: where rank 0 keeps checkpoints (every epoch) and TensorBoard logs; None
        keeps nothing.
      resume: continue from the last checkpoint in ``run_dir`` (weights, optimizer slots,
        LR step, data stream position); the result equals an uninterrupted run for models
        without dropout.
      callbacks: extra Keras callbacks, run after lbtrain's own.
      verbose: Keras's ``fit`` verbosity on rank 0 (other ranks are always silent).

    Returns:
      A ``RunResult`` with status ``ok`` or ``diverged``; exceptions propagate (the runner
      records them as ``failed``; under Horovod they end the job).
    """
    started = time.perf_counter()
    settings = config.training
    if world.size != settings.world_size:
        raise ValueError(f"training.world_size is {settings.world_size} but the world has {world.size} workers")
    tf.keras.utils.set_random_seed(settings.seed)
    data = load_dataset(
        config.data.dataset, train_subset=config.data.train_subset, validation_split=config.data.validation_split,
        seed=settings.seed, **config.data.options,
    )
    steps = steps_per_epoch(len(data.x_train), settings.per_worker_batch, settings.world_size)
    global_batch = global_batch_size(settings.world_size, settings.per_worker_batch)
    schedule = build_schedule(
        config.lr.schedule_spec(), steps_per_epoch=steps, base_lr=config.lr.base_lr, base_batch=config.lr.base_batch,
        global_batch=global_batch, total_epochs=settings.epochs,
    )
    model = build_model(config.model.name, data.input_shape, data.num_classes, seed=settings.seed, **config.model.options)
    model = world.prepare_model(model, settings.per_worker_batch)
    optimizer = world.wrap_optimizer(build_optimizer(config.optimizer.name, schedule, **config.optimizer.params))
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    optimizer.build(model.trainable_variables)

    shard, shards = world.input_shard()
    run_dir = Path(run_dir) if run_dir is not None else None
    state = _RunState(model, optimizer)
    initial_epoch, previous_history = 0, []
    if resume and run_dir is not None:
        initial_epoch, previous_history = state.restore(run_dir / CHECKPOINT_FOLDER)

    first_loss = previous_history[0].get("loss") if previous_history else None
    guard = DivergenceGuard(settings.divergence_factor, every_step=shards == 1, first_epoch_loss=first_loss)
    run_callbacks = [*world.callbacks(), LearningRateLogger(), Throughput(global_batch), GeneralizationGap(), guard]
    noise_scale = None
    if config.analysis.noise_scale:
        noise_scale = GradientNoiseScale(data.x_train, data.y_train, world, settings.per_worker_batch,
                                         every=config.analysis.noise_scale_every, seed=settings.seed)
        run_callbacks.append(noise_scale)
    if run_dir is not None and settings.checkpoint:
        run_callbacks.append(_RunCheckpoint(run_dir / CHECKPOINT_FOLDER, state, guard, previous_history, world))
    if run_dir is not None and settings.tensorboard and world.is_root:
        run_callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=str(run_dir / "tensorboard")))
    run_callbacks.extend(callbacks)

    train_data = make_input_pipeline(
        data.x_train, data.y_train, per_worker_batch=world.process_batch(settings.per_worker_batch), rank=shard,
        world_size=shards, seed=settings.seed, training=True, initial_epoch=initial_epoch,
    )
    validation_data = None
    if len(data.x_validation):
        validation_data = make_input_pipeline(
            data.x_validation, data.y_validation, per_worker_batch=settings.eval_batch, rank=shard, world_size=shards,
            seed=0, training=False,
        )
    history = list(previous_history)
    if initial_epoch < settings.epochs:
        keras_history = model.fit(
            train_data, epochs=settings.epochs, initial_epoch=initial_epoch, steps_per_epoch=steps,
            validation_data=validation_data, callbacks=run_callbacks, verbose=verbose if world.is_root else 0,
        )
        history += [
            _history_row(epoch_index, {key: values[i] for key, values in keras_history.history.items()})
            for i, epoch_index in enumerate(keras_history.epoch)
        ]

    metrics = _final_metrics(model, data, world, settings.eval_batch)
    if noise_scale is not None and noise_scale.measurements:
        metrics["noise_scale"] = noise_scale.estimate()["noise_scale"]
    if config.analysis.sharpness and not guard.reason:
        samples = config.analysis.sharpness_samples or len(data.x_train)
        metrics["sharpness"] = sharpness(
            model, (data.x_train[:samples], data.y_train[:samples]), epsilon=config.analysis.sharpness_epsilon,
            subspace_dim=config.analysis.sharpness_subspace, seed=settings.seed,
        )
    throughputs = [row["samples_per_second"] for row in history if "samples_per_second" in row]
    return RunResult(
        config=config.to_dict(),
        status="diverged" if guard.reason else "ok",
        reason=guard.reason,
        metrics=metrics,
        generalization_gap={
            "accuracy": metrics["train_accuracy"] - metrics["test_accuracy"],
            "loss": metrics["test_loss"] - metrics["train_loss"],
        },
        history=history,
        world_size=settings.world_size,
        global_batch=global_batch,
        learning_rate=scale_learning_rate(config.lr.base_lr, config.lr.base_batch, global_batch, config.lr.rule),
        steps_per_epoch=steps,
        total_steps=int(optimizer.iterations.numpy()),
        samples_per_second=float(np.mean(throughputs[1:] or throughputs)) if throughputs else 0.0,
        wall_time_seconds=time.perf_counter() - started,
        model=model,
    )
