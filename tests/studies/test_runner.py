import csv
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from helpers import REPO_ROOT
from lbtrain.config import ConfigError, ExperimentConfig, load_experiment
from lbtrain.launch.horovodrun import launch_horovod
from lbtrain.results import read_run
from lbtrain.studies.plan import expand
from lbtrain.studies.runner import run_experiment
from lbtrain.worlds.horovod import HorovodWorld, rank_cores


def experiment(tmp_path, **changes):
    data = {
        "name": "tiny",
        "output_dir": str(tmp_path / "results"),
        "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
        "model": {"name": "mlp", "options": {"widths": [16]}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.1, "base_batch": 16},
        "training": {"per_worker_batch": 16, "epochs": 1},
        "grid": {"world_sizes": [1, 2], "variants": [{"label": "none", "lr.rule": "none"}, {"label": "linear", "lr.rule": "linear"}]},
    }
    data.update(changes)
    return ExperimentConfig.model_validate(data)


def test_expand_crosses_variants_with_lists_in_order_with_stable_unique_ids(tmp_path):
    planned = expand(experiment(tmp_path, grid={"world_sizes": [1, 2, 4], "seeds": [0, 1],
                                                "variants": [{"label": "none", "lr.rule": "none"}, {"label": "Linear+WU", "lr.rule": "linear", "lr.warmup_epochs": 0.5}]}))
    assert len(planned) == 12
    assert [(p.label, p.config.training.world_size, p.config.training.seed) for p in planned[:3]] == [("none", 1, 0), ("none", 1, 1), ("none", 2, 0)]
    assert planned[6].config.lr.rule == "linear" and planned[6].config.lr.warmup_epochs == 0.5
    assert planned[6].run_id.startswith("linear-wu-w1-s0-")
    assert len({p.run_id for p in planned}) == 12
    assert [p.run_id for p in planned] == [p.run_id for p in expand(experiment(tmp_path, grid={"world_sizes": [1, 2, 4], "seeds": [0, 1],
        "variants": [{"label": "none", "lr.rule": "none"}, {"label": "Linear+WU", "lr.rule": "linear", "lr.warmup_epochs": 0.5}]}))]


def test_one_recipe_may_be_given_per_batch_under_one_label(tmp_path):
    """An LR chosen for each batch: one label on variants of different world sizes (or per-worker
    batches), written alike; the same label twice at one batch, or spelled two ways, is refused."""
    per_batch = [{"label": "table", "training.world_size": 1, "lr.base_lr": 0.1},
                 {"label": "table", "training.world_size": 2, "lr.base_lr": 0.15},
                 {"label": "table", "training.world_size": 2, "training.per_worker_batch": 8, "lr.base_lr": 0.12}]
    planned = expand(experiment(tmp_path, grid={"seeds": [0, 1], "variants": per_batch}))
    assert [(p.label, p.config.training.world_size, p.config.training.per_worker_batch, p.config.lr.base_lr, p.config.training.seed)
            for p in planned] == [("table", 1, 16, 0.1, 0), ("table", 1, 16, 0.1, 1), ("table", 2, 16, 0.15, 0),
                                  ("table", 2, 16, 0.15, 1), ("table", 2, 8, 0.12, 0), ("table", 2, 8, 0.12, 1)]
    assert len({p.run_id for p in planned}) == 6
    with pytest.raises(ConfigError, match=r"grid.variants\[2\].label 'table' is the same recipe name as grid.variants\[1\].label 'table' "):
        expand(experiment(tmp_path, grid={"variants": [*per_batch[:2], {**per_batch[1], "lr.base_lr": 0.3}]}))
    with pytest.raises(ConfigError, match=r"grid.variants\[1\].label 'Table' is the same recipe name as grid.variants\[0\].label 'table' "):
        expand(experiment(tmp_path, grid={"variants": [per_batch[0], {**per_batch[1], "label": "Table"}]}))


