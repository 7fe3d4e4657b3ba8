"""A team's own package, written into a temporary folder as a user would have it: a functional
convnet with batch norm and a dataset saved as ``.npz``, trained by ``lbtrain run`` (simulated
worlds of 1 and 8), under ``horovodrun -np 2`` against a simulated world of 2, by ``lbtrain
sweep`` and ``lbtrain advise``; and every bad input refused in one line before anything trains."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers import JOB_FOLDER, run_cli, shared_horovod_job, write_package
from lbtrain import SimulatedWorld, run_config_from_dict, train
from lbtrain.cli import main
from lbtrain.config import ConfigError, ExperimentConfig
from lbtrain.studies.runner import run_experiment

MODEL = "ownpkg.models:convnet"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's folder holding ``ownpkg``, ``data.npz`` and ``experiment.yaml``; importable here too."""
    write_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    write_experiment(tmp_path)
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("ownpkg")]:
        del sys.modules[name]


def write_experiment(folder: Path, name: str = "own", **sections) -> Path:
    experiment = {
        "name": name,
        "data": {"dataset": "data.npz", "validation_split": 0.25},
        "model": {"name": MODEL, "options": {"width": 4}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.05, "base_batch": 8, "rule": "sqrt"},
        "training": {"per_worker_batch": 8, "epochs": 1, "checkpoint": False, "precise_bn_samples": 256},
        "grid": {"world_sizes": [1, 8]},
    }
    for section, values in sections.items():
        experiment[section] = {**experiment.get(section, {}), **values} if isinstance(values, dict) else values
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


@pytest.mark.slow
def test_lbtrain_run_trains_the_users_model_on_the_users_data_in_worlds_of_1_and_8(project):
    write_experiment(project, training={"epochs": 3})  # 12 updates at 8 workers: enough to leave chance behind
    result = run_cli("run", "own.yaml", cwd=project)  # no PYTHONPATH: the package is found in the current folder
    assert result.returncode == 0, result.stderr[-3000:]
    runs = sorted((project / "results" / "own" / "runs").iterdir())
    assert len(runs) == 2
    for run in runs:
        metrics = json.loads((run / "metrics.json").read_text())
        assert metrics["config"]["model"]["name"] == MODEL and metrics["config"]["data"]["dataset"] == "data.npz"
        assert metrics["status"] == "ok", metrics["reason"]
    assert "world  batch" in result.stdout
    from lbtrain.reports import write_report

    assert f"Model `{MODEL}` on data `data.npz`." in write_report(project / "results" / "own").read_text()


def two_rank_spec(project: str) -> dict:
    """A LARS run of the user's model on the user's data in ``project``, with warmup and batch norm."""
    return {"data": {"dataset": f"{project}/data.npz"}, "model": {"name": MODEL},
            "optimizer": {"name": "lars", "params": {"momentum": 0.9, "weight_decay": 1e-4, "eta": 0.02}},
            "lr": {"base_lr": 0.2, "base_batch": 16, "rule": "linear", "warmup_epochs": 0.2},
            "training": {"world_size": 2, "per_worker_batch": 16, "steps": 5, "seed": 2, "checkpoint": False}}


# Trained in the session's shared horovodrun job (conftest: horovod_jobs): the ranks write the
# user's package into the job's folder and find it on their path (tests/horovod_jobs/own_package_two_ranks.py).
OWN_MODEL_TWO_RANKS = shared_horovod_job("test_own_model:two_ranks", "own_package_two_ranks.py", f"{JOB_FOLDER}/project",
                                         json.dumps(two_rank_spec(f"{JOB_FOLDER}/project")), f"{JOB_FOLDER}/weights.npz",
                                         f"{JOB_FOLDER}/runs")


@pytest.mark.slow
@pytest.mark.horovod
def test_horovodrun_two_ranks_equal_a_simulated_world_of_two_on_the_users_model(horovod_jobs, monkeypatch):
    folder = horovod_jobs(OWN_MODEL_TWO_RANKS)
    project = folder / "project"  # the package and data the ranks trained on, importable here too
    monkeypatch.syspath_prepend(str(project))
    try:
        arrays = np.load(folder / "weights.npz")
        assert json.loads(str(arrays["result"]))["total_steps"] == 5
        simulated = train(run_config_from_dict(two_rank_spec(str(project))), SimulatedWorld(2))
        trainable = {v.name for v in simulated.model.trainable_variables}
        compared = 0
        for i, variable in enumerate(simulated.model.weights):
            if variable.name in trainable:
                rank0 = arrays[f"rank0:{i}"]
                np.testing.assert_array_equal(rank0, arrays[f"rank1:{i}"], err_msg=variable.name)
                np.testing.assert_allclose(variable.numpy().reshape(rank0.shape), rank0, atol=1e-5, err_msg=variable.name)
                compared += 1
        assert compared == 5  # conv kernel, BN gamma and beta, dense kernel and bias
    finally:
        for name in [name for name in sys.modules if name.startswith("ownpkg")]:
            del sys.modules[name]


