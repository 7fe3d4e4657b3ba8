import gzip
import os
import struct

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_cli
from lbtrain import data
from lbtrain.data import DatasetError, load_dataset, make_input_pipeline, read_idx, steps_per_epoch

DEBIAN_FASHION = data.DEBIAN_DATASET_ROOT / "fashion-mnist"


def idx_bytes(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx_set(directory, num_train=12, num_test=6, seed=0):
    """Four small IDX files as an MNIST-style dataset; returns the arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (num_train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, num_train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (num_test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, num_test),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        (directory / f"{stem}.gz").write_bytes(gzip.compress(idx_bytes(array)))
    return arrays


@pytest.fixture
def fresh_loads():
    data._load_raw.cache_clear()
    yield
    data._load_raw.cache_clear()


# ---------------------------------------------------------------- IDX reader


def test_read_idx_plain_and_gzip_round_trip(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "plain").write_bytes(idx_bytes(array))
    (tmp_path / "zipped.gz").write_bytes(gzip.compress(idx_bytes(array)))
    np.testing.assert_array_equal(read_idx(tmp_path / "plain"), array)
    np.testing.assert_array_equal(read_idx(tmp_path / "zipped.gz"), array)


def test_truncated_gzip_names_file(tmp_path):
    blob = gzip.compress(idx_bytes(np.zeros((50, 28, 28), np.uint8)))
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DatasetError, match=r"train-images-idx3-ubyte.gz: corrupt or truncated gzip"):
        read_idx(path)


def test_truncated_data_reports_expected_and_found_bytes(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(idx_bytes(np.zeros(100, np.uint8))[:-10])
    with pytest.raises(DatasetError, match=r"labels: truncated: dims \(100,\) need 100 bytes of data, found 90"):
        read_idx(path)


def test_trailing_bytes_and_bad_magic_are_errors(tmp_path):
    trailing = tmp_path / "trailing"
    trailing.write_bytes(idx_bytes(np.zeros(4, np.uint8)) + b"xx")
    with pytest.raises(DatasetError, match="trailing bytes"):
        read_idx(trailing)
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(DatasetError, match=r"bad: not an IDX file \(bad magic number 01020801\)"):
        read_idx(bad)
    unknown_type = tmp_path / "unknown_type"
    unknown_type.write_bytes(b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(DatasetError, match="unknown IDX type code 0x07"):
        read_idx(unknown_type)


# ---------------------------------------------------------------- datasets


@pytest.mark.skipif(not (DEBIAN_FASHION / "train-images-idx3-ubyte.gz").is_file(), reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_reads_the_debian_package(monkeypatch, fresh_loads):
    monkeypatch.delenv("LBTRAIN_DATA_DIR", raising=False)
    dataset = load_dataset("fashion_mnist")
    assert dataset.source == str(DEBIAN_FASHION)
    assert dataset.x_train.shape == (60000, 28, 28, 1) and dataset.x_test.shape == (10000, 28, 28, 1)
    assert dataset.x_train.dtype == np.float32 and dataset.y_train.dtype == np.int32
    assert 0.0 <= dataset.x_train.min() and dataset.x_train.max() == 1.0
    assert np.bincount(dataset.y_train).tolist() == [6000] * 10
    assert np.bincount(dataset.y_test).tolist() == [1000] * 10
    assert dataset.input_shape == (28, 28, 1) and dataset.num_classes == 10


def test_data_dir_takes_precedence_and_arrays_are_scaled(tmp_path, monkeypatch, fresh_loads):
    written = write_idx_set(tmp_path / "mnist")
    monkeypatch.setenv("LBTRAIN_DATA_DIR", str(tmp_path))
    dataset = load_dataset("mnist")
    assert dataset.source == str(tmp_path / "mnist")
    np.testing.assert_allclose(dataset.x_test[..., 0], written["t10k-images-idx3-ubyte"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(dataset.y_test, written["t10k-labels-idx1-ubyte"])
    assert dataset.x_train.shape == (12, 28, 28, 1)


def test_corrupt_file_in_data_dir_is_a_clear_error(tmp_path, monkeypatch, fresh_loads):
    write_idx_set(tmp_path / "mnist")
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01" + struct.pack(">I", 6) + b"\x01"))
    monkeypatch.setenv("LBTRAIN_DATA_DIR", str(tmp_path))
    with pytest.raises(DatasetError, match=r"t10k-labels-idx1-ubyte.gz: truncated: dims \(6,\) need 6 bytes"):
        load_dataset("mnist")


def test_mnist1d_is_generated_offline_cached_and_leaves_numpy_rng_alone(tmp_path, monkeypatch, fresh_loads):
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    dataset = load_dataset("mnist1d", num_samples=500, generator_seed=3)
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    assert dataset.x_train.shape == (400, 40) and dataset.x_test.shape == (100, 40)
    assert set(np.unique(dataset.y_train)) == set(range(10))
    cached = data.cache_dir() / "mnist1d-n500-seed3.npz"
    assert dataset.source == str(cached) and cached.is_file()
    data._load_raw.cache_clear()
    again = load_dataset("mnist1d", num_samples=500, generator_seed=3)
    np.testing.assert_array_equal(again.x_train, dataset.x_train)
    other_seed = load_dataset("mnist1d", num_samples=500, generator_seed=4)
    assert not np.array_equal(other_seed.x_train, dataset.x_train)


def test_synthetic_any_shape():
    dataset = load_dataset("synthetic", input_shape=[8, 8, 3], num_classes=5, train_size=32, test_size=16)
    assert dataset.x_train.shape == (32, 8, 8, 3) and dataset.x_test.shape == (16, 8, 8, 3)
    assert dataset.num_classes == 5 and dataset.y_train.max() < 5 and dataset.y_train.min() >= 0


def test_subset_and_validation_split_are_disjoint_and_seeded():
    kwargs = dict(input_shape=[3], train_size=100, test_size=10)
    dataset = load_dataset("synthetic", train_subset=50, validation_split=0.2, seed=7, **kwargs)
    assert len(dataset.x_train) == 40 and len(dataset.x_validation) == 10 and len(dataset.x_test) == 10
    full = load_dataset("synthetic", **kwargs)
    rows = {tuple(r) for r in full.x_train}
    train_rows, validation_rows = {tuple(r) for r in dataset.x_train}, {tuple(r) for r in dataset.x_validation}
    assert train_rows <= rows and validation_rows <= rows and not train_rows & validation_rows
    same = load_dataset("synthetic", train_subset=50, validation_split=0.2, seed=7, **kwargs)
    np.testing.assert_array_equal(same.x_validation, dataset.x_validation)
    other = load_dataset("synthetic", train_subset=50, validation_split=0.2, seed=8, **kwargs)
    assert not np.array_equal(other.x_validation, dataset.x_validation)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: load_dataset("cifar"), r"unknown dataset 'cifar' \(allowed: fashion_mnist, mnist, mnist1d, synthetic\)"),
        (lambda: load_dataset("synthetic", validation_split=1.0), r"validation_split must be in \[0, 1\)"),
        (lambda: load_dataset("synthetic", train_subset=0), r"train_subset must be an integer in \[1, 4096\]"),
        (lambda: load_dataset("synthetic", colour=True), r"synthetic: bad option"),
        (lambda: load_dataset("mnist1d", num_samples=3), r"num_samples must be an integer >= 10"),
    ],
)
def test_bad_arguments_name_what_is_allowed(call, message):
    with pytest.raises(DatasetError, match=message):
        call()


def test_datasets_command_lists_every_dataset():
    result = run_cli("datasets")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert names == list(data.DATASETS)
    assert "60000" in result.stdout and "mnist1d" in result.stdout


# ---------------------------------------------------------------- input pipeline


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
