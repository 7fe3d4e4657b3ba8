"""Shared test set-up: quiet TensorFlow, a private cache dir, the fixtures and collection hooks.
The plain helpers that tests import by name are in helpers.py."""

import contextlib
import json
import os
import socket
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from helpers import JOB_FOLDER, SHARED_HOROVOD_JOBS, horovod_installed, run_horovod


def _one_intra_op_thread_per_xdist_worker() -> None:
    """Under pytest-xdist with several workers (``make test``: one per core), each worker's
    TensorFlow computes an op on one thread: the workers already fill the cores, and a pool of
    one thread per core in each of them oversubscribes the cores, where a test of many small
    steps waits on descheduled threads (measured: 60 steps of a tiny model, 0.6 s alone, took
    58 s beside another worker). The inter-op pool keeps its default: ops that wait on each
    other (collectives, tf.data) need more than one thread. Subprocesses (``lbtrain`` commands,
    ``horovodrun`` jobs) choose their own threads."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)


_one_intra_op_thread_per_xdist_worker()
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # The workers already fill the cores: lbtrain run trains a grid's runs one at a time in each
    # (a second run process would cost its TensorFlow import, seconds, for a grid of tiny runs).
    # Tests of parallel runs pass workers themselves.
    os.environ.setdefault("LBTRAIN_WORKERS", "1")


# Tests whose behaviour does not depend on the Keras version run on the main stack only (TF 2.15,
# tf.keras 2): on the Keras 3 stack they would repeat the same checks (make test runs both). Each
# key is a folder, a file or one test (the start of its node id), with the reason the second
# stack adds nothing; what Keras 3 changes (models, layers, optimizers,
# saving, schedules, the trainer, the worlds, the runner's checkpoints, sweeps and runs end to end,
# Ctrl-C with JAX's callbacks) runs on both.
MAIN_STACK_ONLY = {
    "tests/reports/": "reports, tables and statistics read results files; no Keras in what they check",
    "tests/cli/test_report_command.py": "lbtrain report's arguments: files in, text out",
    "tests/studies/test_storages.py": "Optuna storages (SQLite, journal, PostgreSQL), their damage and the claiming of trials",
    "tests/studies/test_protocol.py": "the tuning protocol's planning, seeds and tables (its trials train as any sweep's)",
    "tests/studies/test_search.py": "the log2 grid and TPE settings of the protocol's search",
    "tests/config/": "YAML limits and number checks, before any model exists",
    "tests/test_experiments.py": "the committed experiments' YAML and the tuning results they were built on",
    "tests/studies/test_sweep.py::test_resume_after_sigkill_fails_the_stale_trial_and_completes_the_study":
        "a killed worker's stale trial failed by the storage's heartbeat, and the study topped up: Optuna's storage, not Keras",
    "tests/studies/test_sweep.py::test_two_workers_share_one_study": "two workers claiming the trials of one Optuna storage",
    "tests/cli/test_cli.py::test_a_storage_that_cannot_be_opened_is_one_line": "a storage URL refused before any model is built",
    "tests/cli/test_cli.py::test_train_refuses_a_run_dir_that_is_a_file_and_threads_far_above_the_cores":
        "lbtrain train's arguments refused before any model is built",
    "tests/lab/": "this repository's studies (results page, advisor validation, performance table, elasticity section) "
                  "rendered from their files (the simulated elastic runs rendered: tests/test_elastic.py, on both stacks)",
    "tests/bench/test_bench.py::test_a_tiny_matrix_writes_a_csv_json_and_plot_with_positive_throughput":
        "the bench's matrix of worlds, its CSV, JSON and plot (a model is benchmarked on Keras 3 by "
        "tests/bench/test_bench_own_model.py's registered name, on both stacks)",
    "tests/bench/test_bench_own_model.py::test_a_step_cheaper_than_its_input_pipeline_is_labelled_input_bound":
        "the bench's label from the input pipeline's images/s against the step's (tf.data), not Keras",
    "tests/bench/test_bench_own_model.py::test_a_model_by_reference_is_benchmarked_from_the_users_folder":
        "a reference found from the user's folder, and the bench's CSV, JSON, plot and table (a user's model is "
        "benchmarked on both stacks by its registered name)",
    "tests/bench/test_bench_own_model.py::test_from_python_a_factory_is_benchmarked_by_its_reference":
        "a factory passed from Python turned into the reference its child processes import",
    "tests/studies/test_runner.py::test_run_writes_every_run_and_a_summary_then_skips_finished_runs":
        "the runner's bookkeeping: a summary of the runs' files, finished runs skipped",
    "tests/studies/test_runner.py::test_a_run_whose_configuration_another_label_finished_is_copied_not_trained_again":
        "the runner's bookkeeping: a finished twin's files copied",
    "tests/studies/test_runner.py::test_fresh_deletes_previous_runs": "the runner's bookkeeping: --fresh deletes the runs' folders",
    "tests/studies/test_runner.py::test_a_damaged_metrics_file_is_a_warning_and_its_run_trained_again":
        "the runner's bookkeeping: a damaged metrics.json found and its run queued again",
    "tests/studies/test_runner.py::test_a_rerun_with_another_grid_says_in_one_warning_which_earlier_runs_its_summary_leaves_out":
        "the runner's bookkeeping: the summary's warning about earlier runs",
    "tests/studies/test_runner.py::test_a_copy_replaces_what_an_interrupted_attempt_left_and_a_damaged_twin_is_not_copied":
        "the runner's bookkeeping: copies of finished twins and what an interrupted copy left",
    "tests/cli/test_cli.py::test_run_exits_non_zero_when_a_run_failed_and_says_how_many": "lbtrain run's exit code and count of failed runs",
    "tests/cli/test_cli.py::test_ctrl_c_in_sweep_is_one_line_exit_130_and_the_rerun_tops_up[2]":
        "two sweep workers ended by one Ctrl-C and their claimed trials failed: lbtrain's processes and Optuna's storage "
        "(Keras 3's fit interrupted inside a sweep's trial is the one-process case [1], on both stacks)",
    "tests/cli/test_cli.py::test_two_experiments_with_one_name_do_not_share_a_folder": "the results folder's owner, read from its files",
    "tests/studies/test_sweep.py::test_rerun_tops_up_to_the_requested_trials": "the trials an Optuna storage holds, topped up",
    "tests/studies/test_sweep.py::test_a_rerun_draws_new_trials_instead_of_repeating_the_first_ones": "Optuna's sampler seeded per rerun",
    "tests/studies/test_sweep.py::test_a_stale_running_trial_is_failed_even_when_the_study_has_its_trials":
        "a stale trial failed by the storage's heartbeat",
    "tests/models/test_own_model.py::test_lbtrain_sweep_and_advise_take_the_users_model":
        "the user's model found by reference in a sweep and the advisor (it trains on both stacks in lbtrain run's test)",
}


def keras_3() -> bool:
    """Whether this stack's Keras is Keras 3 (the second stack of make test), found without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("keras").split(".")[0]) >= 3
    except PackageNotFoundError:
        return False


