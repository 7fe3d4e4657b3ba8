"""experiments/keskar_v4.yaml keeps the design its header states (issue 56, item 4): batch 1,024 in
the page's regime (<= 5% of the data, >= 800 updates), batch 5,376 at Keskar et al.'s 10% with his
200 updates, every arm (the equal-loss controls included) a cosine that ends at ~0, the LR tuned at
every batch on two tuning seeds apart from five final seeds."""

import copy
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from lbtrain.config import load_experiment
from lbtrain.config.run import run_config_from_dict
from lbtrain.schedules import schedule_values
from lbtrain.studies.protocol import protocol_arms

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
