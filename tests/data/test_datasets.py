import gzip
import pickle
import struct

import numpy as np
import pytest

from helpers import run_cli
from idx_files import write_idx_set
from lbtrain.data import DATASETS, DEBIAN_DATASET_ROOT, DatasetError, cache_dir, datasets, load_dataset

DEBIAN_FASHION = DEBIAN_DATASET_ROOT / "fashion-mnist"


@pytest.fixture
def fresh_loads():
    datasets._load_raw.cache_clear()
    yield
    datasets._load_raw.cache_clear()


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
    cached = cache_dir() / "mnist1d-n500-seed3.npz"
    assert dataset.source == str(cached) and cached.is_file()
    datasets._load_raw.cache_clear()
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
        (lambda: load_dataset("cifar"), r"unknown dataset 'cifar' \(allowed: fashion_mnist, mnist, mnist1d, synthetic, a registered name, a .npz path, package.module:function or tfds:<name>\)"),
        (lambda: load_dataset("synthetic", validation_split=1.0), r"validation_split must be in \[0, 1\)"),
        (lambda: load_dataset("synthetic", train_subset=0), r"train_subset must be an integer in \[1, 4096\]"),
        (lambda: load_dataset("synthetic", colour=True), r"unknown option 'colour' for dataset 'synthetic' \(allowed: input_shape, "),
        (lambda: load_dataset("fashion_mnist", num_samples=10), r"unknown option 'num_samples' for dataset 'fashion_mnist' \(allowed: none\)"),
        (lambda: load_dataset("mnist1d", num_samples=3), r"num_samples must be an integer from 10 to 200000, got 3"),
    ],
)
def test_bad_arguments_name_what_is_allowed(call, message):
    with pytest.raises(DatasetError, match=message):
        call()


def test_dataset_error_keeps_its_public_name():
    error = pickle.loads(pickle.dumps(DatasetError("mnist: bad option")))
    assert type(error) is DatasetError and str(error) == "mnist: bad option"
    assert f"{DatasetError.__module__}.{DatasetError.__qualname__}" == "lbtrain.data.DatasetError"


def test_datasets_command_lists_every_dataset():
    result = run_cli("datasets")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert names == list(DATASETS)
    assert "60000" in result.stdout and "mnist1d" in result.stdout