def _module_name(item) -> str | None:
    """The name of the test module ``item`` is in; None for a doctest, which has none."""
    module = getattr(item, "module", None)
    return module.__name__ if module is not None else None


def slow_modules_first(items: list) -> None:
    """Reorders ``items`` in place: the modules holding a test marked ``slow`` first, each
    module's tests kept together and in order (its module fixtures are built once). Under
    pytest-xdist (make test runs one worker per core) a long test started last would leave the
    other workers idle while it finishes."""
    slow = {_module_name(item) for item in items if item.get_closest_marker("slow") is not None} - {None}
    items.sort(key=lambda item: _module_name(item) not in slow)


def pytest_collection_modifyitems(config, items):
    """Modules with slow tests first (``slow_modules_first``). On the Keras 3 stack, the tests of
    ``MAIN_STACK_ONLY`` skip, saying why; tests marked ``horovod`` skip, saying why, on a stack
    without Horovod (Keras 3)."""
    slow_modules_first(items)
    if keras_3():
        for item in items:
            # A folder, a file or one test: the start of the test's node id (path::name[params]).
            node = item.nodeid.replace(os.sep, "/")
            reason = next((why for prefix, why in MAIN_STACK_ONLY.items() if node.startswith(prefix)), None)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=f"runs on the TF 2.15 stack only: {reason}"))
    if horovod_installed():
        return
    skip = pytest.mark.skip(reason="needs Horovod, installed only on the TF 2.15 stack (make test's .venv)")
    for item in items:
        if item.get_closest_marker("horovod") is not None:
            item.add_marker(skip)


# The MNIST-1D sizes (``num_samples``, the generator's default seed) the tests train on.
MNIST1D_SIZES = (400, 500, 600, 2600)


