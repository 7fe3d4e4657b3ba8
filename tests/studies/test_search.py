"""How the protocol searches: grid values, edge extensions, a described search, TPE's budget,
each study's own sampler seed and no pruner."""

import optuna
import pytest

from lbtrain.config import ConfigError, ExperimentConfig, SearchParam
from lbtrain.studies.protocol import check_final_seeds, protocol_arms, tuned_studies
from lbtrain.studies.search import check_tpe_budget, describe_search, edge_extensions, grid_points, grid_values
from lbtrain.studies.sweep import open_study

LR = SearchParam(type="float", low=0.01, high=0.1, log=True)
WARMUP = SearchParam(type="float", low=0.0, high=2.0, step=1.0)
DECAY = SearchParam(type="categorical", choices=["cosine", "step"])


def test_grid_values_double_from_low_and_cover_steps_and_choices():
    assert grid_values(LR) == [0.01, 0.02, 0.04, 0.08]
    assert grid_values(WARMUP) == [0.0, 1.0, 2.0]
    assert grid_values(DECAY) == ["cosine", "step"]
    assert len(grid_points({"lr.base_lr": LR, "lr.warmup_epochs": WARMUP, "lr.decay": DECAY})) == 4 * 3 * 2


def test_edge_extensions_step_past_a_log_edge_until_the_cap():
    search = {"lr.base_lr": LR, "lr.warmup_epochs": WARMUP}
    tried = grid_points(search)
    assert edge_extensions(search, tried, {"lr.base_lr": 0.04, "lr.warmup_epochs": 2.0}, cap=3) == []  # linear edges stay
    assert edge_extensions(search, tried, {"lr.base_lr": 0.08, "lr.warmup_epochs": 1.0}, cap=3) == [
        {"lr.base_lr": 0.16, "lr.warmup_epochs": 1.0}]
    assert edge_extensions(search, tried, {"lr.base_lr": 0.01, "lr.warmup_epochs": 0.0}, cap=3) == [
        {"lr.base_lr": 0.005, "lr.warmup_epochs": 0.0}]
    extended = tried + [{"lr.base_lr": 0.16, "lr.warmup_epochs": 1.0}, {"lr.base_lr": 0.32, "lr.warmup_epochs": 1.0}]
    assert edge_extensions(search, extended, {"lr.base_lr": 0.32, "lr.warmup_epochs": 1.0}, cap=2) == []
    assert edge_extensions(search, extended, {"lr.base_lr": 0.32, "lr.warmup_epochs": 1.0}, cap=3) == [
        {"lr.base_lr": 0.64, "lr.warmup_epochs": 1.0}]


def test_describe_search_says_whether_the_best_is_interior():
    tried = [{"lr.base_lr": value} for value in (0.01, 0.02, 0.04)]
    assert describe_search({"lr.base_lr": LR}, tried, {"lr.base_lr": 0.02}) == {
        "fields": {"lr.base_lr": {"values": [0.01, 0.02, 0.04], "best": 0.02, "interior": True}}, "interior": True}
    assert describe_search({"lr.base_lr": LR}, tried, {"lr.base_lr": 0.04})["interior"] is False


def test_tpe_needs_ten_random_trials_and_three_times_as_many_in_all():
    check_tpe_budget(30, 10)
    with pytest.raises(ConfigError, match=r"sweep.trials \(29\) must be at least 3 x protocol.tpe_startup_trials \(30\)"):
        check_tpe_budget(29, 10)
    with pytest.raises(ConfigError, match="tpe_startup_trials must be at least 10, got 5"):
        check_tpe_budget(100, 5)


def experiment(tmp_path, **protocol):
    return ExperimentConfig.model_validate({
        "name": "search", "output_dir": str(tmp_path), "data": {"dataset": "synthetic", "validation_split": 0.2},
        "grid": {"world_sizes": [1, 2], "variants": [{"label": "a", "lr.rule": "sqrt"}, {"label": "b", "lr.rule": "linear"}]},
        "search": {"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}},
        "protocol": protocol})


def test_final_seeds_must_differ_from_the_tuning_seed(tmp_path):
    check_final_seeds(experiment(tmp_path), protocol_arms(experiment(tmp_path)))
    bad = experiment(tmp_path, seeds=[0, 1, 2])
    with pytest.raises(ConfigError, match=r"protocol.seeds \[0, 1, 2\] include the tuning trials' seed 0 \(training.seed\)"):
        check_final_seeds(bad, protocol_arms(bad))


def test_every_protocol_study_has_its_own_sampler_seed_and_no_pruner(tmp_path):
    config = experiment(tmp_path, search_method="tpe")
    studies = tuned_studies(protocol_arms(config))
    opened = [open_study(config, study, f"sqlite:///{tmp_path / 'optuna.db'}") for study in studies]
    first_draws = [study.ask().suggest_float("lr.base_lr", 0.01, 0.1, log=True) for study in opened]
    assert len(studies) == 4 and len(set(first_draws)) == 4  # the arms of one world size do not share their draws
    assert all(isinstance(study.pruner, optuna.pruners.NopPruner) for study in opened)


def test_a_grid_none_of_whose_trials_trained_ok_steps_below_its_lowest_lr_until_the_cap(tmp_path):
    """goyal_v4's LARS at batch 512 and up: every LR of the grid diverged or spiked, so there was no
    best to extend from and the search stopped above the LR that trains."""
    from lbtrain.studies.protocol import _due_points

    config = experiment(tmp_path, grid_extensions=2)
    spec = tuned_studies(protocol_arms(config))[0]
    study = open_study(config, spec, f"sqlite:///{tmp_path / 'optuna.db'}")
    distribution = {"lr.base_lr": optuna.distributions.FloatDistribution(0.001, 1.0, log=True)}

    def finish(lr, status, state=optuna.trial.TrialState.PRUNED):
        study.add_trial(optuna.trial.create_trial(params={"lr.base_lr": lr}, distributions=distribution, state=state,
                                                  value=0.1 if state == optuna.trial.TrialState.COMPLETE else None,
                                                  user_attrs={"status": status}))

    for lr in grid_values(LR):
        finish(lr, "diverged")
    assert _due_points(config, spec, study) == [{"lr.base_lr": 0.005}]
    finish(0.005, "ok-unstable", optuna.trial.TrialState.COMPLETE)
    assert _due_points(config, spec, study) == [{"lr.base_lr": 0.0025}]
    finish(0.0025, "diverged")
    assert _due_points(config, spec, study) == []  # two below the grid: the cap
    # A failed trial (an error) says nothing about the step: no point below.
    other = experiment(tmp_path / "failed", grid_extensions=2)
    study = open_study(other, spec, f"sqlite:///{tmp_path / 'failed.db'}")
    for lr, status in zip(grid_values(LR), ("diverged", "failed", "diverged", "diverged")):
        finish(lr, status)
    assert _due_points(other, spec, study) == []
    # Once a trial below the grid trains ok it is the best, and the edge extension takes over.
    study = open_study(config, spec, f"sqlite:///{tmp_path / 'ok.db'}")
    for lr in grid_values(LR):
        finish(lr, "diverged")
    finish(0.005, "ok", optuna.trial.TrialState.COMPLETE)
    assert _due_points(config, spec, study) == [{"lr.base_lr": 0.0025}]
