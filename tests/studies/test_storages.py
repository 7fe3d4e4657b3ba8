"""Sweeps on shared storage, for real: a throwaway PostgreSQL server (``postgres_server`` in
conftest.py), journal files, worker processes that are SIGKILLed, and optuna-dashboard reading
a finished sweep over HTTP."""

import csv
import datetime
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import optuna
import pytest

from helpers import REPO_ROOT, running_trials_are_stale, stderr_lines, sweep_spec, wait_until, write_spec
from lbtrain.cli import main
from lbtrain.cli import one_line as cli_one_line
from lbtrain.config.limits import quote
from lbtrain.studies.storages import HeartbeatJournalStorage, claim_trial, describe, open_storage

COMPLETE, PRUNED, RUNNING, WAITING, FAIL = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                                            optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING,
                                            optuna.trial.TrialState.FAIL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def lbtrain_sweep(path, *args, cache, timeout=300) -> subprocess.CompletedProcess:
    """``lbtrain sweep PATH ARGS`` in a fresh process with its own dataset cache."""
    return subprocess.run([sys.executable, "-m", "lbtrain.cli", "sweep", str(path), *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "XDG_CACHE_HOME": str(cache)})


def child_processes(pid: int) -> list[int]:
    """The ids of the processes ``pid`` started (Linux)."""
    return [int(child) for task in os.listdir(f"/proc/{pid}/task")
            for child in open(f"/proc/{pid}/task/{task}/children").read().split()]


def trial_states(url: str, name: str) -> list[tuple[str, float]]:
    """(state, seconds since it started) of each trial of study ``name``, read without creating
    anything: the sweep under test creates Optuna's tables and the journal file itself."""
    now = datetime.datetime.now()
    if url.startswith("journal://"):
        path = url.removeprefix("journal://")
        if not os.path.exists(path):
            return []
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(path))
        try:
            trials = storage.get_all_trials(storage.get_study_id_from_name(name))
        except KeyError:
            return []
        return [(trial.state.name, (now - trial.datetime_start).total_seconds() if trial.datetime_start else 0.0) for trial in trials]
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5) as connection:
            rows = connection.execute("SELECT trials.state, trials.datetime_start FROM trials JOIN studies USING (study_id)"
                                      " WHERE studies.study_name = %s", (name,)).fetchall()
    except psycopg.errors.UndefinedTable:
        return []
    return [(str(state), (now - start).total_seconds() if start else 0.0) for state, start in rows]


def summary(results) -> list[dict]:
    with open(results / "sweep_summary.csv") as handle:
        return list(csv.DictReader(handle))


def assert_exactly_finished(study: optuna.Study, trials: int) -> list[optuna.trial.FrozenTrial]:
    """The study has exactly ``trials`` finished trials, none RUNNING, and any WAITING one left
    is a parameterless place holder (two workers that both found the queue empty)."""
    every = study.get_trials()
    finished = [trial for trial in every if trial.state in (COMPLETE, PRUNED)]
    assert len(finished) == trials, [(trial.number, trial.state.name) for trial in every]
    assert RUNNING not in [trial.state for trial in every]
    assert all(not trial.params for trial in every if trial.state == WAITING)
    return finished


# --- Bad storage: one line naming the storage, exit 2, nothing created --------------------------

def test_a_password_never_shows_in_messages():
    assert describe("postgresql://sweeper:hunter2@db.example:5432/sweeps") == "postgresql://sweeper:***@db.example:5432/sweeps"
    assert describe("journal:///shared/sweeps/x.log") == "journal:///shared/sweeps/x.log"


def assert_refused(tmp_path, capsys, storage, shown, reason):
    path = write_spec(tmp_path, sweep_spec(tmp_path))
    assert main(["sweep", str(path), "--storage", storage]) == 2
    error = capsys.readouterr().err
    # The storage is quoted as every input is, to at most 120 characters (a long path is cut, not the reason).
    assert error.startswith(f"lbtrain: error: storage {quote(shown)} cannot be opened (") and error.count("\n") == 1, error
    assert any(text in error for text in ([reason] if isinstance(reason, str) else reason)), error
    assert not (tmp_path / "results").exists()
    return error


