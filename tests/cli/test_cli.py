"""The command line as a user meets it: bad input is one line on stderr, exit code 2, no
traceback and nothing written under results/."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from helpers import REPO_ROOT, horovod_installed, run_cli, stderr_lines
from lbtrain._keras import KERAS_3
from lbtrain.cli import main, one_line
from lbtrain.results import read_run

GOOD = {
    "name": "cli",
    # Small enough to train in a second, large enough to learn above chance (the verdict's ok).
    "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [16]}},
    "lr": {"base_lr": 0.1, "base_batch": 16},
    "training": {"per_worker_batch": 16, "epochs": 1},
    "grid": {"world_sizes": [1, 2]},
}


def experiment_file(tmp_path, **changes):
    data = {**GOOD, "output_dir": str(tmp_path / "results"), **changes}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def merge(section, **values):
    return {section: {**GOOD.get(section, {}), **values}}


BAD_INPUTS = {
    "missing file": (lambda tmp: [str(tmp / "nope.yaml")], r"nope.yaml: file not found"),
    "invalid yaml": (lambda tmp: [str(_text(tmp, "name: [oops"))], r"exp.yaml: invalid YAML"),
    "unknown key": (lambda tmp: [str(experiment_file(tmp, epochs=3))], r"epochs: unknown key"),
    "wrong type": (lambda tmp: [str(experiment_file(tmp, **merge("training", epochs="two")))], r"training.epochs: Input should be a valid integer \(got 'two'\)"),
    "zero lr": (lambda tmp: [str(experiment_file(tmp, lr={"base_lr": 0}))], r"lr.base_lr: Input should be greater than 0 \(got 0\)"),
    "negative batch": (lambda tmp: [str(experiment_file(tmp, **merge("training", per_worker_batch=-4)))], r"training.per_worker_batch: Input should be greater than 0 \(got -4\)"),
    "unknown rule": (lambda tmp: [str(experiment_file(tmp, lr={"rule": "cube"}))], r"lr.rule: rule must be one of 'linear', 'sqrt', 'none' or a float exponent, got 'cube'"),
    "unknown optimizer": (lambda tmp: [str(experiment_file(tmp, optimizer={"name": "rmsprop"}))], r"optimizer.name: unknown optimizer 'rmsprop' \(allowed: sgd, momentum, adam, lars, lamb\)"),
    "unknown dataset": (lambda tmp: [str(experiment_file(tmp, data={"dataset": "imagenet"}))], r"data.dataset: unknown dataset 'imagenet' \(allowed: fashion_mnist, mnist, mnist1d, synthetic, a registered name, a .npz path, package.module:function or tfds:<name>\)"),
    "unknown model": (lambda tmp: [str(experiment_file(tmp, model={"name": "vgg"}))], r"model.name: unknown model 'vgg' \(allowed: mlp, cnn, resnet, vit, a reference package.module:function, or keras.applications.<Name>\)"),
    "world size zero": (lambda tmp: [str(experiment_file(tmp, grid={"world_sizes": [1, 0]}))], r"training.world_size: Input should be greater than 0 \(got 0\)"),
    "world size fraction": (lambda tmp: [str(experiment_file(tmp, grid={"world_sizes": [2.5]}))], r"training.world_size: Input should be a valid integer \(got 2.5\)"),
    "set unknown path": (lambda tmp: [str(experiment_file(tmp)), "--set", "training.epoch=2"], r"--set training.epoch: no such field"),
    "empty file": (lambda tmp: [str(_text(tmp, "# nothing here\n"))], r"exp.yaml: the file is empty; expected a mapping"),
    "duplicate key": (lambda tmp: [str(_text(tmp, "name: a\ntraining: {epochs: 1}\ntraining: {epochs: 2}\n"))],
                      r"exp.yaml: invalid YAML \(.*duplicate key 'training'"),
    "binary file": (lambda tmp: [str(_bytes(tmp, b"\x00\x01name: x"))], r"exp.yaml: a binary file, not YAML"),
    "not utf-8": (lambda tmp: [str(_bytes(tmp, "name: caf\u00e9".encode("latin-1")))], r"exp.yaml: not UTF-8 text \(byte 9\)"),
    "two budgets": (lambda tmp: [str(experiment_file(tmp, **merge("training", steps=10)))],
                    r"training: give one budget, epochs, steps or samples, not epochs=1 and steps=10"),
    "labels alike": (lambda tmp: [str(experiment_file(tmp, grid={"variants": [{"label": "a b", "lr.rule": "none"},
                                                                               {"label": "A-B", "lr.rule": "sqrt"}]}))],
                     r"grid.variants\[1\].label 'A-B' is the same recipe name as grid.variants\[0\].label 'a b'"),
    # Once an abort inside oneDNN (exit 134) that took the whole grid down.
    "impossible model option": (lambda tmp: [str(experiment_file(tmp, model={"name": "mlp", "options": {"widths": [0]}}))],
                                r"model.options: widths must be a list of at most 64 positive integers, got \[0\]"),
    "model option typo": (lambda tmp: [str(experiment_file(tmp, model={"name": "mlp", "options": {"widht": [8]}}))],
                          r"model.options: unknown option 'widht' for model 'mlp' \(did you mean 'widths'\? allowed: widths, "),
    "option of another model": (lambda tmp: [str(experiment_file(tmp, grid={"variants": [{"label": "cnn", "model.name": "cnn"}]}))],
                                r"model.options: unknown option 'widths' for model 'cnn'.*\(grid point cnn\)$"),
    "data option typo": (lambda tmp: [str(experiment_file(tmp, **merge("data", options={"num_sample": 500})))],
                         r"data.options: unknown option 'num_sample' for dataset 'mnist1d' \(did you mean 'num_samples'\?"),
    "subset larger than the data": (lambda tmp: [str(experiment_file(tmp, **merge("data", train_subset=100000)))],
                                    r"train_subset must be an integer in \[1, 400\] for mnist1d, got 100000 \(run base, world size 1\)"),
    "absurd world size": (lambda tmp: [str(experiment_file(tmp, grid={"world_sizes": [1, 100000]}))],
                          r"256 training samples are fewer than one global batch \(100000 workers x 16\).*\(run base, world size 100000\)"),
}


def _text(tmp, content):
    path = tmp / "exp.yaml"
    path.write_text(content)
    return path


def _bytes(tmp, content):
    path = tmp / "exp.yaml"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, case):
    arguments, message = BAD_INPUTS[case]
    assert main(["run", *arguments(tmp_path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lbtrain: error: "), captured.err
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "results").exists()


def test_mode_horovod_without_horovodrun_is_a_clear_error(tmp_path, capsys, monkeypatch):
    launcher = str(tmp_path / "no-such-launcher")
    monkeypatch.setenv("HOROVODRUN", launcher)
    assert main(["run", str(experiment_file(tmp_path, mode="horovod"))]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lbtrain: error: mode: horovod: $HOROVODRUN is {launcher!r}, which is not a file or command (use mode: simulated)")
    assert not (tmp_path / "results").exists()


def test_mode_horovod_on_a_stack_without_horovod_names_the_fix_before_anything_trains(tmp_path, lbtrain_here):
    """On Keras 3 (TensorFlow 2.16+) Horovod cannot run at all; on TensorFlow 2.15 this venv has it."""
    if horovod_installed():
        pytest.skip("this stack has Horovod")
    completed = lbtrain_here("run", str(experiment_file(tmp_path, mode="horovod")))
    assert completed.returncode == 2, completed.stderr[-2000:]
    lines = stderr_lines(completed.stderr)
    assert len(lines) == 1 and lines[0].startswith("lbtrain: error: mode: horovod: "), completed.stderr
    if KERAS_3:
        assert "Horovod runs on TensorFlow 2.15 only" in lines[0]
    assert "pip install tensorflow-cpu==2.15.1" in lines[0] and "'lbtrain[horovod]'" in lines[0]
    assert "use mode: simulated" in lines[0]
    assert not (tmp_path / "results").exists()


def test_a_real_process_shows_no_traceback(tmp_path):
    result = run_cli("run", str(experiment_file(tmp_path, lr={"rule": "cube"})))
    assert result.returncode == 2
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("lbtrain: error: lr.rule:") and "Traceback" not in result.stderr


def test_dry_run_lists_runs_and_writes_nothing(tmp_path, capsys):
    assert main(["run", str(experiment_file(tmp_path)), "--dry-run", "--set", "grid.seeds=[0, 1]"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"cli: 4 runs (simulated) -> {tmp_path / 'results' / 'cli'}"
    assert len(out) == 6 and "world 2 x 16" in out[-2] and out[-1].startswith("price: about ")
    assert not (tmp_path / "results").exists()


def test_a_dry_run_prices_runs_that_stop_at_a_target_at_most(tmp_path, capsys):
    assert main(["run", str(experiment_file(tmp_path)), "--dry-run", "--set", "training.stop_at.train_loss=0.5"]) == 0
    price = capsys.readouterr().out.splitlines()[-1]
    assert price.startswith("price: at most about ") and "(2 runs stop at a target, each priced at its whole budget" in price
    assert not (tmp_path / "results").exists()


def test_run_logs_progress_and_prints_the_summary_table(tmp_path, capsys):
    assert main(["run", str(experiment_file(tmp_path))]) == 0
    captured = capsys.readouterr()
    assert "lbtrain: [1/2] base w1 x 16 seed 0: ok" in captured.err and "lbtrain: [2/2] base w2 x 16 seed 0: ok" in captured.err
    assert captured.out.startswith("world  batch recipe") and "[1/2]" not in captured.out
    assert (tmp_path / "results" / "cli" / "summary.csv").is_file()


def test_train_command_writes_the_run_directory(tmp_path, capsys):
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({key: GOOD[key] for key in ("data", "model", "lr", "training")}))
    assert main(["train", str(run), "--run-dir", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out.startswith("ok: world 1 x 16 = batch 16")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoints", "config.yaml", "history.csv", "metrics.json"]


@pytest.mark.parametrize("arguments, message", [
    (["--trials", "0"], "argument --trials: expected a whole number >= 1, got 0"),
    (["--trials", "-1"], "argument --trials: expected a whole number >= 1, got -1"),
    (["--workers", "0"], "argument --workers: expected a whole number >= 1, got 0"),
    (["--workers", "two"], "argument --workers: expected a whole number >= 1, got 'two'"),
])
def test_sweep_counts_must_be_positive(tmp_path, arguments, message):
    result = run_cli("sweep", str(experiment_file(tmp_path)), *arguments)
    assert result.returncode == 2
    assert stderr_lines(result.stderr) == [f"lbtrain: error: {message}"]
    assert not (tmp_path / "results").exists()


def test_scientific_notation_reads_as_a_number(tmp_path):
    spec = {key: value for key, value in GOOD.items() if key != "lr"}
    path = _text(tmp_path, yaml.safe_dump({**spec, "output_dir": str(tmp_path / "results")}) + "lr: {base_lr: 1e-1}\n")
    from lbtrain.config import load_experiment

    assert load_experiment(path).lr == {"base_lr": 0.1}


def test_run_exits_non_zero_when_a_run_failed_and_says_how_many(tmp_path, capsys):
    # Passes every check, then raises after training: a sharpness subspace larger than the model.
    spec = experiment_file(tmp_path, grid={"world_sizes": [1], "variants": [
        {"label": "fine"}, {"label": "fails", "analysis.sharpness": True, "analysis.sharpness_subspace": 10**9}]})
    assert main(["run", str(spec)]) == 1
    captured = capsys.readouterr()
    assert "fine w1 x 16 seed 0: ok" in captured.err and "fails w1 x 16 seed 0: failed" in captured.err
    assert stderr_lines(captured.err)[-1].startswith("lbtrain: warning: 1 of 2 runs failed (reasons in ")


def test_a_file_where_the_results_folder_should_be_is_refused_and_kept(tmp_path, capsys):
    (tmp_path / "results").write_text("my notes\n")
    assert main(["run", str(experiment_file(tmp_path))]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lbtrain: error: {tmp_path / 'results' / 'cli'}: a file is where the results folder should be (set output_dir or name)")
    assert (tmp_path / "results").read_text() == "my notes\n"


def test_a_results_folder_that_cannot_be_created_is_one_line(tmp_path, capsys):
    # /proc refuses new folders even to root, who can write anywhere else.
    assert main(["run", str(experiment_file(tmp_path, output_dir="/proc/lbtrain-results"))]) == 2
    assert capsys.readouterr().err.strip().startswith(
        "lbtrain: error: /proc/lbtrain-results/cli: cannot create the results folder (")


def test_two_experiments_with_one_name_do_not_share_a_folder(tmp_path, capsys):
    first = experiment_file(tmp_path)
    assert main(["run", str(first)]) == 0
    runs = sorted(p.name for p in (tmp_path / "results" / "cli" / "runs").iterdir())
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**GOOD, "output_dir": str(tmp_path / "results"), "lr": {"base_lr": 0.2, "base_batch": 16}}))
    capsys.readouterr()
    for arguments in ([], ["--fresh"]):
        assert main(["run", str(other), *arguments]) == 2
        assert capsys.readouterr().err.strip() == (
            f"lbtrain: error: {tmp_path / 'results' / 'cli'} holds experiment 'cli' from {first}, configured otherwise: give "
            "this one another name or output_dir")
    assert sorted(p.name for p in (tmp_path / "results" / "cli" / "runs").iterdir()) == runs
    # The same experiment from another file agrees with the folder's: it may resume it.
    copy = tmp_path / "copy.yaml"
    copy.write_text(first.read_text())
    assert main(["run", str(copy)]) == 0
    assert capsys.readouterr().err.count("done before, skipped") == len(runs)


def test_a_second_process_on_a_running_experiment_is_refused(tmp_path, capsys):
    from lbtrain.results import folder_lock

    folder = tmp_path / "results" / "cli"
    folder.mkdir(parents=True)
    with folder_lock(folder, "cli"):
        assert main(["run", str(experiment_file(tmp_path))]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lbtrain: error: experiment 'cli' is already running in {folder} (process {os.getpid()}); wait for it or stop it")
    assert not (folder / "runs").exists()


@pytest.mark.parametrize("storage, message", [
    ("not-a-url", r"storage 'not-a-url' cannot be opened \(ArgumentError: "),
    ("sqlite:////proc/lbtrain/optuna.db", r"storage 'sqlite:////proc/lbtrain/optuna.db' cannot be opened \("),
])
def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path, storage, message, lbtrain_here):
    spec = experiment_file(tmp_path, **merge("data", validation_split=0.25),
                           search={"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.1}})
    result = lbtrain_here("sweep", str(spec), "--storage", storage)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1 and re.search(message, lines[0]), result.stderr


def test_sweep_workers_are_capped_by_trials_and_cores(tmp_path, capsys):
    import os

    from lbtrain.cli import main

    path = tmp_path / "s.yaml"
    path.write_text("name: s\noutput_dir: " + str(tmp_path / "out") + "\ndata: {dataset: synthetic, validation_split: 0.2}\n"
                    "search: {lr.base_lr: {type: float, low: 0.01, high: 0.1, log: true}}\nsweep: {trials: 4}\n")
    assert main(["sweep", str(path), "--workers", "5"]) == 2
    assert capsys.readouterr().err.strip() == "lbtrain: error: --workers 5 is more than the 4 trials per study: at most 4"
    cap = 4 * os.cpu_count()
    assert main(["sweep", str(path), "--workers", str(cap + 1), "--trials", str(cap + 1)]) == 2
    assert f"is more than 4 per core ({cap} on this machine); add --force-workers" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _children(pid: int) -> list[int]:
    """The ids of the processes ``pid`` started (Linux)."""
    return [int(child) for task in os.listdir(f"/proc/{pid}/task")
            for child in open(f"/proc/{pid}/task/{task}/children").read().split()]


def _default_sigint() -> None:
    """A child's ``preexec_fn``: SIGINT's default action, as a command typed at a terminal has
    (pytest run in the background of a non-interactive shell ignores SIGINT, and an ignored
    signal stays ignored across exec; lbtrain, rightly, keeps it so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_when(command: list[str], started, timeout: float = 120) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Starts ``lbtrain COMMAND`` in its own session, waits until ``started()``, then sends
    SIGINT to its whole process group, as Ctrl-C in a terminal does; returns how it ended and
    the processes it had started. The command starts with SIGINT's default action (``_default_sigint``)."""
    process = subprocess.Popen([sys.executable, "-m", "lbtrain.cli", *command], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + timeout
    while not started() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    children = _children(process.pid) if process.poll() is None else []
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=180)  # ending takes seconds; minutes on a machine loaded tenfold
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), children