def test_changing_one_value_changes_only_the_ids_it_touches(tmp_path):
    before = {p.label + str(p.config.training.world_size): p.run_id for p in expand(experiment(tmp_path))}
    after = {p.label + str(p.config.training.world_size): p.run_id
             for p in expand(experiment(tmp_path, grid={"world_sizes": [1, 2], "variants": [
                 {"label": "none", "lr.rule": "none"}, {"label": "linear", "lr.rule": "linear", "lr.base_lr": 0.2}]}))}
    assert before["none1"] == after["none1"] and before["none2"] == after["none2"]
    assert before["linear1"] != after["linear1"]


def test_any_field_path_can_be_a_grid_axis(tmp_path):
    planned = expand(experiment(tmp_path, grid={"training.per_worker_batch": [8, 16], "optimizer.name": ["momentum", "lars"]}))
    assert [(p.config.training.per_worker_batch, p.config.optimizer.name) for p in planned] == [(8, "momentum"), (8, "lars"), (16, "momentum"), (16, "lars")]
    assert planned[1].label == "per_worker_batch=8-name=lars"


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"world_size": [1]}, r"grid.world_size: no such field"),
        ({"world_sizes": 4}, r"grid.world_sizes must be a non-empty list, got 4"),
        ({"world_sizes": [0, 2]}, r"training.world_size: Input should be greater than 0 \(got 0\) \(grid point base: training.world_size=0\)"),
        ({"world_sizes": [1.5]}, r"training.world_size: Input should be a valid integer"),
        ({"variants": [{"label": "x", "lr.rul": "none"}]}, r"grid.variants\[0\].lr.rul: no such field"),
        ({"lr.rule": ["linear", "cubic"]}, r"lr.rule: rule must be one of .* \(grid point rule=cubic: lr.rule=cubic\)"),
    ],
)
def test_bad_grids_name_the_point(tmp_path, grid, message):
    with pytest.raises(ConfigError, match=message):
        expand(experiment(tmp_path, grid=grid))


def read_summary(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_run_writes_every_run_and_a_summary_then_skips_finished_runs(tmp_path):
    exp = experiment(tmp_path)
    lines = []
    rows = run_experiment(exp, progress=lines.append)
    assert [row["status"] for row in rows] == ["ok"] * 4
    summary = read_summary(tmp_path / "results" / "tiny" / "summary.csv")
    assert [row["run_id"] for row in summary] == [p.run_id for p in expand(exp)]
    assert [float(row["learning_rate"]) for row in summary] == pytest.approx([0.1, 0.1, 0.1, 0.2])
    for row in summary:
        run_dir = tmp_path / "results" / "tiny" / "runs" / row["run_id"]
        assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "config.yaml", "history.csv", "metrics.json"]
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["training"]["world_size"] == int(row["world_size"])
        assert float(row["test_accuracy"]) == pytest.approx(read_run(run_dir).metrics["test_accuracy"])
    # Runs train side by side (two on two cores), so their lines come as they finish.
    assert sorted(line.split(" ", 1)[0] for line in lines) == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    [first] = [line for line in lines if line.startswith("[1/4] ")]
    assert first.startswith("[1/4] none w1 x 16 seed 0: ok, test acc") and "ETA" in first

    again = []
    assert run_experiment(exp, progress=again.append) == rows
    assert all("done before, skipped" in line for line in again)


