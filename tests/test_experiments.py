"""The committed experiments: each loads, expands (or, with a protocol, lays out its arms), and
the studies built on goyal_bn's tuning use the base LR goyal_bn tuned, and the sync_vs_async pair
differs only in its mode."""

from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT
from lbtrain.config import load_experiment
from lbtrain.reports.tables import read_summary
from lbtrain.studies.plan import expand
from lbtrain.studies.protocol import protocol_arms

EXPERIMENTS = sorted((Path(REPO_ROOT) / "experiments").glob("*.yaml"))
BUILT_ON_GOYAL_BN = ("keskar_v2", "warmup_ablation")


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


def test_the_async_twin_is_the_sync_grid_in_another_mode():
    """lbtrain compare pairs the two by cell: everything but name, description and mode is equal."""
    sync, twin = (load_experiment(Path(REPO_ROOT) / "experiments" / f"sync_vs_async_{side}.yaml").model_dump()
                  for side in ("sync", "async"))
    assert {key for key in sync if sync[key] != twin[key]} == {"name", "description", "mode"}
    assert (sync["mode"], twin["mode"]) == ("simulated", "parameter_server")
