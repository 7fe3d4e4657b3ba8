"""lbtrain scale end to end on a user's package written to a temporary folder (a functional
convnet with batch norm, an ``.npz``): the dry run prints the design and its price, a tiny study
writes an answer whose numbers summary.csv re-derives (two seeds: an exploratory study, flagged), a rerun trains nothing, advise cites the
answer, and bad input is one line, exit 2, before anything runs."""

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from lbtrain.config import load_experiment
from lbtrain.reports.decisions import claim
from lbtrain.reports.statistics import difference_interval, mean_interval
from lbtrain.reports.tables import read_summary
from lbtrain.studies.advisor import _recipe_line, own_evidence
from lbtrain.studies.findings import recipe_advice


def write_project(folder: Path) -> Path:
    package = folder / "scalepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(textwrap.dedent("""
        import keras

        def convnet(input_shape, num_classes, width=4):
            inputs = keras.Input(shape=input_shape)
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
            x = keras.layers.GlobalAveragePooling2D()(x)
            return keras.Model(inputs, keras.layers.Dense(num_classes)(x))
    """))
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 400)
    images = rng.normal(0, 0.3, (400, 8, 8, 1)).astype(np.float32)
    rows, columns = np.indices((8, 8))
    for image, label, offset in zip(images, labels, rng.integers(2, 6, 400)):
        image[[rows == offset, columns == offset, rows == columns, rows == 7 - columns][label], 0] += 1.0
    np.savez(folder / "data.npz", x_train=images[:320], y_train=labels[:320], x_test=images[320:], y_test=labels[320:])
    experiment = {
        "name": "own_scale",
        "data": {"dataset": "data.npz", "validation_split": 0.25},
        "model": {"name": "scalepkg.models:convnet", "options": {"width": 4}},
        "optimizer": {"name": "lamb"},  # no layer-wise twin to add: the smallest design
        "lr": {"base_lr": 0.1, "base_batch": 8},
        "training": {"per_worker_batch": 8, "epochs": 1, "checkpoint": False},
    }
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


@pytest.fixture
def project(tmp_path, monkeypatch):
    write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_dry_run_prints_the_design_with_its_floor_and_price_and_writes_nothing(project, lbtrain_here):
    result = lbtrain_here("scale", "experiment.yaml", "--world-sizes", "1,4", "--dry-run", cwd=project)
    assert result.returncode == 0, result.stderr[-2000:]
    # 240 training samples: world 1 takes 30 steps an epoch, world 4 (batch 32) 7, so both get the floor of 300.
    assert "world    4: global batch     32 (13.33% of the data), 300 updates (floor: 1 epochs would give 7)" in result.stdout
    assert "OUT OF REGIME" in result.stdout and "estimated machine time" in result.stdout
    assert "seeds 1, 2, 3, 4, 5" in result.stdout
    assert not (project / "results").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--world-sizes", "4,1"], "--world-sizes '4,1': give at least two positive world sizes in increasing order"),
    (["--world-sizes", "1,64"], "world size 64 needs a global batch of 512, more than the 240 training samples"),
    (["--world-sizes", "1,4", "--budget", "0.000001"], "--budget 1e-06 h is too small for one run per arm"),
    (["--world-sizes", "1,4", "--seeds", "0"], "argument --seeds: expected a whole number >= 1, got 0"),
])
def test_bad_input_is_one_line_exit_2_before_anything_runs(project, lbtrain_here, arguments, message):
    result = lbtrain_here("scale", "experiment.yaml", *arguments, cwd=project)
    assert result.returncode == 2
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("lbtrain: error:")]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / "results").exists()


@pytest.mark.slow
def test_a_tiny_study_answers_from_its_runs_and_a_rerun_trains_nothing(project, lbtrain_here):
    # Two seeds, as a CI-sized first look: the protocol runs it as exploratory and the answer flags every world size.
    arguments = ("scale", "experiment.yaml", "--world-sizes", "1,4", "--seeds", "2", "--min-updates", "30")
    result = lbtrain_here(*arguments, cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = project / "results" / "own_scale"
    answer = json.loads((folder / "answer.json").read_text())
    for key in ("experiment", "model", "data", "per_world_size", "linear_rule_holds_up_to", "first_worse", "noise_scale", "flags",
                "machine_hours"):
        assert key in answer
    assert answer["model"] == "scalepkg.models:convnet" and answer["data"] == "data.npz"
    summary = read_summary(folder / "summary.csv")
    reference, large = answer["per_world_size"]
    assert reference["use"] and large["use"], answer["flags"]
    assert (reference["world_size"], large["world_size"], large["global_batch"], large["updates"]) == (1, 4, 32, 30)
    for row in (reference, large):
        assert {"mean", "low", "high", "n"} <= set(row["test_accuracy"]) and {"mean", "low", "high", "n", "df"} <= set(row["difference"])
        tests = [r["test_accuracy"] for r in summary if r["label"] == row["use"] and r["world_size"] == row["world_size"]
                 and r["status"] == "ok"]
        assert row["test_accuracy"]["mean"] == mean_interval(tests).mean and row["test_accuracy"]["n"] == len(tests)
    reference_tests = [r["test_accuracy"] for r in summary if r["label"] == reference["use"] and r["world_size"] == 1 and r["status"] == "ok"]
    large_tests = [r["test_accuracy"] for r in summary if r["label"] == large["use"] and r["world_size"] == 4 and r["status"] == "ok"]
    difference = difference_interval(large_tests, reference_tests)
    assert large["difference"]["mean"] == pytest.approx(difference.mean) and large["decision"] == claim(difference)
    assert any("global batch 32 is 13.3% of the training set" in flag for flag in answer["flags"])
    assert any("30 updates, fewer than 300" in flag for flag in answer["flags"])
    assert any(flag.startswith(f"world 4: {large['use']} has 2 ok seeds, fewer than 3") for flag in answer["flags"])
    assert (folder / "answer.md").read_text().startswith("# own_scale: the scaling answer")
    assert (folder / "figures" / "answer_accuracy.png").stat().st_size > 0
    finished = {path: path.stat().st_mtime_ns for path in (folder / "runs").glob("*/metrics.json")}

    again = lbtrain_here(*arguments, cwd=project)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {path: path.stat().st_mtime_ns for path in (folder / "runs").glob("*/metrics.json")} == finished

    experiment = load_experiment(project / "experiment.yaml")
    evidence = own_evidence(experiment, 4)
    line = _recipe_line(evidence)
    assert line.startswith("LR recipe: from your own scaling study (results/own_scale/answer.json) at 4 workers (global batch 32): ")
    assert f"{large['use']}, test accuracy " in line


def test_advise_without_an_answer_names_the_other_models_study_it_falls_back_to(project):
    experiment = load_experiment(project / "experiment.yaml")
    assert own_evidence(experiment, 4) is None
    fallback = recipe_advice("scalepkg.models:convnet", "data.npz", 4.0)
    line = _recipe_line(fallback)
    assert f"lbtrain's {fallback['study']} study ({fallback['model']} on {fallback['dataset']}" in line
    assert "another model's evidence, not yours" in line
