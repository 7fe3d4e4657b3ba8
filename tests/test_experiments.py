"""The committed experiments: each loads, expands (or, with a protocol, lays out its arms), and
the studies built on goyal_bn's (goyal_v3's) tuning use the base LR it tuned, keskar_v3's
equal-loss target is goyal_v3's small-batch training loss, and the sync_vs_async pair differs only
in its mode."""

import csv
import statistics
from pathlib import Path

import optuna
import pytest
import yaml
from helpers import REPO_ROOT

from lbtrain.config import load_experiment
from lbtrain.reports.tables import read_summary
from lbtrain.studies.plan import expand
from lbtrain.studies.protocol import protocol_arms

EXPERIMENTS = sorted((Path(REPO_ROOT) / "experiments").glob("*.yaml"))
BUILT_ON_GOYAL_BN = ("keskar_v2", "warmup_ablation")
BUILT_ON_GOYAL_V3 = ("keskar_v3", "critical_batch_v3")
GOYAL_V3 = Path(REPO_ROOT) / "results" / "goyal_v3"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[path.stem for path in EXPERIMENTS])
def test_every_committed_experiment_loads_and_expands(path):
    experiment = load_experiment(path)
    assert experiment.name == path.stem
    assert protocol_arms(experiment) if experiment.protocol is not None else expand(experiment)


@pytest.mark.parametrize("name", BUILT_ON_GOYAL_BN)
def test_studies_built_on_goyal_bn_use_its_tuned_momentum_base_lr(name):
    results = Path(REPO_ROOT) / "results" / "goyal_bn"
    if not (results / "protocol.json").is_file():
        pytest.skip("goyal_bn is not committed yet: its tuned base LR cannot be checked")
    reference = [row for row in read_summary(results / "summary.csv") if row["label"] == "momentum tuned" and row["world_size"] == 1]
    tuned = {yaml.safe_load((results / "runs" / row["run_id"] / "config.yaml").read_text())["lr"]["base_lr"] for row in reference}
    assert len(tuned) == 1
    assert load_experiment(Path(REPO_ROOT) / "experiments" / f"{name}.yaml").base_run()["lr"]["base_lr"] == tuned.pop()


@pytest.mark.parametrize("name", BUILT_ON_GOYAL_V3)
def test_studies_built_on_goyal_v3_use_the_base_lr_its_grid_chose_at_every_world_size(name):
    # Read-only: the committed file is never written, nor waited on while another process reads it.
    storage = f"sqlite:///file:{GOYAL_V3 / 'optuna.db'}?mode=ro&uri=true"
    best = set()
    for size in (1, 4, 16):
        study = optuna.load_study(study_name=f"goyal_v3-momentum-warmup-w{size}", storage=storage)
        ok = [trial for trial in study.get_trials(deepcopy=False) if trial.value is not None and trial.user_attrs.get("status") == "ok"]
        best.add(max(ok, key=lambda trial: trial.value).params["lr.base_lr"])
    assert best == {0.1}
    assert load_experiment(Path(REPO_ROOT) / "experiments" / f"{name}.yaml").base_run()["lr"]["base_lr"] == best.pop()


def test_keskar_v3_stops_the_large_batch_at_goyal_v3s_small_batch_training_loss():
    finals = sorted((GOYAL_V3 / "runs").glob("momentum-warmup-tuned-w1-s*"))
    if len(finals) < 5:
        pytest.skip("goyal_v3's world-size-1 finals are not committed yet")
    losses = []
    for run in finals:
        with open(run / "history.csv") as handle:
            losses.append(float(list(csv.DictReader(handle))[-1]["loss"]))
    [equal_loss] = [variant for variant in load_experiment(Path(REPO_ROOT) / "experiments" / "keskar_v3.yaml").grid["variants"]
                    if variant["label"] == "LB equal loss"]
    assert equal_loss["training.stop_at"] == {"train_loss": round(statistics.fmean(losses), 3)}


def test_the_async_twin_is_the_sync_grid_in_another_mode():
    """lbtrain compare pairs the two by cell: everything but name, description and mode is equal."""
    sync, twin = (load_experiment(Path(REPO_ROOT) / "experiments" / f"sync_vs_async_{side}.yaml").model_dump()
                  for side in ("sync", "async"))
    assert {key for key in sync if sync[key] != twin[key]} == {"name", "description", "mode"}
    assert (sync["mode"], twin["mode"]) == ("simulated", "parameter_server")
