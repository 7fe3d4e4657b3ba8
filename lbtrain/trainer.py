"""One training run: ``train(config, world) -> RunResult``.

The same function runs under ``horovodrun -np W`` (``HorovodWorld``), in one process
(``SimulatedWorld(W)``), under a synchronous tf.distribute strategy (``lbtrain.worlds.strategy``) and
on the chief of an asynchronous parameter-server job (``lbtrain.worlds.parameter_server``, whose
``World.fit`` drives the same callbacks), in four phases: ``build`` (data sharded by rank, the model, the
optimizer wrapped by the world, the learning rate scaled for the *global* batch and decaying
over the budget), ``make_callbacks`` (lbtrain's callbacks, a restored checkpoint), ``fit``
(until the budget of epochs, steps or samples, or a training target) and ``measure`` (final
train/validation/test loss and accuracy on the full sets, averaged over ranks, and what the
run's ``analysis`` section asks for). ``lbtrain.verdict.judge`` then gives the run its status.
Only rank 0 writes files.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import tensorflow as tf

from lbtrain._keras import optimizer_step
from lbtrain.callbacks import (
    BudgetStop,
    DivergenceGuard,
    GeneralizationGap,
    GradientNoiseScale,
    LearningRateLogger,
    Throughput,
    ValidationPoints,
)
from lbtrain.config import ConfigError, RunConfig
from lbtrain.data import Dataset, make_input_pipeline, sample_stream, steps_per_epoch
from lbtrain.elastic import ElasticLearningRate, WorldChange, WorldSegment, plan_run, replay_changes
from lbtrain.measures.flatness import hessian_top_eigenvalue, pac_bayes_flatness, sharpness
from lbtrain.measures.noise_scale import NoiseScaleSettings
from lbtrain.models import build_model
from lbtrain.objectives import chance, compile_arguments
from lbtrain.optimizers import build_optimizer
from lbtrain.precise_bn import PreciseBatchNorm, recompute_batch_norm_statistics
from lbtrain.results import CHECKPOINT_FOLDER, RunResult, finite_or_none
from lbtrain.scaling import scale_learning_rate
from lbtrain.train_step import NoiseScaleTracker, noise_scale_tracker
from lbtrain.verdict import Verdict, judge
from lbtrain.worlds.base import World, jit_compile_refusal

logger = logging.getLogger(__name__)


class _RunState:
    """What a checkpoint holds: model, optimizer (slots and step), epochs done, the step-0 loss
    (NaN until measured) and the history so far (as JSON in a string variable, so it is saved
    in the same atomic checkpoint)."""

    def __init__(self, model: tf.keras.Model, optimizer: tf.keras.optimizers.Optimizer, elastic_job: bool = False,
                 validation_points: bool = False):
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.initial_loss = tf.Variable(math.nan, dtype=tf.float64, trainable=False, name="initial_loss")
        self.history_json = tf.Variable("[]", dtype=tf.string, trainable=False, name="history")
        # An elastic job's progress (samples seen, the LR's segment, the world changes), as JSON:
        # its steps do not say how many samples were seen. Only its checkpoints hold it.
        self.progress_json = tf.Variable("{}", dtype=tf.string, trainable=False, name="progress") if elastic_job else None
        extra = {"progress": self.progress_json} if elastic_job else {}
        # The validation points so far (``training.validation_every_steps``): only such runs' checkpoints hold them.
        self.points_json = tf.Variable("[]", dtype=tf.string, trainable=False, name="validation_points") if validation_points else None
        if validation_points:
            extra["validation_points"] = self.points_json
        self.checkpoint = tf.train.Checkpoint(
            model=model, optimizer=optimizer, epoch=self.epoch, initial_loss=self.initial_loss, history=self.history_json, **extra,
        )

    def progress(self) -> dict[str, Any]:
        """The restored progress of an elastic job (empty if none)."""
        return json.loads(self.progress_json.numpy().decode()) if self.progress_json is not None else {}

    def points(self) -> list[dict[str, float]]:
        """The restored validation points (empty if none)."""
        return json.loads(self.points_json.numpy().decode()) if self.points_json is not None else []

    def restore(self, directory: Path, set_aside: bool = True) -> tuple[int, list[dict], float | None]:
        """Restores the latest checkpoint of ``directory`` if any; returns (epochs done, history,
        step-0 loss). A damaged checkpoint (``checkpoint_damage``: a truncated data file, a
        garbled index) restores nothing: the run starts from scratch, and with ``set_aside`` (the
        root's call) the folder is moved to ``<directory>.damaged-<n>`` with one warning naming it,
        so no rerun trips on it again and nothing is deleted."""
        latest, damage = checkpoint_damage(directory)
        if damage is not None:
            if set_aside:
                moved = _set_aside(directory)
                logger.warning("%s is damaged (%s): moved it to %s; training the run from scratch", directory, damage, moved)
            return 0, [], None
        if latest is None:
            return 0, [], None
        self.checkpoint.restore(latest).assert_existing_objects_matched()
        initial_loss = float(self.initial_loss.numpy())
        return int(self.epoch.numpy()), json.loads(self.history_json.numpy().decode()), initial_loss if math.isfinite(initial_loss) else None


# TensorFlow's checkpoint index in a checkpoint folder: it names the latest checkpoint's files.
CHECKPOINT_INDEX = "checkpoint"


def checkpoint_damage(directory: Path) -> tuple[str | None, str | None]:
    """``(latest checkpoint prefix, None)`` when ``directory`` holds a readable checkpoint (or
    ``(None, None)`` when it holds none), else ``(None, why it cannot be read)``: an index that is
    not one or names files that are missing, or a data file that does not read in full. Every
    tensor is read before anything is restored, so a damaged checkpoint never half-restores a model."""
    index = Path(directory) / CHECKPOINT_INDEX
    if not index.exists():
        return None, None
    quiet, level = tf.get_logger(), tf.get_logger().level
    quiet.setLevel(logging.ERROR)  # TensorFlow logs an unparsable index as a warning and ignores it
    try:
        latest = tf.train.latest_checkpoint(str(directory))
        if latest is None:
            return None, f"its index {index.name} names no checkpoint whose files are there"
        reader = tf.train.load_checkpoint(latest)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, UnicodeDecodeError, ValueError, IndexError) as error:  # IndexError: a short read
        message = getattr(error, "message", None) or str(error)
        lines = [line for line in message.splitlines() if line.strip()] or [""]
        return None, f"{type(error).__name__}: {lines[0][:200]}"
    finally:
        quiet.setLevel(level)
    return latest, None


def _set_aside(directory: Path) -> Path:
    """Renames ``directory`` to the first free ``<name>.damaged-<n>`` beside it; returns the new path."""
    number = 1
    while (target := directory.with_name(f"{directory.name}.damaged-{number}")).exists():
        number += 1
    directory.rename(target)
    return target


class _RunCheckpoint(tf.keras.callbacks.Callback):
    """Rank 0 checkpoints the run state after every epoch (TensorFlow writes the files, then
    the index that names them: a kill leaves the previous checkpoint intact). Skipped once the
    run diverged, so a resume never starts from NaN weights. Where saving is a collective
    (``World.collective_checkpoints``: tf.distribute's multi-worker variables, whose reads
    all-reduce), the other ranks save too, into a scratch folder they delete."""

    def __init__(self, directory: Path, state: _RunState, guard: DivergenceGuard,
                 previous_history: list[dict[str, float]], world: World):
        super().__init__()
        self.state, self.guard, self.world = state, guard, world
        self.history = list(previous_history)
        # An elastic job's: what its progress is at an epoch end (``_fit_elastic_job`` sets it).
        self.progress: Callable[[], dict[str, Any]] | None = None
        # The run's validation points (``ValidationPoints.points``) when it measures them between epoch ends.
        self.points: Callable[[], list[dict[str, float]]] | None = None
        self.manager = tf.train.CheckpointManager(state.checkpoint, str(directory), max_to_keep=1)

    def on_epoch_end(self, epoch, logs=None):
        self.history.append(_history_row(epoch, logs or {}))
        if self.guard.reason is not None or not (self.world.is_root or self.world.collective_checkpoints):
            return
        self.state.epoch.assign(epoch + 1)
        self.state.initial_loss.assign(math.nan if self.guard.initial_loss is None else self.guard.initial_loss)
        self.state.history_json.assign(json.dumps(finite_or_none(self.history)))
        if self.progress is not None:
            self.state.progress_json.assign(json.dumps(self.progress()))
        if self.points is not None:
            self.state.points_json.assign(json.dumps(finite_or_none(self.points())))
        if self.world.is_root:
            self.manager.save(checkpoint_number=epoch + 1)
            return
        with tempfile.TemporaryDirectory(prefix="lbtrain-worker-checkpoint-") as scratch:
            self.state.checkpoint.save(str(Path(scratch) / "checkpoint"))


def _history_row(epoch: int, logs: dict[str, Any]) -> dict[str, float]:
    return {"epoch": epoch + 1, **{key: float(value) for key, value in sorted(logs.items())}}


def evaluate(model: tf.keras.Model, x: np.ndarray, y: np.ndarray, world: World, batch: int) -> dict[str, float]:
    """Loss and accuracy on all of ``(x, y)``: each rank evaluates its shard, the sums are
    averaged over ranks, so the result is the exact mean over every sample. (A tf.distribute
    world feeds the whole set, which its strategy splits and reduces across replicas.)"""
    shard, shards = world.input_shard()
    count = len(range(shard, len(x), shards))
    loss = accuracy = 0.0
    if count:
        data = make_input_pipeline(x, y, per_worker_batch=batch, rank=shard, world_size=shards, seed=0, training=False)
        world.share_replica_statistics(model)
        loss, accuracy = world.evaluate(model, data)
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


def accelerators() -> list[str]:
    """The kinds of non-CPU device TensorFlow sees (``GPU``, ``TPU``), sorted."""
    return sorted({device.device_type for device in tf.config.list_physical_devices() if device.device_type != "CPU"})


def resolve_jit_compile(setting: bool | str, world: World) -> tuple[bool, str]:
    """Whether ``training.jit_compile`` (``auto``, True or False) compiles the train step with
    XLA in ``world``, and why, as a phrase for the log.

    ``auto`` compiles where a GPU or TPU is visible and the world's step can be compiled, and
    not on CPU only: there ``benchmarks/bench_jit.py`` measures the compiled step several times
    slower than the uncompiled one (TensorFlow's oneDNN CPU kernels beat XLA's CPU code for the
    cnn and the mlp alike), as Keras 3's own ``jit_compile="auto"`` decides too. A measured probe
    would cost every run a compile of its step to learn what the device already says. ``True`` in a world whose step cannot be compiled
    (``World.jit_compile_problem``) is a one-line ``ConfigError``."""
    problem = world.jit_compile_problem
    if setting is True:
        if problem is not None:
            raise ConfigError(jit_compile_refusal(problem))
        return True, "training.jit_compile is true"
    if setting is False:
        return False, "training.jit_compile is false"
    if problem is not None:
        return False, f"training.jit_compile is auto and {problem}"
    devices = accelerators()
    if devices:
        return True, f"training.jit_compile is auto and {' and '.join(devices)} devices are visible"
    return False, ("training.jit_compile is auto and only the CPU is visible, where the compiled step measured "
                   "slower (benchmarks/bench_jit.py)")


@dataclasses.dataclass
class _Built:
    """What ``build`` makes of a config: the data, the compiled model and its optimizer, and
    the budget in steps; for an elastic run (``training.elastic``), its segments of one world
    size each, its learning rate and the world changes made so far."""

    data: Dataset
    model: tf.keras.Model
    optimizer: tf.keras.optimizers.Optimizer
    steps_per_epoch: int
    total_steps: int
    segments: list[WorldSegment] | None = None
    elastic_lr: ElasticLearningRate | None = None
    world_changes: list[WorldChange] = dataclasses.field(default_factory=list)
    samples_trained: int | None = None


def build(config: RunConfig, world: World) -> _Built:
    """Seeds, loads the data, and compiles the model with the world's optimizer and the run's
    schedule (scaled for the global batch, decaying over the budget), in the world's scope, its
    train step compiled with XLA or not as ``resolve_jit_compile`` decides (logged once: INFO when compiled, DEBUG when not)."""
    settings = config.training
    if world.size != settings.world_size and not world.elastic:
        raise ValueError(f"training.world_size is {settings.world_size} but the world has {world.size} workers")
    tf.keras.utils.set_random_seed(settings.seed)
    data = config.data.load(seed=settings.seed)
    # An update takes ``accumulation_steps`` batches of every worker, or one worker's batch where
    # the workers update one by one (``World.updates_per_step``): epochs count updates.
    steps = steps_per_epoch(len(data.x_train), settings.update_batch, settings.world_size) * world.updates_per_step
    analysis = config.analysis
    noise_scale = NoiseScaleSettings(analysis.noise_scale_decay, analysis.noise_scale_pieces) if analysis.noise_scale else None
    segments, schedule = None, None
    if settings.elastic is not None:
        segments, schedule = plan_run(config, len(data.x_train), world.updates_per_step)
        if segments is not None:
            world.plan_sizes([segment.world_size for segment in segments])
    if world.elastic and settings.elastic is None:
        raise ConfigError("this process is a worker of an elastic job (HOROVOD_ELASTIC=1) but the run has no training.elastic")
    if settings.elastic is not None and settings.elastic.discovery is not None and not world.elastic:
        raise ConfigError("training.elastic.discovery is set but this job was not started by horovodrun's elastic launcher "
                          "(lbtrain run starts it; by hand: horovodrun --min-np/--max-np/--host-discovery-script)")
    jit_compile, why = resolve_jit_compile(settings.jit_compile, world)
    if world.is_root:  # compiling is the notable choice; the uncompiled step is the usual one on a CPU
        logger.log(logging.INFO if jit_compile else logging.DEBUG, "train step %s: %s",
                   "compiled with XLA" if jit_compile else "not compiled", why)
    with world.scope():
        model = build_model(config.model.name, data.input_shape, data.num_classes, seed=settings.seed, **config.model.options)
        loss, metrics = compile_arguments(model, data)
        model = world.prepare_model(model, settings.per_worker_batch, noise_scale=noise_scale,
                                    accumulation_steps=settings.accumulation_steps, staleness=settings.staleness,
                                    jit_compile=jit_compile)
        optimizer = world.wrap_optimizer(build_optimizer(config.optimizer.name, schedule or config.schedule(steps), **config.optimizer.params))
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=jit_compile and world.compiles_whole_step)
        optimizer.build(model.trainable_variables)
    if segments is not None:
        return _Built(data, model, optimizer, steps, segments[-1].end_step, segments=segments, elastic_lr=schedule)
    return _Built(data, model, optimizer, steps, config.total_steps(steps), elastic_lr=schedule)


@dataclasses.dataclass
class _Callbacks:
    """The callbacks of one ``fit``, with handles on the ones whose findings the run keeps."""

    all: list[tf.keras.callbacks.Callback]
    guard: DivergenceGuard
    budget: BudgetStop
    noise_scale: GradientNoiseScale | NoiseScaleTracker | None
    initial_epoch: int
    previous_history: list[dict[str, float]]
    checkpoint: "_RunCheckpoint | None" = None
    progress: dict[str, Any] = dataclasses.field(default_factory=dict)
    validation_points: ValidationPoints | None = None


def make_callbacks(
    config: RunConfig, built: _Built, world: World, run_dir: Path | None, resume: bool, extra: Iterable[tf.keras.callbacks.Callback],
) -> _Callbacks:
    """The world's callbacks first (broadcast, metric averaging), then lbtrain's (LR log,
    throughput, gap, divergence guard, budget, noise scale, checkpoints, TensorBoard), then the
    caller's. A resumed run restores its checkpoint here."""
    settings = config.training
    state = _RunState(built.model, built.optimizer, elastic_job=world.elastic, validation_points=settings.validation_every_steps is not None)
    initial_epoch, previous_history, initial_loss = 0, [], None
    if resume and run_dir is not None:
        initial_epoch, previous_history, initial_loss = state.restore(run_dir / CHECKPOINT_FOLDER, set_aside=world.is_root)
        if initial_epoch and world.is_root:
            logger.debug("resuming after epoch %d from %s", initial_epoch, run_dir / CHECKPOINT_FOLDER)
    # Rank 0's: every rank then measures the step-0 loss (one collective) or none does. (An
    # elastic job's state carries it instead: no collective may come before its first sync.)
    if not world.elastic:
        initial_loss = world.broadcast_object(initial_loss)
    guard = DivergenceGuard(settings.divergence_factor, world=world, initial_loss=initial_loss)
    budget = BudgetStop(built.total_steps, settings.stop_at)
    callbacks = [*world.callbacks(), LearningRateLogger(), Throughput(config.global_batch), GeneralizationGap(), guard, budget]
    points = None
    if settings.validation_every_steps is not None:
        previous_points = state.points() if initial_epoch else []
        points = ValidationPoints(settings.validation_every_steps, _validation_evaluator(config, built, world), settings.stop_at,
                                  budget, previous=previous_points)
        callbacks.append(points)
    if config.training.precise_bn_samples:
        callbacks.append(PreciseBatchNorm(built.data.x_train[:config.training.precise_bn_samples], config.training.per_worker_batch))
    noise_scale = noise_scale_tracker(built.model)
    if config.analysis.noise_scale and noise_scale is None:
        analysis = config.analysis
        noise_scale = GradientNoiseScale(built.data.x_train, built.data.y_train, world, settings.per_worker_batch,
                                         every=analysis.noise_scale_every, decay=analysis.noise_scale_decay ** analysis.noise_scale_every,
                                         seed=settings.seed)
        callbacks.append(noise_scale)
    checkpoint = None
    if run_dir is not None and settings.checkpoint:
        checkpoint = _RunCheckpoint(run_dir / CHECKPOINT_FOLDER, state, guard, previous_history, world)
        if points is not None:
            checkpoint.points = lambda: points.points
        callbacks.append(checkpoint)
    if run_dir is not None and settings.tensorboard and world.is_root:
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=str(run_dir / "tensorboard")))
    callbacks.extend(extra)
    return _Callbacks(callbacks, guard, budget, noise_scale, initial_epoch, previous_history, checkpoint, state.progress(), points)