INTERRUPTED = "lbtrain: interrupted; rerun the same command to resume"


# A command whose work logs through other libraries' loggers, as SQLAlchemy does when Ctrl-C
# lands in a sweep worker's query: before the interrupt its records print, after it only lbtrain's.
LOGGING_COMMAND = """
import logging, os, signal, sys
import lbtrain.cli

def command(args):
    logging.getLogger("sqlalchemy.pool.impl.QueuePool").error("before the interrupt")
    try:
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()
    finally:
        try:
            raise ValueError("the cursor is gone")
        except ValueError:
            logging.getLogger("sqlalchemy.pool.impl.QueuePool").error("Error closing cursor", exc_info=True)
        logging.getLogger("lbtrain.studies").warning("lbtrain's own record")

lbtrain.cli.datasets.run = command
code = lbtrain.cli.main(["datasets"])
print("default SIGINT handler restored:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
sys.exit(code)
"""


def test_ctrl_c_silences_other_libraries_logs_but_not_lbtrains_and_restores_the_handler():
    completed = subprocess.run([sys.executable, "-c", LOGGING_COMMAND], capture_output=True, text=True, timeout=120,
                               preexec_fn=_default_sigint)
    assert completed.returncode == 130
    lines = stderr_lines(completed.stderr)
    assert lines[0] == "before the interrupt" and lines[-1] == "lbtrain: interrupted; rerun the same command to resume"
    assert "Error closing cursor" not in completed.stderr and "Traceback" not in completed.stderr
    assert len(lines) == 3 and lines[1].endswith("lbtrain's own record"), lines
    assert completed.stdout == "default SIGINT handler restored: True\n"


