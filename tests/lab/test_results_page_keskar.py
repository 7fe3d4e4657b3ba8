"""The Keskar sections read each top Hessian eigenvalue beside the LR its run ended at
(``lab.results_page.keskar``): keskar_v3's stopped runs are not read as flatter, and keskar_v4's
two regimes are each judged on their own runs, at equal training loss by an annealed horizon, and
each says which part of Keskar et al.'s claim (sharper minima; worse tests) holds."""

import csv
import json

import pytest

from lab.results_page.common import parts_claim
from lab.results_page.keskar import (
    anchor_keskar_v3,
    anchor_keskar_v4,
    flatness_part,
    flatness_runs_table,
    flatness_text,
    keskar_claim,
    keskar_v4_claim,
    keskar_v4_comparison,
    run_flatness,
    section_keskar_v2,
    section_keskar_v4,
    stability_limit,
)
from lbtrain.reports.statistics import Estimate

COLUMNS = ["run_id", "label", "status", "world_size", "global_batch", "seed", "test_accuracy", "sharpness",
           "target_reached_step", "total_steps", "train_loss", "learning_rate"]


def write_study(folder, runs, report=None):
    """A synthetic study: summary.csv and each run's metrics.json (its config's optimizer, peak LR,
    last epoch's LR and top Hessian eigenvalue). ``runs``: dicts of label, world_size, batch, seed,
    test, loss, peak, end, eigenvalue, sharpness."""
    folder.mkdir(parents=True)
    if report is not None:
        (folder / report[0]).write_text(json.dumps(report[1]))
    with open(folder / "summary.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for run in runs:
            run_id = f"{run['label'].replace(' ', '-')}-w{run['world_size']}-s{run['seed']}"
            writer.writerow({"run_id": run_id, "label": run["label"], "status": "ok", "world_size": run["world_size"],
                             "global_batch": run["batch"], "seed": run["seed"], "test_accuracy": run["test"], "sharpness": run["sharpness"],
                             "target_reached_step": "", "total_steps": run.get("steps", 1000), "train_loss": run["loss"],
                             "learning_rate": run["peak"]})
            (folder / "runs" / run_id).mkdir(parents=True)
            (folder / "runs" / run_id / "metrics.json").write_text(json.dumps({
                "config": {"optimizer": {"name": "momentum", "params": {"momentum": 0.9}}}, "learning_rate": run["peak"],
                "history": [{"epoch": 1, "lr": run["end"]}], "metrics": {"hessian_top_eigenvalue": run["eigenvalue"]}}))


def test_the_stability_limit_of_momentum_sgd():
    assert stability_limit(0.8, 0.9) == 2 * 1.9 / 0.8
    assert stability_limit(0.0, 0.9) is None and stability_limit(0.1, None) is None


def _v3_runs():
    runs = []
    for seed in range(5):
        runs.append(dict(label="SB", world_size=1, batch=32, seed=seed, test=0.919 + 0.0005 * seed, loss=0.154, peak=0.1, end=0.0,
                         eigenvalue=9.0 + 0.2 * seed, sharpness=5.8))
        runs.append(dict(label="LB equal epochs", world_size=16, batch=512, seed=seed, test=0.907 + 0.0005 * seed, loss=0.2, peak=1.6,
                         end=5.6e-6, eigenvalue=10.0 + 0.2 * seed, sharpness=4.8))
        end = 0.135 if seed == 0 else 0.88
        runs.append(dict(label="LB equal loss", world_size=16, batch=512, seed=seed, test=0.914 + 0.0005 * seed, loss=0.144, peak=1.6,
                         end=end, eigenvalue=0.9 * 3.8 / end if seed else 8.55, sharpness=4.7))
    return runs


def test_keskar_v3s_stopped_runs_are_not_read_as_flatter(tmp_path):
    accuracy = [{"recipe": label, "global_batch": batch, "train_accuracy": None, "gap_accuracy": None, "test_accuracy": None,
                 "ok_runs": 5, "total": 5} for label, batch in (("SB", 32), ("LB equal epochs", 512), ("LB equal loss", 512))]
    sharp = [{"recipe": label, "global_batch": 32, "sharpness": 5.0, "low": 4.0, "high": 6.0, "n": 5} for label in ("SB", "LB equal loss")]
    write_study(tmp_path / "keskar_v3", _v3_runs(), ("report.json", {"accuracy": accuracy, "sharpness": sharp}))
    verdict, evidence = anchor_keskar_v3(tmp_path)
    assert evidence.startswith("the claim is not judged on flatness here: the large batch tests within the 1-point margin")
    assert "flatness not compared at equal LR: LB equal loss's runs ended at LR 0.135 to 0.88 (λ / limit 0.30 to 0.90), SB's at LR 0" in evidence
    table = "\n".join(flatness_runs_table(run_flatness(tmp_path, "keskar_v3")))
    assert "| LB equal loss | 512 | 0 | 1000 | 0.135 (8% of 1.6) | 8.55 | 28.1 | 0.30 | 4.70 |" in table
    assert "| SB | 32 | 0 | 1000 | 0 (0% of 0.1) | 9 | ∞ | 0.00 | 5.80 |" in table


def _v4_runs(in_regime_test, keskar_test, longer_loss=0.10):
    """keskar_v4's runs: SB (world 1), batch 1,024 (world 8) at 1x and 2x, batch 5,376 (world 42) at 1x and 4x."""
    runs = []
    for seed in range(1, 6):
        wobble = 0.001 * (seed - 3)
        runs.append(dict(label="momentum tuned", world_size=1, batch=128, seed=seed, test=0.90 + wobble, loss=0.12, peak=0.1, end=1e-6,
                         eigenvalue=20 + seed, sharpness=10))
        for world, batch, factor, test, loss, eigenvalue in ((8, 1024, 1, in_regime_test, 0.15, 30), (8, 1024, 2, in_regime_test, longer_loss, 31),
                                                              (42, 5376, 1, keskar_test - 0.01, 0.3, 60), (42, 5376, 4, keskar_test, 0.2, 61)):
            label = "momentum tuned" + ("" if factor == 1 else f" {factor}x longer")
            runs.append(dict(label=label, world_size=world, batch=batch, seed=seed, test=test + wobble, loss=loss, peak=1.0, end=1e-6,
                             eigenvalue=eigenvalue + seed, sharpness=20))
    return runs


def test_keskar_v4_judges_each_regime_on_its_own_runs_at_the_annealed_equal_loss_horizon(tmp_path):
    write_study(tmp_path / "keskar_v4", _v4_runs(in_regime_test=0.90, keskar_test=0.85), ("protocol.json", {"rows": []}))
    runs = run_flatness(tmp_path, "keskar_v4")
    in_regime, keskar = keskar_v4_comparison(runs, 8), keskar_v4_comparison(runs, 42)
    assert in_regime.equal_loss == 2.0 and set(in_regime.large) == {1.0, 2.0}
    assert keskar.equal_loss is None  # 0.2 > the small batch's 0.12 at 4x: judged at equal epochs, said so
    verdict, evidence = anchor_keskar_v4(tmp_path, "in regime")
    assert verdict == "matches"
    assert evidence.startswith("keskar_v4 in regime, batch 1024 minus 128, at equal training loss (2x longer, annealed = equal "
                               "training loss: mean train loss 0.100 against the small batch's 0.120)")
    # within the margin but sharper (eigenvalue 31+ against 21+, both annealed): one part holds, the other does not
    assert keskar_v4_claim(tmp_path, "in regime") == (
        "the claim holds in part: sharper, tests within the 1-point margin at equal training loss; matches at equal epochs")
    verdict, evidence = anchor_keskar_v4(tmp_path, "Keskar's regime")
    assert verdict == "worse"
    assert "at equal epochs: no annealed horizon (1x, 4x) reached the small batch's mean train loss 0.120" in evidence
    # worse and sharper, judged at equal epochs (no horizon reached the loss): no second basis to name
    assert keskar_v4_claim(tmp_path, "Keskar's regime") == "the claim holds: sharper, tests worse at equal epochs"
    text = "\n".join(section_keskar_v4(tmp_path))
    assert "| in regime: 2x longer, annealed = equal training loss | 1024 | 1000 | 1e-06 | 0.1 |" in text
    assert ("- **Keskar's regime**: **worse**; the claim holds: sharper, tests worse at equal epochs. keskar_v4 Keskar's regime, "
            "batch 5376 minus 128, at equal epochs") in text


def test_keskar_v4_does_not_read_flatness_at_unequal_lr_nor_before_it_is_committed(tmp_path):
    assert anchor_keskar_v4(tmp_path, "in regime") == ("not measured yet", "keskar_v4 is not committed")
    assert section_keskar_v4(tmp_path)[2].startswith("*Not committed yet*: `lbtrain sweep experiments/keskar_v4.yaml")
    runs = _v4_runs(in_regime_test=0.90, keskar_test=0.85)
    for run in runs:
        if run["world_size"] == 8:
            run["end"] = 0.5  # stopped mid-schedule
    write_study(tmp_path / "keskar_v4", runs, ("protocol.json", {"rows": []}))
    _, evidence = anchor_keskar_v4(tmp_path, "in regime")
    assert "; flatness not compared at equal LR: the large batch's runs ended at LR 0.5" in evidence
    # the flatness part is not read; the test part (within the margin) still contradicts the claim
    assert keskar_v4_claim(tmp_path, "in regime").startswith(
        "the claim does not hold: flatness not judged (not measured at equal LR), tests within the 1-point margin at equal training loss")
    assert keskar_v4_claim(tmp_path, "Keskar's regime") == "the claim holds: sharper, tests worse at equal epochs"


def _difference(low, high):
    return Estimate((low + high) / 2, low, high, 5, df=8.0, n_second=5)


SHARPER, FLATTER, LEVEL = _difference(1.0, 3.0), _difference(-3.0, -1.0), _difference(-1.0, 1.0)
# Two seeds of the large batch: an interval wholly above 0 that is not shown, so not read.
FEW = Estimate(2.0, 1.0, 3.0, 2, df=1.0, n_second=5)


@pytest.mark.parametrize("verdict, flatness, expected", [
    # keskar_v4 in Keskar's regime: sharper by both measures, inconclusive at equal loss, worse at equal epochs
    ("inconclusive", {"sharpness": SHARPER, "hessian_top_eigenvalue": SHARPER},
     "the claim holds in part: sharper, not measurably worse at equal training loss (inconclusive at the 1-point margin); worse at "
     "equal epochs"),
    # keskar_v4 in regime: flatter by sharpness, level by the eigenvalue, within the margin: "does not hold" from "flatter"
    ("matches", {"sharpness": FLATTER, "hessian_top_eigenvalue": LEVEL},
     "the claim does not hold: flatter by sharpness, tests within the 1-point margin at equal training loss; worse at equal epochs"),
    # Level on both measures is not "flatter": with an inconclusive test difference nothing is decided
    ("inconclusive", {"sharpness": LEVEL, "hessian_top_eigenvalue": LEVEL},
     "the claim is inconclusive: neither sharper nor flatter, not measurably worse at equal training loss (inconclusive at the "
     "1-point margin); worse at equal epochs"),
    # Fewer than 3 seeds on a side: no interval is shown, so none is read, however it lies
    ("inconclusive", {"sharpness": FEW, "hessian_top_eigenvalue": FEW},
     "the claim is inconclusive: flatness not judged (1 or 2 seeds: no interval), not measurably worse at equal training loss "
     "(inconclusive at the 1-point margin); worse at equal epochs"),
    ("worse", {"sharpness": FEW, "hessian_top_eigenvalue": LEVEL}, "the claim holds in part: neither sharper nor flatter, tests worse "
     "at equal training loss; worse at equal epochs"),
    ("worse", {"sharpness": SHARPER, "hessian_top_eigenvalue": SHARPER}, "the claim holds: sharper, tests worse at equal training loss; "
     "worse at equal epochs"),
    ("worse", {"sharpness": FLATTER, "hessian_top_eigenvalue": FLATTER}, "the claim holds in part: flatter, tests worse at equal "
     "training loss; worse at equal epochs"),
    ("inconclusive", {"sharpness": SHARPER, "hessian_top_eigenvalue": FLATTER}, "the claim is inconclusive: sharper by sharpness, "
     "flatter by top Hessian eigenvalue, not measurably worse at equal training loss (inconclusive at the 1-point margin); worse at "
     "equal epochs"),
    ("better", {"sharpness": SHARPER, "hessian_top_eigenvalue": LEVEL}, "the claim holds in part: sharper by sharpness, tests better "
     "at equal training loss; worse at equal epochs"),
])
def test_keskars_claim_is_read_part_by_part_from_the_judged_differences(verdict, flatness, expected):
    assert keskar_claim(verdict, flatness, "", "equal training loss", "worse") == expected


def test_a_flatness_difference_on_fewer_than_three_seeds_is_shown_without_an_interval_and_not_read():
    assert flatness_text({"sharpness": FEW}) == "sharpness +2.00 (n=2 vs 5; 1 or 2 seeds: no interval) (not read)"
    assert flatness_part({"sharpness": FEW, "hessian_top_eigenvalue": FEW}, "") == (
        "the claim is inconclusive", "flatness not judged (1 or 2 seeds: no interval)")
    with pytest.raises(ValueError, match="at least one part"):
        parts_claim([])


def test_the_keskar_v2_section_prints_each_runs_lr_at_its_end(tmp_path):
    accuracy = [{"recipe": label, "global_batch": batch, "train_accuracy": {"mean": 0.9, "low": 0.89, "high": 0.91, "n": 5, "df": 4},
                 "test_accuracy": 0.9, "low": 0.89, "high": 0.91, "df": 4,
                 "gap_accuracy": {"mean": 0.01, "low": 0.0, "high": 0.02, "n": 5, "df": 4}, "ok_runs": 5, "total": 5}
                for label, batch in (("SB", 32), ("LB equal epochs", 512), ("LB equal loss", 512))]
    write_study(tmp_path / "keskar_v3", _v3_runs(), ("report.json", {"accuracy": accuracy, "budget": "8 epochs"}))
    text = "\n".join(section_keskar_v2(tmp_path, study="keskar_v3"))
    assert "λ / limit" in text and "| LB equal loss | 512 | 1 | 1000 | 0.88 (55% of 1.6) |" in text
    assert "but flatness not compared at equal LR" in text


def test_the_pages_keskar_v4_regimes_are_the_experiments_large_batches():
    from pathlib import Path

    from helpers import REPO_ROOT
    from lab.results_page.keskar import KESKAR_V4_REGIMES
    from lbtrain.config import load_experiment

    experiment = load_experiment(Path(REPO_ROOT) / "experiments" / "keskar_v4.yaml")
    sizes = experiment.grid["world_sizes"]
    assert set(KESKAR_V4_REGIMES.values()) == set(sizes) - {min(sizes)}
    assert {control.world_size for control in experiment.protocol.train_longer} == set(KESKAR_V4_REGIMES.values())
