"""A results folder's tuning minutes come from its storage through Optuna's API: the same trials
give the same minutes in SQLite and in a journal file, and reading changes nothing."""

import datetime
import hashlib

import optuna
import pytest
import yaml

from lbtrain.reports.report import ReportError, machine_minutes
from lbtrain.reports.tuning import results_storage

START = datetime.datetime(2025, 1, 2, 3, 4, 5, 123456)
# (state, seconds from start to completion or None): every finished trial counts, whatever its state.
TRIALS = [(optuna.trial.TrialState.COMPLETE, 90.5), (optuna.trial.TrialState.PRUNED, 30.25),
          (optuna.trial.TrialState.FAIL, 12.0), (optuna.trial.TrialState.RUNNING, None), (optuna.trial.TrialState.WAITING, None)]
EXPECTED_MINUTES = 2 * (90.5 + 30.25 + 12.0) / 60  # the same trials in two studies


def add_trials(storage) -> None:
    """Two studies (as a sweep has one per world size) holding ``TRIALS`` with known times."""
    for name in ("sweep-w1", "sweep-w8"):
        study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
        for index, (state, seconds) in enumerate(TRIALS):
            trial = optuna.trial.create_trial(state=state, value=0.5 if state == optuna.trial.TrialState.COMPLETE else None,
                                              params={"lr": 0.1}, distributions={"lr": optuna.distributions.FloatDistribution(0.01, 1)})
            trial.datetime_start = None if state == optuna.trial.TrialState.WAITING else START + datetime.timedelta(hours=index)
            trial.datetime_complete = None if seconds is None else trial.datetime_start + datetime.timedelta(seconds=seconds)
            study.add_trial(trial)


def journal_folder(folder, log):
    """A results folder whose experiment names a journal file as its storage."""
    folder.mkdir()
    (folder / "experiment.yaml").write_text(yaml.safe_dump({"name": folder.name, "sweep": {"storage": f"journal://{log}"}}))
    return folder


def test_the_same_trials_give_the_same_minutes_in_sqlite_and_in_a_journal(tmp_path):
    sqlite = tmp_path / "sqlite"
    sqlite.mkdir()
    add_trials(f"sqlite:///{sqlite / 'optuna.db'}")
    log = tmp_path / "shared" / "sweep.log"
    log.parent.mkdir()
    add_trials(optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(log))))
    journal = journal_folder(tmp_path / "journal", log)

    assert results_storage(journal) == f"journal://{log}"
    by_sqlite, by_journal = machine_minutes(sqlite)["tuning_trials"], machine_minutes(journal)["tuning_trials"]
    assert by_sqlite == pytest.approx(EXPECTED_MINUTES, abs=1e-9)
    assert by_journal == pytest.approx(EXPECTED_MINUTES, abs=1e-9)


def test_reading_a_sqlite_storage_leaves_its_file_as_it_was(tmp_path):
    add_trials(f"sqlite:///{tmp_path / 'optuna.db'}")
    before = hashlib.sha256((tmp_path / "optuna.db").read_bytes()).hexdigest()
    assert machine_minutes(tmp_path)["tuning_trials"] == pytest.approx(EXPECTED_MINUTES)
    assert hashlib.sha256((tmp_path / "optuna.db").read_bytes()).hexdigest() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["optuna.db"]


def test_a_folder_without_its_storage_has_no_tuning_minutes(tmp_path):
    assert machine_minutes(tmp_path) == {"runs": 0.0, "tuning_trials": None}
    missing = journal_folder(tmp_path / "moved", tmp_path / "gone.log")
    assert results_storage(missing) is None and machine_minutes(missing)["tuning_trials"] is None
    assert not (tmp_path / "gone.log").exists()


def test_a_storage_that_is_not_optunas_is_one_report_error(tmp_path):
    (tmp_path / "optuna.db").write_text("not a database")
    with pytest.raises(ReportError, match="tuning trials in 'sqlite:///.*optuna.db' cannot be read"):
        machine_minutes(tmp_path)