@pytest.mark.slow
def test_lbtrain_sweep_and_advise_take_the_users_model(project):
    write_experiment(project, "own_sweep", grid={"world_sizes": [2]},
                     search={"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.3, "log": True}}, sweep={"trials": 3})
    sweep = run_cli("sweep", "own_sweep.yaml", cwd=project)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert (project / "results" / "own_sweep" / "sweep_summary.csv").is_file()
    advice = run_cli("advise", "own.yaml", "--steps", "6", cwd=project)
    assert advice.returncode == 0, advice.stderr[-3000:]
    probe = json.loads((project / "results" / "own" / "advice" / "advice.json").read_text())["probe"]
    assert probe["model"] == MODEL and probe["dataset"] == "data.npz"


@pytest.mark.slow
def test_a_keras_application_trains_one_epoch_in_a_simulated_world_of_4():
    config = run_config_from_dict({
        "data": {"dataset": "synthetic", "options": {"input_shape": [32, 32, 3], "num_classes": 4, "train_size": 64, "test_size": 16}},
        "model": {"name": "keras.applications.MobileNetV2", "options": {"alpha": 0.35}},
        "lr": {"base_lr": 0.01, "base_batch": 16}, "training": {"world_size": 4, "per_worker_batch": 4, "epochs": 1}})
    result = train(config, SimulatedWorld(4))
    assert result.total_steps == 4 and np.isfinite(result.metrics["train_loss"])
    assert result.status in ("ok", "collapsed")  # random labels: chance is the honest result
    ghost = [layer for layer in result.model.layers if type(layer).__name__ == "GhostBatchNormalization"]
    assert len(ghost) == 52 and {layer.virtual_batch_size for layer in ghost} == {4}


BAD_INPUTS = {
    "reference does not import": ({"model": {"name": "ownpkgx.models:convnet", "options": {}}},
                                  r"model.name: model 'ownpkgx.models:convnet': importing ownpkgx.models failed"),
    "factory raises": ({"model": {"name": "ownpkg.models:broken", "options": {}}},
                       r"model 'ownpkg.models:broken' raised ValueError building for input shape \(8, 8, 1\) and 4 outputs: "
                       r"cannot build for this shape"),
    "no keras.Model": ({"model": {"name": "ownpkg.models:nothing", "options": {}}}, r"returned a NoneType, not a keras.Model"),
    "logits too wide": ({"model": {"name": "ownpkg.models:wide", "options": {}}},
                        r"has 7 outputs but the labels are 4 classes \(0 to 3\); make its last layer Dense\(4\) of logits"),
    "subclassed batch norm": ({"model": {"name": "ownpkg.models:subclassed", "options": {}}},
                              r"is a subclassed Subclassed with batch norm .* build it with keras.Sequential or the functional API"),
    "lengths differ": ({"data": {"dataset": "bad.npz"}}, r"x_train has 384 samples but y_train has 383"),
    "NaN features": ({"data": {"dataset": "nan.npz"}}, r"x_train holds NaN or infinite values in 1 samples \(first: sample 3\)"),
    "labels out of range": ({"data": {"dataset": "negative.npz"}}, r"y_train holds the label -1; class labels are 0 to num_classes - 1"),
    "missing key": ({"data": {"dataset": "nokey.npz"}}, r"has no 'y_train' \(it holds: x_train, ytrain"),
    "TFDS absent": ({"data": {"dataset": "tfds:not_a_dataset_xyz", "options": {"data_dir": "tfds_data"}}},
                    r"dataset 'tfds:not_a_dataset_xyz' (needs TensorFlow Datasets|is not prepared)"),
}


@pytest.mark.parametrize("change, message", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_exit_2_and_nothing_written(project, change, message, monkeypatch, capsys):
    with np.load(project / "data.npz") as data:
        x, y = data["x_train"], data["y_train"]
    nan = x.copy()
    nan[3, 0, 0, 0] = np.nan
    np.savez(project / "bad.npz", x_train=x, y_train=y[:-1])
    np.savez(project / "nan.npz", x_train=nan, y_train=y)
    np.savez(project / "negative.npz", x_train=x, y_train=y - 1)
    np.savez(project / "nokey.npz", x_train=x, ytrain=y)
    write_experiment(project, "bad", **change)
    monkeypatch.chdir(project)
    code = main(["run", "bad.yaml"])  # in this process: the same main as the command line, without a TensorFlow start-up each
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("lbtrain: error: ") and re.search(message, lines[0]), lines[0]
    assert not (project / "results").exists()


def test_a_callable_only_this_process_holds_trains_in_process_and_is_refused_by_lbtrain_run(project, tmp_path):
    from ownpkg.models import convnet

    def local_model(input_shape, num_classes):
        return convnet(input_shape, num_classes, width=2)

    config = run_config_from_dict({"data": {"dataset": str(project / "data.npz")}, "model": {"name": local_model},
                                   "training": {"world_size": 2, "per_worker_batch": 32, "steps": 2, "checkpoint": False}})
    assert config.model.name.endswith("<locals>.local_model")
    assert train(config, SimulatedWorld(2)).total_steps == 2
    experiment = ExperimentConfig(name="local", output_dir=str(tmp_path / "out"), model={"name": local_model},
                                  data={"dataset": str(project / "data.npz")}, training={"steps": 2})
    with pytest.raises(ConfigError, match=r"model '.*local_model' is defined in __main__, in a function or as a lambda, and lbtrain "
                                          r"run trains each run of mode simulated in processes of their own"):
        run_experiment(experiment)
    assert not (tmp_path / "out").exists()
