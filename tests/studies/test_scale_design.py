"""lbtrain scale's design and price: the update floor, the grid, fresh seeds, controls, the price
formula and the budget's trimming order, with exact numbers; no training."""

import math

import pytest

from lbtrain.config import ConfigError, ExperimentConfig, run_config_from_dict
from lbtrain.studies.price import Probe, StepCost
from lbtrain.studies.protocol import protocol_arms
from lbtrain.studies.scale import (
    default_world_sizes,
    describe_design,
    design_study,
    parse_world_sizes,
    price_design,
    trim_to_budget,
)
from lbtrain.studies.scale.design import GRID_POINTS, TUNING_SEEDS
from lbtrain.studies.search import grid_values


def experiment(**training) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "name": "own", "data": {"dataset": "mnist1d", "validation_split": 0.1}, "model": {"name": "mlp", "options": {"widths": [8]}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}}, "lr": {"base_lr": 0.05, "base_batch": 32},
        "training": {"per_worker_batch": 32, "epochs": 3, **training}})


def test_default_world_sizes_are_powers_of_4_within_5_percent_of_the_data():
    assert default_world_sizes(32, 54_000) == [1, 4, 16, 64]  # 64 x 32 = 2,048 <= 5% of 54,000 = 2,700
    assert default_world_sizes(32, 40_000) == [1, 4, 16]  # 2,048 > 2,000
    assert default_world_sizes(128, 1_000) == [1, 4]  # nothing fits: the smallest comparison, flagged out of regime


@pytest.mark.parametrize("text", ["4,1", "1", "1,1,4", "0,4", "1,x"])
def test_world_sizes_must_be_at_least_two_increasing_positive_integers(text):
    with pytest.raises(ConfigError, match="--world-sizes"):
        parse_world_sizes(text)


def test_equal_epochs_with_too_few_updates_get_the_floor_and_say_so():
    design = design_study(experiment(), 4_000, [1, 4, 16])
    # 4,000 // 32 = 125 steps an epoch at world 1: 3 epochs = 375 >= 300; world 4: 31 x 3 = 93; world 16: 7 x 3 = 21.
    assert [(w.epoch_updates, w.updates, w.floored) for w in design.worlds] == [(375, 375, False), (93, 300, True), (21, 300, True)]
    text = "\n".join(describe_design(design))
    assert "300 updates (floor: 3 epochs would give 93)" in text and "375 updates (3 epochs)" in text
    assert "OUT OF REGIME" in text  # 16 x 32 = 512 is 12.8% of 4,000
    for world in design.worlds:
        config = run_config_from_dict({**design.protocol_experiment().base_run(),
                                       "training": {**design.protocol_experiment().training, "world_size": world.world_size}})
        assert config.total_steps(world.steps_per_epoch) == world.updates


def test_a_world_size_the_data_cannot_fill_is_refused():
    with pytest.raises(ConfigError, match="world size 64 needs a global batch of 2048, more than the 1000 training samples"):
        design_study(experiment(), 1_000, [1, 64])


def test_the_protocol_tunes_5_lrs_around_the_linear_rule_on_2_seeds_with_fresh_final_seeds_and_controls():
    design = design_study(experiment(), 40_000, [1, 4, 16])
    protocol = design.protocol_experiment()
    assert grid_values(protocol.search["lr.base_lr"]) == [0.0125, 0.025, 0.05, 0.1, 0.2]  # 0.05 in the middle
    assert len(grid_values(protocol.search["lr.base_lr"])) == GRID_POINTS
    assert protocol.protocol.seeds == [1, 2, 3, 4, 5] and protocol.protocol.tuning_seeds == [0, 100] == list(TUNING_SEEDS)
    assert not set(protocol.protocol.seeds) & set(TUNING_SEEDS) and protocol.training["seed"] == 0
    assert protocol.protocol.rules == {"momentum+warmup": ["linear", "sqrt", "none"]}
    assert [(c.world_size, c.factor, c.arm) for c in protocol.protocol.train_longer] == [
        (1, 3, None), (16, 3, "momentum+warmup linear rule")]  # the best arm at the reference; the linear rule's at the largest
    assert ("convergence controls: the best arm at world 1 and momentum+warmup linear rule at world 16 re-run for 3x its updates"
            in describe_design(design))
    labels = {(arm.label, arm.world_size) for arm in protocol_arms(protocol)}
    assert ("momentum+warmup linear rule", 16) in labels and ("momentum+warmup none rule", 4) in labels
    assert ("lars+warmup tuned", 16) in labels and ("momentum+warmup tuned", 16) in labels
    assert protocol.training["min_steps"] == 300 and protocol.analysis["noise_scale"] is True