def test_a_run_whose_configuration_another_label_finished_is_copied_not_trained_again(tmp_path):
    exp = experiment(tmp_path, grid={"world_sizes": [2], "variants": [
        {"label": "tuned", "lr.base_lr": 0.05, "lr.rule": "linear"},
        {"label": "linear rule", "lr.base_lr": 0.05, "lr.rule": "linear"},
        {"label": "sqrt rule", "lr.base_lr": 0.05, "lr.rule": "sqrt"}]})
    lines = []
    rows = run_experiment(exp, progress=lines.append)
    tuned, linear, sqrt = (tmp_path / "results" / "tiny" / "runs" / row["run_id"] for row in rows)
    assert tuned.name.rsplit("-", 1)[1] == linear.name.rsplit("-", 1)[1] != sqrt.name.rsplit("-", 1)[1]
    # The twin is copied once the run it copies has finished: its line comes last.
    assert lines[2].startswith("[2/3] linear rule ") and lines[2].endswith(f"(same configuration as {tuned.name}, copied)")
    assert "copied" not in lines[0] and "copied" not in lines[1]
    assert sorted(path.name for path in linear.iterdir()) == ["config.yaml", "history.csv", "metrics.json"]
    assert all((linear / name).read_bytes() == (tuned / name).read_bytes() for name in ("config.yaml", "history.csv", "metrics.json"))
    assert rows[1]["test_accuracy"] == rows[0]["test_accuracy"] and rows[1]["label"] == "linear rule"


def test_diverged_and_failed_runs_are_recorded_and_the_rest_finish(tmp_path):
    exp = experiment(tmp_path, grid={"world_sizes": [2], "variants": [
        {"label": "huge", "lr.base_lr": 1.0e6, "lr.rule": "none"},
        # Passes every check, then raises after training: a sharpness subspace larger than the model.
        {"label": "fails", "analysis.sharpness": True, "analysis.sharpness_subspace": 10**9},
        {"label": "fine", "lr.rule": "sqrt"}]})
    rows = run_experiment(exp, progress=lambda line: None)
    assert [row["status"] for row in rows] == ["diverged", "failed", "ok"]
    assert "loss became nan" in rows[0]["reason"] or "exceeds" in rows[0]["reason"]
    assert rows[1]["reason"].startswith("ValueError: subspace_dim must be an integer in 1..")
    assert read_summary(tmp_path / "results" / "tiny" / "summary.csv")[1]["status"] == "failed"


def test_a_grid_point_with_no_step_per_epoch_fails_before_anything_trains(tmp_path):
    exp = experiment(tmp_path, grid={"world_sizes": [1, 2], "variants": [{"label": "tiny", "data.train_subset": 16}]})
    with pytest.raises(ConfigError, match=r"16 training samples are fewer than one global batch \(2 workers x 16\).*"
                                          r"\(run tiny, world size 2\)"):
        run_experiment(exp, progress=lambda line: None)
    assert not (tmp_path / "results" / "tiny" / "runs").exists()


def test_equal_epochs_equal_steps_and_until_target_budgets_run_from_yaml(tmp_path, capsys):
    from lbtrain.cli import main

    spec = experiment(tmp_path, grid={"world_sizes": [1, 2], "variants": [
        {"label": "epochs", "training.epochs": 2},
        {"label": "steps", "training.epochs": None, "training.steps": 20},
        {"label": "target", "training.epochs": 3, "training.stop_at": {"train_accuracy": 0.05}}]}).model_dump(mode="json")
    path = tmp_path / "budgets.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path)]) == 0
    summary = read_summary(tmp_path / "results" / "tiny" / "summary.csv")
    # 256 samples: 16 steps per epoch at one worker of 16, 8 at two.
    assert [(row["label"], row["world_size"], row["budget"], row["total_steps"], row["target_reached_step"]) for row in summary] == [
        ("epochs", "1", "2 epochs", "32", ""), ("epochs", "2", "2 epochs", "16", ""),
        ("steps", "1", "20 steps", "20", ""), ("steps", "2", "20 steps", "20", ""),
        ("target", "1", "3 epochs, until train accuracy >= 0.05", "16", "16"),
        ("target", "2", "3 epochs, until train accuracy >= 0.05", "8", "8"),
    ]