def _validation_evaluator(config: RunConfig, built: _Built, world: World) -> Callable[[], dict[str, float]]:
    """What ``ValidationPoints`` calls every N steps: ``{"val_loss", "val_accuracy"}`` on the whole
    validation split, each rank summing over its shard and the sums averaged over ranks (as
    ``evaluate`` does), so every rank gets the same numbers. It keeps its own loss and metric
    (``compile_arguments`` again) and never calls Keras's ``evaluate``, which would reset the
    compiled metrics and with them the epoch's running training means; batch-norm statistics are
    recomputed first when the run asks for precise ones (``training.precise_bn_samples``)."""
    settings, data, model = config.training, built.data, built.model
    shard, shards = world.input_shard()
    x, y = data.x_validation[shard::shards], data.y_validation[shard::shards]
    loss_function, [metric] = compile_arguments(model, data)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(settings.eval_batch)

    @tf.function(reduce_retracing=True)
    def batch_loss(inputs, targets):
        outputs = model(inputs, training=False)
        metric.update_state(targets, outputs)
        return tf.cast(loss_function(targets, outputs), tf.float64) * tf.cast(tf.shape(targets)[0], tf.float64)

    def evaluate() -> dict[str, float]:
        if settings.precise_bn_samples:
            recompute_batch_norm_statistics(model, data.x_train[:settings.precise_bn_samples], settings.per_worker_batch)
        metric.reset_state()
        loss = sum(float(batch_loss(inputs, targets)) for inputs, targets in batches) if len(x) else 0.0
        accuracy = float(metric.result()) if len(x) else 0.0
        totals = world.allreduce_mean([loss, accuracy * len(x), len(x)])
        return {"val_loss": float(totals[0] / totals[2]), "val_accuracy": float(totals[1] / totals[2])}

    return evaluate


