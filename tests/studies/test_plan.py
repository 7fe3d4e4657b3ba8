"""How a grid's runs share the machine: ``place_runs`` (cores, threads, GPUs: no GPU needed to
test the assignment), the launch kinds' footprints, and ``$LBTRAIN_WORKERS``."""

import sys

import pytest

from lbtrain.config import ConfigError, ExperimentConfig
from lbtrain.launch.launchers import Footprint, run_fresh_process
from lbtrain.studies.plan import Placement, expand, place_runs, visible_gpus
from lbtrain.studies.runner import default_workers, placement
from lbtrain.worlds.modes import get_mode


@pytest.mark.parametrize("runs, processes, cores, workers, expected", [
    (12, 1, 2, None, (2, 1)),    # simulated runs on 2 cores: two at once, a thread each
    (1, 1, 2, None, (1, 2)),     # one run keeps every core
    (12, 1, 16, None, (12, 1)),  # never more workers than runs
    (5, 1, 16, None, (5, 3)),    # the cores left over become threads: 5 x 3 <= 16
    (12, 2, 2, None, (1, 1)),    # horovodrun -np 2 on 2 cores: its ranks take both
    (12, 2, 8, None, (4, 1)),    # 4 jobs of 2 ranks on 8 cores
    (12, 5, 8, None, (1, 1)),    # a parameter-server job of 5 processes on 8 cores: one at a time
    (12, 1, 2, 1, (1, 2)),       # --workers 1: serial, as before, on every core
    (12, 1, 2, 4, (4, 1)),       # --workers 4 on 2 cores: oversubscribed, but a thread each
])
def test_runs_times_processes_times_threads_fit_the_cores(runs, processes, cores, workers, expected):
    placed = place_runs(runs, processes=processes, cores=cores, workers=workers)
    assert (placed.workers, placed.threads) == expected
    assert placed.devices is None and placed.environment(0) == {}
    if placed.workers * processes <= cores:
        assert placed.workers * processes * placed.threads <= cores


def test_one_run_per_gpu_each_worker_seeing_only_its_own():
    placed = place_runs(12, processes=1, cores=8, gpus=["0", "1", "2", "3"])
    assert (placed.workers, placed.threads) == (4, 2)
    assert [placed.environment(worker) for worker in range(4)] == [{"CUDA_VISIBLE_DEVICES": str(gpu)} for gpu in range(4)]
    # A run over two GPUs (horovodrun -np 2, MirroredStrategy over 2 devices): two groups of two.
    pairs = place_runs(12, processes=2, cores=8, gpus=["0", "1", "2", "3"], gpus_per_run=2)
    assert (pairs.workers, pairs.threads, pairs.devices) == (2, 2, (("0", "1"), ("2", "3")))
    # Three GPUs, two a run: the third is left idle rather than shared between two runs' ranks.
    assert place_runs(12, processes=2, cores=8, gpus=["0", "1", "2"], gpus_per_run=2).devices == (("0", "1"),)
    # More GPUs a run than the machine has: every run gets them all, one at a time.
    assert place_runs(12, processes=4, cores=8, gpus=["0", "1"], gpus_per_run=4).devices == (("0", "1"),)
    # Workers asked beyond the GPUs share them in turn.
    assert place_runs(12, processes=1, cores=8, gpus=["0", "1"], workers=3).devices == (("0",), ("1",), ("0",))
    # Fewer runs than GPUs: one worker per run.
    assert place_runs(2, processes=1, cores=8, gpus=["0", "1", "2", "3"]).devices == (("0",), ("1",))


def test_children_see_the_gpus_this_process_was_given_by_their_own_ids():
    """TensorFlow numbers the GPUs it sees from 0; a child must be given their real ids."""
    assert visible_gpus(2, "3,5,7") == ["3", "5"]
    assert visible_gpus(2, "") == ["0", "1"]
    assert visible_gpus(2, "GPU-1a2b, GPU-3c4d") == ["GPU-1a2b", "GPU-3c4d"]
    placed = place_runs(4, processes=1, cores=4, gpus=visible_gpus(2, "3,5"))
    assert [placed.environment(worker) for worker in range(placed.workers)] == [
        {"CUDA_VISIBLE_DEVICES": "3"}, {"CUDA_VISIBLE_DEVICES": "5"}]


def test_the_environment_of_a_worker_reaches_a_launched_process():
    printed = run_fresh_process([sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"], task="check",
                                env=Placement(2, 1, 2, (("4",), ("6",))).environment(1))
    assert (printed.returncode, printed.output) == (0, "6\n")


def experiment(tmp_path, **changes):
    data = {"name": "placed", "output_dir": str(tmp_path), "grid": {"world_sizes": [1, 2, 4]},
            "data": {"dataset": "mnist1d", "options": {"num_samples": 500}}, **changes}
    return ExperimentConfig.model_validate(data)


def test_every_modes_launcher_counts_its_processes_against_the_cores(tmp_path):
    exp = experiment(tmp_path)

    def footprint(mode: str, world_size: int, settings: ExperimentConfig = exp) -> Footprint:
        return get_mode(mode).launcher().footprint(world_size, settings)

    assert footprint("simulated", 4) == Footprint(processes=1, gpus=1)
    assert footprint("mirrored", 4) == Footprint(processes=1, gpus=4)
    assert footprint("horovod", 4) == Footprint(processes=4, gpus=4)
    assert footprint("multiworker", 4) == Footprint(processes=4, gpus=4)
    assert footprint("parameter_server", 4, experiment(tmp_path, parameter_server={"ps_tasks": 2})) == Footprint(7, 4)
    assert footprint("multiworker", 2, experiment(tmp_path, multiworker={"base_port": 23456})).fixed_ports
    assert not footprint("multiworker", 2).fixed_ports


def test_the_largest_run_of_the_grid_decides_and_fixed_ports_train_one_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr("lbtrain.worlds.horovod.usable_cores", lambda: list(range(8)))
    simulated = experiment(tmp_path)
    assert (placement(simulated, expand(simulated)).workers, placement(simulated, expand(simulated)).threads) == (3, 2)
    multiworker = experiment(tmp_path, mode="multiworker")
    assert placement(multiworker, expand(multiworker)) == Placement(2, 1, 8)  # 2 jobs of up to 4 workers
    fixed = experiment(tmp_path, mode="multiworker", multiworker={"base_port": 23456})
    assert placement(fixed, expand(fixed), workers=3) == Placement(1, 2, 8)


@pytest.mark.parametrize("value, expected", [(None, None), ("auto", None), ("", None), ("3", 3)])
def test_lbtrain_workers_sets_the_default(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("LBTRAIN_WORKERS", raising=False)
    else:
        monkeypatch.setenv("LBTRAIN_WORKERS", value)
    assert default_workers() == expected


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_lbtrain_workers_is_a_one_line_error(monkeypatch, value):
    monkeypatch.setenv("LBTRAIN_WORKERS", value)
    with pytest.raises(ConfigError, match=rf"^\$LBTRAIN_WORKERS is '{value}' \(allowed: auto or a whole number >= 1\)$"):
        default_workers()