def test_fresh_deletes_previous_runs(tmp_path):
    exp = experiment(tmp_path, grid={"world_sizes": [1]})
    run_experiment(exp, progress=lambda line: None)
    stale = tmp_path / "results" / "tiny" / "runs" / "stale-run"
    stale.mkdir()
    run_experiment(exp, fresh=True, progress=lambda line: None)
    assert not stale.exists()


@pytest.mark.slow
def test_resume_after_sigkill_completes_every_run_once_without_partial_files(tmp_path):
    exp_path = tmp_path / "exp.yaml"
    exp = experiment(tmp_path, grid={"world_sizes": [1, 2], "seeds": [0, 1, 2]}, training={"per_worker_batch": 16, "epochs": 2})
    exp_path.write_text(yaml.safe_dump(exp.model_dump()))
    runs = tmp_path / "results" / "tiny" / "runs"
    command = [sys.executable, "-m", "lbtrain.cli", "run", str(exp_path)]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(runs.glob("*/metrics.json"))) < 2:
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    finished_before = len(list(runs.glob("*/metrics.json")))
    assert 2 <= finished_before < 6

    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("done before, skipped") == finished_before
    summary = read_summary(tmp_path / "results" / "tiny" / "summary.csv")
    assert len(summary) == 6 and len({row["run_id"] for row in summary}) == 6
    assert {row["status"] for row in summary} == {"ok"}
    assert sorted(p.name for p in runs.iterdir()) == sorted(row["run_id"] for row in summary)
    assert not list((tmp_path / "results").rglob("*.partial"))


@pytest.mark.slow
@pytest.mark.horovod
def test_mode_horovod_runs_world_sizes_one_and_two_for_real(tmp_path):
    exp = experiment(tmp_path, mode="horovod", grid={"world_sizes": [1, 2]}, horovod={"timeline": True})
    simulated = run_experiment(experiment(tmp_path, name="tiny-sim", grid={"world_sizes": [1, 2]}), progress=lambda line: None)
    rows = run_experiment(exp, progress=lambda line: None)
    assert [row["status"] for row in rows] == ["ok", "ok"]
    for real, sim in zip(rows, simulated):
        assert real["total_steps"] == sim["total_steps"]
        assert real["test_accuracy"] == pytest.approx(sim["test_accuracy"], abs=2e-3)
    run_dir = tmp_path / "results" / "tiny" / "runs" / rows[1]["run_id"]
    assert read_run(run_dir).world_size == 2
    events = json.loads((run_dir / "horovod_timeline.json").read_text())
    assert any(event.get("name") == "ALLREDUCE" for event in events)


KNOBS = {"fusion_threshold_mb": 2, "cycle_time_ms": 3.5, "timeline": True, "compression": "fp16", "hierarchical_allreduce": True,
         "idle_threads": True, "pin_cores": True}


