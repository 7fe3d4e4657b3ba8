"""`lbtrain advise`: the probe, the predictions it makes from the noise scale, and the command."""

import json
import re

import pytest
import yaml

from helpers import run_cli, stderr_lines
from lbtrain.config import ExperimentConfig
from lbtrain.studies.advisor import (
    ProbeStep,
    advise,
    noise_scale_estimate,
    probe_config,
    recommended_world_size,
    region,
    world_advice,
)

TINY = {
    "name": "advise",
    "data": {"dataset": "mnist1d", "train_subset": 256, "options": {"num_samples": 500}},
    "model": {"name": "mlp", "options": {"widths": [16]}},
    "optimizer": {"name": "momentum"},
    "lr": {"base_lr": 0.1, "base_batch": 32, "warmup_epochs": 1, "decay": {"type": "cosine"}},
    "training": {"per_worker_batch": 16, "epochs": 2},
    "grid": {"world_sizes": [1, 4]},
}


def test_the_probe_trains_the_base_run_at_the_base_batch_with_a_constant_lr():
    config = probe_config(ExperimentConfig.model_validate(TINY), steps=7)
    assert (config.training.world_size, config.training.per_worker_batch) == (2, 16)
    assert config.training.steps == 7 and config.training.epochs is None
    assert (config.lr.warmup_epochs, config.lr.decay) == (0, None)
    assert config.analysis.noise_scale
    # A base batch the per-worker batch does not divide: one worker of the base batch.
    odd = probe_config(ExperimentConfig.model_validate({**TINY, "lr": {**TINY["lr"], "base_batch": 24}}), steps=None)
    assert (odd.training.world_size, odd.training.per_worker_batch, odd.training.epochs) == (1, 24, 1)


def test_regions_are_ten_percent_from_the_minimum_steps_or_samples():
    assert region(10, 100) == "perfect scaling" and region(11, 100) == "diminishing returns"
    assert region(999, 100) == "diminishing returns" and region(1000, 100) == "wasteful"


def test_world_advice_follows_mccandlish_s_model():
    """S(B) = S_min (1 + B_noise / B) with S(128) = 300 steps: B_noise 256 gives S_min = 100."""
    worlds = world_advice(256.0, per_worker_batch=64, base_batch=128, base_steps=300, train_samples=6400,
                          sample_seconds=0.001, max_world_size=8)
    assert [world.world_size for world in worlds] == [1, 2, 4, 8]
    assert [world.steps for world in worlds] == pytest.approx([500, 300, 200, 150])
    assert [world.samples for world in worlds] == pytest.approx([32000, 38400, 51200, 76800])
    assert [world.epochs for world in worlds] == pytest.approx([5, 6, 8, 12])
    assert [world.seconds for world in worlds] == pytest.approx([32, 19.2, 12.8, 9.6])
    assert [world.region for world in worlds] == ["diminishing returns"] * 4
    assert recommended_world_size(worlds, 256.0) == 4
    assert recommended_world_size(worlds, 90.0) == 1  # 64 and 128 straddle 90: the nearer in log2


def test_the_noise_scale_is_the_ratio_of_the_late_means_with_an_interval():
    steps = [ProbeStep(i, 1000.0, 1.0, None, 0.1) for i in range(20)]
    steps += [ProbeStep(20 + i, 100.0 * (1 + i % 2), 1.0, 150.0, 0.1) for i in range(20)]
    estimate = noise_scale_estimate(steps)
    assert estimate.mean == pytest.approx(150.0) and estimate.n == 20
    assert 100 <= estimate.low < 150 < estimate.high <= 200
    # Fewer late steps than the bootstrap's threshold (BOOTSTRAP_MIN_N = 20): the ratio alone.
    short = noise_scale_estimate(steps[2:-2])
    assert short.mean == pytest.approx(150.0) and short.n == 18 and short.low is None
    undetermined = noise_scale_estimate([ProbeStep(i, 5.0, -1.0, None, 0.1) for i in range(6)])
    assert undetermined.mean is None


