"""The tuning protocol: equal tuning budgets per arm from the Optuna storage, best of each arm
re-run with three seeds, the cost of a rule with its interval."""

import json
import logging
import os
import re
import statistics

import optuna
import pytest
import yaml

from lbtrain.cli import main
from lbtrain.config import ConfigError, ExperimentConfig
from lbtrain.reports.tables import read_summary
from lbtrain.studies.protocol import (
    best_arm,
    comparison_rows,
    controls_not_run,
    equal_steps_rows,
    equal_steps_runs,
    protocol_arms,
    reference_world_size,
    train_longer_arms,
    train_longer_rows,
    train_longer_runs,
    tune,
    tuned_studies,
    untaken_points,
)
from lbtrain.studies.sweep import FINISHED, best_ok_trial, open_study


def protocol_spec(tmp_path, **changes):
    spec = {
        "name": "proto",
        "output_dir": str(tmp_path / "results"),
        "data": {"dataset": "mnist1d", "train_subset": 320, "validation_split": 0.25, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [16]}},
        "lr": {"base_batch": 16},
        "training": {"per_worker_batch": 16, "epochs": 1},
        "grid": {"world_sizes": [1, 2], "variants": [
            {"label": "sqrt", "lr.rule": "sqrt"},
            {"label": "linear+warmup", "lr.rule": "linear", "lr.warmup_epochs": 0.5}]},
        "search": {"lr.base_lr": {"type": "float", "low": 0.05, "high": 0.1, "log": True},
                   "lr.warmup_epochs": {"type": "categorical", "choices": [0.5]}},
        "sweep": {"trials": 2},
        "protocol": {"seeds": [1, 2, 3], "grid_extensions": 1},
    }
    spec.update(changes)
    return spec


def test_arms_pair_a_tuned_and_a_rule_arm_per_recipe_and_world_size(tmp_path):
    experiment = ExperimentConfig.model_validate(protocol_spec(tmp_path))
    arms = protocol_arms(experiment)
    assert [(arm.label, arm.world_size, arm.study.name) for arm in arms] == [
        ("sqrt tuned", 1, "proto-sqrt-w1"), ("sqrt tuned", 2, "proto-sqrt-w2"), ("sqrt rule", 2, "proto-sqrt-w1"),
        ("linear+warmup tuned", 1, "proto-linear-warmup-w1"), ("linear+warmup tuned", 2, "proto-linear-warmup-w2"),
        ("linear+warmup rule", 2, "proto-linear-warmup-w1"),
    ]
    assert reference_world_size(experiment) == 1 and len(tuned_studies(arms)) == 4
    # A recipe without warmup does not search the warmup length.
    assert set(arms[0].study.search) == {"lr.base_lr"} and set(arms[3].study.search) == {"lr.base_lr", "lr.warmup_epochs"}


def test_protocol_rules_carry_one_reference_tuning_by_several_rules(tmp_path):
    spec = protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 1, "rules": {"sqrt": ["none", "sqrt", 0.75]}})
    spec["grid"]["world_sizes"] = [1, 2, 4]
    arms = protocol_arms(ExperimentConfig.model_validate(spec))
    sqrt_rule_arms = [(arm.label, arm.world_size, arm.study.name, arm.base["lr"]["rule"]) for arm in arms
                      if arm.recipe == "sqrt" and arm.kind == "rule"]
    assert sqrt_rule_arms == [(f"sqrt {rule} rule", size, "proto-sqrt-w1", rule) for size in (2, 4) for rule in ("none", "sqrt", 0.75)]
    # A recipe without an entry keeps its one rule arm, labelled as before.
    assert [arm.label for arm in arms if arm.recipe == "linear+warmup" and arm.kind == "rule"] == ["linear+warmup rule"] * 2
    assert len(tuned_studies(arms)) == 6  # the extra rules cost no tuning


def test_protocol_search_gives_a_recipe_its_own_ranges_with_the_same_budget(tmp_path):
    adam_range = {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}
    spec = protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 1, "search": {"linear+warmup": {"lr.base_lr": adam_range}}})
    arms = protocol_arms(ExperimentConfig.model_validate(spec))
    sqrt, linear = arms[0].study.search, arms[3].study.search
    assert (sqrt["lr.base_lr"].low, sqrt["lr.base_lr"].high) == (0.05, 0.1)
    assert (linear["lr.base_lr"].low, linear["lr.base_lr"].high) == (1e-4, 1e-2) and "lr.warmup_epochs" in linear


