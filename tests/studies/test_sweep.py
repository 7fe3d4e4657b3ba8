import datetime
import os
import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest
import tensorflow as tf
import yaml

from helpers import REPO_ROOT, goyal_blow_up_run, running_trials_are_stale, sweep_spec, wait_until, write_spec
from lbtrain.cli import main
from lbtrain.config import ConfigError, ExperimentConfig, load_experiment
from lbtrain.studies.storages import open_storage
from lbtrain.studies.sweep import _PruningCallback, check_sweepable, open_study, optimize, storage_url, summary_rows, trial_run
from lbtrain.worlds.simulated import SimulatedWorld

FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def test_tiny_sweep_on_sqlite_writes_studies_summary_and_figures(tmp_path, capsys):
    path = write_spec(tmp_path, sweep_spec(tmp_path))
    assert main(["sweep", str(path)]) == 0
    captured = capsys.readouterr()
    # Two world sizes: the tuned LR is reported per batch, never fitted through two points.
    assert "lbtrain: [tiny-w1 trial 0] complete: validation" in captured.err
    assert "tuned lr vs global batch: not enough points (n = 2 batch sizes < 4)" in captured.out
    results = tmp_path / "results" / "tiny"
    storage = f"sqlite:///{results / 'optuna.db'}"
    for world_size in (1, 2):
        study = optuna.load_study(study_name=f"tiny-w{world_size}", storage=storage)
        complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        assert len(complete) == 4
        assert study.best_value == max(t.value for t in complete)
        assert 0.0 <= study.best_trial.user_attrs["test_accuracy"] <= 1.0
        assert set(study.best_params) == {"lr.base_lr", "optimizer.name"}
        assert (results / "figures" / f"sweep_history_w{world_size}.png").stat().st_size > 1000
    summary = (results / "sweep_summary.csv").read_text().splitlines()
    assert summary[0].startswith("world_size,study,complete,pruned,diverged,collapsed,global_batch,best_validation_accuracy,best_test_accuracy")
    statuses = [t.user_attrs["status"] for t in optuna.load_study(study_name="tiny-w2", storage=storage).get_trials()]
    assert len(summary) == 3
    assert summary[2].startswith(f"2,tiny-w2,4,0,{statuses.count('diverged')},{statuses.count('collapsed')},32,")
    assert yaml.safe_load((results / "sweep_fit.json").read_text())["points"] == 2


def test_rerun_tops_up_to_the_requested_trials(tmp_path):
    experiment = ExperimentConfig.model_validate(sweep_spec(tmp_path, grid={"world_sizes": [1]}))
    optimize(experiment, 1, 2)
    study = optimize(experiment, 1, 3)
    assert len(study.get_trials(states=FINISHED)) == 3


def test_diverging_trials_are_pruned_with_their_reason(tmp_path):
    experiment = ExperimentConfig.model_validate(sweep_spec(
        tmp_path, grid={"world_sizes": [1]}, search={"lr.base_lr": {"type": "float", "low": 1.0e5, "high": 1.0e6}},
        optimizer={"name": "momentum"}))
    study = optimize(experiment, 1, 2)
    pruned = study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
    assert len(pruned) == 2
    assert all(t.user_attrs["reason"].startswith("loss became nan") or "exceeds" in t.user_attrs["reason"] for t in pruned)


def test_the_goyal_blow_up_as_a_sweep_trial_is_never_an_ok_best(tmp_path):
    base = goyal_blow_up_run(world_size=32)
    experiment = ExperimentConfig.model_validate({
        "name": "goyal", "output_dir": str(tmp_path / "results"), **base,
        "data": {**base["data"], "validation_split": 0.1}, "grid": {"world_sizes": [32]},
        "search": {"lr.base_lr": {"type": "categorical", "choices": [0.05]}}, "sweep": {"trials": 1, "pruner": "none"},
    })
    study = optimize(experiment, 32, 1)
    (trial,) = study.get_trials()
    assert trial.user_attrs["status"] in ("diverged", "collapsed") and trial.user_attrs["reason"]
    assert trial.state == (optuna.trial.TrialState.PRUNED if trial.user_attrs["status"] == "diverged"
                           else optuna.trial.TrialState.COMPLETE)
    (row,) = summary_rows(experiment)
    assert row["diverged"] + row["collapsed"] == 1 and "best_validation_accuracy" not in row