def test_an_experiment_with_its_own_grid_or_protocol_is_refused():
    with pytest.raises(ConfigError, match="designs the grid and the protocol itself"):
        design_study(ExperimentConfig.model_validate({**experiment().model_dump(), "grid": {"variants": [{"label": "a"}]}}), 4_000)


def probe(step_seconds: dict[int, float]) -> Probe:
    return Probe({batch: StepCost(batch, seconds, 2.0, 1e-4) for batch, seconds in step_seconds.items()}, 4_000, 400, 1_000,
                 launch_seconds=3.0)


def test_a_budget_trims_in_the_stated_order_and_refuses_what_cannot_fit():
    design = design_study(experiment(), 4_000, [1, 4, 16])
    costs = probe({32: 0.01, 128: 0.02, 512: 0.05})
    full = price_design(design, costs)
    trimmed, price = trim_to_budget(design, 0.999 * full.total / 3600, costs)
    assert len(trimmed.seeds) == 3 and trimmed.trimmed[0].startswith("final seeds 5 -> 3: every interval about 2.0x wider")
    assert price.total < full.total
    # Next in the order: the second tuning seed, which halves the tuning's price.
    fewer_seeds = trimmed.replace(trimmed=())
    one_tuning_seed, cheaper = trim_to_budget(fewer_seeds, 0.999 * price.total / 3600, costs)
    assert one_tuning_seed.tuning_seeds == (0,) and one_tuning_seed.trimmed[0].startswith("tuning seeds 2 -> 1")
    assert cheaper.trials == pytest.approx(price.trials / 2) and cheaper.finals == pytest.approx(price.finals)
    with pytest.raises(ConfigError, match=r"--budget 1e-06 h is too small for one run per arm: the smallest design \(world sizes 1, 16"):
        trim_to_budget(design, 1e-6, costs)


def test_the_interval_widening_of_fewer_seeds_is_the_t_quantile_ratio():
    from scipy.stats import t

    from lbtrain.studies.scale.design import seed_interval_widening

    assert seed_interval_widening(5, 3) == pytest.approx((t.ppf(0.975, 2) / math.sqrt(3)) / (t.ppf(0.975, 4) / math.sqrt(5)))


def test_a_steps_or_samples_budget_becomes_whole_epochs_at_the_reference_batch():
    # 250 steps x 32 = 8,000 samples = 2 epochs of 4,000; 9,000 samples round up to 3.
    assert design_study(experiment(epochs=None, steps=250), 4_000, [1, 4]).epochs == 2
    assert design_study(experiment(epochs=None, samples=9_000), 4_000, [1, 4]).epochs == 3


def test_the_design_keeps_the_experiments_storage_with_its_password():
    url = "postgresql://lb:secret@db:5432/sweeps"
    spec = {**experiment().model_dump(), "sweep": {"storage": url}}
    design = design_study(ExperimentConfig.model_validate(spec), 40_000, [1, 4])
    assert design.protocol_experiment().sweep.storage == url
    assert "secret" not in str(design.protocol_experiment().model_dump(mode="json")["sweep"]["storage"])


