"""A study's regime is read from its committed runs (tests/lab/test_results_page_regimes.py: a study
outside a paper's regime reads ``out of regime`` on the results page, never a claim on the paper)."""

import json
from pathlib import Path

import pytest
import yaml

from helpers import REPO_ROOT
from lbtrain.reports.regime import (
    MAX_BATCH_FRACTION,
    MIN_UPDATES,
    PAPER_REGIMES,
    PaperRegime,
    Regime,
    in_regime,
    largest_in_regime,
    study_regime,
    study_regimes,
)

RESULTS = Path(REPO_ROOT) / "results"
GOYAL = PAPER_REGIMES["Goyal et al. 2017"]


def write_study(results: Path, study: str, runs: list[dict], mode: str = "simulated") -> None:
    """A study folder as lbtrain run leaves it: experiment.yaml and one metrics.json per run."""
    folder = results / study
    folder.mkdir(parents=True)
    (folder / "experiment.yaml").write_text(yaml.safe_dump({"name": study, "mode": mode}))
    (folder / "summary.csv").write_text("run_id\n")
    for index, run in enumerate(runs):
        (folder / "runs" / f"run-{index}").mkdir(parents=True)
        (folder / "runs" / f"run-{index}" / "metrics.json").write_text(json.dumps(run))


def run(world_size: int, global_batch: int, steps_per_epoch: int, budget: dict, total_steps: int | None = None) -> dict:
    return {"status": "ok", "world_size": world_size, "global_batch": global_batch, "steps_per_epoch": steps_per_epoch,
            "budget": budget, "total_steps": total_steps if total_steps is not None else budget.get("epochs", 0) * steps_per_epoch}


def test_goyal_bn_at_64_workers_is_out_of_goyals_regime_by_fraction_and_updates():
    experiment = yaml.safe_load((RESULTS / "goyal_bn" / "experiment.yaml").read_text())
    train_size = round(experiment["data"]["train_subset"] * (1 - experiment["data"]["validation_split"]))
    largest = 64 * experiment["training"]["per_worker_batch"]
    regime = study_regime(RESULTS, "goyal_bn")

    assert (regime.global_batch, regime.train_size) == (largest, train_size) == (1024, 8000)
    assert regime.fraction == pytest.approx(0.128)
    assert regime.updates == experiment["training"]["epochs"] * (train_size // largest) == 42
    assert regime.describe() == "batch 1,024 = 12.8% of 8,000; 42 updates (6 epochs)"
    inside, reason = in_regime(GOYAL, regime)
    assert not inside
    assert reason == "12.8% of the data > 5%; 42 updates < 300"
    # Goyal et al. at 8k: 0.64% of ImageNet for about 14,000 updates.
    assert GOYAL.fraction_range()[1] == pytest.approx(0.0064, abs=1e-4)
    assert GOYAL.updates_range()[0] == pytest.approx(14_000, rel=0.01)


def test_goyal_bns_smaller_batches_and_its_equal_steps_runs_are_read_per_batch():
    regimes = study_regimes(RESULTS, "goyal_bn")
    assert [(r.global_batch, r.updates) for r in regimes] == [(16, 3000), (128, 372), (1024, 42)]
    # The equal-steps runs at 1024 (3000 steps) do not hide the 42-update arms: the fewest count.
    assert largest_in_regime(GOYAL, regimes) == regimes[1]
    assert in_regime(GOYAL, regimes[1]) == (True, "1.6% of the data <= 5%; 372 updates >= 300")


def test_a_synthetic_study_within_the_bounds_is_in_regime_and_an_early_stop_counts_at_its_budget(tmp_path):
    write_study(tmp_path, "small", [run(1, 256, 234, {"epochs": 20}), run(8, 2048, 29, {"epochs": 20}),
                                    run(8, 2048, 29, {"epochs": 20}, total_steps=3)])  # the last diverged early
    regime = study_regime(tmp_path, "small")
    assert regime == Regime(global_batch=2048, train_size=256 * 234, updates=580, epochs=20)
    assert regime.fraction == pytest.approx(2048 / 59904)
    assert in_regime(GOYAL, regime) == (True, "3.42% of the data <= 5%; 580 updates >= 300")


def test_the_training_set_is_the_smallest_size_every_runs_epoch_allows(tmp_path):
    # 60,000 samples: 234 updates an epoch at 256 (59,904 seen), 10 at 6,000 (60,000 seen).
    write_study(tmp_path, "keskar", [run(1, 256, 234, {"epochs": 20}), run(24, 6000, 10, {"epochs": 20})])
    assert study_regime(tmp_path, "keskar").train_size == 60_000


def test_an_asynchronous_update_applies_one_workers_batch(tmp_path):
    write_study(tmp_path, "async", [run(4, 128, 400, {"epochs": 10})], mode="parameter_server")
    assert study_regime(tmp_path, "async") == Regime(global_batch=32, train_size=12_800, updates=4000, epochs=10)


def test_steps_and_samples_budgets_give_their_updates(tmp_path):
    write_study(tmp_path, "budgets", [run(1, 100, 50, {"steps": 700}), run(2, 200, 25, {"samples": 100_000})])
    assert [(r.global_batch, r.updates) for r in study_regimes(tmp_path, "budgets")] == [(100, 700), (200, 500)]
    # An update floor raises a short budget to it (goyal_v4: 6 epochs of 26 updates at batch 2,048 train 800).
    write_study(tmp_path, "floor", [run(1, 32, 1687, {"epochs": 6, "min_steps": 800}), run(64, 2048, 26, {"epochs": 6, "min_steps": 800})])
    assert [(r.global_batch, r.updates, round(r.epochs, 2)) for r in study_regimes(tmp_path, "floor")] == [(32, 10122, 6), (2048, 800, 30.77)]
    assert study_regime(tmp_path, "nothing") is None


def test_a_paper_beyond_the_default_bounds_widens_them_and_a_range_claim_drops_them():
    keskar, shallue = PAPER_REGIMES["Keskar et al. 2017"], PAPER_REGIMES["Shallue et al. 2018"]
    at_ten_percent = Regime(global_batch=6000, train_size=60_000, updates=200, epochs=20)
    assert (keskar.max_fraction(), keskar.min_updates()) == (0.10, 200)
    assert in_regime(keskar, at_ten_percent) == (True, "10% of the data <= 10%; 200 updates >= 200")
    assert in_regime(GOYAL, at_ten_percent)[0] is False
    assert (GOYAL.max_fraction(), GOYAL.min_updates()) == (MAX_BATCH_FRACTION, MIN_UPDATES)
    half_the_data = Regime(global_batch=8192, train_size=18_000, updates=4, epochs=2)
    inside, reason = in_regime(shallue, half_the_data)
    assert inside and reason.startswith("no bound: ")
    unstated = PaperRegime("A paper", "some data", "nowhere")
    assert (unstated.max_fraction(), unstated.min_updates(), unstated.updates_range()) == (MAX_BATCH_FRACTION, MIN_UPDATES, None)