def test_comparison_rows_set_each_arm_against_the_recipes_tuned_reference(tmp_path):
    spec = protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 1, "rules": {"sqrt": ["none", "sqrt"]}})
    arms = protocol_arms(ExperimentConfig.model_validate(spec))
    accuracies = {("sqrt tuned", 1): [0.80, 0.82, 0.84], ("sqrt tuned", 2): [0.78, 0.80, 0.79],
                  ("sqrt none rule", 2): [0.70, 0.72, None], ("sqrt sqrt rule", 2): [0.75, 0.77, 0.76],
                  ("linear+warmup tuned", 1): [0.8] * 3, ("linear+warmup tuned", 2): [0.8] * 3, ("linear+warmup rule", 2): [0.1] * 3}
    summary = [{"label": label, "world_size": world, "status": "ok" if value is not None else "diverged", "test_accuracy": value}
               for (label, world), values in accuracies.items() for value in values]
    trials = {study.name: 2 for study in tuned_studies(arms)}
    rows = {(row["recipe"], row["rule_name"], row["world_size"]): row for row in comparison_rows(arms, summary, trials, 1)}
    assert set(rows) == {("sqrt", "reference", 1), ("sqrt", "none", 2), ("sqrt", "sqrt", 2), ("linear+warmup", "reference", 1),
                         ("linear+warmup", "linear", 2)}
    none = rows[("sqrt", "none", 2)]
    assert (none["rule"]["n"], none["rule_runs"]) == (2, 3)  # the diverged seed is counted, not averaged
    assert none["rule_minus_reference"]["mean"] == pytest.approx(0.71 - 0.82)
    assert none["tuned_minus_reference"]["mean"] == pytest.approx(0.79 - 0.82)
    assert none["cost_of_rule"]["mean"] == pytest.approx(0.79 - 0.71)
    assert rows[("sqrt", "sqrt", 2)]["rule_minus_reference"]["mean"] == pytest.approx(0.76 - 0.82)
    assert rows[("sqrt", "reference", 1)]["cost_of_rule"] is None and rows[("sqrt", "reference", 1)]["rule_minus_reference"] is None


def test_equal_steps_rerun_the_best_arm_on_validation_for_the_reference_updates(tmp_path):
    spec = protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 1, "equal_steps": [2]})
    experiment = ExperimentConfig.model_validate(spec)
    arms = protocol_arms(experiment)
    # linear+warmup rule has the best validation but a diverged seed; sqrt rule beats sqrt tuned on
    # validation although its test accuracy is lower: validation decides.
    runs = {("sqrt tuned", 1): [(0.80, 0.81, "ok")] * 3, ("sqrt tuned", 2): [(0.70, 0.79, "ok")] * 3,
            ("sqrt rule", 2): [(0.75, 0.70, "ok")] * 3, ("linear+warmup tuned", 1): [(0.8, 0.8, "ok")] * 3,
            ("linear+warmup tuned", 2): [(0.6, 0.6, "ok")] * 3, ("linear+warmup rule", 2): [(0.9, 0.9, "ok")] * 2 + [(0.1, 0.1, "diverged")]}
    summary = [{"label": label, "world_size": world, "validation_accuracy": validation, "test_accuracy": test, "status": status,
                "total_steps": 15 if world == 1 else 7} for (label, world), values in runs.items() for validation, test, status in values]
    assert best_arm(arms, summary, 2).label == "sqrt rule"
    params = {"proto-sqrt-w1": {"lr.base_lr": 0.05}, "proto-sqrt-w2": {"lr.base_lr": 0.2}}
    planned = equal_steps_runs(experiment, arms, params, summary)
    assert [(run.label, run.config.training.seed) for run in planned] == [("sqrt rule equal steps", seed) for seed in (1, 2, 3)]
    config = planned[0].config
    assert (config.training.steps, config.training.epochs, config.training.world_size) == (15, None, 2)
    assert (config.lr.base_lr, config.lr.rule) == (0.05, "sqrt")  # the reference tuning, carried by the rule

    summary += [{"label": "sqrt rule equal steps", "world_size": 2, "validation_accuracy": 0.8, "test_accuracy": test, "status": "ok",
                 "total_steps": 15} for test in (0.76, 0.78, 0.77)]
    [row] = equal_steps_rows(arms, summary, 1)
    assert (row["arm"], row["world_size"], row["global_batch"], row["steps"], row["equal_steps_runs"]) == ("sqrt rule", 2, 32, 15, 3)
    assert row["gain_of_steps"]["mean"] == pytest.approx(0.77 - 0.70)
    assert row["equal_steps_minus_reference"]["mean"] == pytest.approx(0.77 - 0.81)