def test_an_unreachable_postgres_server_is_one_line_naming_it(tmp_path, capsys):
    port = free_port()  # nothing listens there
    error = assert_refused(tmp_path, capsys, f"postgresql://sweeper:hunter2@127.0.0.1:{port}/sweeps",
                           f"postgresql://sweeper:***@127.0.0.1:{port}/sweeps", "Connection refused")
    assert "hunter2" not in error and "check that the server is reachable" in error


def test_a_missing_database_driver_says_what_to_install(tmp_path, capsys):
    if importlib.util.find_spec("psycopg2") is not None:
        pytest.skip("psycopg2 is installed here")
    url = f"postgresql+psycopg2://sweeper:hunter2@127.0.0.1:{free_port()}/sweeps"
    error = assert_refused(tmp_path, capsys, url, url.replace(":hunter2@", ":***@"), "(ModuleNotFoundError: No module named 'psycopg2')")
    assert error.rstrip().endswith("install the PostgreSQL driver: pip install 'lbtrain[postgres]' (psycopg 3, for postgresql:// and postgresql+psycopg://)")


def test_a_wrong_postgres_password_is_one_line_and_creates_no_table(tmp_path, capsys, postgres_server):
    database = postgres_server.create_database()
    url = postgres_server.url(database, password="wrong")
    error = assert_refused(tmp_path, capsys, url, url.replace(":wrong@", ":***@"), 'password authentication failed for user "postgres"')
    assert "wrong" not in error.split("cannot be opened")[0]
    with postgres_server.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'").fetchone() == (0,)


def unwritable_folder(tmp_path):
    """A folder this process cannot create files in: a read-only one, or for root (who may
    write anywhere else) /sys, where no one can create a file."""
    if os.geteuid() == 0:
        return "/sys"
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return str(folder)


@pytest.mark.parametrize("where", ["sweep.log", "new/folders/sweep.log"])
def test_a_journal_in_a_folder_that_cannot_be_written_is_one_line(tmp_path, capsys, where):
    folder = unwritable_folder(tmp_path)
    storage = f"journal://{folder}/{where}"
    assert_refused(tmp_path, capsys, storage, storage, ["Permission denied", "Operation not permitted", "Read-only file system"])
    assert not os.path.exists(f"{folder}/{where.split('/')[0]}")


def test_a_journal_that_cannot_be_created_leaves_no_folders_behind(tmp_path, capsys):
    storage = f"journal://{tmp_path}/new/folders/{'x' * 300}.log"  # a file name longer than any filesystem takes
    assert_refused(tmp_path, capsys, storage, storage, "File name too long")
    assert not (tmp_path / "new").exists()


def test_a_journal_needs_an_absolute_path(tmp_path, capsys):
    assert_refused(tmp_path, capsys, "journal://sweep.log", "journal://sweep.log", "a journal needs an absolute path")


# --- Heartbeats on the journal, and exact trial counts under concurrency -----------------------

def test_a_journal_trial_whose_heartbeat_stops_is_failed_and_retried(tmp_path):
    storage = open_storage(f"journal://{tmp_path}/sweep.log", heartbeat_seconds=1, grace_seconds=1)
    assert isinstance(storage, HeartbeatJournalStorage)
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    dead = claim_trial(study, trials=1)  # its process "dies": no heartbeat after the first
    dead.suggest_float("x", 0, 1)
    assert claim_trial(study, trials=1) is None  # the study is full while the trial may still be alive
    wait_until(lambda: running_trials_are_stale(storage, "s"), "the dead trial's heartbeat to go stale")
    other = optuna.load_study(study_name="s", storage=open_storage(f"journal://{tmp_path}/sweep.log", 1, 1))
    retry = claim_trial(other, trials=1)
    trials = other.get_trials()
    assert [trial.state for trial in trials] == [FAIL, RUNNING]
    assert retry.number == 1 and trials[1].system_attrs["failed_trial"] == 0 and trials[1].params == trials[0].params


CLAIMER = textwrap.dedent("""
    import random, sys, time
    import optuna
    from lbtrain.studies.storages import claim_trial, open_storage, run_claimed

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url, trials, studies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    storage = open_storage(url, heartbeat_seconds=5, grace_seconds=30)

    def objective(trial):
        time.sleep(random.uniform(0, 0.03))
        return trial.suggest_float("x", 0, 1)

    for index in range(studies):
        study = optuna.create_study(study_name=f"s{index}", storage=storage, direction="maximize", load_if_exists=True)
        while (trial := claim_trial(study, trials)) is not None:
            run_claimed(study, trial, objective)
""")