def fit(config: RunConfig, built: _Built, world: World, callbacks: _Callbacks, verbose: int) -> list[dict[str, float]]:
    """Trains from the restored epoch until the budget or the target; returns the whole
    per-epoch history (restored epochs included)."""
    if built.segments is not None:
        return _fit_segments(config, built, world, callbacks, verbose)
    if world.elastic:
        return _fit_elastic_job(config, built, world, callbacks, verbose)
    settings, data = config.training, built.data
    shard, shards = world.input_shard()
    start_step = int(built.optimizer.iterations.numpy())
    history = list(callbacks.previous_history)
    if start_step >= built.total_steps or _target_met(settings.stop_at, history):
        return history
    train_data = world.training_input(make_input_pipeline(
        data.x_train, data.y_train, per_worker_batch=world.process_batch(settings.update_batch), rank=shard,
        world_size=shards, seed=settings.seed, training=True, initial_epoch=callbacks.initial_epoch,
    ), settings.update_batch)
    validation_data = None
    if len(data.x_validation):
        validation_data = world.evaluation_input(make_input_pipeline(
            data.x_validation, data.y_validation, per_worker_batch=settings.eval_batch, rank=shard, world_size=shards,
            seed=0, training=False,
        ))
    keras_history = world.fit(
        built.model, train_data, total_steps=built.total_steps,
        epochs=config.epochs_to_run(built.steps_per_epoch), initial_epoch=callbacks.initial_epoch,
        steps_per_epoch=built.steps_per_epoch, validation_data=validation_data, callbacks=callbacks.all,
        verbose=verbose if world.is_root else 0, shuffle=False,  # the input pipeline shuffles (Keras 3 warns otherwise)
    )
    return history + [
        _history_row(epoch_index, {key: values[i] for key, values in keras_history.history.items()})
        for i, epoch_index in enumerate(keras_history.epoch)
    ]