def test_a_rule_only_recipe_is_tuned_at_the_reference_only_and_carried_by_its_rules(tmp_path):
    spec = protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "rule_only": ["sqrt"], "rules": {"sqrt": ["sqrt", "linear"]}})
    spec["grid"]["world_sizes"] = [1, 2, 4]
    arms = protocol_arms(ExperimentConfig.model_validate(spec))
    assert [(arm.label, arm.world_size, arm.study.name) for arm in arms if arm.recipe == "sqrt"] == [
        ("sqrt tuned", 1, "proto-sqrt-w1"), ("sqrt sqrt rule", 2, "proto-sqrt-w1"), ("sqrt linear rule", 2, "proto-sqrt-w1"),
        ("sqrt sqrt rule", 4, "proto-sqrt-w1"), ("sqrt linear rule", 4, "proto-sqrt-w1")]
    assert [study.name for study in tuned_studies(arms)] == [
        "proto-sqrt-w1", "proto-linear-warmup-w1", "proto-linear-warmup-w2", "proto-linear-warmup-w4"]

    accuracies = {("sqrt tuned", 1): [0.80, 0.82, 0.84], ("sqrt sqrt rule", 2): [0.75, 0.77, 0.76], ("sqrt linear rule", 2): [0.7] * 3,
                  ("sqrt sqrt rule", 4): [0.7, 0.6, None], ("sqrt linear rule", 4): [0.5] * 3}
    summary = [{"label": label, "world_size": world, "status": "ok" if value is not None else "diverged", "test_accuracy": value}
               for (label, world), values in accuracies.items() for value in values]
    trials = {study.name: 5 for study in tuned_studies(arms)}
    rows = {(row["rule_name"], row["world_size"]): row for row in comparison_rows(arms, summary, trials, 1) if row["recipe"] == "sqrt"}
    assert list(rows) == [("reference", 1), ("sqrt", 2), ("linear", 2), ("sqrt", 4), ("linear", 4)]
    sqrt4 = rows[("sqrt", 4)]
    assert (sqrt4["tuned"]["n"], sqrt4["tuned_runs"], sqrt4["tuned_trials"], sqrt4["rule_trials"]) == (0, 0, 0, 5)
    assert (sqrt4["rule"]["n"], sqrt4["rule_runs"]) == (2, 3) and sqrt4["rule_minus_reference"]["mean"] == pytest.approx(0.65 - 0.82)
    assert sqrt4["cost_of_rule"]["mean"] is None and sqrt4["tuned_minus_reference"]["mean"] is None
    assert rows[("reference", 1)]["tuned"]["mean"] == pytest.approx(0.82) and rows[("reference", 1)]["tuned_trials"] == 5


def test_a_tuned_only_recipe_has_no_rule_arms_and_no_rule_columns(tmp_path):
    arms = protocol_arms(ExperimentConfig.model_validate(protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "tuned_only": ["sqrt"]})))
    assert [(arm.label, arm.world_size) for arm in arms] == [
        ("sqrt tuned", 1), ("sqrt tuned", 2), ("linear+warmup tuned", 1), ("linear+warmup tuned", 2), ("linear+warmup rule", 2)]
    summary = [{"label": label, "world_size": world, "status": "ok", "test_accuracy": value}
               for label, world, value in (("sqrt tuned", 1, 0.8), ("sqrt tuned", 1, 0.82), ("sqrt tuned", 2, 0.7), ("sqrt tuned", 2, 0.74))]
    rows = [row for row in comparison_rows(arms, summary, {study.name: 5 for study in tuned_studies(arms)}, 1) if row["recipe"] == "sqrt"]
    assert [(row["rule_name"], row["world_size"], row["rule"]["n"], row["rule_runs"], row["tuned"]["n"]) for row in rows] == [
        ("reference", 1, 2, 2, 2), ("-", 2, 0, 0, 2)]
    assert rows[1]["tuned_minus_reference"]["mean"] == pytest.approx(0.72 - 0.81) and rows[1]["cost_of_rule"]["mean"] is None


