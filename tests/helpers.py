"""Builders that several test files share. Import them by name (``from helpers import
write_package``): pytest puts ``tests/`` on ``sys.path`` as it does for ``conftest``."""

import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml
from optuna.trial import TrialState

# The ``models`` module of a user's own package: the factories (good and bad) a user might write.
USER_MODELS = textwrap.dedent("""
    import keras

    def convnet(input_shape, num_classes, width=4):
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x))

    def build(input_shape, num_classes, width=8):
        return convnet(input_shape, num_classes, width)

    def binary(input_shape, num_classes):
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))

    def glance(input_shape, num_classes):
        # One pixel of each image: a step that costs next to nothing beside the batch it is fed.
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Cropping2D(((0, input_shape[0] - 1), (0, input_shape[1] - 1)))(inputs)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(keras.layers.Flatten()(x)))

    def wide(input_shape, num_classes):
        return convnet(input_shape, num_classes + 3)

    def broken(input_shape, num_classes):
        raise ValueError("cannot build for this shape")

    def nothing(input_shape, num_classes):
        return None

    class Subclassed(keras.Model):
        def __init__(self, num_classes):
            super().__init__()
            self.norm = keras.layers.BatchNormalization()
            self.flat = keras.layers.Flatten()
            self.out = keras.layers.Dense(num_classes)

        def call(self, inputs, training=None):
            return self.out(self.flat(self.norm(inputs, training=training)))

    def subclassed(input_shape, num_classes):
        return Subclassed(num_classes)
""")


def write_package(folder: Path, name: str = "ownpkg", *, data: bool = True) -> Path:
    """A user's own package ``name`` in ``folder`` (its ``models`` module is ``USER_MODELS``: a
    functional convnet with batch norm, ``build`` the same at width 8, and bad factories), and,
    with ``data``, ``data.npz``: 8x8 images of a bar in one of four directions, 384 to train on and
    96 to test. Returns ``folder``. Test files that import the package in-process use distinct
    names, so that one worker's ``sys.modules`` never holds another file's."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(USER_MODELS)
    if data:
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 4, 480)
        images = rng.normal(0, 0.3, (480, 8, 8, 1)).astype(np.float32)
        rows, columns = np.indices((8, 8))
        for image, label, offset in zip(images, labels, rng.integers(2, 6, 480)):
            # A bar through the image: horizontal, vertical, diagonal or anti-diagonal (class 0 to 3).
            image[[rows == offset, columns == offset, rows == columns, rows == 7 - columns][label], 0] += 1.0
        np.savez(folder / "data.npz", x_train=images[:384], y_train=labels[:384], x_test=images[384:], y_test=labels[384:])
    return folder


def sweep_spec(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """A tiny sweep experiment (``tiny``: an mlp on 320 MNIST-1D samples, 4 trials a world size of
    1 and 2) whose results go under ``tmp_path``; ``changes`` replace whole sections."""
    spec = {
        "name": "tiny",
        "output_dir": str(tmp_path / "results"),
        "data": {"dataset": "mnist1d", "train_subset": 320, "validation_split": 0.25, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [16]}},
        "training": {"per_worker_batch": 16, "epochs": 2},
        "lr": {"base_batch": 16, "rule": "none"},
        "grid": {"world_sizes": [1, 2]},
        "search": {"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.2, "log": True},
                   "optimizer.name": {"type": "categorical", "choices": ["momentum", "adam"]}},
        "sweep": {"trials": 4, "pruner": "none"},
    }
    spec.update(changes)
    return spec


def write_spec(tmp_path: Path, spec: dict[str, Any]) -> Path:
    """``spec`` as ``tmp_path/sweep.yaml``."""
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60.0, interval: float = 0.05) -> Any:
    """``condition()``'s first truthy value, asked every ``interval`` seconds; fails the test
    (naming ``what`` it waited for) after ``timeout`` seconds. A wait for a state, never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(interval)
    return value


def running_trials_are_stale(storage: Any, study_name: str) -> bool:
    """Whether every RUNNING trial of ``study_name`` has a heartbeat that ``storage`` (an Optuna
    storage with heartbeats) finds older than its grace period, so that the next claim fails and
    retries them all and counts none as alive (True when none is RUNNING)."""
    study_id = storage.get_study_id_from_name(study_name)
    running = {trial._trial_id for trial in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))}
    return running <= set(storage._get_stale_trial_ids(study_id))