def _fit_segments(config: RunConfig, built: _Built, world: World, callbacks: _Callbacks, verbose: int) -> list[dict[str, float]]:
    """An elastic run's ``fit``: one Keras ``fit`` per segment of ``built.segments``, the world
    resized and the learning rate moved to the new world (``ElasticLearningRate.change_world``)
    before it, the data continuing the sample stream where the last segment left it
    (``sample_stream``). A segment's epochs are ``steps_per_epoch`` of its world (the last one
    cut at the segment's end), so checkpoints fall on segment and epoch boundaries and a resumed
    run replays the changes before its restored step."""
    settings, data = config.training, built.data
    start = int(built.optimizer.iterations.numpy())
    built.world_changes.extend(replay_changes(built.elastic_lr, built.segments, start))
    history, epoch = list(callbacks.previous_history), callbacks.initial_epoch
    validation_data = None
    if len(data.x_validation):
        validation_data = make_input_pipeline(data.x_validation, data.y_validation, per_worker_batch=settings.eval_batch,
                                              rank=0, world_size=1, seed=0, training=False)
    throughput = next(callback for callback in callbacks.all if isinstance(callback, Throughput))
    for segment in built.segments:
        if segment.end_step <= start or _target_met(settings.stop_at, history):  # done, or resumed after its target
            continue
        if segment.start_step > start and segment.world_size != built.elastic_lr.world_size:
            change = built.elastic_lr.change_world(segment.start_step, segment.world_size, segment.start_samples)
            built.world_changes.append(change)
            logger.info("world size %d -> %d at step %d (%d samples): lr %.4g -> %.4g", change.old_world_size,
                        change.new_world_size, change.step, change.samples, change.old_lr, change.new_lr)
        begin = max(start, segment.start_step)
        batch = segment.world_size * settings.update_batch
        world.resize(segment.world_size)
        throughput.global_batch = batch
        callbacks.budget.total_steps = segment.end_step
        per_epoch = steps_per_epoch(len(data.x_train), settings.update_batch, segment.world_size)
        stream = sample_stream(data.x_train, data.y_train, batch=batch, seed=settings.seed,
                               skip=segment.start_samples + (begin - segment.start_step) * batch)
        keras_history = world.fit(
            built.model, stream, total_steps=segment.end_step, epochs=epoch + math.ceil((segment.end_step - begin) / per_epoch),
            initial_epoch=epoch, steps_per_epoch=per_epoch, validation_data=validation_data, callbacks=[_EpochStep(), *callbacks.all],
            verbose=verbose, shuffle=False,
        )
        history += [_history_row(index, {key: values[i] for key, values in keras_history.history.items()})
                    for i, index in enumerate(keras_history.epoch)]
        epoch += len(keras_history.epoch)
        if callbacks.guard.reason is not None or callbacks.budget.reached_step is not None:
            break
    callbacks.budget.total_steps = built.total_steps
    built.samples_trained = built.elastic_lr.samples_at(int(built.optimizer.iterations.numpy()))
    return history