def test_train_longer_reruns_an_arm_for_a_multiple_of_its_own_updates(tmp_path, caplog):
    controls = [{"world_size": 2, "factor": 3}, {"world_size": 2, "factor": 2, "arm": "linear+warmup tuned"},
                {"world_size": 2, "factor": 3.0, "arm": "sqrt rule"}]  # the first control again, by name: run once
    experiment = ExperimentConfig.model_validate(protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "train_longer": controls}))
    arms = protocol_arms(experiment)
    runs = {("sqrt tuned", 1): [(0.80, 0.81, "ok")] * 3, ("sqrt tuned", 2): [(0.70, 0.79, "ok")] * 3,
            ("sqrt rule", 2): [(0.75, 0.70, "ok")] * 3, ("linear+warmup tuned", 1): [(0.8, 0.8, "ok")] * 3,
            ("linear+warmup tuned", 2): [(0.6, 0.6, "ok")] * 2 + [(0.1, 0.1, "diverged")], ("linear+warmup rule", 2): [(0.5, 0.5, "ok")] * 3}
    summary = [{"label": label, "world_size": world, "validation_accuracy": validation, "test_accuracy": test, "status": status,
                "total_steps": 15 if world == 1 else 7} for (label, world), values in runs.items() for validation, test, status in values]
    params = {"proto-sqrt-w1": {"lr.base_lr": 0.05}, "proto-linear-warmup-w2": {"lr.base_lr": 0.2, "lr.warmup_epochs": 0.5}}
    planned = train_longer_runs(experiment, train_longer_arms(experiment, arms, summary), params, summary)
    # The best on validation (sqrt rule), then the named arm although one of its seeds diverged.
    assert [(run.label, run.config.training.seed, run.config.training.steps) for run in planned] == [
        ("sqrt rule 3x longer", seed, 21) for seed in (1, 2, 3)] + [("linear+warmup tuned 2x longer", seed, 14) for seed in (1, 2, 3)]
    assert (planned[0].config.lr.base_lr, planned[0].config.training.epochs) == (0.05, None)
    assert planned[3].config.lr.warmup_epochs == 0.5  # the warmup stays in epochs
    without_ok = [row for row in summary if row["label"] != "linear+warmup tuned" or row["world_size"] != 2]
    with caplog.at_level(logging.WARNING, logger="lbtrain"):
        controls = train_longer_arms(experiment, arms, without_ok)
        assert [run.label for run in train_longer_runs(experiment, controls, params, without_ok)] == ["sqrt rule 3x longer"] * 3
    assert [record.getMessage() for record in caplog.records] == [
        "protocol.train_longer at world size 2: linear+warmup tuned has no ok final run, so this control is not run"]
    assert controls_not_run(experiment, arms, without_ok) == [
        "world 2: linear+warmup tuned 2x longer not run: linear+warmup tuned has no ok final run"]
    assert controls_not_run(experiment, arms, summary) == []

    summary += [{"label": "sqrt rule 3x longer", "world_size": 2, "validation_accuracy": 0.8, "test_accuracy": test, "status": status,
                 "total_steps": 21} for test, status in ((0.76, "ok"), (0.78, "ok"), (0.1, "diverged"))]
    [row] = train_longer_rows([(arms[2], 3.0)], summary, 1)
    assert (row["arm"], row["world_size"], row["global_batch"], row["steps"], row["longer_steps"], row["longer_runs"]) == (
        "sqrt rule", 2, 32, 7, 21, 3)
    assert row["longer"]["n"] == 2 and row["gain"]["mean"] == pytest.approx(0.77 - 0.70)
    assert row["longer_minus_reference"]["mean"] == pytest.approx(0.77 - 0.81)


def test_a_grid_point_whose_trial_failed_is_tried_again(tmp_path):
    experiment = ExperimentConfig.model_validate(protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 0}))
    spec = tuned_studies(protocol_arms(experiment))[0]  # the grid {0.05, 0.1}, nothing past its edges
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = open_study(experiment, spec, storage)
    study.enqueue_trial({"lr.base_lr": 0.05})
    interrupted = study.ask()  # as a Ctrl-C leaves it: the point's one trial failed
    interrupted.suggest_float("lr.base_lr", 0.05, 0.1, log=True)
    study.tell(interrupted, state=optuna.trial.TrialState.FAIL)
    assert untaken_points(study, [{"lr.base_lr": 0.05}, {"lr.base_lr": 0.1}]) == [{"lr.base_lr": 0.05}, {"lr.base_lr": 0.1}]

    tune(experiment, [spec], storage)
    finished = open_study(experiment, spec, storage).get_trials(states=FINISHED)
    assert sorted(trial.params["lr.base_lr"] for trial in finished) == [0.05, 0.1]
    assert untaken_points(study, [{"lr.base_lr": 0.05}, {"lr.base_lr": 0.1}, {"lr.base_lr": 0.2}]) == [{"lr.base_lr": 0.2}]