# Ctrl-C inside TensorFlow's native code that calls back into Python: the KeyboardInterrupt comes
# out as another error (here nest.flatten's RuntimeError; a bare TypeError when Keras builds a metric).
CONVERTED_INTERRUPT_COMMAND = """
import collections.abc, os, signal, sys
import tensorflow as tf
import lbtrain.cli

class Interrupted(collections.abc.Mapping):
    def __getitem__(self, key):
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()
    def __iter__(self):
        return iter(["key"])
    def __len__(self):
        return 1

def command(args):
    try:
        tf.nest.flatten(Interrupted())
    except BaseException as error:
        print("raised", type(error).__name__)
        raise

lbtrain.cli.datasets.run = command
sys.exit(lbtrain.cli.main(["datasets"]))
"""


def test_ctrl_c_that_native_code_turns_into_another_error_is_still_one_line_exit_130():
    completed = subprocess.run([sys.executable, "-c", CONVERTED_INTERRUPT_COMMAND], capture_output=True, text=True,
                               timeout=120, preexec_fn=_default_sigint)
    assert completed.stdout == "raised RuntimeError\n"  # not a KeyboardInterrupt
    assert completed.returncode == 130, completed.stderr[-2000:]
    assert stderr_lines(completed.stderr) == [INTERRUPTED]

