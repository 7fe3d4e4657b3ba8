"""Data of one's own: .npz files, loaders by reference, tf.data datasets; the task read from
the labels; every bad input a one-line ``DatasetError`` before anything trains."""

import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from lbtrain.data import DatasetError, load_dataset, make_input_pipeline


def arrays(n=60, seed=0, shape=(4,)):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *shape)).astype(np.float32), rng.integers(0, 3, n).astype(np.int64)


@pytest.fixture
def npz(tmp_path):
    def write(name="data.npz", **values):
        path = tmp_path / name
        np.savez(path, **values)
        return str(path)

    return write


@pytest.fixture
def loaders(tmp_path, monkeypatch):
    (tmp_path / "user_data.py").write_text(textwrap.dedent("""
        import numpy as np
        import tensorflow as tf

        rng = np.random.default_rng(1)
        X, Y = rng.normal(size=(50, 3)).astype("float32"), rng.integers(0, 4, 50)

        def keras_style(size=50):
            return (X[:size], Y[:size]), (X[:10], Y[:10])

        def datasets(batched=False):
            train = tf.data.Dataset.from_tensor_slices((X, Y))
            return (train.batch(7) if batched else train), tf.data.Dataset.from_tensor_slices((X[:10], Y[:10]))

        def endless():
            return tf.data.Dataset.from_tensor_slices((X, Y)).repeat()

        def broken():
            raise FileNotFoundError("/data/missing.csv")

        def a_list():
            return [X, Y]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("user_data", None)


def test_an_npz_file_loads_with_its_test_split(npz):
    x, y = arrays()
    x_test, y_test = arrays(20, seed=1)
    data = load_dataset(npz(x_train=x, y_train=y, x_test=x_test, y_test=y_test), validation_split=0.25, seed=3)
    assert data.task == "classification" and data.num_classes == 3 and data.input_shape == (4,)
    assert len(data.x_train) == 45 and len(data.x_validation) == 15
    np.testing.assert_array_equal(data.x_test, x_test) and np.testing.assert_array_equal(data.y_test, y_test)
    assert data.y_train.dtype == np.int32 and data.x_train.dtype == np.float32


def test_without_a_test_split_a_fixed_share_is_held_out_whatever_the_seed(npz):
    x, y = arrays(100)
    path = npz(x_train=x, y_train=y)
    first, second = load_dataset(path, seed=0), load_dataset(path, seed=7, test_split=0.2)
    assert len(first.x_test) == 20 and len(first.x_train) == 80
    np.testing.assert_array_equal(first.x_test, second.x_test)
    held = {tuple(row) for row in first.x_test}
    assert not held & {tuple(row) for row in first.x_train}


def test_one_hot_rows_become_class_indices_and_uint8_features_are_scaled(npz):
    labels = np.array([0, 2, 1, 2] * 10)
    images = np.full((40, 2, 2, 1), 255, np.uint8)
    data = load_dataset(npz(x_train=images, y_train=np.eye(3)[labels], x_test=images[:4], y_test=np.eye(3)[labels[:4]]))
    assert data.num_classes == 3
    np.testing.assert_array_equal(data.y_test, labels[:4])
    assert data.x_train.max() == 1.0


def test_the_task_comes_from_the_labels(npz):
    x, _ = arrays(40)
    integral = load_dataset(npz("a.npz", x_train=x, y_train=np.tile([0.0, 1.0], 20)))
    regression = load_dataset(npz("b.npz", x_train=x, y_train=x[:, :2] * 1.5))
    assert integral.task == "classification" and integral.num_classes == 2
    assert regression.task == "regression" and regression.num_classes == 2 and regression.y_train.shape == (32, 2)
    counts = load_dataset(npz("c.npz", x_train=x, y_train=np.arange(40) % 5), task="regression")
    assert counts.task == "regression" and counts.y_train.dtype == np.float32


def test_a_loader_by_reference_returns_keras_style_arrays_or_tf_data(loaders):
    keras_style = load_dataset("user_data:keras_style", size=40)
    assert len(keras_style.x_train) == 40 and len(keras_style.x_test) == 10 and keras_style.num_classes == 4
    from_tf_data = load_dataset("user_data:datasets", batched=True)
    arrays_ = load_dataset("user_data:keras_style")
    np.testing.assert_array_equal(from_tf_data.x_train, arrays_.x_train)
    np.testing.assert_array_equal(from_tf_data.y_train, arrays_.y_train)


def test_materialized_tf_data_feeds_the_same_sharded_stream_as_arrays(loaders):
    data = load_dataset("user_data:datasets")
    one = [y.numpy() for _, y in make_input_pipeline(data.x_train, data.y_train, per_worker_batch=8, rank=0, world_size=1,
                                                      seed=4, training=True).take(3)]
    shards = [[y.numpy() for _, y in make_input_pipeline(data.x_train, data.y_train, per_worker_batch=4, rank=rank,
                                                         world_size=2, seed=4, training=True).take(3)] for rank in (0, 1)]
    for step in range(3):
        np.testing.assert_array_equal(np.sort(one[step]), np.sort(np.concatenate([shards[0][step], shards[1][step]])))


@pytest.mark.parametrize("build, message", [
    (lambda npz: npz(x_train=arrays()[0], y_train=arrays()[1][:50]), r"x_train has 60 samples but y_train has 50$"),
    (lambda npz: npz(x_train=np.where(np.eye(60, 4) > 0, np.nan, 1.0), y_train=arrays()[1]),
     r"x_train holds NaN or infinite values in 4 samples \(first: sample 0\)$"),
    (lambda npz: npz(x_train=arrays()[0], y_train=arrays()[1] - 1), r"y_train holds the label -1; class labels are 0 to num_classes - 1$"),
    (lambda npz: npz(x_train=arrays()[0], labels=arrays()[1]), r"has no 'y_train' \(it holds: labels, x_train; needs x_train and y_train"),
    (lambda npz: npz(x_train=arrays()[0], y_train=arrays()[1], x_test=arrays()[0]), r"has no 'y_test'"),
    (lambda npz: npz(x_train=arrays()[0], y_train=np.zeros(60)), r"every training label is 0; classification needs at least two classes"),
    (lambda npz: npz(x_train=arrays()[0], y_train=arrays()[1], x_test=arrays(10, shape=(5,))[0], y_test=arrays(10)[1]),
     r"x_test samples have shape \(5,\) but x_train's have \(4,\)$"),
    (lambda npz: npz(x_train=arrays()[0], y_train=np.ones(60) * 2.0), r"every training label is 2; classification needs"),
    (lambda npz: "missing.npz", r"'missing.npz': no such file \(relative paths are read from "),
])
def test_bad_arrays_are_one_line_errors(npz, build, message):
    with pytest.raises(DatasetError, match=message) as error:
        load_dataset(build(npz))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name, options, message", [
    ("user_data:endless", {}, r"its train tf.data dataset is infinite \(remove .repeat\(\)\)$"),
    ("user_data:broken", {}, r"^dataset 'user_data:broken' raised FileNotFoundError: /data/missing.csv$"),
    ("user_data:a_list", {}, r"returned a list; return a mapping with x_train, y_train"),
    ("user_data:keras_style", {"sise": 3}, r"unknown option 'sise' for dataset 'user_data:keras_style' \(did you mean 'size'\?"),
    ("no_such_module_q:load", {}, r"importing no_such_module_q failed \(ModuleNotFoundError"),
])
def test_bad_loaders_are_one_line_errors(loaders, name, options, message):
    with pytest.raises(DatasetError, match=message) as error:
        load_dataset(name, **options)
    assert "\n" not in str(error.value)


def test_a_tfds_name_never_downloads(tmp_path):
    try:
        import tensorflow_datasets  # noqa: F401
        message = rf"dataset 'tfds:mnist' is not prepared in {tmp_path} \(.*\); lbtrain never downloads"
    except ImportError:
        message = r"dataset 'tfds:mnist' needs TensorFlow Datasets: pip install tensorflow-datasets$"
    with pytest.raises(DatasetError, match=message):
        load_dataset("tfds:mnist", data_dir=str(tmp_path))
    with pytest.raises(DatasetError, match=r"unknown option 'split' for dataset 'tfds:mnist' \(allowed: data_dir, train_split"):
        load_dataset("tfds:mnist", split="train")


def test_a_zoo_dataset_is_no_regression():
    with pytest.raises(DatasetError, match="'synthetic' is a classification dataset"):
        load_dataset("synthetic", task="regression", train_size=20, test_size=5)
    assert tf.is_tensor(tf.constant(1))


def test_constant_regression_targets_are_refused(npz):
    with pytest.raises(DatasetError, match=r"the regression targets are constant over the training set$"):
        load_dataset(npz(x_train=arrays()[0], y_train=np.full(60, 0.5)), task="regression")