class AlwaysPrune(optuna.pruners.BasePruner):
    def prune(self, study, trial):
        return True


def test_pruning_waits_until_the_trials_warmup_has_ended():
    study = optuna.create_study(pruner=AlwaysPrune())
    callback = _PruningCallback(study.ask(), SimulatedWorld(1), warmup_epochs=1.5)
    callback.set_model(tf.keras.Sequential([tf.keras.layers.Dense(1)]))
    callback.model.stop_training = False  # as fit sets it (Keras 3 models have no such attribute before)
    callback.on_epoch_end(0, {"val_accuracy": 0.5})
    assert callback.pruned_at is None and not callback.model.stop_training
    callback.on_epoch_end(1, {"val_accuracy": 0.5})
    assert callback.pruned_at == 2 and callback.model.stop_training


def test_median_pruner_stops_a_clearly_bad_trial_after_its_first_epoch(tmp_path):
    experiment = ExperimentConfig.model_validate(sweep_spec(
        tmp_path, grid={"world_sizes": [1]}, training={"per_worker_batch": 16, "epochs": 3},
        search={"lr.base_lr": {"type": "float", "low": 1e-7, "high": 1.0, "log": True}}, optimizer={"name": "adam"},
        sweep={"trials": 3, "pruner": "median", "pruner_startup_trials": 2}))
    study = open_study(experiment, 1)
    for rate in (0.01, 0.01, 1e-7):
        study.enqueue_trial({"lr.base_lr": rate})
    optimize(experiment, 1, 3)
    trials = open_study(experiment, 1).get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2 + [optuna.trial.TrialState.PRUNED]
    assert trials[2].user_attrs["reason"] == "pruned by the median pruner after epoch 1"
    assert trials[2].user_attrs["epochs_run"] == 1


def test_trial_run_applies_params_to_the_base_run(tmp_path):
    experiment = ExperimentConfig.model_validate(sweep_spec(tmp_path))
    config = trial_run(experiment, 2, {"lr.base_lr": 0.3, "optimizer.name": "lars"})
    assert (config.lr.base_lr, config.optimizer.name, config.training.world_size) == (0.3, "lars", 2)
    assert storage_url(experiment) == f"sqlite:///{(tmp_path / 'results' / 'tiny' / 'optuna.db').resolve()}"


@pytest.mark.parametrize(
    "search, message",
    [
        ({"lr.base": {"type": "float", "low": 0.1, "high": 1}}, r"search: 'lr.base' is no field path"),
        ({"lr.base_lr": {"type": "float", "low": 0, "high": 1, "log": True}}, r"search.lr.base_lr: log scale needs low > 0, got 0.0"),
        ({"lr.base_lr": {"type": "float", "low": 2, "high": 1}}, r"search.lr.base_lr: float needs low < high, got low=2.0, high=1.0"),
        ({"optimizer.name": {"type": "categorical"}}, r"search.optimizer.name: categorical needs a non-empty choices list"),
        ({"optimizer.name": {"type": "choice", "choices": ["sgd"]}}, r"search.optimizer.name.type: Input should be 'float', 'int' or 'categorical'"),
        ({"lr.warmup_epochs": {"type": "int", "low": 0, "high": 2.5}}, r"search.lr.warmup_epochs: int needs whole low and high"),
        ({"lr.base_lr": {"type": "float", "low": 0.1, "high": 1, "choices": [1]}}, r"float takes low and high, not choices"),
    ],
)
def test_bad_search_specs_are_one_line_errors(tmp_path, search, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(write_spec(tmp_path, sweep_spec(tmp_path, search=search)))


def test_a_sweep_needs_a_validation_split_and_a_search(tmp_path, capsys):
    spec = sweep_spec(tmp_path)
    spec["data"] = {**spec["data"], "validation_split": 0.0}
    assert main(["sweep", str(write_spec(tmp_path, spec))]) == 2
    assert "data.validation_split must be > 0 for a sweep" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="search: name at least one field to tune"):
        check_sweepable(ExperimentConfig.model_validate(sweep_spec(tmp_path, search={})))
    assert not (tmp_path / "results").exists()


def test_an_asynchronous_experiment_is_refused_by_sweep_before_anything_is_written(tmp_path, capsys):
    spec = {**sweep_spec(tmp_path), "mode": "parameter_server"}
    assert main(["sweep", str(write_spec(tmp_path, spec))]) == 2
    assert capsys.readouterr().err.startswith("lbtrain: error: mode: parameter_server cannot be swept: trials train simulated worlds")
    assert not (tmp_path / "results").exists()


