"""The tf.data input pipeline: ``steps_per_epoch`` (the one place where epochs become steps),
``epoch_order`` and ``make_input_pipeline``.

The pipeline shards one seeded stream of indices across ranks so that the union of the ranks'
batches at step k is exactly the global batch k a single process would take (see
``make_input_pipeline``): this is what makes a simulated world equal a real one.

Both pipelines run without tf.data's autotuning model (``_without_autotune_model``).
"""

from __future__ import annotations

import numpy as np

from lbtrain.data.errors import DatasetError

__all__ = ["epoch_order", "make_input_pipeline", "sample_stream", "steps_per_epoch"]


def steps_per_epoch(num_samples: int, per_worker_batch: int, world_size: int) -> int:
    """Optimizer steps in one epoch: ``num_samples // (world_size * per_worker_batch)``.

    The remainder of the epoch's shuffled stream is dropped so that every rank takes the
    same number of steps (a rank with one step more would hang an allreduce). This is the
    one place where epochs become steps.

    >>> steps_per_epoch(60000, per_worker_batch=32, world_size=8)  # 60000 // 256, 96 dropped
    234
    >>> steps_per_epoch(60000, per_worker_batch=256, world_size=1)  # same global batch
    234
    >>> steps_per_epoch(100, per_worker_batch=32, world_size=4)
    Traceback (most recent call last):
      ...
    lbtrain.data.DatasetError: 100 training samples are fewer than one global batch (4 workers x 32); use a larger dataset or smaller batch
    """
    global_batch = world_size * per_worker_batch
    steps = num_samples // global_batch
    if steps < 1:
        raise DatasetError(
            f"{num_samples} training samples are fewer than one global batch "
            f"({world_size} workers x {per_worker_batch}); use a larger dataset or smaller batch"
        )
    return steps


def epoch_order(num_samples: int, seed: int, epoch):
    """The shuffled sample order of one epoch: a stateless function of (seed, epoch), so
    every rank, a resumed run and a simulated world all see the same stream."""
    import tensorflow as tf

    seed_pair = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_shuffle(tf.range(num_samples, dtype=tf.int64), seed=seed_pair)


def _without_autotune_model(dataset):
    """``dataset`` with tf.data's autotuning model off (``Options.autotune.enabled = False``).

    The model runs in a thread of each iterator, optimizing at doubling intervals (10 ms up to
    60 s); destroying the iterator (the end of ``fit``, or a garbage collection of a model that
    kept Keras 3's validation iterator after ``fit`` raised) sometimes waits for the rest of the
    current interval, on TensorFlow 2.15 and 2.21 alike: idle seconds at the end of a run, up
    to a minute after a long one. lbtrain's pipelines gather batches of in-memory arrays, which
    needs no tuning: the ``AUTOTUNE`` map runs at tf.data's fixed default parallelism and the
    ``AUTOTUNE`` prefetch keeps tf.data's own buffer heuristic, which needs no model. The
    samples per second, without over with the model, are in the README's performance table
    (``benchmarks/bench_pipeline.py``; target at least 0.9)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def make_input_pipeline(
    x: np.ndarray,
    y: np.ndarray,
    *,
    per_worker_batch: int,
    rank: int,
    world_size: int,
    seed: int,
    training: bool,
    initial_epoch: int = 0,
):
    """A tf.data pipeline of one rank's batches.

    Training: an endless stream of epochs (pass ``steps_per_epoch`` to ``fit``). Epoch e is
    ``epoch_order(n, seed, e)`` cut to ``steps * world_size * per_worker_batch`` indices;
    rank r takes every ``world_size``-th index starting at r and batches them by
    ``per_worker_batch``. The ranks' step-k batches together are positions
    ``[k*W*b, (k+1)*W*b)`` of the stream, the global batch of one process with batch W*b,
    and rank r's samples are exactly ghost batch r of Keras's ``virtual_batch_size=b``
    batch norm, which reshapes the global batch to ``[b, W, ...]``.

    Evaluation: rank r's shard in order, last batch kept.
    """
    import tensorflow as tf

    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    if per_worker_batch < 1:
        raise ValueError(f"per_worker_batch must be a positive integer, got {per_worker_batch}")
    features, labels = tf.constant(x), tf.constant(y)
    num_samples = len(x)

    def gather(index):
        return tf.gather(features, index), tf.gather(labels, index)

    if training:
        usable = steps_per_epoch(num_samples, per_worker_batch, world_size) * world_size * per_worker_batch
        epochs = tf.data.Dataset.counter(start=initial_epoch)
        indices = epochs.flat_map(
            lambda epoch: tf.data.Dataset.from_tensor_slices(epoch_order(num_samples, seed, epoch)[:usable])
        )
        indices = indices.shard(world_size, rank).batch(per_worker_batch, drop_remainder=True)
    else:
        indices = tf.data.Dataset.range(num_samples).shard(world_size, rank).batch(per_worker_batch)
    return _without_autotune_model(indices.map(gather, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def sample_stream(x: np.ndarray, y: np.ndarray, *, batch: int, seed: int, skip: int = 0, rank: int = 0, world_size: int = 1):
    """The training stream of a run whose global batch changes (an elastic world,
    ``lbtrain.elastic``): the epochs' orders (``epoch_order``) one after another, whole, without
    the ``skip`` samples already trained on, in global batches of ``batch``, of which rank
    ``rank`` of ``world_size`` takes every ``world_size``-th sample from its rank on (as
    ``make_input_pipeline`` shards, so a simulated world's ghost batch r is rank r's batch).
    Counting the stream in samples rather than steps is what lets a batch-size change continue
    where the previous batch size stopped; a batch may span two epochs."""
    import tensorflow as tf

    if batch < 1 or skip < 0 or batch % world_size or not 0 <= rank < world_size:
        raise ValueError(f"batch must be a positive multiple of world_size, skip non-negative and rank in [0, world_size): "
                         f"got batch {batch}, skip {skip}, rank {rank}, world_size {world_size}")
    features, labels = tf.constant(x), tf.constant(y)
    num_samples = len(x)
    first_epoch, offset = divmod(skip, num_samples)
    indices = tf.data.Dataset.counter(start=first_epoch).flat_map(
        lambda epoch: tf.data.Dataset.from_tensor_slices(epoch_order(num_samples, seed, epoch)))
    indices = indices.skip(offset).batch(batch, drop_remainder=True)
    if world_size > 1:
        indices = indices.map(lambda index: index[rank::world_size])
    return _without_autotune_model(indices.map(lambda index: (tf.gather(features, index), tf.gather(labels, index)),
                                              num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