@pytest.fixture(scope="session")
def generated_mnist1d(tmp_path_factory) -> list:
    """MNIST-1D at ``MNIST1D_SIZES``: the cache files lbtrain's loader writes, generated once per
    test process and made read-only. Generating one costs a process 0.1 to 0.6 CPU-s (400 to 2,600
    samples) after importing the mnist1d package, and every fresh process of a test (a CLI run,
    each Horovod rank) would otherwise generate it again."""
    from lbtrain.data.datasets import _load_mnist1d

    folder = tmp_path_factory.mktemp("mnist1d")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(folder))
        for num_samples in MNIST1D_SIZES:
            _load_mnist1d(num_samples)
    files = sorted((folder / "lbtrain").glob("mnist1d-*.npz"))
    for path in files:
        path.chmod(0o444)
    return files


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch, generated_mnist1d):
    """Every test gets its own ``$XDG_CACHE_HOME`` so what a test caches never leaks into another.
    It starts with links to the read-only MNIST-1D files of ``generated_mnist1d``, the files
    lbtrain would generate there itself; other sizes and seeds are generated on first use, as
    for a user."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "lbtrain").mkdir()
    for path in generated_mnist1d:
        (cache / "lbtrain" / path.name).symlink_to(path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


@pytest.fixture
def lbtrain_here(monkeypatch, capsys):
    """``lbtrain ARGS`` in this test's process (``lbtrain.cli.main``), from ``cwd`` as a user's
    ``python -m lbtrain.cli`` would run (that folder first on ``sys.path``), returning what
    ``run_cli`` does. For arguments refused before anything trains: a fresh process would spend
    its time importing TensorFlow to say one line. That a real process prints that line with no
    traceback and exits 2 is tests/cli/test_cli.py's. The logger, the unraisable hook and the
    modules first imported from ``cwd`` are put back or dropped afterwards."""
    import logging

    from lbtrain.cli import main
    from lbtrain.logs import LOGGER_NAME

    logger = logging.getLogger(LOGGER_NAME)
    handlers, level = list(logger.handlers), logger.level
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    folders: list[str] = []
    imported_before = set(sys.modules)

    def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
        if cwd is not None:
            monkeypatch.chdir(cwd)
            monkeypatch.syspath_prepend(str(cwd))
            folders.append(str(cwd))
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's refusals
            code = exit.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["lbtrain", *args], code, out, err)

    yield run
    logger.handlers[:], logger.level = handlers, level
    for name in set(sys.modules) - imported_before:
        if any(str(getattr(sys.modules[name], "__file__", None) or "").startswith(folder) for folder in folders):
            del sys.modules[name]


@contextlib.contextmanager
def once_per_session(tmp_path_factory, name: str):
    """The folder ``name`` that all of this session's test processes share (pytest-xdist's
    workers included), held under an exclusive lock: the first to enter makes what it holds,
    the others wait for it and find it made. Yields ``(folder, made)``: ``made`` is whether a
    process already filled the folder (it writes ``folder / "done"`` when it has)."""
    import fcntl

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder; each worker's basetemp is a folder in it
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            folder.mkdir(exist_ok=True)
            yield folder, (folder / "done").exists()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def horovod_jobs(tmp_path_factory, generated_mnist1d):
    """``folder(name)``: the folder of the registered job ``name`` (``shared_horovod_job``) after
    it ran under ``horovodrun -np 2`` with all the registered jobs, one after another in one job,
    once per test session (``once_per_session``). A failed job fails each test that reads it,
    with the job's output."""
    with once_per_session(tmp_path_factory, "horovod_jobs") as (folder, made):
        if not made:
            commands = []
            for index, command in enumerate(SHARED_HOROVOD_JOBS.values()):
                (folder / str(index)).mkdir()
                commands.append([part.replace(JOB_FOLDER, str(folder / str(index))) for part in command])
            cache = folder / "cache"  # the job's own, as a test's (private_cache)
            (cache / "lbtrain").mkdir(parents=True)
            for path in generated_mnist1d:
                (cache / "lbtrain" / path.name).symlink_to(path)
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("XDG_CACHE_HOME", str(cache))
                completed = run_horovod("one_after_another.py", json.dumps(commands), timeout=1800)
            record = {"names": list(SHARED_HOROVOD_JOBS), "returncode": completed.returncode,
                      "output": (completed.stdout + completed.stderr)[-4000:]}
            (folder / "job.json").write_text(json.dumps(record))
            (folder / "done").touch()
        record = json.loads((folder / "job.json").read_text())

    def job_folder(name: str):
        assert record["returncode"] == 0, record["output"]
        return folder / str(record["names"].index(name))

    return job_folder