def test_a_search_corner_that_is_no_valid_run_is_an_error_before_any_trial(tmp_path, capsys):
    spec = sweep_spec(tmp_path, lr={"base_batch": 16, "rule": "none", "warmup_start": 0.05},
                      search={"lr.base_lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True},
                              "lr.warmup_epochs": {"type": "int", "low": 0, "high": 1}})
    assert main(["sweep", str(write_spec(tmp_path, spec))]) == 2
    error = capsys.readouterr().err
    assert error.startswith("lbtrain: error: search space corner lr.base_lr=0.01, lr.warmup_epochs=1 (tiny-w1, world size 1) is no valid run: "
                            "lr.warmup_start must be") and error.count("\n") == 1
    assert not (tmp_path / "results").exists()


def trial_rows(storage, name):
    """(state, seconds since start) of each trial, read through a read-only SQLite connection.

    Polling with ``optuna.load_study`` would let the test create Optuna's tables while the
    sweep under test creates them too: a race that can crash the sweep.
    """
    path = storage.removeprefix("sqlite:///")
    if not os.path.exists(path):
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as connection:
            rows = connection.execute(
                "SELECT trials.state, trials.datetime_start FROM trials JOIN studies USING (study_id)"
                " WHERE studies.study_name = ?", (name,)).fetchall()
    except sqlite3.OperationalError:
        return []
    now = datetime.datetime.now()
    return [(state, (now - datetime.datetime.fromisoformat(start)).total_seconds() if start else 0.0)
            for state, start in rows]


def count_finished(storage, name):
    return sum(state in ("COMPLETE", "PRUNED") for state, _ in trial_rows(storage, name))


def running_for(storage, name, seconds):
    """Whether a trial of the study has been RUNNING for at least ``seconds``."""
    return any(state == "RUNNING" and age >= seconds for state, age in trial_rows(storage, name))


@pytest.mark.slow
def test_resume_after_sigkill_fails_the_stale_trial_and_completes_the_study(tmp_path):
    # Trials of 40 epochs (a few seconds each) leave time to kill one while it trains.
    spec = sweep_spec(tmp_path, grid={"world_sizes": [1]}, training={"per_worker_batch": 16, "epochs": 40},
                      sweep={"trials": 4, "pruner": "none", "heartbeat_seconds": 1, "grace_seconds": 2})
    path = write_spec(tmp_path, spec)
    storage = f"sqlite:///{(tmp_path / 'results' / 'tiny' / 'optuna.db').resolve()}"
    command = [sys.executable, "-m", "lbtrain.cli", "sweep", str(path)]
    log = tmp_path / "killed_sweep.log"
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and count_finished(storage, "tiny-w1") < 1:
        time.sleep(0.3)
    # Kill while a trial trains, after its heartbeat started (Optuna never treats a RUNNING
    # trial without any heartbeat as stale: a kill in the first instant of a trial leaves it).
    while time.monotonic() < deadline and not running_for(storage, "tiny-w1", seconds=1.0):
        time.sleep(0.1)
    assert process.poll() is None, "the sweep ended before it was killed:\n" + log.read_text()[-2000:]
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = count_finished(storage, "tiny-w1")
    assert 1 <= before < 4
    beating = open_storage(storage, 1, 2)
    wait_until(lambda: running_trials_are_stale(beating, "tiny-w1"), "the killed trial's heartbeat to go stale")
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    study = optuna.load_study(study_name="tiny-w1", storage=storage)
    states = [t.state for t in study.get_trials()]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 4
    assert optuna.trial.TrialState.RUNNING not in states


@pytest.mark.slow
def test_two_workers_share_one_study(tmp_path, capsys):
    path = write_spec(tmp_path, sweep_spec(tmp_path, grid={"world_sizes": [1]}))
    assert main(["sweep", str(path), "--workers", "2", "--trials", "4"]) == 0
    storage = f"sqlite:///{(tmp_path / 'results' / 'tiny' / 'optuna.db').resolve()}"
    trials = optuna.load_study(study_name="tiny-w1", storage=storage).get_trials()
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert 4 <= len(complete) <= 5 and len({t.number for t in trials}) == len(trials)
    # Each worker has its own sampler seed: the two do not draw the same trials.
    assert len({tuple(sorted(t.params.items())) for t in trials}) == len(trials)
    assert "world   1: " in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.horovod
