"""Horovod's thread placement by default (issue #36): ``auto`` pins each rank to its own cores and
runs Horovod's threads at ``SCHED_IDLE`` exactly when the ranks leave no core spare, and
``false`` turns it off; old ``true/false`` experiments keep their meaning and their run ids."""

import json
import logging
import os
import sys
import textwrap

import pytest
import yaml

from lbtrain.config import ConfigError, ExperimentConfig, HorovodLaunchConfig, load_experiment
from lbtrain.launch.horovodrun import launch_horovod
from lbtrain.studies.plan import expand
from lbtrain.worlds.horovod import place_threads, rank_cores, usable_cores

ON, OFF = (True, True), (False, False)


@pytest.mark.parametrize("ranks, threads, cores, gpus, chosen, why", [
    (2, 1, 2, 0, ON, "2 ranks x 1 TensorFlow thread on 2 cores leave no core spare"),  # the benchmark's np=2
    (4, 1, 2, 0, ON, "4 ranks x 1 TensorFlow thread on 2 cores leave no core spare"),
    (2, 2, 2, 0, ON, "2 ranks x 2 TensorFlow threads on 2 cores leave no core spare"),  # TensorFlow's default threads
    (2, 4, 8, 0, ON, "2 ranks x 4 TensorFlow threads on 8 cores leave no core spare"),
    (1, 1, 1, 0, ON, "1 rank x 1 TensorFlow thread on 1 core leave no core spare"),
    (2, 1, 8, 0, OFF, "2 ranks x 1 TensorFlow thread on 8 cores leave 6 spare"),
    (2, 3, 8, 0, OFF, "2 ranks x 3 TensorFlow threads on 8 cores leave 2 spare"),
    (8, 64, 64, 8, OFF, "the ranks train on GPUs (8 ranks x 64 TensorFlow threads on 64 cores)"),
])
def test_auto_turns_both_on_exactly_when_the_ranks_leave_no_core_spare_on_cpus(ranks, threads, cores, gpus, chosen, why):
    placement = place_threads(None, None, local_ranks=ranks, threads_per_rank=threads, cores=cores, gpus=gpus)
    assert (placement.pin_cores, placement.idle_threads) == chosen
    assert placement.why == why
    assert placement.automatic == ("pin_cores", "idle_threads")


@pytest.mark.parametrize("pin, idle, chosen", [(False, False, OFF), (False, None, (False, True)), (None, False, (True, False)),
                                               (True, True, ON)])
def test_a_setting_given_wins_over_auto_where_no_core_is_spare(pin, idle, chosen):
    placement = place_threads(pin, idle, local_ranks=2, threads_per_rank=1, cores=2)
    assert (placement.pin_cores, placement.idle_threads) == chosen
    assert placement.automatic == tuple(name for name, value in (("pin_cores", pin), ("idle_threads", idle)) if value is None)


def test_a_setting_given_wins_over_auto_where_cores_are_spare_and_auto_stays_off_without_linux():
    spare = place_threads(True, None, local_ranks=2, threads_per_rank=1, cores=8)
    assert (spare.pin_cores, spare.idle_threads) == (True, False)
    elsewhere = place_threads(None, None, local_ranks=2, threads_per_rank=1, cores=2, linux=False)
    assert (elsewhere.pin_cores, elsewhere.idle_threads, elsewhere.why) == (False, False, "no Linux scheduler calls on this system")


def test_the_log_line_says_what_was_chosen_why_and_how_to_turn_it_off():
    busy = place_threads(None, None, local_ranks=2, threads_per_rank=1, cores=2).describe()
    assert busy == ("Horovod threads: 2 ranks x 1 TensorFlow thread on 2 cores leave no core spare: pin_cores on (auto), "
                    "idle_threads on (auto) (horovod.pin_cores / horovod.idle_threads: false, or $LBTRAIN_HOROVOD_PIN_CORES / "
                    "$LBTRAIN_HOROVOD_IDLE_THREADS=0, turn them off)")
    spare = place_threads(None, False, local_ranks=2, threads_per_rank=1, cores=8).describe()
    assert spare == "Horovod threads: 2 ranks x 1 TensorFlow thread on 8 cores leave 6 spare: pin_cores off (auto), idle_threads off (set)"


