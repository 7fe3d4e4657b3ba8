"""A variant or ``--set`` can clear what it inherits (issue #53, item 6): ``null`` gives a field
that takes no None its default (``model.options=null`` was refused), a field that takes None
gets None; and a switch of optimizer drops the inherited parameters the new one does not take,
saying which (a variant switching to LAMB kept the base's ``momentum: 0.9`` and failed with
"unknown argument 'momentum'"), while parameters written for the new optimizer are still checked."""

import logging

import pytest
import yaml

from lbtrain.config import ConfigError, load_experiment, run_config_from_dict
from lbtrain.studies.plan import expand

BASE = {"name": "switch", "data": {"dataset": "mnist1d", "train_subset": 400, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [8]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9, "nesterov": True}},
        "training": {"per_worker_batch": 16, "epochs": 1}}


def experiment_file(tmp_path, **changes):
    path = tmp_path / "switch.yaml"
    path.write_text(yaml.safe_dump({**BASE, **changes}))
    return path


def test_set_null_clears_an_inherited_field_to_its_default(tmp_path):
    experiment = load_experiment(experiment_file(tmp_path), ["model.options=null", "lr.rule=null", "data.train_subset=null"])
    run = run_config_from_dict(experiment.base_run())
    assert run.model.options == {}
    assert run.lr.rule == "linear"  # the default
    assert run.data.train_subset is None
    assert run_config_from_dict(load_experiment(experiment_file(tmp_path)).base_run()).model.options == {"widths": [8]}


def test_a_variant_switching_optimizer_drops_the_params_the_new_one_does_not_take(tmp_path, caplog):
    grid = {"variants": [{"label": "momentum"}, {"label": "lamb", "optimizer.name": "lamb"},
                         {"label": "lars", "optimizer.name": "lars", "optimizer.params.eta": 0.01}]}
    with caplog.at_level(logging.INFO, logger="lbtrain"):
        runs = {run.label.split()[0]: run.config.optimizer for run in expand(load_experiment(experiment_file(tmp_path, grid=grid)))}
    assert runs["momentum"].params == {"momentum": 0.9, "nesterov": True}
    assert (runs["lamb"].name, runs["lamb"].params) == ("lamb", {})
    assert (runs["lars"].name, runs["lars"].params) == ("lars", {"momentum": 0.9, "nesterov": True, "eta": 0.01})
    assert "optimizer.name lamb (was momentum): dropped the inherited params it does not take: momentum, nesterov" in caplog.text


def test_set_optimizer_name_drops_them_too_and_written_params_are_still_checked(tmp_path):
    experiment = load_experiment(experiment_file(tmp_path), ["optimizer.name=adam"])
    assert run_config_from_dict(experiment.base_run()).optimizer.params == {}
    with pytest.raises(ConfigError, match=r"optimizer.params: .*unknown argument 'momentum'"):
        run_config_from_dict({"optimizer": {"name": "lamb", "params": {"momentum": 0.9}}})
    experiment = load_experiment(experiment_file(tmp_path), ["optimizer.name=lamb", "optimizer.params.momentum=0.5"])
    with pytest.raises(ConfigError, match=r"unknown argument 'momentum'"):
        run_config_from_dict(experiment.base_run())


def test_a_null_optimizer_parameter_is_cleared_to_the_optimizers_default(tmp_path):
    grid = {"variants": [{"label": "lamb", "optimizer.name": "lamb", "optimizer.params.nesterov": None}]}
    [run] = expand(load_experiment(experiment_file(tmp_path, grid=grid)))
    assert (run.config.optimizer.name, run.config.optimizer.params) == ("lamb", {})
    experiment = load_experiment(experiment_file(tmp_path), ["optimizer.params.momentum=null"])
    assert run_config_from_dict(experiment.base_run()).optimizer.params == {"nesterov": True}