def test_horovodrun_two_ranks_sweep_two_trials(tmp_path):
    path = write_spec(tmp_path, sweep_spec(tmp_path, grid={"world_sizes": [2]}, sweep={"trials": 2, "pruner": "median"}))
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    lbtrain = os.path.join(os.path.dirname(sys.executable), "lbtrain")
    result = subprocess.run([horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", lbtrain, "sweep", str(path)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    storage = f"sqlite:///{(tmp_path / 'results' / 'tiny' / 'optuna.db').resolve()}"
    study = optuna.load_study(study_name="tiny-w2", storage=storage)
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.COMPLETE] * 2
    assert "[0]<stdout>:world   2: 2 complete, 0 pruned" in result.stdout
    assert "[0]<stderr>:lbtrain[rank 0]: [tiny-w2 trial 0] complete" in result.stderr
    assert "[1]<stdout>:world" not in result.stdout and "[tiny-w2" not in result.stdout and "[1]<stderr>:lbtrain" not in result.stderr


@pytest.mark.parametrize("pruner, kind", [("median", optuna.pruners.MedianPruner),
                                          ("successive_halving", optuna.pruners.SuccessiveHalvingPruner),
                                          ("none", optuna.pruners.NopPruner)])
def test_pruner_choice(tmp_path, pruner, kind):
    experiment = ExperimentConfig.model_validate(sweep_spec(tmp_path, sweep={"pruner": pruner}))
    assert isinstance(open_study(experiment, 1).pruner, kind)


def test_a_rerun_draws_new_trials_instead_of_repeating_the_first_ones(tmp_path):
    experiment = ExperimentConfig.model_validate(sweep_spec(tmp_path, grid={"world_sizes": [1]}, training={"per_worker_batch": 16, "epochs": 1}))
    optimize(experiment, 1, 2)
    study = optimize(experiment, 1, 4)
    rates = [trial.params["lr.base_lr"] for trial in study.get_trials()]
    assert len(rates) == 4 and len(set(rates)) == 4, rates


def test_parallel_workers_and_reruns_get_distinct_sampler_seeds(tmp_path):
    from lbtrain.studies.sweep import sampler_seed

    experiment = ExperimentConfig.model_validate(sweep_spec(tmp_path))
    seeds = {sampler_seed(experiment, world, worker, finished) for world in (1, 2) for worker in (0, 1) for finished in (0, 4)}
    assert len(seeds) == 8 and sampler_seed(experiment, 1, 0, 0) == sampler_seed(experiment, 1, 0, 0)


def test_a_stale_running_trial_is_failed_even_when_the_study_has_its_trials(tmp_path):
    from lbtrain.studies.sweep import _storage

    experiment = ExperimentConfig.model_validate(sweep_spec(
        tmp_path, grid={"world_sizes": [1]}, training={"per_worker_batch": 16, "epochs": 1},
        sweep={"trials": 1, "pruner": "none", "heartbeat_seconds": 1, "grace_seconds": 1}))
    optimize(experiment, 1, 1)
    # A worker killed mid-trial leaves it RUNNING with a heartbeat that stops.
    storage = _storage(storage_url(experiment), experiment.sweep)
    study = optuna.load_study(study_name="tiny-w1", storage=storage)
    stale = study.ask()
    storage.record_heartbeat(stale._trial_id)
    wait_until(lambda: running_trials_are_stale(storage, "tiny-w1"), "the trial's heartbeat to go stale")
    optimize(experiment, 1, 1)
    states = [trial.state for trial in open_study(experiment, 1).get_trials()]
    assert states[:2] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert states[2:] == [optuna.trial.TrialState.WAITING]  # its retry, for the next top-up


def test_a_queued_point_past_the_search_range_is_suggested_as_queued_without_a_warning():
    """A grid's edge extension (lbtrain.studies.search) lies outside the range on purpose: the
    trial takes the queued value and Optuna's out-of-range warning is not shown."""
    import warnings

    from lbtrain.config import SearchParam
    from lbtrain.studies.sweep import suggest

    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"lr.base_lr": 0.4})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = suggest(study.ask(), {"lr.base_lr": SearchParam(type="float", low=0.05, high=0.2, log=True)})
    assert values == {"lr.base_lr": 0.4}
    assert not [w for w in caught if "out of range" in str(w.message)]