def test_a_simulated_study_pays_one_process_start_trials_none():
    """Trials train in this process, and a simulated world's finals and controls share the child
    the runner keeps between runs: one process start in all (as lbtrain run --price counts it)."""
    import dataclasses

    design = design_study(experiment(), 4_000, [1, 4])
    costs = probe({32: 0.01, 128: 0.02})
    started = price_design(design, costs).total - price_design(design, dataclasses.replace(costs, launch_seconds=0.0)).total
    assert started == pytest.approx(3.0)


def test_a_design_whose_runs_stop_at_a_target_is_priced_at_most():
    costs = probe({32: 0.01, 128: 0.02})
    plain = price_design(design_study(experiment(), 4_000, [1, 4]), costs)
    stopping = price_design(design_study(experiment(stop_at={"val_accuracy": 0.9}), 4_000, [1, 4]), costs)
    assert plain.stopping == 0 and plain.describe().startswith(f"estimated machine time {plain.total / 3600:.2f} h (tuning")
    # Tuning: 2 recipes (momentum, LARS) x 2 worlds x 6 trials x 2 seeds = 48 runs; finals: (2 arms at world 1 + the
    # tuned, 3 rules and LARS at world 4) x 5 seeds = 35; controls: 2 x 5 seeds = 10.
    assert stopping.stopping == 48 + 35 + 10 and stopping.total == pytest.approx(plain.total)
    assert stopping.describe().startswith(f"estimated machine time at most {plain.total / 3600:.2f} h ({stopping.stopping} runs stop at "
                                          "a target, each priced at its whole budget")


def test_tuning_seeds_can_be_set_and_never_meet_a_final_seed():
    assert design_study(experiment(), 40_000, [1, 4], tuning_seeds=1).protocol_experiment().protocol.tuning_seeds == [0]
    three = design_study(experiment(), 40_000, [1, 4], tuning_seeds=3)
    assert three.tuning_seeds == (0, 100, 200) and not set(three.tuning_seeds) & set(three.seeds)
    assert "each trial scored on validation, on the mean of seeds 0, 100, 200" in "\n".join(describe_design(three))


def test_the_grid_is_centred_on_the_experiments_rule_when_linear_or_sqrt():
    sqrt = ExperimentConfig.model_validate({**experiment().model_dump(), "lr": {"base_lr": 0.05, "base_batch": 32, "rule": "sqrt"}})
    design = design_study(sqrt, 40_000, [1, 4])
    config = run_config_from_dict({**design.protocol_experiment().base_run(), "training": {
        **design.protocol_experiment().training, "world_size": 4}})
    from lbtrain.scaling import scale_learning_rate

    lr = scale_learning_rate(config.lr.base_lr, config.lr.base_batch, config.global_batch, config.lr.rule)
    assert design.centre_rule == "sqrt" and config.lr.rule == "sqrt" and lr == pytest.approx(0.05 * 2)  # sqrt(128 / 32) = 2
    none = ExperimentConfig.model_validate({**experiment().model_dump(), "lr": {"base_lr": 0.05, "base_batch": 32, "rule": "none"}})
    assert design_study(none, 40_000, [1, 4]).centre_rule == "linear"
    assert "around the sqrt rule's value" in "\n".join(describe_design(design))


def test_a_rerun_resumes_what_the_budget_kept_whatever_a_new_probe_would_trim():
    import json

    design = design_study(experiment(), 4_000, [1, 4, 16])
    costs = probe({32: 0.01, 128: 0.02, 512: 0.05})
    trimmed, _ = trim_to_budget(design, 0.5 * price_design(design, costs).total / 3600, costs)
    assert trimmed.trimmed  # the budget gave something up
    record = json.loads(json.dumps(trimmed.record()))  # as the results folder keeps it
    resumed = design.with_record(record)  # the fresh design of the rerun, before any trimming
    assert resumed == trimmed and resumed.protocol_experiment().model_dump() == trimmed.protocol_experiment().model_dump()
    with pytest.raises(ConfigError, match=r"holds a scaling study of world sizes 1, 4, 16; this design has no world size 16: "
                                          r"rerun with --world-sizes 1,4,16"):
        design_study(experiment(), 4_000, [1, 4]).with_record(design.record())