@pytest.mark.parametrize("ranks", range(1, 7))
@pytest.mark.parametrize("cores", [1, 2, 3, 8, 9])
def test_each_rank_gets_its_own_share_of_the_cores_or_one_core_when_they_are_fewer(ranks, cores):
    available = [10 + 2 * core for core in range(cores)]  # an affinity mask need not start at 0 or be contiguous
    shares = [rank_cores(rank, ranks, available) for rank in range(ranks)]
    if ranks >= cores:
        assert shares == [(available[rank % cores],) for rank in range(ranks)]
    else:
        assert [core for share in shares for core in share] == available  # disjoint, in order, every core used
        assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_auto_is_the_default_and_sets_no_variable_while_true_and_false_reach_the_ranks(tmp_path):
    assert (HorovodLaunchConfig().pin_cores, HorovodLaunchConfig().idle_threads) == ("auto", "auto")
    assert HorovodLaunchConfig().environment(tmp_path) == {"LBTRAIN_HOROVOD_COMPRESSION": "none"}
    assert HorovodLaunchConfig(pin_cores=False, idle_threads=True).environment(tmp_path) == {
        "LBTRAIN_HOROVOD_COMPRESSION": "none", "LBTRAIN_HOROVOD_IDLE_THREADS": "1", "LBTRAIN_HOROVOD_PIN_CORES": "0"}


@pytest.mark.parametrize("value, expected", [("auto", "auto"), (True, True), (False, False)])
def test_old_true_false_experiments_still_load_and_auto_round_trips(tmp_path, value, expected):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "knobs", "mode": "horovod", "horovod": {"pin_cores": value, "idle_threads": value}}))
    loaded = load_experiment(path)
    assert (loaded.horovod.pin_cores, loaded.horovod.idle_threads) == (expected, expected)
    assert ExperimentConfig.model_validate(loaded.model_dump(mode="json")) == loaded
    assert load_experiment(path, ["horovod.pin_cores=false"]).horovod.pin_cores is False  # lbtrain run --set turns it off


@pytest.mark.parametrize("value, shown", [("always", "'always'"), (1, "1"), ("true", "'true'")])
def test_anything_but_auto_true_or_false_is_a_one_line_error(tmp_path, value, shown):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "knobs", "mode": "horovod", "horovod": {"idle_threads": value}}))
    with pytest.raises(ConfigError) as error:
        load_experiment(path)
    assert str(error.value) == f"horovod.idle_threads: Input should be 'auto', true or false (got {shown})"


def test_the_placement_settings_do_not_enter_run_ids(tmp_path):
    """Launch settings are not part of a run's identity, so the committed results of experiments
    recorded with ``pin_cores: false`` keep their ids under the ``auto`` default."""
    base = {"name": "ids", "output_dir": str(tmp_path), "mode": "horovod", "data": {"dataset": "mnist1d", "options": {"num_samples": 500}},
            "model": {"name": "mlp", "options": {"widths": [16]}}, "training": {"per_worker_batch": 16, "epochs": 1},
            "grid": {"world_sizes": [1, 2]}}
    ids = {str(settings): [planned.run_id for planned in expand(ExperimentConfig.model_validate({**base, "horovod": settings}))]
           for settings in ({}, {"pin_cores": False, "idle_threads": False}, {"pin_cores": True, "idle_threads": "auto"})}
    assert len(set(map(tuple, ids.values()))) == 1, ids


def said_about_threads(output: str) -> list[str]:
    """The log lines about Horovod's threads in a job's output, without horovodrun's ``[0]<stderr>:`` prefix."""
    return [line[line.index("lbtrain["):] for line in output.splitlines() if "Horovod threads:" in line]