def test_a_grid_point_a_dead_process_left_running_is_waited_for_then_retried(tmp_path):
    spec = protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 0},
                         sweep={"trials": 2, "heartbeat_seconds": 1, "grace_seconds": 8})
    experiment = ExperimentConfig.model_validate(spec)
    spec = tuned_studies(protocol_arms(experiment))[0]  # the grid {0.05, 0.1}, nothing past its edges
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = open_study(experiment, spec, storage)
    study.enqueue_trial({"lr.base_lr": 0.05})
    orphan = study.ask()  # a worker that took the point, beat once and died
    orphan.suggest_float("lr.base_lr", 0.05, 0.1, log=True)
    study._storage.record_heartbeat(orphan._trial_id)

    tune(experiment, [spec], storage)  # neither returns with the point unfinished nor spins on it
    trials = open_study(experiment, spec, storage).get_trials()
    assert sorted((trial.state.name, trial.params["lr.base_lr"]) for trial in trials) == [
        ("COMPLETE", 0.05), ("COMPLETE", 0.1), ("FAIL", 0.05)]


def test_two_tuning_workers_give_every_point_the_value_one_process_gives(tmp_path, caplog, capsys):
    """A grid and its edge extension tuned by this process alone, and by two worker processes of
    one TensorFlow thread each: the same points, each tried once (a 2-point grid's best sits on
    an edge: one extension, after the grid), with the same values and verdicts, since a grid
    point is a seeded run. The workers trained every trial, each trial once (their lines: no
    trial taken by both, as SQLite lets two processes do unless they take turns); this process
    logged none."""
    from lbtrain.studies.protocol import run_tuning

    tuned, logged, printed = {}, {}, {}
    for workers in (1, 2):
        spec = protocol_spec(tmp_path / f"workers-{workers}")
        spec["grid"] = {"world_sizes": [1], "variants": [{"label": "sqrt", "lr.rule": "sqrt"}]}
        experiment = ExperimentConfig.model_validate(spec)
        studies = tuned_studies(protocol_arms(experiment))
        storage = f"sqlite:///{experiment.results_dir / 'optuna.db'}"
        caplog.clear()
        capsys.readouterr()
        with caplog.at_level(logging.INFO, logger="lbtrain"):
            run_tuning(experiment, studies, storage, workers)
        logged[workers] = [record.getMessage() for record in caplog.records]
        printed[workers] = capsys.readouterr().err  # what the workers logged
        tuned[workers] = {study.name: sorted((trial.params["lr.base_lr"], trial.state.name, trial.value, trial.user_attrs["status"])
                                             for trial in open_study(experiment, study, storage).get_trials())
                          for study in studies}
    [trials] = tuned[1].values()
    assert len(trials) == 3 and {0.05, 0.1} < {point[0] for point in trials}
    assert tuned[2] == tuned[1]
    assert sum("[proto-sqrt-w1 trial" in line for line in logged[1]) == 3 and not any("[proto-" in line for line in logged[2])
    assert sorted(re.findall(r"\[proto-sqrt-w1 trial (\d)\] complete", printed[2])) == ["0", "1", "2"]
    assert "tuning 1 study, 2 trials known to be ahead: 2 processes at once, 1 TensorFlow thread each (2 cores)" in logged[2]


def test_a_tuning_worker_that_fails_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    """lbtrain sweep --workers 2 with a protocol: the workers' model raises (this process's
    checks built it), and the command ends as a plain sweep's failed workers do: their one
    line, exit 2, no traceback, no trial finished."""
    (tmp_path / "childfails.py").write_text(
        "import os\n"
        "import tensorflow as tf\n"
        f"PARENT = {os.getpid()}\n\n"
        "def build(input_shape, num_classes):\n"
        "    if os.getpid() != PARENT:\n"
        "        raise RuntimeError('no model in a worker')\n"
        "    inputs = tf.keras.Input(input_shape)\n"
        "    return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes)(inputs))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    spec = protocol_spec(tmp_path, model={"name": "childfails:build"})
    spec["grid"] = {"world_sizes": [1], "variants": [{"label": "sqrt", "lr.rule": "sqrt"}]}
    path = tmp_path / "proto.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"^lbtrain: error: sweep workers? (0|1|0, 1) of 2 failed: model 'childfails:build' raised RuntimeError "
                     r"building for input shape \(40,\) .*no model in a worker", err, re.MULTILINE), err
    assert "Traceback" not in err
    study = optuna.load_study(study_name="proto-sqrt-w1", storage=f"sqlite:///{tmp_path / 'results' / 'proto' / 'optuna.db'}")
    assert not study.get_trials(states=FINISHED)