@pytest.mark.slow
def test_ctrl_c_in_run_is_one_line_exit_130_and_the_rerun_resumes(tmp_path):
    # One run of 150 epochs (about ten seconds): long enough that a starved test process still
    # interrupts it mid-way, after its first checkpoint.
    path = experiment_file(tmp_path, **merge("training", epochs=150), grid={"world_sizes": [1]})
    outside = tmp_path / "notes.txt"
    outside.write_text("mine\n")
    runs = tmp_path / "results" / "cli" / "runs"
    interrupted, children = _interrupt_when(["-q", "run", str(path)], lambda: any(runs.glob("*/checkpoints/checkpoint")))
    assert interrupted.returncode == 130, interrupted.stderr[-2000:]
    assert stderr_lines(interrupted.stderr) == [INTERRUPTED]
    assert children and not any(os.path.exists(f"/proc/{child}") for child in children)  # the run's process ended too
    assert not any(runs.glob("*/metrics.json"))
    resumed = run_cli("-v", "run", str(path))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming after epoch" in resumed.stderr and "Traceback" not in resumed.stderr
    assert [len(read_run(run).history) for run in sorted(runs.iterdir())] == [150]
    assert outside.read_text() == "mine\n"


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_in_sweep_is_one_line_exit_130_and_the_rerun_tops_up(tmp_path, workers):
    import sqlite3

    path = experiment_file(tmp_path, **merge("data", validation_split=0.25), **merge("training", epochs=1000),
                           grid={"world_sizes": [1]}, search={"lr.base_lr": {"type": "float", "low": 0.01, "high": 0.1}},
                           sweep={"trials": 2, "pruner": "none"})
    database = tmp_path / "results" / "cli" / "optuna.db"

    def training() -> bool:
        if not database.exists():
            return False
        try:
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
                return bool(connection.execute("select 1 from trials where state = 'RUNNING'").fetchall())
        except sqlite3.Error:  # its tables are being created
            return False

    interrupted, children = _interrupt_when(["-q", "sweep", str(path), "--workers", workers], training)
    assert interrupted.returncode == 130, interrupted.stderr[-2000:]
    assert stderr_lines(interrupted.stderr) == [INTERRUPTED]
    assert not any(os.path.exists(f"/proc/{child}") for child in children)  # its workers ended too
    with sqlite3.connect(database) as connection:  # interrupted trials failed at once: the rerun need not wait for them
        states = [state for (state,) in connection.execute("select state from trials")]
    assert "FAIL" in states and "RUNNING" not in states
    finished = run_cli("-q", "sweep", str(path), "--set", "training.epochs=1", "--workers", workers)
    assert finished.returncode == 0, finished.stderr[-2000:]
    with sqlite3.connect(database) as connection:
        states = [state for (state,) in connection.execute("select state from trials")]
    assert states.count("COMPLETE") == 2, finished.stderr