def test_advise_probes_and_recommends_with_a_cited_recipe():
    advice = advise(ExperimentConfig.model_validate(TINY), steps=12)
    assert len(advice.steps) == 12 and all(step.seconds > 0 for step in advice.steps)
    assert advice.noise_scale.mean is not None and advice.noise_scale.mean > 0
    assert advice.recommended_world_size in [world.world_size for world in advice.worlds]
    assert advice.recipe["title"].startswith("Fashion-MNIST mlp 512-512, ") and "report" not in advice.recipe
    data = advice.to_dict()
    assert data["probe"]["global_batch"] == 32 and data["probe"]["base_steps"] == 2 * (256 // 32)


def test_the_command_prints_advice_and_writes_json_and_figure(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**TINY, "output_dir": str(tmp_path / "results")}))
    result = run_cli("advise", str(path), "--steps", "10")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "recommended:" in result.stdout and "LR recipe:" in result.stdout
    advice = json.loads((tmp_path / "results" / "advise" / "advice" / "advice.json").read_text())
    assert len(advice["steps"]) == 10 and advice["worlds"]
    assert (tmp_path / "results" / "advise" / "advice" / "advice.png").stat().st_size > 1000


@pytest.mark.parametrize("arguments, message", [
    (["--steps", "0"], r"argument --steps: expected a whole number >= 1, got 0"),
    (["--set", "training.epoch=2"], r"--set training.epoch: no such field"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, arguments, message, lbtrain_here):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**TINY, "output_dir": str(tmp_path / "results")}))
    result = lbtrain_here("advise", str(path), *arguments)
    lines = stderr_lines(result.stderr)
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "results").exists()


def test_the_recipe_line_follows_validation_quotes_test_and_names_a_best_only_when_separable():
    from lbtrain.studies.advisor import _recipe_line
    from lbtrain.studies.findings import recipe_advice

    # goyal_bn at 1024 (64 x its base batch 16), from the shipped findings: the recipe first on validation, its test quoted.
    recipe = recipe_advice("resnet", "fashion_mnist", 64)
    first = recipe["held"][0]
    line = _recipe_line(recipe)
    assert line.startswith(f"LR recipe: {first['recipe']}, ") and f"({first['validation_accuracy']:.3f}" in line
    assert f"test accuracy {first['test_accuracy']:.3f} [{first['low']:.3f}, {first['high']:.3f}] (n={first['n']})" in line

    # Validation and test disagree: the recipe first on validation is named, with its (lower) test accuracy.
    def held(*standings):
        cells = [{"recipe": "steady", "validation_accuracy": 0.90, "test_accuracy": 0.80, "low": 0.79, "high": 0.81, "n": 3},
                 {"recipe": "fast", "validation_accuracy": 0.85, "test_accuracy": 0.95, "low": 0.94, "high": 0.96, "n": 3},
                 {"recipe": "slow", "validation_accuracy": 0.70, "test_accuracy": 0.70, "low": 0.69, "high": 0.71, "n": 3}]
        return {**recipe, "failed": [], "longer": [], "held": [{**cell, "standing": word} for cell, word in zip(cells, standings)]}

    line = _recipe_line(held("best", "below the best", "below the best"))
    assert line.startswith("LR recipe: steady, best on validation (0.900, separable from the other 2 recipes that held) in ")
    assert line.endswith(": test accuracy 0.800 [0.790, 0.810] (n=3)")
    # Not separable from "fast": tied with the best, no best named.
    line = _recipe_line(held("tied with the best", "tied with the best", "below the best"))
    assert line.startswith("LR recipe: steady, the highest mean validation accuracy (0.900) of the 3 recipes that held, "
                           "tied with the best on validation with fast in ") and "best on validation (" not in line
    one = {**recipe, "failed": [], "longer": [], "held": held("best")["held"][:1]}
    assert _recipe_line(one).startswith("LR recipe: steady, the one recipe that held in ")