def test_a_trial_tuned_on_two_seeds_scores_the_mean_of_their_validation_accuracies(tmp_path):
    from lbtrain.trainer import train
    from lbtrain.worlds.simulated import SimulatedWorld

    experiment = ExperimentConfig.model_validate(protocol_spec(
        tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 0, "tuning_seeds": [7, 8]}))
    spec = tuned_studies(protocol_arms(experiment))[0]
    assert spec.seeds == (7, 8)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    tune(experiment, [spec], storage)
    trials = open_study(experiment, spec, storage).get_trials(states=FINISHED)
    assert sorted(trial.params["lr.base_lr"] for trial in trials) == [0.05, 0.1]
    for trial in trials:
        alone = {seed: train(spec.run(trial.params, seed), SimulatedWorld(spec.world_size)).metrics["validation_accuracy"]
                 for seed in (7, 8)}
        assert trial.user_attrs["seed_values"] == {str(seed): pytest.approx(value) for seed, value in alone.items()}
        assert trial.value == pytest.approx(statistics.fmean(alone.values()))
        assert trial.user_attrs["status"] == "ok"


def test_a_final_seed_that_is_a_tuning_seed_and_a_study_scored_on_other_seeds_are_refused(tmp_path):
    from lbtrain.studies.protocol import check_final_seeds

    experiment = ExperimentConfig.model_validate(protocol_spec(
        tmp_path, protocol={"seeds": [1, 2, 3], "tuning_seeds": [3, 9]}))
    with pytest.raises(ConfigError, match=r"protocol.seeds \[1, 2, 3\] include the tuning trials' seed 3 \(protocol.tuning_seeds\)"):
        check_final_seeds(experiment, protocol_arms(experiment))
    one_seed = ExperimentConfig.model_validate(protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 0}))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    spec = tuned_studies(protocol_arms(one_seed))[0]
    study = open_study(one_seed, spec, storage)
    study.enqueue_trial({"lr.base_lr": 0.05})
    study.tell(study.ask(), 0.5)
    two_seeds = ExperimentConfig.model_validate(protocol_spec(
        tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 0, "tuning_seeds": [7, 8]}))
    with pytest.raises(ConfigError, match=r"has trials scored on tuning seed 0, the experiment asks for 7, 8 \(protocol.tuning_seeds"):
        open_study(two_seeds, tuned_studies(protocol_arms(two_seeds))[0], storage)
    # A study made before the seeds were recorded was scored on the run's seed (0): asking for [0] resumes it.
    study.set_user_attr("tuning_seeds", None)
    seed_zero = ExperimentConfig.model_validate(protocol_spec(
        tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 0, "tuning_seeds": [0]}))
    assert open_study(seed_zero, tuned_studies(protocol_arms(seed_zero))[0], storage).user_attrs["tuning_seeds"] is None