@pytest.fixture
def two_rank_runs(horovod_jobs):
    """``trained(name)``: the output of the registered run ``name`` (``two_rank_run``), loaded
    (every rank's weights and the run result), and its runs folder (``rank0`` is the only rank's
    folder that may exist)."""
    def trained(name: str) -> tuple:
        folder = horovod_jobs(name)
        return np.load(folder / "weights.npz"), folder / "runs"

    return trained


class PostgresServer:
    """A running throwaway PostgreSQL server: superuser ``postgres`` with ``password``, on
    127.0.0.1:``port`` only (password required over TCP)."""

    def __init__(self, port: int, password: str):
        self.port, self.password, self._databases = port, password, 0

    def url(self, database: str = "postgres", password: str | None = None, driver: str = "postgresql") -> str:
        return f"{driver}://postgres:{self.password if password is None else password}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres"):
        try:
            import psycopg
        except ImportError:
            pytest.fail("psycopg is not installed: pip install -e '.[dev,postgres]' (make test does)")

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", password=self.password,
                               dbname=database, autocommit=True)

    def create_database(self) -> str:
        """A new empty database; returns its name."""
        self._databases += 1
        name = f"lbtrain_{self._databases}"
        with self.connect() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return name


def _postgres_bin_dir() -> str | None:
    """Where initdb and pg_ctl are: the newest Debian server (/usr/lib/postgresql/<v>/bin), else PATH."""
    import glob
    import shutil

    def version(pg_ctl: str) -> int:
        number = pg_ctl.split("/")[4]
        return int(number) if number.isdigit() else 0

    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=version)
    if versions:
        return os.path.dirname(versions[-1])
    pg_ctl = shutil.which("pg_ctl")
    return os.path.dirname(os.path.realpath(pg_ctl)) if pg_ctl and shutil.which("initdb") else None


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server for this test session, in a temporary folder, listening on
    127.0.0.1 at a free port only, stopped and deleted at the end. PostgreSQL refuses to run as
    root: as root (CI) the server runs as the ``postgres`` system user. Skips only when no
    server binary is installed (Debian: apt-get install postgresql)."""
    import pwd
    import secrets
    import shutil
    import socket
    import tempfile

    bin_dir = _postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binary (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH; "
                    "install one (Debian: apt-get install postgresql) to run the PostgreSQL storage tests")
    owner, as_user = None, []
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("running as root, PostgreSQL needs a non-root user to run as, and there is no 'postgres' user")
        as_user = ["runuser", "-u", "postgres", "--"]
    folder = tempfile.mkdtemp(prefix="lbtrain-pg-")  # not under pytest's tmp folders: those are private to root
    password = secrets.token_hex(12)
    password_file = os.path.join(folder, "password")
    with open(password_file, "w") as handle:
        handle.write(password + "\n")
    if owner is not None:
        for path in (folder, password_file):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data, log = os.path.join(folder, "data"), os.path.join(folder, "server.log")
    pg_ctl = [*as_user, os.path.join(bin_dir, "pg_ctl"), "-D", data]
    try:
        initdb = subprocess.run([*as_user, os.path.join(bin_dir, "initdb"), "-D", data, "-U", "postgres", f"--pwfile={password_file}",
                                 "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "--no-locale", "-E", "UTF8"],
                                capture_output=True, text=True, timeout=120)
        if initdb.returncode != 0:
            pytest.fail(f"initdb failed: {initdb.stdout}{initdb.stderr}")
        started = subprocess.run([*pg_ctl, "-l", log, "-w", "-t", "60", "-o",
                                  f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off", "start"],
                                 capture_output=True, text=True, timeout=120)
        if started.returncode != 0:
            server_log = open(log).read() if os.path.exists(log) else ""
            pytest.fail(f"PostgreSQL did not start: {started.stdout}{started.stderr}{server_log[-2000:]}")
        yield PostgresServer(port, password)
    finally:
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            subprocess.run([*pg_ctl, "-m", "fast", "-w", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The ``postgresql://`` URL of a new empty database on the session's server."""
    return postgres_server.url(postgres_server.create_database())


@pytest.fixture
def busy_port():
    """A localhost port held open (bound and listening) while the test runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("localhost", 0))
        busy.listen()
        yield busy.getsockname()[1]
