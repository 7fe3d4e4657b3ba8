"""How many classes the user's classification data has (issue #53, item 6): the largest training
label + 1 only when the training labels hold every class below it and the validation and test
labels no class they lack, else a one-line refusal naming the split and the class; or
``data.num_classes``, declared, which every label must stay below. The run's pre-flight check
refuses bad labels before anything trains."""

import numpy as np
import pytest
import yaml

from lbtrain.cli import main
from lbtrain.config import run_config_from_dict
from lbtrain.data import DatasetError, load_dataset


def write(tmp_path, y_train, y_test, name="labels.npz"):
    rng = np.random.default_rng(0)
    path = tmp_path / name
    np.savez(path, x_train=rng.normal(size=(len(y_train), 4)).astype(np.float32), y_train=np.asarray(y_train),
             x_test=rng.normal(size=(len(y_test), 4)).astype(np.float32), y_test=np.asarray(y_test))
    return str(path)


LABELS = np.arange(60) % 3  # classes 0, 1, 2, 20 samples each


@pytest.mark.parametrize(("y_train", "y_test", "message"), [
    (LABELS, [0, 1, 3], r"y_test holds class 3, which no training label has \(3 classes, 0 to 2\): set data.num_classes "
                        r"to train a wider model, or fix the labels$"),
    (np.append(LABELS, 57), [0, 1, 2], r"the training labels skip class 3, 4, 5, 6, 7 and 49 more of 0 to 57: set "
                                        r"data.num_classes: 58 to keep them, or relabel"),
])
def test_a_class_the_training_labels_lack_is_refused_in_one_line(tmp_path, y_train, y_test, message):
    with pytest.raises(DatasetError, match=message) as error:
        load_dataset(write(tmp_path, y_train, y_test))
    assert "\n" not in str(error.value)


def test_a_class_only_the_validation_split_holds_is_refused(tmp_path):
    """Class 3 has one sample, which the validation split (seed 0) draws."""
    labels = LABELS.copy()
    labels[np.random.default_rng(0).permutation(60)[0]] = 3
    with pytest.raises(DatasetError, match=r"y_validation holds class 3, which no training label has"):
        load_dataset(write(tmp_path, labels, [0, 1, 2]), validation_split=0.2, seed=0)
    # Declared, the model is 4 wide and class 3 is only validated on.
    data = load_dataset(write(tmp_path, labels, [0, 1, 2], "declared.npz"), validation_split=0.2, seed=0, classes=4)
    assert data.num_classes == 4 and 3 in data.y_validation and 3 not in data.y_train


def test_declared_classes_set_the_width_and_bound_every_label(tmp_path):
    path = write(tmp_path, np.append(LABELS, 57), [0, 1, 3])
    assert load_dataset(path, classes=58).num_classes == 58
    assert load_dataset(write(tmp_path, LABELS, [0, 1, 2], "plain.npz")).num_classes == 3
    with pytest.raises(DatasetError, match=r"y_train holds the label 57, but data.num_classes is 10 \(labels 0 to 9\)$"):
        load_dataset(path, classes=10)
    with pytest.raises(DatasetError, match=r"'mnist1d' has 10 classes, but data.num_classes is 12: leave it unset"):
        load_dataset("mnist1d", classes=12, num_samples=400)
    regression = write(tmp_path, np.linspace(0, 1, 60), [0.5, 0.25], "regression.npz")
    with pytest.raises(DatasetError, match=r"data.num_classes is for classification, and these labels are regression targets"):
        load_dataset(regression, task="regression", classes=3)


def test_the_run_config_takes_num_classes(tmp_path):
    path = write(tmp_path, np.append(LABELS, 57), [0, 1, 2])
    config = run_config_from_dict({"data": {"dataset": path, "num_classes": 58}, "model": {"name": "mlp"}})
    assert config.data.num_classes == 58 and config.data.load().num_classes == 58
    with pytest.raises(ValueError, match=r"data.num_classes"):
        run_config_from_dict({"data": {"dataset": path, "num_classes": 1}})


def test_lbtrain_run_refuses_unseen_test_classes_before_anything_trains(tmp_path, capsys):
    spec = {"name": "labels", "output_dir": str(tmp_path / "results"), "data": {"dataset": write(tmp_path, LABELS, [0, 1, 3])},
            "model": {"name": "mlp", "options": {"widths": [4]}}, "training": {"per_worker_batch": 8, "epochs": 1}}
    experiment = tmp_path / "labels.yaml"
    experiment.write_text(yaml.safe_dump(spec))
    assert main(["run", str(experiment)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("lbtrain: error: ") and "y_test holds class 3, which no training label has" in error
    assert "\n" not in error
    assert not (tmp_path / "results" / "labels" / "runs").exists()