@pytest.mark.parametrize("changes, message", [
    ({"protocol": {"rule_only": ["adam"]}}, r"protocol.rule_only: 'adam' is not a recipe"),
    ({"grid": {"world_sizes": [1, 2], "variants": [{"label": "sqrt", "lr.rule": "sqrt", "training.per_worker_batch": 8},
                                                    {"label": "sqrt", "lr.rule": "sqrt"}]}},
     r"grid.variants: the protocol takes each recipe once \(it is tuned at every world size\), but 'sqrt' names several variants"),
    ({"protocol": {"tuned_only": ["sqrt"], "rules": {"sqrt": ["linear"]}}},
     r"protocol.rules: 'sqrt' is tuned_only, so it has no rule arm to carry by them"),
    ({"protocol": {"tuned_only": ["adam"]}}, r"protocol.tuned_only: 'adam' is not a recipe"),
    ({"protocol": {"tuned_only": ["sqrt"], "rule_only": ["sqrt"]}}, r"protocol: 'sqrt' is in both rule_only and tuned_only"),
    ({"protocol": {"train_longer": [{"world_size": 4, "factor": 3}]}},
     r"protocol.train_longer: world size 4 is not one of grid.world_sizes \[1, 2\]"),
    ({"protocol": {"train_longer": [{"world_size": 1, "factor": 3, "arm": "sqrt rule"}]}},
     r"protocol.train_longer: 'sqrt rule' is not an arm at world size 1 \(arms there: sqrt tuned, linear\+warmup tuned\)"),
    ({"grid": {"world_sizes": [1, 2], "seeds": [0, 1]}}, r"the protocol crosses grid.world_sizes with grid.variants only, not training.seed"),
    ({"protocol": {"reference_world_size": 4}}, r"protocol.reference_world_size 4 is not one of grid.world_sizes \[1, 2\]"),
    ({"protocol": {"rules": {"linear": ["sqrt"]}}}, r"protocol.rules: 'linear' is not a recipe \(labels of grid.variants: sqrt, linear\+warmup\)"),
    ({"protocol": {"search": {"adam": {}}}}, r"protocol.search: 'adam' is not a recipe"),
    ({"protocol": {"equal_steps": [1, 4]}},
     r"protocol.equal_steps: \[1, 4\] must be world sizes of grid.world_sizes \[1, 2\] other than the reference world size 1"),
])
def test_protocol_grid_errors(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        protocol_arms(ExperimentConfig.model_validate(protocol_spec(tmp_path, **changes)))


def test_fewer_than_three_seeds_is_a_config_error(tmp_path, capsys):
    path = tmp_path / "proto.yaml"
    path.write_text(yaml.safe_dump(protocol_spec(tmp_path, protocol={"seeds": [0, 1]})))
    assert main(["sweep", str(path)]) == 2
    assert "the finals need at least 3 fresh seeds, got 2 (exploratory: true allows fewer" in capsys.readouterr().err
    exploratory = ExperimentConfig.model_validate(protocol_spec(tmp_path, protocol={"seeds": [1, 2], "exploratory": True}))
    assert exploratory.protocol.seeds == [1, 2]


@pytest.mark.slow
def test_a_tuned_study_from_one_yaml_equal_budgets_three_seeds_and_the_cost_of_the_rule(tmp_path, capsys):
    spec = protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 1, "equal_steps": [2],
                                             "train_longer": [{"world_size": 2, "factor": 2, "arm": "sqrt rule"}]})
    path = tmp_path / "proto.yaml"
    path.write_text(yaml.safe_dump(spec))
    # One process (the tuning workers: test_two_tuning_workers_give_every_point_the_value_one_process_gives).
    assert main(["sweep", str(path), "--workers", "1"]) == 0
    results = tmp_path / "results" / "proto"
    experiment = ExperimentConfig.model_validate(spec)

    # The grid, read back from the Optuna storage: every point once, then past the edge while the
    # best sat on it (at most grid_extensions = 1 per edge), nothing pruned but by divergence.
    studies = tuned_studies(protocol_arms(experiment))
    storage = f"sqlite:///{results / 'optuna.db'}"
    searched = json.loads((results / "protocol.json").read_text())["search"]
    for study in studies:
        trials = optuna.load_study(study_name=study.name, storage=storage).get_trials(states=FINISHED)
        tried = [trial.params["lr.base_lr"] for trial in trials]
        assert len(tried) == len(set(tried)) and {0.05, 0.1} <= set(tried) <= {0.025, 0.05, 0.1, 0.2}
        assert all(trial.state == optuna.trial.TrialState.COMPLETE or trial.user_attrs["status"] == "diverged" for trial in trials)
        best = best_ok_trial(open_study(experiment, study, storage)).params["lr.base_lr"]
        on_grid = [trial for trial in trials if trial.params["lr.base_lr"] in (0.05, 0.1) and trial.user_attrs["status"] == "ok"]
        best_on_grid = max(on_grid, key=lambda trial: (trial.value, -trial.number)).params["lr.base_lr"]
        assert (0.2 in tried) == (best_on_grid == 0.1) and (0.025 in tried) == (best_on_grid == 0.05)
        entry = searched[study.name]
        assert entry["method"] == "grid" and entry["trials"] == len(tried)
        assert entry["fields"]["lr.base_lr"] == {"values": sorted(tried), "best": best, "interior": min(tried) < best < max(tried)}
    assert json.loads((results / "protocol.json").read_text())["seeds"] == {"tuning": [0], "finals": [1, 2, 3]}

    # Every arm's best re-run with three seeds; the rule arm at world 2 carries world 1's best LR.
    everything = read_summary(results / "summary.csv")
    longer = [row for row in everything if row["label"].endswith(" equal steps")]
    control = [row for row in everything if row["label"] == "sqrt rule 2x longer"]
    summary = [row for row in everything if row not in longer + control]
    arms = {(row["label"], row["world_size"]) for row in summary}
    assert arms == {(f"{recipe} {kind}", world) for recipe in ("sqrt", "linear+warmup")
                    for kind, world in (("tuned", 1), ("tuned", 2), ("rule", 2))}
    for label, world in arms:
        assert sorted(row["seed"] for row in summary if (row["label"], row["world_size"]) == (label, world)) == [1, 2, 3]
    best_reference = best_ok_trial(open_study(experiment, studies[0]))
    rule_runs = [row for row in summary if row["label"] == "sqrt rule"]
    for row in rule_runs:
        config = yaml.safe_load((results / "runs" / row["run_id"] / "config.yaml").read_text())
        assert config["lr"]["base_lr"] == best_reference.params["lr.base_lr"]
        assert row["learning_rate"] == pytest.approx(best_reference.params["lr.base_lr"] * 2 ** 0.5)

    # The comparison: means of the ok seeds' test accuracy, and tuned − rule.
    rows = json.loads((results / "protocol.json").read_text())["rows"]
    row = next(r for r in rows if (r["recipe"], r["world_size"]) == ("sqrt", 2))
    tuned = [r["test_accuracy"] for r in summary if r["label"] == "sqrt tuned" and r["world_size"] == 2 and r["status"] == "ok"]
    rule = [r["test_accuracy"] for r in rule_runs if r["status"] == "ok"]
    assert row["tuned"]["n"] == len(tuned) and row["tuned"]["mean"] == pytest.approx(statistics.fmean(tuned))
    assert row["cost_of_rule"]["mean"] == pytest.approx(statistics.fmean(tuned) - statistics.fmean(rule))
    assert row["tuned_trials"] == searched[studies[1].name]["trials"] and row["rule_trials"] == searched[studies[0].name]["trials"]
    text = (results / "protocol.md").read_text()
    assert "| sqrt | sqrt | 2 | 32 |" in text and "the tuning trials trained with seed 0: no final run repeats" in text
    assert f"| {studies[0].name} | grid | {searched[studies[0].name]['trials']} | lr.base_lr {{" in text
    # The tuned LR per recipe is reported against the batch, never fitted through two world sizes.
    fits = json.loads((results / "protocol.json").read_text())["lr_fits"]
    assert set(fits) == {"sqrt", "linear+warmup"} and fits["sqrt"]["note"] == "not enough points (n = 2 batch sizes < 4)"
    assert [batch["global_batch"] for batch in fits["sqrt"]["batches"]] == [16, 32]
    assert "- sqrt: tuned lr vs global batch: not enough points (n = 2 batch sizes < 4)" in text

    # Equal steps: world 2's best arm on validation, re-run with the three seeds for world 1's updates.
    best = best_arm(protocol_arms(experiment), summary, 2)
    assert sorted((row["label"], row["world_size"], row["seed"]) for row in longer) == [(f"{best.label} equal steps", 2, seed) for seed in (1, 2, 3)]
    reference_steps = {row["total_steps"] for row in summary if row["world_size"] == 1}
    assert reference_steps == {15} and {row["total_steps"] for row in longer} == {15} and {row["budget"] for row in longer} == {"15 steps"}
    assert json.loads((results / "protocol.json").read_text())["best_arms"] == {
        str(size): best_arm(protocol_arms(experiment), summary, size).label for size in (1, 2)}
    [steps_row] = json.loads((results / "protocol.json").read_text())["equal_steps"]
    ok_longer = [row["test_accuracy"] for row in longer if row["status"] == "ok"]
    assert steps_row["arm"] == best.label and steps_row["equal_steps"]["n"] == len(ok_longer)
    assert steps_row["equal_steps"]["mean"] == pytest.approx(statistics.fmean(ok_longer))
    assert f"| {best.label} | 2 | 32 | 15 |" in text

    # The convergence control: the named arm, the same seeds, twice its own updates.
    assert sorted((row["seed"], row["world_size"], row["total_steps"]) for row in control) == [(seed, 2, 14) for seed in (1, 2, 3)]
    [control_row] = json.loads((results / "protocol.json").read_text())["train_longer"]
    ok_control = [row["test_accuracy"] for row in control if row["status"] == "ok"]
    assert (control_row["arm"], control_row["steps"], control_row["longer_steps"], control_row["longer"]["n"]) == (
        "sqrt rule", 7, 14, len(ok_control))
    assert control_row["gain"]["mean"] == pytest.approx(statistics.fmean(ok_control) - statistics.fmean(rule))
    assert "| sqrt rule | 2 | 32 | 7 | 14 |" in text

    # Resumable: a rerun trains nothing new (nor starts tuning workers: no trial is ahead).
    capsys.readouterr()
    assert main(["sweep", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("done before, skipped") >= len(everything) and "ETA" not in err


def test_a_rule_that_does_not_exist_in_protocol_rules_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "proto.yaml"
    path.write_text(yaml.safe_dump(protocol_spec(tmp_path, protocol={"seeds": [1, 2, 3], "grid_extensions": 1, "rules": {"sqrt": ["none", "cube"]}})))
    assert main(["sweep", str(path)]) == 2
    assert capsys.readouterr().err == ("lbtrain: error: protocol.rules: rules of 'sqrt': 'cube' is not a rule "
                                       "(allowed: linear, sqrt, none or a float exponent)\n")
