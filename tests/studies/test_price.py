"""The price's model of a run (``lbtrain.studies.price``): what a run pays once, per step, per
epoch and per evaluated sample, from what the probe measures; and which experiments a dry run
may price (no code of the user's). No test here reads a time as a claim about speed."""

import math

import numpy as np
import pytest

from lbtrain.config import ExperimentConfig, run_config_from_dict
from lbtrain.studies.price import Probe, StepCost, code_of_yours, launch_seconds, probe_costs, run_seconds


def test_a_run_is_priced_by_its_start_fixed_costs_steps_epoch_ends_and_evaluated_samples():
    config = run_config_from_dict({"data": {"dataset": "mnist1d"}, "training": {"per_worker_batch": 32, "world_size": 4, "epochs": 3,
                                                                                 "min_steps": 300}})
    cost = StepCost(128, 0.05, 2.0, 1e-4, start_seconds=0.7, epoch_seconds=0.02, eval_start_seconds=0.3)
    probe = Probe({128: cost}, 4_000, 400, 1_000, launch_seconds=3.0)
    # 4,000 // 128 = 31 steps an epoch; the floor gives 300 steps over ceil(300 / 31) = 10 epochs; the
    # validation set is evaluated after each epoch and, with the train and test sets, at the end.
    expected = 3.0 + 2.0 + 0.7 + 300 * 0.05 + 10 * 0.02 + 0.3 + 1e-4 * (10 * 400 + 4_000 + 1_000 + 400)
    assert run_seconds(config, probe) == pytest.approx(expected)
    assert cost.fixed_seconds == pytest.approx(2.0 + 0.7 + 0.02 + 0.3)
    # Validation every 50 steps: 300 // 50 = 6 passes more over the 400 validation samples.
    every = run_config_from_dict({**config.to_dict(), "data": {"dataset": "mnist1d", "validation_split": 0.1},
                                  "training": {**config.to_dict()["training"], "validation_every_steps": 50}})
    assert run_seconds(every, probe) == pytest.approx(expected + 6 * 400 * 1e-4)


def test_the_probe_measures_each_global_batch_and_a_process_start():
    base = {"data": {"dataset": "mnist1d", "train_subset": 256, "validation_split": 0.25, "options": {"num_samples": 500}},
            "model": {"name": "mlp", "options": {"widths": [8]}}, "training": {"per_worker_batch": 16, "epochs": 2}}
    configs = [run_config_from_dict({**base, "training": {**base["training"], "world_size": size}}) for size in (1, 2, 2)]
    probe = probe_costs(configs)
    assert sorted(probe.costs) == [16, 32]
    assert (probe.train_size, probe.validation_size) == (192, 64) and probe.test_size > 0
    for cost in probe.costs.values():
        parts = [cost.step_seconds, cost.build_seconds, cost.eval_sample_seconds, cost.start_seconds, cost.epoch_seconds,
                 cost.eval_start_seconds]
        assert all(math.isfinite(part) and part >= 0 for part in parts), cost
        assert cost.step_seconds > 0 and cost.build_seconds > 0 and cost.eval_sample_seconds > 0
    assert probe.launch_seconds > 0


def test_a_process_start_is_measured_once_per_process():
    first = launch_seconds()
    assert first > 0 and launch_seconds() == first  # two measurements would differ in the last digits


def test_a_dry_run_may_price_lbtrains_and_keras_models_on_lbtrains_data_only(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("def build(input_shape, num_classes):\n    raise AssertionError('called')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    experiment = ExperimentConfig(name="x")
    builtin = [run_config_from_dict({"model": {"name": name}, "data": {"dataset": "mnist1d"}})
               for name in ("mlp", "keras.applications.MobileNetV2")]
    assert code_of_yours(experiment, builtin) is None
    yours = run_config_from_dict({"model": {"name": "mine:build"}, "data": {"dataset": "mnist1d"}})
    assert code_of_yours(experiment, [*builtin, yours]) == "model 'mine:build'"
    np.savez(tmp_path / "data.npz", x_train=np.zeros((8, 4), "float32"), y_train=np.arange(8) % 2)
    npz = run_config_from_dict({"data": {"dataset": str(tmp_path / "data.npz")}})
    assert code_of_yours(experiment, [npz]) == f"dataset {str(tmp_path / 'data.npz')!r}"
    assert code_of_yours(experiment, builtin, imports=["mine"]) == "imports mine"
    assert code_of_yours(ExperimentConfig(name="x", imports=["mine"]), builtin) == "imports mine"