@pytest.mark.slow
@pytest.mark.horovod
def test_every_horovod_knob_reaches_every_rank_and_the_timeline_lands_in_the_run_folder(tmp_path):
    """A real ``horovodrun -np 2``, launched the way ``mode: horovod`` launches runs; each rank
    reports what it sees (tests/horovod_jobs/horovod_knobs.py)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = launch_horovod(experiment(tmp_path, mode="horovod", horovod=KNOBS).horovod, 2,
                         [sys.executable, os.path.join(REPO_ROOT, "tests", "horovod_jobs", "horovod_knobs.py"), str(run_dir)], run_dir)
    assert job.returncode == 0, job.output[-2000:]
    timeline = run_dir / "horovod_timeline.json"
    expected = {"HOROVOD_FUSION_THRESHOLD": str(2 * 1024 * 1024), "HOROVOD_CYCLE_TIME": "3.5", "HOROVOD_TIMELINE": str(timeline),
                "HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "LBTRAIN_HOROVOD_COMPRESSION": "fp16",
                "LBTRAIN_HOROVOD_IDLE_THREADS": "1", "LBTRAIN_HOROVOD_PIN_CORES": "1"}
    cores = sorted(os.sched_getaffinity(0))
    for rank in (0, 1):
        seen = json.loads((run_dir / f"rank{rank}.json").read_text())
        assert (seen["size"], seen["environment"], seen["compression"]) == (2, expected, "FP16Compressor")
        own = list(rank_cores(rank, 2, cores))  # the local rank's own share of the cores (one core each on 2)
        assert seen["cores"] == own and all(thread_cores == own for thread_cores in seen["threads"]["cores"])
        assert seen["threads"]["idle"], "no Horovod thread runs at SCHED_IDLE"
        assert seen["threads"]["other"][0] == "python"  # the main thread, which computes, is not idle
        assert seen["weight"] == -1.0  # the gradient 1 + 2**-12 crossed the allreduce as float16
    events = json.loads(timeline.read_text())
    assert {"dtype": "float16", "shape": "[]"} in [event.get("args") for event in events]


@pytest.mark.parametrize(
    "horovod, message",
    [
        ({"fusion_threshold_mb": -1}, "horovod.fusion_threshold_mb: Input should be greater than or equal to 0 (got -1)"),
        ({"cycle_time_ms": 0}, "horovod.cycle_time_ms: Input should be greater than 0 (got 0)"),
        ({"compression": "int8"}, "horovod.compression: Input should be 'none' or 'fp16' (got 'int8')"),
        ({"timeline": "yes"}, "horovod.timeline: Input should be a valid boolean (got 'yes')"),
        ({"hierarchical_allreduce": 1}, "horovod.hierarchical_allreduce: Input should be a valid boolean (got 1)"),
        ({"pin_cores": "always"}, "horovod.pin_cores: Input should be 'auto', true or false (got 'always')"),
        ({"cycle_time_ms": 5, "args": ["--cycle-time-ms=2"]},
         "horovod: args has --cycle-time-ms, which sets what cycle_time_ms sets: keep one of them"),
    ],
)
def test_bad_horovod_knobs_are_one_line_errors_naming_the_field(tmp_path, horovod, message):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "knobs", "mode": "horovod", "horovod": horovod}))
    with pytest.raises(ConfigError) as error:
        load_experiment(path)
    assert str(error.value) == message


def test_only_the_knobs_given_become_horovod_variables(tmp_path):
    assert experiment(tmp_path).horovod.environment(tmp_path) == {"LBTRAIN_HOROVOD_COMPRESSION": "none"}
    assert experiment(tmp_path, horovod={"hierarchical_allreduce": False, "fusion_threshold_mb": 0, "args": ["--timeline-filename", "t.json"]}
                      ).horovod.environment(tmp_path) == {
        "LBTRAIN_HOROVOD_COMPRESSION": "none", "HOROVOD_FUSION_THRESHOLD": "0", "HOROVOD_HIERARCHICAL_ALLREDUCE": "0"}
    assert experiment(tmp_path, horovod={"idle_threads": True, "pin_cores": False}).horovod.environment(tmp_path) == {
        "LBTRAIN_HOROVOD_COMPRESSION": "none", "LBTRAIN_HOROVOD_IDLE_THREADS": "1", "LBTRAIN_HOROVOD_PIN_CORES": "0"}


@pytest.mark.horovod
@pytest.mark.parametrize("variable", ["LBTRAIN_HOROVOD_IDLE_THREADS", "LBTRAIN_HOROVOD_PIN_CORES"])
def test_a_bad_thread_switch_in_a_ranks_environment_is_a_one_line_error(monkeypatch, variable):
    monkeypatch.setenv(variable, "yes")
    with pytest.raises(ConfigError, match=rf"^\${variable} is 'yes' \(allowed: 0, 1\)$"):
        HorovodWorld()


@pytest.mark.slow
@pytest.mark.horovod
def test_mode_horovod_records_a_failing_job_with_its_error(tmp_path):
    exp = experiment(tmp_path, mode="horovod", grid={"world_sizes": [2]},
                     analysis={"sharpness": True, "sharpness_subspace": 10**9})
    rows = run_experiment(exp, progress=lambda line: None)
    assert rows[0]["status"] == "failed"
    assert rows[0]["reason"].startswith("horovodrun exited with ")
    assert "subspace_dim must be an integer in 1.." in rows[0]["reason"]
    assert read_run(tmp_path / "results" / "tiny" / "runs" / rows[0]["run_id"]).status == "failed"


def test_a_damaged_metrics_file_is_a_warning_and_its_run_trained_again(tmp_path, caplog):
    exp = experiment(tmp_path, grid={"world_sizes": [1], "variants": [{"label": "none", "lr.rule": "none"},
                                                                      {"label": "linear", "lr.rule": "linear"}]})
    first = run_experiment(exp, progress=lambda line: None)
    metrics = tmp_path / "results" / "tiny" / "runs" / first[1]["run_id"] / "metrics.json"
    metrics.write_text(metrics.read_text()[:50])
    lines = []
    with caplog.at_level(logging.WARNING, logger="lbtrain"):
        again = run_experiment(exp, progress=lines.append)
    assert lines[0] == "[1/2] none w1 x 16 seed 0: ok, " + lines[0].split(": ok, ")[1] and "done before, skipped" in lines[0]
    [warning] = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.startswith(f"{metrics} is damaged (JSONDecodeError: ") and warning.endswith(": training the run again")
    assert "done before, skipped" not in lines[1] and [row["status"] for row in again] == ["ok", "ok"]
    assert read_run(metrics.parent).metrics["test_accuracy"] == pytest.approx(first[1]["test_accuracy"])


def test_a_rerun_with_another_grid_says_in_one_warning_which_earlier_runs_its_summary_leaves_out(tmp_path, caplog):
    wide = experiment(tmp_path, grid={"world_sizes": [1, 2], "variants": [{"label": "none", "lr.rule": "none"}]})
    first = run_experiment(wide, progress=lambda line: None)
    runs = tmp_path / "results" / "tiny" / "runs"
    before = {path.name: (path / "metrics.json").read_bytes() for path in runs.iterdir()}
    narrow = experiment(tmp_path, grid={"world_sizes": [1], "variants": [{"label": "none", "lr.rule": "none"}]})
    with caplog.at_level(logging.WARNING, logger="lbtrain"):
        rows = run_experiment(narrow, progress=lambda line: None)
    [warning] = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warning == (f"1 earlier run in {runs} is not in this grid: left out of summary.csv and the report, kept on disk "
                       "(rerun with their grid to summarize them again, without training them; --fresh deletes every earlier run)")
    assert [row["run_id"] for row in rows] == [first[0]["run_id"]]
    assert [row["run_id"] for row in read_summary(tmp_path / "results" / "tiny" / "summary.csv")] == [first[0]["run_id"]]
    assert {path.name: (path / "metrics.json").read_bytes() for path in runs.iterdir()} == before
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lbtrain"):
        again = run_experiment(wide, progress=lambda line: None)  # the earlier grid: summarized again, nothing trained
    assert [row["run_id"] for row in again] == [row["run_id"] for row in first] and not caplog.records
    assert {path.name: (path / "metrics.json").read_bytes() for path in runs.iterdir()} == before


def test_fields_added_later_enter_a_run_id_only_away_from_their_default(tmp_path):
    """A study configured before lr.warmup_type, training.accumulation_steps,
    training.staleness or training.stop_at.val_accuracy existed keeps its run ids, so a rerun
    finds its runs done."""
    from lbtrain.config import JUDGING_FIELDS, LATER_FIELD_DEFAULTS, run_config_from_dict
    from lbtrain.studies.plan import run_id

    config = run_config_from_dict({"lr": {"warmup_epochs": 1}, "training": {"stop_at": {"train_loss": 0.3}}})
    older = config.to_dict()
    for path in [*LATER_FIELD_DEFAULTS, *(path for path, hashed in JUDGING_FIELDS.items() if hashed is None)]:
        *sections, field = path.split(".")
        parent = older
        for section in sections:
            parent = parent[section]
        del parent[field]
    older["training"]["collapse_margin"] = JUDGING_FIELDS["training.collapse_margin"]  # what ids were computed with
    assert config.identity() == older
    assert run_id(config, "a") == run_id(run_config_from_dict(older), "a")
    assert run_id(run_config_from_dict({"lr": {"warmup_epochs": 1, "warmup_type": "constant"}}), "a") != run_id(config, "a")
    # A committed run that stopped at a training loss, configured before stop_at.val_accuracy existed.
    [committed] = [row for row in read_summary(Path(REPO_ROOT) / "results" / "keskar_v2" / "summary.csv")
                   if row["label"] == "LB equal loss" and row["seed"] == "0"]
    recorded = yaml.safe_load((Path(REPO_ROOT) / "results" / "keskar_v2" / "runs" / committed["run_id"] / "config.yaml").read_text())
    assert run_id(run_config_from_dict(recorded), "LB equal loss") == committed["run_id"]


@pytest.mark.horovod
def test_staleness_under_horovod_is_refused_before_anything_trains(tmp_path):
    exp = experiment(tmp_path, mode="horovod", training={"per_worker_batch": 16, "epochs": 1, "staleness": 2})
    with pytest.raises(ConfigError, match=r"^training.staleness 2 is simulated only: .*\(run none, world size 1\)$"):
        run_experiment(exp, progress=lambda line: None)
    assert not (tmp_path / "results" / "tiny").exists()


def test_the_preflight_counts_an_accumulated_update_as_one_step(tmp_path):
    """256 samples, 2 workers x 16 x 4 accumulated = 128 a step: 2 steps an epoch, so a warmup of
    1 epoch (2 steps) fits a 4-step budget (counted at 16 a worker it would be 8 steps), and one
    of 3 epochs (6 steps) does not."""
    from lbtrain.studies.plan import check_runs

    def planned(warmup_epochs):
        return expand(experiment(tmp_path, grid={"world_sizes": [2]},
                                 training={"per_worker_batch": 16, "steps": 4, "accumulation_steps": 4},
                                 lr={"base_lr": 0.1, "base_batch": 16, "warmup_epochs": warmup_epochs}))

    check_runs(planned(1))
    with pytest.raises(ConfigError, match="warmup"):
        check_runs(planned(3))


def test_a_copy_replaces_what_an_interrupted_attempt_left_and_a_damaged_twin_is_not_copied(tmp_path):
    """A run folder an earlier attempt left (a checkpoint, no metrics.json) is replaced by the
    copy; a twin whose metrics.json is damaged is neither copied nor touched: the run trains."""
    variants = [{"label": "first", "lr.rule": "linear"}, {"label": "second", "lr.rule": "linear"}]
    exp = experiment(tmp_path, grid={"world_sizes": [1], "variants": variants[:1]})
    first = run_experiment(exp, progress=lambda line: None)[0]
    runs = tmp_path / "results" / "tiny" / "runs"
    both = experiment(tmp_path, grid={"world_sizes": [1], "variants": variants})
    second_id = expand(both)[1].run_id
    (runs / second_id / "checkpoints").mkdir(parents=True)
    lines = []
    rows = run_experiment(both, progress=lines.append)
    assert lines[1].endswith("copied)") and sorted(path.name for path in (runs / second_id).iterdir()) == [
        "config.yaml", "history.csv", "metrics.json"]
    assert rows[1]["test_accuracy"] == first["test_accuracy"]

    (runs / second_id / "metrics.json").unlink()
    (runs / first["run_id"] / "metrics.json").write_text("{truncated")
    lines = []
    run_experiment(experiment(tmp_path, grid={"world_sizes": [1], "variants": variants[1:]}), progress=lines.append)
    assert "copied" not in lines[0] and (runs / first["run_id"] / "metrics.json").read_text() == "{truncated"


TIMINGS = ("samples_per_second", "wall_time_seconds")


def test_runs_side_by_side_give_the_summary_of_runs_one_after_another(tmp_path):
    """Two runs at once (a thread each; one worker trains two of the three) and one at a time
    (every core): the same rows, but for the timings; each run's history too."""
    def summary(workers):
        exp = experiment(tmp_path / f"workers-{workers}", grid={"world_sizes": [1, 2, 4], "variants": [{"label": "linear", "lr.rule": "linear"}]})
        rows = run_experiment(exp, progress=lambda line: None, workers=workers)
        histories = [[{key: value for key, value in epoch.items() if key not in TIMINGS}
                      for epoch in read_run(exp.results_dir / "runs" / row["run_id"]).history] for row in rows]
        return [{key: value for key, value in row.items() if key not in TIMINGS} for row in rows], histories

    serial, parallel = summary(1), summary(2)
    assert {row["status"] for row in serial[0]} <= {"ok", "collapsed"}  # trained (world 4: 4 steps, near chance)
    assert parallel == serial