def test_a_damaged_experiment_record_with_a_new_config_of_the_same_name_is_one_line(tmp_path, capsys):
    from lbtrain.results import claim_folder

    folder = tmp_path / "results" / "cli"
    first = experiment_file(tmp_path)
    claim_folder(folder, "cli", str(first), {"name": "cli"})
    (folder / "experiment.yaml").write_text("name: cli\ntraining: {epochs: [1, 2\n")  # cut short, as a full disk leaves it
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    other = tmp_path / "other.yaml"
    other.write_text(first.read_text())
    assert main(["run", str(other)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == "lbtrain: error: " + one_line(f"{folder / 'experiment.yaml'} is damaged (ParserError): rerun {first}, which "
                                                 "owns the folder, to write it again, or give this experiment another name or "
                                                 "output_dir")
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before


def test_train_refuses_a_run_dir_that_is_a_file_and_threads_far_above_the_cores(tmp_path, lbtrain_here):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({key: GOOD[key] for key in ("data", "model", "lr")} | {"training": GOOD["training"]}))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    cap = 8 * os.cpu_count()
    for arguments, message in [
        (["--run-dir", str(notes)], f"--run-dir {notes}: a file, not a folder; give a folder (new, or one of an earlier run)"),
        (["--run-dir", str(notes / "run")],
         f"--run-dir {notes / 'run'}: a file, not a folder ({notes} is); give a folder (new, or one of an earlier run)"),
        (["--threads", "100000"], f"--threads 100000 is more than 8 per core ({cap} on this machine); add --force-threads to use them anyway"),
    ]:
        result = lbtrain_here("train", str(config), *arguments)
        assert result.returncode == 2 and stderr_lines(result.stderr) == [f"lbtrain: error: {message}"], result.stderr[-2000:]
    assert notes.read_text() == "mine\n" and sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt", "run.yaml"]
    assert "--force-threads" in run_cli("train", "--help").stdout
