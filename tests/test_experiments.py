"""The committed experiments: each loads, expands (or, with a protocol, lays out its arms), and
the studies built on goyal_bn's (goyal_v3's) tuning use the base LR it tuned, keskar_v3's
equal-loss target is goyal_v3's small-batch training loss, and the sync_vs_async pair differs only
in its mode.

experiments/keskar_v4.yaml keeps the design its header states (issue 56, item 4): batch 1,024 in
the page's regime (<= 5% of the data, >= 800 updates), batch 5,376 at Keskar et al.'s 10% with his
200 updates, every arm (the equal-loss controls included) a cosine that ends at ~0, the LR tuned at
every batch on two tuning seeds apart from five final seeds."""

import copy
import csv
import statistics
from pathlib import Path

import optuna
import pytest
import yaml

from helpers import REPO_ROOT
from lbtrain.config import load_experiment
from lbtrain.config.run import run_config_from_dict
from lbtrain.reports.tables import read_summary
from lbtrain.schedules import schedule_values
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


# experiments/keskar_v4.yaml's design.
KESKAR_V4 = Path(REPO_ROOT) / "experiments" / "keskar_v4.yaml"
FASHION_MNIST_TRAIN = 60_000


@pytest.fixture(scope="module")
def experiment():
    return load_experiment(KESKAR_V4)


def _runs(experiment, factors):
    """Each arm's run config at its equal-epoch budget and at each train_longer factor's budget."""
    training_images = int(FASHION_MNIST_TRAIN * (1 - experiment.base_run()["data"]["validation_split"]))
    for arm in protocol_arms(experiment):
        data = copy.deepcopy(arm.base)
        data["training"]["world_size"] = arm.world_size
        config = run_config_from_dict(data)
        steps_per_epoch = training_images // config.global_batch
        yield arm, config, steps_per_epoch, training_images, 1
        for factor in factors.get(arm.world_size, []):
            longer = copy.deepcopy(data)
            longer["training"]["epochs"] = int(data["training"]["epochs"] * factor)
            yield arm, run_config_from_dict(longer), steps_per_epoch, training_images, factor


def test_keskar_v4_has_an_in_regime_large_batch_and_keskars_own(experiment):
    factors = {}
    for control in experiment.protocol.train_longer:
        factors.setdefault(control.world_size, []).append(control.factor)
    updates = {}
    for arm, config, steps_per_epoch, images, factor in _runs(experiment, factors):
        if factor == 1:
            updates[config.global_batch] = (config.global_batch / images, config.total_steps(steps_per_epoch))
    (small, _), in_regime, keskar = sorted(updates.items())
    assert small == 128
    assert in_regime[0] == 1024 and in_regime[1][0] <= 0.05 and in_regime[1][1] >= 800
    assert keskar[0] == 5376 and 0.095 <= keskar[1][0] <= 0.10 and keskar[1][1] >= 200
    # an equal-loss control (an annealed longer horizon) at both large batches, none at the small one
    assert set(factors) == {8, 42} and all(factor > 1 for values in factors.values() for factor in values)


def test_every_keskar_v4_schedule_anneals_to_zero_at_its_last_step(experiment):
    factors = {control.world_size: [control.factor] for control in experiment.protocol.train_longer}
    for arm, config, steps_per_epoch, _, factor in _runs(experiment, factors):
        total = config.total_steps(steps_per_epoch)
        values = schedule_values(config.schedule(steps_per_epoch), total)
        assert values[-1] < 1e-3 * values.max(), (arm.world_size, factor, values[-1], values.max())
        assert config.training.stop_at is None  # no run stops mid-schedule


def test_keskar_v4_tunes_every_batch_on_two_seeds_apart_from_five_final_seeds(experiment):
    protocol = experiment.protocol
    assert protocol.tuning_seeds == [0, 100] and protocol.seeds == [1, 2, 3, 4, 5]
    assert protocol.search_method == "grid" and protocol.grid_extensions >= 1
    search = experiment.search["lr.base_lr"]
    points = 1
    while search.low * 2 ** points <= search.high * (1 + 1e-9):
        points += 1
    assert points >= 5
    assert {arm.world_size for arm in protocol_arms(experiment) if arm.kind == "tuned"} == {1, 8, 42}