# Each rank reports how HorovodWorld placed its threads: the placement, each thread's cores and
# scheduling policy (Linux's /proc/self/task), after one allreduce.
PLACEMENT_JOB = textwrap.dedent("""
    import json, os, sys
    import tensorflow as tf
    from lbtrain.logs import configure
    from lbtrain.worlds.horovod import HorovodWorld
    configure("normal")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    world = HorovodWorld()
    world.allreduce_mean(1.0)
    tasks = sorted(int(tid) for tid in os.listdir("/proc/self/task"))
    report = {"pin_cores": world.placement.pin_cores, "idle_threads": world.placement.idle_threads, "cores": world.cores,
              "thread_cores": [sorted(os.sched_getaffinity(tid)) for tid in tasks],
              "idle": sum(os.sched_getscheduler(tid) == os.SCHED_IDLE for tid in tasks)}
    with open(os.path.join(sys.argv[1], f"rank{world.rank}.json"), "w") as out:
        json.dump(report, out)
""")


@pytest.mark.horovod
@pytest.mark.parametrize("settings", [{}, {"pin_cores": False, "idle_threads": False}], ids=["auto", "false"])
def test_a_real_np2_job_places_its_threads_as_auto_says_and_false_turns_it_off(tmp_path, settings):
    script = tmp_path / "job.py"
    script.write_text(PLACEMENT_JOB)
    job = launch_horovod(HorovodLaunchConfig(**settings), 2, [sys.executable, str(script), str(tmp_path)], tmp_path)
    assert job.returncode == 0, job.output[-2000:]
    cores = usable_cores()
    expected = place_threads(settings.get("pin_cores"), settings.get("idle_threads"), local_ranks=2, threads_per_rank=1, cores=len(cores))
    assert said_about_threads(job.output) == ([f"lbtrain[rank 0]: {expected.describe()}"] if not settings else []), job.output[-2000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert (seen["pin_cores"], seen["idle_threads"]) == (expected.pin_cores, expected.idle_threads)
        own = list(rank_cores(rank, 2, cores)) if expected.pin_cores else cores
        assert seen["cores"] == (own if expected.pin_cores else None)
        assert all(thread_cores == own for thread_cores in seen["thread_cores"])
        assert (seen["idle"] > 0) == expected.idle_threads


RUN_CONFIG = {"data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
              "model": {"name": "mlp", "options": {"widths": [16]}}, "optimizer": {"name": "momentum"},
              "lr": {"base_lr": 0.1, "base_batch": 16}, "training": {"per_worker_batch": 16, "epochs": 2, "world_size": 2}}


def untimed(result: dict) -> dict:
    """A run's ``metrics.json`` without its timings."""
    timings = ("samples_per_second", "wall_time_seconds")
    return {**{key: value for key, value in result.items() if key not in timings},
            "history": [{key: value for key, value in epoch.items() if key not in timings} for epoch in result["history"]]}


@pytest.mark.slow
@pytest.mark.horovod
def test_lbtrain_train_under_np2_logs_the_choice_and_trains_as_with_the_settings_given(tmp_path, caplog):
    """``lbtrain train`` under ``horovodrun -np 2`` as ``mode: horovod`` starts it: with the
    defaults, rank 0 logs what auto chose; the run's history equals that of the same run with
    the choice given explicitly (placement changes where threads run, not what they compute)."""
    caplog.set_level(logging.INFO, logger="lbtrain")  # the ranks log as this process does (child_environment)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(RUN_CONFIG))
    cores = usable_cores()
    expected = place_threads(None, None, local_ranks=2, threads_per_rank=1, cores=len(cores))
    results = {}
    for name, settings in {"auto": HorovodLaunchConfig(),
                           "given": HorovodLaunchConfig(pin_cores=expected.pin_cores, idle_threads=expected.idle_threads)}.items():
        run_dir = tmp_path / name
        program = [os.path.join(os.path.dirname(sys.executable), "lbtrain"), "train", str(config), "--run-dir", str(run_dir),
                   "--threads", "1", "--mode", "horovod"]
        job = launch_horovod(settings, 2, program, run_dir)
        assert job.returncode == 0, job.output[-2000:]
        assert said_about_threads(job.output) == ([f"lbtrain[rank 0]: {expected.describe()}"] if name == "auto" else []), job.output[-2000:]
        results[name] = untimed(json.loads((run_dir / "metrics.json").read_text()))
    assert results["auto"]["status"] == "ok"
    assert results["auto"] == results["given"]  # every metric and each epoch's loss and accuracy, exactly