@pytest.mark.parametrize("backend", ["postgresql", "journal"])
def test_processes_racing_for_the_last_trials_finish_exactly_the_budget(tmp_path, request, backend):
    # Four processes started together on a new storage (they race to create Optuna's tables,
    # each study and each study's last trials) top up eight studies of five short trials.
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else f"journal://{tmp_path}/race.log"
    processes = [subprocess.Popen([sys.executable, "-c", CLAIMER, url, "5", "8"], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    errors = [process.communicate(timeout=120)[1] for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, errors
    storage = open_storage(url, 5, 30)
    for index in range(8):
        assert_exactly_finished(optuna.load_study(study_name=f"s{index}", storage=storage), 5)


def test_a_sqlite_claim_waits_for_the_claim_lock_so_two_processes_never_take_one_trial(tmp_path):
    """SQLite takes no row lock (Optuna #4002): a trial is taken under a flock beside the database.
    While another holder has it, claim_trial waits and the trial stays WAITING; once it is
    released, the claim takes the trial."""
    import fcntl
    import threading

    storage = open_storage(f"sqlite:///{tmp_path}/optuna.db", 5, 30)
    study = optuna.create_study(study_name="s", storage=storage)
    study.enqueue_trial({"x": 1.0})
    claimed = []
    with open(tmp_path / ".optuna.db.claims.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        thread = threading.Thread(target=lambda: claimed.append(claim_trial(study, None)))
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and [trial.state for trial in study.get_trials()] == [optuna.trial.TrialState.WAITING]
    thread.join(60)
    assert not thread.is_alive() and claimed[0].number == 0
    assert [trial.state for trial in study.get_trials()] == [optuna.trial.TrialState.RUNNING]


# --- Whole sweeps: two workers on PostgreSQL and on a journal, a kill, the dashboard -----------

TRIALS = 3


class FinishedSweep:
    def __init__(self, storage, dashboard_storage, results, output):
        self.storage, self.dashboard_storage, self.results, self.output = storage, dashboard_storage, results, output


def two_worker_sweep(tmp, storage, dashboard_storage, world_sizes) -> FinishedSweep:
    spec = sweep_spec(tmp, grid={"world_sizes": world_sizes}, training={"per_worker_batch": 16, "epochs": 1},
                      sweep={"trials": TRIALS, "pruner": "none"})
    result = lbtrain_sweep(write_spec(tmp, spec), "--workers", "2", "--storage", storage, cache=tmp / "cache")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return FinishedSweep(storage, dashboard_storage, tmp / "results" / "tiny", result.stdout)


@pytest.fixture(scope="module")
def postgres_sweep(postgres_server, tmp_path_factory):
    """Two worker processes sweep two world sizes (two studies in one database) on PostgreSQL."""
    database = postgres_server.create_database()
    return two_worker_sweep(tmp_path_factory.mktemp("postgres_sweep"), postgres_server.url(database),
                            postgres_server.url(database, driver="postgresql+psycopg"), [1, 2])


@pytest.fixture(scope="module")
def journal_sweep(tmp_path_factory):
    """Two worker processes sweep one world size on one journal file."""
    tmp = tmp_path_factory.mktemp("journal_sweep")
    return two_worker_sweep(tmp, f"journal://{tmp}/shared/sweep.log", f"{tmp}/shared/sweep.log", [1])


def assert_distinct_exact_studies(sweep: FinishedSweep, names: list[str]) -> None:
    storage = open_storage(sweep.storage, 10, 30)
    assert sorted(optuna.get_all_study_names(storage)) == names
    for name, row in zip(names, summary(sweep.results)):
        finished = assert_exactly_finished(optuna.load_study(study_name=name, storage=storage), TRIALS)
        assert all(trial.state == COMPLETE for trial in finished)
        # Each worker has its own sampler seed: the two do not draw the same trials.
        assert len({tuple(sorted(trial.params.items())) for trial in finished}) == TRIALS
        assert (row["study"], row["complete"], row["pruned"]) == (name, str(TRIALS), "0")


@pytest.mark.slow
def test_two_workers_on_postgres_sweep_two_world_sizes_to_exactly_the_trials(postgres_sweep):
    assert_distinct_exact_studies(postgres_sweep, ["tiny-w1", "tiny-w2"])
    assert f"world   1: {TRIALS} complete" in postgres_sweep.output and f"world   2: {TRIALS} complete" in postgres_sweep.output


@pytest.mark.slow
def test_two_workers_share_one_journal_file(journal_sweep):
    assert_distinct_exact_studies(journal_sweep, ["tiny-w1"])
    journal = journal_sweep.storage.removeprefix("journal://")
    assert not os.path.exists(journal + ".lock")  # the lock is released
    trials = optuna.load_study(study_name="tiny-w1", storage=open_storage(journal_sweep.storage, 10, 30)).get_trials()
    assert all(HeartbeatJournalStorage.KEY in trial.system_attrs for trial in trials)


@pytest.mark.slow
@pytest.mark.parametrize("sweep", ["postgres_sweep", "journal_sweep"])
def test_optuna_dashboard_reads_back_the_sweep_summary(request, sweep):
    finished = request.getfixturevalue(sweep)
    port = free_port()
    dashboard = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "optuna-dashboard"), finished.dashboard_storage,
                                  "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def get(route):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=10) as response:
            return json.load(response)

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                studies = get("/api/studies")["study_summaries"]
                break
            except OSError:
                assert dashboard.poll() is None and time.monotonic() < deadline, dashboard.communicate(timeout=10)[0][-2000:]
                time.sleep(0.3)
        ids = {study["study_name"]: study["study_id"] for study in studies}
        rows = summary(finished.results)
        assert sorted(ids) == sorted(row["study"] for row in rows)
        for row in rows:
            detail = get(f"/api/studies/{ids[row['study']]}")
            states = [trial["state"] for trial in detail["trials"]]
            assert states.count("Complete") == int(row["complete"]) and states.count("Pruned") == int(row["pruned"])
            # lbtrain's best is the best trial whose run was judged ok (user attribute status).
            complete = [trial for trial in detail["trials"] if trial["state"] == "Complete"]
            ok = [trial["values"][0] for trial in complete
                  if {attr["key"]: attr["value"] for attr in trial["user_attrs"]}["status"] == "ok"]
            if ok:
                assert max(ok) == pytest.approx(float(row["best_validation_accuracy"]), abs=1e-12)
            else:
                assert row["best_validation_accuracy"] == ""
            (best,) = detail["best_trials"]  # Optuna's best, ok or not
            assert best["values"] == [max(trial["values"][0] for trial in complete)]
    finally:
        dashboard.terminate()
        dashboard.communicate(timeout=30)


@pytest.mark.slow
def test_a_postgres_worker_killed_mid_trial_leaves_a_trial_its_heartbeat_fails_and_a_survivor_or_rerun_retries(tmp_path, postgres_url):
    # (The journal's heartbeats: test_a_journal_trial_whose_heartbeat_stops_is_failed_and_retried.)
    storage = postgres_url
    # Trials of 40 epochs (a few seconds each) leave time to kill a worker while it trains.
    spec = sweep_spec(tmp_path, grid={"world_sizes": [1]}, training={"per_worker_batch": 16, "epochs": 40},
                      sweep={"trials": 3, "pruner": "none", "heartbeat_seconds": 1, "grace_seconds": 2})
    path = write_spec(tmp_path, spec)
    log = tmp_path / "sweep.out"
    with log.open("w") as output:
        parent = subprocess.Popen([sys.executable, "-m", "lbtrain.cli", "sweep", str(path), "--storage", storage, "--workers", "2"],
                                  cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
    try:
        # Both workers are mid-trial once two trials have been RUNNING for a second (each
        # worker runs one at a time; their heartbeats have started).
        deadline = time.monotonic() + 120
        while sum(state == "RUNNING" and age >= 1.0 for state, age in trial_states(storage, "tiny-w1")) < 2:
            assert parent.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        workers = child_processes(parent.pid)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        assert parent.wait(timeout=300) == 1, log.read_text()[-3000:]
    finally:
        if parent.poll() is None:
            for worker in child_processes(parent.pid):
                os.kill(worker, signal.SIGKILL)
            parent.kill()
            parent.wait()
    assert re.search(r"sweep worker [01] of 2 failed: .*was killed by SIGKILL", log.read_text())
    assert not os.path.exists(f"/proc/{workers[1]}")  # the parent waited for the surviving worker
    beating = open_storage(storage, 1, 2)
    wait_until(lambda: running_trials_are_stale(beating, "tiny-w1"), "the killed trial's heartbeat to go stale")
    result = lbtrain_sweep(path, "--storage", storage, cache=os.environ["XDG_CACHE_HOME"])
    assert result.returncode == 0, result.stderr[-3000:]
    study = optuna.load_study(study_name="tiny-w1", storage=open_storage(storage, 1, 2))
    finished = assert_exactly_finished(study, 3)
    (failed,) = study.get_trials(states=(FAIL,))
    (retry,) = [trial for trial in finished if trial.system_attrs.get("failed_trial") == failed.number]
    assert retry.state == COMPLETE and retry.params == failed.params
    assert (tmp_path / "results" / "tiny" / "sweep_summary.csv").exists()


@pytest.mark.parametrize("objective_end", ["writes to the trial", "returns", "raises"])
def test_a_trial_another_process_finished_meanwhile_keeps_its_state(tmp_path, objective_end):
    """Another process fails a running trial (its heartbeats lapsed, as on a machine too loaded
    to run the heartbeat thread): this process's objective then ends however it ends, and the
    trial stays FAIL with no error of Optuna's reaching the sweep; a real error still does."""
    from lbtrain.studies.storages import run_claimed

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=120)
    study = optuna.create_study(study_name="race", storage=storage)
    trial = claim_trial(study, 4)
    other = optuna.load_study(study_name="race", storage=optuna.storages.RDBStorage(url))

    def objective(running):
        other.tell(running.number, state=optuna.trial.TrialState.FAIL)
        if objective_end == "writes to the trial":
            running.set_user_attr("epochs_run", 3)
        if objective_end == "raises":
            raise RuntimeError("the run crashed")
        return 0.5

    if objective_end == "raises":
        with pytest.raises(RuntimeError, match="the run crashed"):
            run_claimed(study, trial, objective)
    else:
        assert run_claimed(study, trial, objective).state == optuna.trial.TrialState.FAIL
    assert other.get_trials()[trial.number].state == optuna.trial.TrialState.FAIL


def test_a_ctrl_c_whose_fail_a_locked_database_refuses_is_failed_by_fail_claimed_trials(tmp_path):
    """Ctrl-C in a trial while another process holds the SQLite file locked: the FAIL written at
    once is refused (the storage waits 0.1 s for the lock), the trial stays claimed, and
    ``fail_claimed_trials`` (what ``lbtrain sweep`` runs on Ctrl-C) fails it once the lock is gone."""
    import sqlite3

    from lbtrain.studies.storages import fail_claimed_trials, run_claimed

    path = tmp_path / "optuna.db"
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}", engine_kwargs={"connect_args": {"timeout": 0.1}})
    study = optuna.create_study(study_name="interrupted", storage=storage)
    trial = claim_trial(study, 2)
    locker = sqlite3.connect(path, timeout=0.1, isolation_level=None)

    def objective(running):
        locker.execute("BEGIN EXCLUSIVE")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_claimed(study, trial, objective)
    locker.execute("ROLLBACK")
    assert study.get_trials()[trial.number].state == optuna.trial.TrialState.RUNNING
    fail_claimed_trials()
    assert study.get_trials()[trial.number].state == optuna.trial.TrialState.FAIL
    locker.close()


def test_a_ctrl_c_just_after_the_storage_took_the_trial_leaves_it_claimed_and_failed(tmp_path, monkeypatch, request):
    """Ctrl-C the instant the storage has written a trial RUNNING, before the claim is recorded
    (when CI's Ctrl-C test polls the database, its SIGINT lands there): the interrupt waits for
    the claim, so ``fail_claimed_trials`` fails the trial instead of leaving it RUNNING."""
    from lbtrain.studies import storages

    taken = storages._pop

    def pop_then_ctrl_c(storage, trial_id):
        popped = taken(storage, trial_id)
        signal.raise_signal(signal.SIGINT)
        return popped

    monkeypatch.setattr(storages, "_pop", pop_then_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in lbtrain (a pytest-xdist worker ignores SIGINT)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    study = optuna.create_study(study_name="interrupted", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    with pytest.raises(KeyboardInterrupt):
        claim_trial(study, 2)
    assert [trial.state for trial in study.get_trials()] == [optuna.trial.TrialState.RUNNING]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    storages.fail_claimed_trials()
    assert [trial.state for trial in study.get_trials()] == [optuna.trial.TrialState.FAIL]


def test_a_ctrl_c_mid_query_leaves_a_session_fail_claimed_trials_recovers_from(tmp_path):
    """Ctrl-C in the middle of a query (the trial's pruning reports one each epoch) leaves this
    thread's SQLAlchemy session in a transaction whose connection is gone; the next call on it
    fails and rolls it back. fail_claimed_trials tries again, so the trial is failed, not left
    RUNNING (CI's Ctrl-C test saw ['RUNNING'] with one worker)."""
    from lbtrain.studies.storages import fail_claimed_trials

    study = optuna.create_study(study_name="interrupted", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    claim_trial(study, 2)
    study._storage._backend.scoped_session().connection().invalidate()  # as a query cut short leaves it
    fail_claimed_trials()
    assert [trial.state for trial in study.get_trials()] == [optuna.trial.TrialState.FAIL]


# Damaged and failing storages: one line naming the file and how to recover, nothing else touched.

def tiny_sweep(tmp_path, trials: int = 1):
    """A one-world-size sweep spec of ``trials`` one-epoch trials; its path."""
    return write_spec(tmp_path, sweep_spec(tmp_path, grid={"world_sizes": [1]}, sweep={"trials": trials, "pruner": "none"},
                                           training={"per_worker_batch": 16, "epochs": 1}))


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """A sweep of one finished trial, in SQLite and in a journal file: the bytes of both, and the
    dataset cache it filled (which the tests share)."""
    tmp = tmp_path_factory.mktemp("finished")
    path, journal = tiny_sweep(tmp), tmp / "sweep.log"
    for storage in (f"sqlite:///{tmp / 'optuna.db'}", f"journal://{journal}"):
        result = lbtrain_sweep(path, "--storage", storage, cache=tmp / "cache")
        assert result.returncode == 0, result.stderr[-2000:]
    return {"sqlite": (tmp / "optuna.db").read_bytes(), "journal": journal.read_bytes(), "cache": tmp / "cache"}


def sweep_here(lbtrain_here, monkeypatch, path, *args, cache) -> subprocess.CompletedProcess:
    """``lbtrain sweep PATH ARGS`` in this test's process (``lbtrain_here``) with the dataset cache
    ``cache``: for a storage refused before any trial starts."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return lbtrain_here("sweep", str(path), *args)


def one_line(result, code: int) -> str:
    assert result.returncode == code and "Traceback" not in result.stderr, result.stderr[-3000:]
    [line] = stderr_lines(result.stderr)
    assert len(line) <= 300  # lbtrain.cli.MAX_ERROR_LENGTH
    return line


@pytest.mark.parametrize("damage", ["garbage header", "truncated"])
def test_a_damaged_sqlite_file_is_one_line_naming_it_and_is_kept(tmp_path, finished_sweep, damage, lbtrain_here, monkeypatch):
    results = tmp_path / "results" / "tiny"
    results.mkdir(parents=True)
    database = results / "optuna.db"
    database.write_bytes(os.urandom(4096) if damage == "garbage header" else finished_sweep["sqlite"][:20000])
    damaged = database.read_bytes()
    outside = tmp_path / "notes.txt"
    outside.write_text("mine")
    line = one_line(sweep_here(lbtrain_here, monkeypatch, tiny_sweep(tmp_path), cache=finished_sweep["cache"]), 2)
    assert line.startswith(f"lbtrain: error: storage 'sqlite:///{database}' ")  # past 300 characters the middle is cut
    assert line.endswith("is damaged: move it aside (to optuna.db.damaged) and rerun to start its studies over, or restore it "
                         "from a backup")
    assert database.read_bytes() == damaged and outside.read_text() == "mine"
    assert sorted(path.name for path in results.iterdir()) == ["optuna.db", "owner.json"]


def test_a_storage_url_naming_a_file_that_is_no_database_is_one_line_and_the_file_is_kept(tmp_path, finished_sweep, lbtrain_here,
                                                                                        monkeypatch):
    other = tmp_path / "elsewhere" / "some.yaml"
    other.parent.mkdir()
    other.write_text("name: mine\n")
    line = one_line(sweep_here(lbtrain_here, monkeypatch, tiny_sweep(tmp_path), "--storage", f"sqlite:///{other}",
                               cache=finished_sweep["cache"]), 2)
    assert line.startswith(f"lbtrain: error: storage 'sqlite:///{other}' ")  # past 300 characters the middle is cut
    assert line.endswith("move it aside (to some.yaml.damaged) and rerun to start its studies over, or restore it from a backup")
    assert other.read_text() == "name: mine\n" and os.listdir(other.parent) == ["some.yaml"]
    assert not (tmp_path / "results").exists()


def test_a_journal_whose_last_line_is_torn_is_one_line_saying_how_to_cut_it_and_the_rerun_resumes(tmp_path, tmp_path_factory, finished_sweep,
                                                                                                  lbtrain_here, monkeypatch):
    # A short folder: the message names the journal twice, and past lbtrain.cli.MAX_ERROR_LENGTH
    # (as under this test's own, longer tmp_path with pytest-xdist) the CLI elides its middle (the
    # command, near the end, stays).
    journal = tmp_path_factory.mktemp("torn") / "sweep.log"
    whole = finished_sweep["journal"]
    journal.write_bytes(whole + whole.splitlines(keepends=True)[-1][:40])  # a line cut short, as a kill leaves one
    torn = journal.read_bytes()
    path = tiny_sweep(tmp_path, trials=2)
    line = one_line(sweep_here(lbtrain_here, monkeypatch, path, "--storage", f"journal://{journal}", cache=finished_sweep["cache"]), 2)
    assert line == "lbtrain: error: " + cli_one_line(
        f"storage 'journal://{journal}' cannot be opened: its last line is torn (a writer was killed or the disk filled): "
        f"move it aside or restore a backup to start over, or keep the trials before it (truncate -s {len(whole)} {journal}), "
        "then rerun")
    assert journal.read_bytes() == torn
    os.truncate(journal, len(whole))
    rerun = lbtrain_sweep(path, "--storage", f"journal://{journal}", cache=finished_sweep["cache"])
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    assert [trial.state for trial in optuna.load_study(study_name="tiny-w1", storage=storage).trials] == [COMPLETE, COMPLETE]


def test_a_journal_with_a_damaged_line_inside_is_one_line_naming_it(tmp_path, finished_sweep, lbtrain_here, monkeypatch):
    journal = tmp_path / "sweep.log"
    lines = finished_sweep["journal"].splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:-1]) + lines[-1][:40] + b"\n" + lines[-1])  # a torn line written over
    damaged = journal.read_bytes()
    line = one_line(sweep_here(lbtrain_here, monkeypatch, tiny_sweep(tmp_path, trials=2), "--storage", f"journal://{journal}",
                               cache=finished_sweep["cache"]), 2)
    assert line.startswith(f"lbtrain: error: storage 'journal://{journal}' ")  # past 300 characters the middle is cut
    assert line.endswith("move it aside (to sweep.log.damaged) and rerun to start its studies over, or restore it "
                         "from a backup")
    assert journal.read_bytes() == damaged


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_disk_that_fills_up_mid_sweep_is_one_line_exit_1_and_the_finished_trials_are_kept(tmp_path, finished_sweep, workers):
    """A real full disk for one process and the workers it starts: their files may not grow
    past 6000 bytes (RLIMIT_FSIZE; Python ignores SIGXFSZ, so a write past it fails), which
    SQLite's rollback journal needs. Two workers meeting it make one line, not two."""
    import resource

    results = tmp_path / "results" / "tiny"
    results.mkdir(parents=True)
    database = results / "optuna.db"
    database.write_bytes(finished_sweep["sqlite"])

    def full_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))

    result = subprocess.run([sys.executable, "-m", "lbtrain.cli", "-q", "sweep", str(tiny_sweep(tmp_path, trials=3)),
                             "--workers", workers],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, preexec_fn=full_disk,
                            env={**os.environ, "XDG_CACHE_HOME": str(finished_sweep["cache"])})
    failure = (f"storage 'sqlite:///{database}' failed while in use (OperationalError: disk I/O error); free space on its "
               "disk (or make it writable) and rerun: the finished trials are kept")
    if workers == "1":
        assert one_line(result, 1) == f"lbtrain: error: {cli_one_line(failure)}"
    else:
        which = ("sweep worker 0", "sweep worker 1", "sweep workers 0, 1")
        assert one_line(result, 1) in [f"lbtrain: error: {cli_one_line(f'{who} of 2 failed: {failure}')}" for who in which]
    study = optuna.load_study(study_name="tiny-w1", storage=f"sqlite:///{database}")
    assert [trial.state for trial in study.trials][0] == COMPLETE