class _EpochStep(tf.keras.callbacks.Callback):
    """``logs["step"]``: the optimizer steps taken by each epoch's end, in an elastic world's
    history, whose epochs differ in steps (``lbtrain.measures.steps_to_target`` reads it). First
    in the list, so every later callback (checkpoints included) sees it."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["step"] = optimizer_step(self.model.optimizer)


class _ElasticProgress(tf.keras.callbacks.Callback):
    """An elastic job's progress into its state, after every other callback of the step and
    before the commit: ``samples`` after every batch; at an epoch end, ``epoch``, the epoch's
    history row and the step-0 loss (which the divergence guard measured)."""

    def __init__(self, state, batch: int, guard: DivergenceGuard):
        super().__init__()
        self.state, self.batch, self.guard = state, batch, guard

    def on_train_batch_end(self, batch, logs=None):
        self.state.samples += self.batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1
        self.state.history = [*self.state.history, _history_row(epoch, logs or {})]
        self.state.initial_loss = self.guard.initial_loss


def _fit_elastic_job(config: RunConfig, built: _Built, world: World, callbacks: _Callbacks, verbose: int) -> list[dict[str, float]]:
    """A Horovod elastic job's ``fit`` (``lbtrain.worlds.horovod_elastic``): training runs in Horovod's
    elastic protocol from a state that every (re)start synchronizes from rank 0 (model,
    optimizer, samples seen, epoch, history, step-0 loss, the LR's segment, the changes so far).
    At each (re)start, in a world of another size than the LR's, the LR moves to it
    (``ElasticLearningRate.change_world`` at the committed step and samples) and the change is
    recorded; then the run trains on its share of the sample stream from the committed samples
    until the budget in samples (``RunConfig.elastic_samples``), committing every
    ``commit_steps`` steps. Returns the history (rolled back with the state on a failure)."""
    settings, data, elastic = config.training, built.data, config.training.elastic
    schedule, guard, budget = built.elastic_lr, callbacks.guard, callbacks.budget
    total = config.elastic_samples(built.steps_per_epoch)
    restored = callbacks.progress
    state = world.elastic_state(
        built.model, built.optimizer, samples=int(restored.get("samples", 0)), epoch=callbacks.initial_epoch,
        history=list(callbacks.previous_history), initial_loss=guard.initial_loss,
        segment=restored.get("segment", schedule.segment()), changes=list(restored.get("changes", [])))
    throughput = next(callback for callback in callbacks.all if isinstance(callback, Throughput))
    if callbacks.checkpoint is not None:
        callbacks.checkpoint.progress = lambda: {"samples": state.samples, "segment": state.segment, "changes": state.changes}

    def train_while_the_world_holds(state) -> None:
        schedule.set_segment(state.segment)
        guard.initial_loss = state.initial_loss
        step = int(built.optimizer.iterations.numpy())
        batch = world.size * settings.update_batch
        remaining = (total - state.samples) // batch
        if (remaining <= 0 or guard.reason is not None or budget.reached_step is not None
                or _target_met(settings.stop_at, state.history)):  # done, or a restart after the target was met
            return  # before any world change: a change no step trains in is not recorded
        if world.size != schedule.world_size:
            change = schedule.change_world(step, world.size, state.samples)
            state.segment, state.changes = schedule.segment(), [*state.changes, change.to_dict()]
            if world.is_root:
                logger.info("world size %d -> %d at step %d (%d samples): lr %.4g -> %.4g", change.old_world_size,
                            change.new_world_size, change.step, change.samples, change.old_lr, change.new_lr)
        if callbacks.checkpoint is not None:
            callbacks.checkpoint.history = list(state.history)
        budget.total_steps, throughput.global_batch = step + remaining, batch
        per_epoch = steps_per_epoch(len(data.x_train), settings.update_batch, world.size)
        stream = sample_stream(data.x_train, data.y_train, batch=batch, seed=settings.seed, skip=state.samples,
                               rank=world.rank, world_size=world.size)
        validation_data = None
        if len(data.x_validation):
            validation_data = make_input_pipeline(data.x_validation, data.y_validation, per_worker_batch=settings.eval_batch,
                                                  rank=world.rank, world_size=world.size, seed=0, training=False)
        world.fit(built.model, stream, total_steps=budget.total_steps, epochs=state.epoch + math.ceil(remaining / per_epoch),
                  initial_epoch=state.epoch, steps_per_epoch=per_epoch, validation_data=validation_data,
                  callbacks=[_EpochStep(), *callbacks.all, _ElasticProgress(state, batch, guard),
                             world.commit_callback(state, elastic.commit_steps)],
                  verbose=verbose if world.is_root else 0, shuffle=False)

    world.run_elastic(train_while_the_world_holds, state)
    built.world_changes = [WorldChange(**change) for change in state.changes]
    built.samples_trained = state.samples
    budget.total_steps = int(built.optimizer.iterations.numpy())
    return list(state.history)


def _target_met(stop_at, history: list[dict[str, float]]) -> bool:
    """Whether a restored history already ended at its target."""
    last = history[-1].get(stop_at.metric) if stop_at is not None and history else None
    return last is not None and stop_at.reached(last)


def measure(config: RunConfig, built: _Built, world: World, callbacks: _Callbacks, history: list[dict[str, float]]) -> dict[str, float]:
    """The final metrics on the full sets, plus what the run's ``analysis`` section asks for
    (the gradient noise scale; the sharpness, top Hessian eigenvalue and PAC-Bayes flatness of
    the final weights, unless the run diverged),
    and the step at which a ``stop_at`` target was met."""
    data = built.data
    if config.training.precise_bn_samples:
        recompute_batch_norm_statistics(built.model, data.x_train[:config.training.precise_bn_samples], config.training.per_worker_batch)
    metrics = _final_metrics(built.model, data, world, config.training.eval_batch)
    if callbacks.noise_scale is not None:
        metrics["noise_scale"] = callbacks.noise_scale.estimate()["noise_scale"]
    if config.analysis.sharpness and not callbacks.guard.reason:
        samples = config.analysis.sharpness_samples or len(data.x_train)
        metrics["sharpness"] = sharpness(
            built.model, (data.x_train[:samples], data.y_train[:samples]), epsilon=config.analysis.sharpness_epsilon,
            subspace_dim=config.analysis.sharpness_subspace, seed=config.training.seed,
        )
    if config.analysis.hessian and not callbacks.guard.reason:
        metrics["hessian_top_eigenvalue"] = hessian_top_eigenvalue(
            built.model, data, samples=config.analysis.hessian_samples, seed=config.training.seed).value
    if config.analysis.pac_bayes and not callbacks.guard.reason:
        metrics["pac_bayes_flatness"] = pac_bayes_flatness(
            built.model, data, samples=config.analysis.pac_bayes_samples, seed=config.training.seed).value
    if callbacks.budget.reached_step is not None:
        metrics["target_reached_step"] = callbacks.budget.reached_step
    elif _target_met(config.training.stop_at, history):
        metrics["target_reached_step"] = int(built.optimizer.iterations.numpy())
    return metrics


def train(
    config: RunConfig,
    world: World,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    callbacks: Iterable[tf.keras.callbacks.Callback] = (),
    verbose: int = 0,
) -> RunResult:
    """Trains one run, measures it and judges it: build, callbacks, fit, measure, verdict.

    Args:
      config: the resolved run.
      world: where it runs; its size must equal ``config.training.world_size``.
      run_dir: where rank 0 keeps checkpoints (every epoch) and TensorBoard logs; None
        keeps nothing.
      resume: continue from the last checkpoint in ``run_dir`` (weights, optimizer slots,
        LR step, data stream position, step-0 loss); the result equals an uninterrupted run for
        models without dropout.
      callbacks: extra Keras callbacks, run after lbtrain's own.
      verbose: Keras's ``fit`` verbosity on rank 0 (other ranks are always silent).

    Returns:
      A ``RunResult`` with status ``ok``, ``ok-unstable``, ``diverged`` or ``collapsed`` (``lbtrain.verdict``);
      exceptions propagate (the runner records them as ``failed``; under Horovod they end the job).
    """
    started = time.perf_counter()
    built = build(config, world)
    if world.is_root:
        logger.debug("training %s = batch %d: %d steps, %d an epoch", config.training.world_text, config.global_batch,
                     built.total_steps, built.steps_per_epoch)
    run_callbacks = make_callbacks(config, built, world, Path(run_dir) if run_dir is not None else None, resume, callbacks)
    history = fit(config, built, world, run_callbacks, verbose)
    metrics = measure(config, built, world, run_callbacks, history)
    if built.samples_trained is not None:
        metrics["samples_trained"] = built.samples_trained
    guard = run_callbacks.guard
    verdict = judge(
        initial_loss=guard.initial_loss, final_train_loss=metrics["train_loss"], final_train_accuracy=metrics["train_accuracy"],
        chance=chance(built.data), divergence=guard.reason, epoch_losses=[row.get("loss", math.nan) for row in history],
        epoch_accuracies=[row.get("accuracy") for row in history],
        num_classes=built.data.num_classes if built.data.task != "regression" else None,
        factor=config.training.divergence_factor, margin=config.training.collapse_margin,
        instability_factor=config.training.instability_factor,
    )
    points = run_callbacks.validation_points.points if run_callbacks.validation_points is not None else []
    return _result(config, built, verdict, guard.initial_loss, metrics, history, time.perf_counter() - started, points)


def _result(config: RunConfig, built: _Built, verdict: Verdict, initial_loss: float | None, metrics: dict[str, float],
            history: list[dict[str, float]], seconds: float, validation_points: list[dict[str, float]] = ()) -> RunResult:
    throughputs = [row["samples_per_second"] for row in history if "samples_per_second" in row]
    return RunResult(
        config=config.to_dict(),
        status=verdict.status,
        reason=verdict.reason,
        metrics=metrics,
        generalization_gap={
            "accuracy": metrics["train_accuracy"] - metrics["test_accuracy"],
            "loss": metrics["test_loss"] - metrics["train_loss"],
        },
        history=history,
        world_size=config.training.world_size,
        global_batch=config.global_batch,
        learning_rate=scale_learning_rate(config.lr.base_lr, config.lr.base_batch, config.global_batch, config.lr.rule),
        steps_per_epoch=built.steps_per_epoch,
        total_steps=int(built.optimizer.iterations.numpy()),
        world_changes=[change.to_dict() for change in built.world_changes],
        task=built.data.task,
        budget=config.training.budget,
        initial_loss=initial_loss,
        samples_per_second=float(np.mean(throughputs[1:] or throughputs)) if throughputs else 0.0,
        wall_time_seconds=seconds,
        validation_points=list(validation_points),
        model=built.model,
    )
