import numpy as np
import pytest
import tensorflow as tf

from lbtrain.data import DatasetError, make_input_pipeline, sample_stream, steps_per_epoch
from lbtrain.worlds.strategy import contiguous_worker_batches


def take_epochs(num_samples, *, per_worker_batch, world_size, seed, epochs=2, initial_epoch=0):
    """Indices seen by each rank, per epoch: {rank: [[batch indices] per step] per epoch}."""
    x = np.arange(num_samples, dtype=np.float32)[:, None]
    y = np.arange(num_samples, dtype=np.int32)
    steps = steps_per_epoch(num_samples, per_worker_batch, world_size)
    seen = {}
    for rank in range(world_size):
        pipeline = make_input_pipeline(
            x, y, per_worker_batch=per_worker_batch, rank=rank, world_size=world_size, seed=seed, training=True,
            initial_epoch=initial_epoch,
        )
        batches = [labels.numpy() for _, labels in pipeline.take(steps * epochs)]
        seen[rank] = [batches[e * steps:(e + 1) * steps] for e in range(epochs)]
    return seen, steps


def test_ranks_cover_every_sample_exactly_once_per_epoch():
    seen, steps = take_epochs(96, per_worker_batch=4, world_size=4, seed=1)
    assert steps == 6
    for epoch in range(2):
        indices = np.concatenate([np.concatenate(seen[rank][epoch]) for rank in range(4)])
        assert sorted(indices.tolist()) == list(range(96))


def test_remainder_is_dropped_equally_on_every_rank():
    seen, steps = take_epochs(70, per_worker_batch=4, world_size=4, seed=1)
    assert steps == 4
    indices = np.concatenate([np.concatenate(seen[rank][0]) for rank in range(4)])
    assert len(indices) == 64 and len(set(indices.tolist())) == 64
    assert all(len(seen[rank][0]) == 4 for rank in range(4))


def test_order_changes_between_epochs_and_is_identical_for_equal_seeds():
    first, _ = take_epochs(64, per_worker_batch=8, world_size=2, seed=5)
    second, _ = take_epochs(64, per_worker_batch=8, world_size=2, seed=5)
    other, _ = take_epochs(64, per_worker_batch=8, world_size=2, seed=6)
    epoch0, epoch1 = np.concatenate(first[0][0]), np.concatenate(first[0][1])
    assert not np.array_equal(epoch0, epoch1)
    np.testing.assert_array_equal(np.concatenate(second[0][1]), epoch1)
    assert not np.array_equal(np.concatenate(other[0][0]), epoch0)


def test_initial_epoch_resumes_the_same_stream():
    full, _ = take_epochs(64, per_worker_batch=8, world_size=2, seed=5, epochs=3)
    resumed, _ = take_epochs(64, per_worker_batch=8, world_size=2, seed=5, epochs=1, initial_epoch=2)
    np.testing.assert_array_equal(np.concatenate(resumed[1][0]), np.concatenate(full[1][2]))


def test_rank_batches_interleave_into_the_single_process_global_batch():
    """Rank r's step-k batch is the r-th ghost batch ([b, W] reshape) of the global batch k."""
    world_size, batch = 4, 3
    ranks, steps = take_epochs(48, per_worker_batch=batch, world_size=world_size, seed=9, epochs=1)
    single, _ = take_epochs(48, per_worker_batch=world_size * batch, world_size=1, seed=9, epochs=1)
    for step in range(steps):
        global_batch = single[0][0][step]
        np.testing.assert_array_equal(np.sort(global_batch), np.sort(np.concatenate([ranks[r][0][step] for r in range(world_size)])))
        ghost_batches = global_batch.reshape(batch, world_size)
        for rank in range(world_size):
            np.testing.assert_array_equal(ghost_batches[:, rank], ranks[rank][0][step])


def test_evaluation_pipeline_keeps_order_and_last_batch():
    x = np.arange(10, dtype=np.float32)[:, None]
    y = np.arange(10, dtype=np.int32)
    shards = [
        np.concatenate([labels.numpy() for _, labels in make_input_pipeline(
            x, y, per_worker_batch=3, rank=rank, world_size=2, seed=0, training=False)])
        for rank in range(2)
    ]
    assert shards[0].tolist() == [0, 2, 4, 6, 8] and shards[1].tolist() == [1, 3, 5, 7, 9]


def test_pipeline_yields_features_matching_labels():
    x = np.arange(20, dtype=np.float32)[:, None] * 10
    y = np.arange(20, dtype=np.int32)
    features, labels = next(iter(make_input_pipeline(x, y, per_worker_batch=5, rank=0, world_size=1, seed=0, training=True)))
    assert features.dtype == tf.float32 and features.shape == (5, 1)
    np.testing.assert_array_equal(features.numpy()[:, 0], labels.numpy() * 10)


def test_fewer_samples_than_a_global_batch_is_an_error():
    with pytest.raises(DatasetError, match=r"10 training samples are fewer than one global batch \(4 workers x 8\)"):
        steps_per_epoch(10, 8, 4)


def test_every_pipeline_runs_without_the_autotuning_model():
    """Destroying an autotuned iterator can wait out the model's optimization interval (up to a
    minute): lbtrain's in-memory pipelines turn the model off, also after a world maps them."""
    x, y = np.zeros((64, 3), np.float32), np.arange(64, dtype=np.int32)
    training = make_input_pipeline(x, y, per_worker_batch=4, rank=1, world_size=2, seed=0, training=True)
    pipelines = {
        "training": training,
        "evaluation": make_input_pipeline(x, y, per_worker_batch=4, rank=0, world_size=1, seed=0, training=False),
        "sample stream": sample_stream(x, y, batch=8, seed=0, rank=1, world_size=2),
        # A strategy world's reordering of one process's global batches (StrategyWorld.training_input).
        "mapped by a world": make_input_pipeline(x, y, per_worker_batch=8, rank=0, world_size=1, seed=0, training=True).map(
            contiguous_worker_batches(2, 4), num_parallel_calls=tf.data.AUTOTUNE),
    }
    assert {name: pipeline.options().autotune.enabled for name, pipeline in pipelines.items()} == dict.fromkeys(pipelines, False)
    assert tf.data.Dataset.range(3).options().autotune.enabled is not False  # the option is lbtrain's, not TensorFlow's default