def _children() -> set[int]:
    """This process's child processes (Linux: every thread's ``children`` list)."""
    return {int(pid) for task in Path("/proc/self/task").iterdir() for pid in (task / "children").read_text().split()}


@pytest.mark.slow
def test_an_interrupt_ends_every_run_side_by_side_records_none_and_the_rerun_resumes_them(tmp_path):
    """Ctrl-C while two runs train at once: both run processes end, neither run is recorded
    (no metrics.json, no failed run), and the rerun resumes each from its checkpoint."""
    exp = experiment(tmp_path, grid={"world_sizes": [1, 2]}, training={"per_worker_batch": 16, "epochs": 150})
    runs = tmp_path / "results" / "tiny" / "runs"
    before = _children()

    def interrupt_when_both_checkpointed():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(list(runs.glob("*/checkpoints/checkpoint"))) < 2:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest in the background ignores SIGINT
    try:
        threading.Thread(target=interrupt_when_both_checkpointed, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_experiment(exp, progress=lambda line: None, workers=2)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert not _children() - before  # the run processes were ended, not left training
    assert not list(runs.glob("*/metrics.json")) and not list(runs.glob("*/.*.partial"))
    lines = []
    rows = run_experiment(exp, progress=lines.append, workers=2)
    assert all(row["status"].startswith("ok") for row in rows)  # 150 epochs at this LR: ok or ok-unstable
    assert [len(read_run(runs / row["run_id"]).history) for row in rows] == [150, 150]


def test_a_launched_job_that_sigint_ended_interrupts_the_grid_and_is_not_recorded(tmp_path, monkeypatch):
    """A terminal's Ctrl-C reaches a launched job's processes: the job ends by SIGINT, and the
    thread that waited for it raises KeyboardInterrupt (a worker thread never gets Python's own).
    Here the model factory of a mirrored run interrupts its own fresh process."""
    (tmp_path / "interrupting.py").write_text(
        "import os, signal\n"
        "import tensorflow as tf\n"
        f"PARENT = {os.getpid()}\n\n"
        "def build(input_shape, num_classes):\n"
        "    if os.getpid() != PARENT:\n"
        "        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a pytest-xdist worker's children inherit SIGINT ignored\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    inputs = tf.keras.Input(input_shape)\n"
        "    return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes)(inputs))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    exp = experiment(tmp_path, mode="mirrored", model={"name": "interrupting:build"}, grid={"world_sizes": [1]})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, progress=lambda line: None, workers=1)
    assert not list((tmp_path / "results" / "tiny" / "runs").glob("*/metrics.json"))
