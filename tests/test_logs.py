"""lbtrain's log: the rank of every record from the launchers' real variables, one line per
record on stderr, ``--quiet`` and ``--verbose`` on a real ``lbtrain run``; results stay on stdout."""

import json
import logging

import pytest
import yaml

from helpers import run_cli, stderr_lines
from lbtrain.cli import build_parser
from lbtrain.logs import (
    LOGGER_NAME,
    VERBOSITY_VARIABLE,
    RankFilter,
    child_environment,
    configure,
    current_verbosity,
    process_rank,
)
from lbtrain.worlds.modes import LAUNCHER_VARIABLES


@pytest.fixture(autouse=True)
def one_process(monkeypatch):
    """No launcher's variable from the machine running the tests."""
    for name in (*LAUNCHER_VARIABLES, "TF_CONFIG", VERBOSITY_VARIABLE):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def lbtrain_logger():
    """The ``lbtrain`` logger, given back as it was (``configure`` changes its handlers and level)."""
    logger = logging.getLogger(LOGGER_NAME)
    handlers, level = list(logger.handlers), logger.level
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_a_process_of_its_own_has_no_rank():
    assert process_rank() == ""


@pytest.mark.parametrize("variable", LAUNCHER_VARIABLES)
def test_the_rank_comes_from_each_launchers_variable(monkeypatch, variable):
    monkeypatch.setenv(variable, "1")
    assert process_rank() == "rank 1"


@pytest.mark.parametrize("task, shown", [({"type": "worker", "index": 1}, "worker 1"), ({"type": "chief", "index": 0}, "chief 0"),
                                         ({"type": "ps", "index": 2}, "ps 2")])
def test_the_rank_of_a_tf_distribute_task_is_its_type_and_index(monkeypatch, task, shown):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": task}))
    assert process_rank() == shown


@pytest.mark.parametrize("text", ["not json", "[1, 2]", json.dumps({"cluster": {}})])
def test_a_tf_config_without_a_task_gives_no_rank(monkeypatch, text):
    monkeypatch.setenv("TF_CONFIG", text)
    assert process_rank() == ""


def test_the_filter_puts_the_rank_into_every_record_and_keeps_it(monkeypatch):
    record = logging.LogRecord("lbtrain.x", logging.INFO, __file__, 1, "hello", None, None)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    assert RankFilter().filter(record) is True and record.rank == "rank 3"


def test_one_line_per_record_with_its_level_and_rank_only_when_there_is_one(monkeypatch, capsys, lbtrain_logger):
    configure()
    logger = logging.getLogger("lbtrain.studies.runner")
    logger.info("[1/2] progress %d", 50)
    logger.warning("metrics.json is damaged")
    monkeypatch.setenv("HOROVOD_RANK", "1")
    logger.warning("a worker's warning")
    monkeypatch.delenv("HOROVOD_RANK")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "worker", "index": 1}}))
    logger.info("a worker's line")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == ["lbtrain: [1/2] progress 50", "lbtrain: warning: metrics.json is damaged",
                                         "lbtrain[rank 1]: warning: a worker's warning", "lbtrain[worker 1]: a worker's line"]


@pytest.mark.parametrize("verbosity, shown", [("quiet", ["lbtrain: warning: w"]), (None, ["lbtrain: i", "lbtrain: warning: w"]),
                                              ("verbose", ["lbtrain: debug: d", "lbtrain: i", "lbtrain: warning: w"])])
def test_the_verbosity_sets_the_records_shown(capsys, lbtrain_logger, verbosity, shown):
    configure(verbosity)
    configure(verbosity)  # a second call replaces the handler: still one line per record
    logger = logging.getLogger("lbtrain.cli.run")
    logger.debug("d")
    logger.info("i")
    logger.warning("w")
    assert capsys.readouterr().err.splitlines() == shown
    assert current_verbosity() == (verbosity or "normal")
    assert child_environment()[VERBOSITY_VARIABLE] == (verbosity or "normal")


def test_a_child_process_takes_the_verbosity_its_parent_gave(monkeypatch, lbtrain_logger):
    monkeypatch.setenv(VERBOSITY_VARIABLE, "quiet")
    configure()
    assert lbtrain_logger.level == logging.WARNING
    with pytest.raises(ValueError, match="verbosity must be one of quiet, normal, verbose"):
        configure("loud")


def test_quiet_and_verbose_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--quiet", "--verbose", "datasets"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "lbtrain: error: argument -v/--verbose: not allowed with argument -q/--quiet"


def tiny_experiment(tmp_path):
    """One run of one epoch on the synthetic dataset."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny", "output_dir": str(tmp_path / "results"),
        "data": {"dataset": "synthetic", "options": {"input_shape": [8], "num_classes": 4, "train_size": 64, "test_size": 16}},
        "model": {"name": "mlp", "options": {"widths": [8]}},
        "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"per_worker_batch": 16, "epochs": 1},
        "grid": {"world_sizes": [1]},
    }))
    return str(path)


@pytest.mark.slow
def test_quiet_silences_the_progress_of_a_run_and_verbose_shows_debug_records(tmp_path):
    path = tiny_experiment(tmp_path)
    quiet = run_cli("--quiet", "run", path)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert stderr_lines(quiet.stderr) == []
    assert "world  batch recipe" in quiet.stdout and "wrote " in quiet.stdout and "[1/1]" not in quiet.stdout

    verbose = run_cli("--verbose", "run", path, "--fresh")
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    lines = stderr_lines(verbose.stderr)
    assert lines[0] == f"lbtrain: tiny: 1 runs (simulated) -> {tmp_path / 'results' / 'tiny'}"
    # The parent's debug record, then the isolated child's, at the parent's verbosity.
    assert any(line.startswith("lbtrain: debug: training run ") for line in lines)
    assert "lbtrain: debug: training world 1 x 16 = batch 16: 4 steps, 4 an epoch" in lines
    assert lines[-2].startswith("lbtrain: [1/1] base w1 x 16 seed 0: ")
    assert lines[-1].startswith("lbtrain: 1 run trained in ")  # then how much of the machine the grid used
    # The summary table is the result: on stdout, as without --verbose.
    assert verbose.stdout.splitlines()[0].startswith("world  batch recipe") and "[1/1]" not in verbose.stdout
