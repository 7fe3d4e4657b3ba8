"""lbtrain scale end to end on a user's package written to a temporary folder (a functional
convnet with batch norm, an ``.npz``): the dry run prints the design and its price, a tiny study
writes an answer whose numbers summary.csv re-derives (two seeds: an exploratory study, flagged), a rerun trains nothing, advise cites the
answer, and bad input is one line, exit 2, before anything runs."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from helpers import write_package
from lbtrain.config import load_experiment
from lbtrain.reports.decisions import claim
from lbtrain.reports.statistics import difference_interval, mean_interval
from lbtrain.reports.tables import read_summary
from lbtrain.studies.advisor import _recipe_line, own_evidence
from lbtrain.studies.findings import recipe_advice


def write_project(folder: Path) -> Path:
    """tests/models/test_own_model.py's user package (``ownpkg``: a functional convnet with batch norm, and
    ``data.npz``: 384 training images) and an experiment of it with a base run only."""
    write_package(folder)
    experiment = {
        "name": "own_scale",
        "data": {"dataset": "data.npz", "validation_split": 0.25},
        "model": {"name": "ownpkg.models:convnet", "options": {"width": 4}},
        "optimizer": {"name": "momentum", "params": {"momentum": 0.9}},
        "lr": {"base_lr": 0.05, "base_batch": 8},
        "training": {"per_worker_batch": 8, "epochs": 1, "checkpoint": False},
    }
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


@pytest.fixture
def project(tmp_path, monkeypatch):
    write_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith("ownpkg")]:
        del sys.modules[name]


def test_dry_run_of_your_model_runs_none_of_it_and_points_to_price(project, lbtrain_here):
    models = project / "ownpkg" / "models.py"
    signature = "def convnet(input_shape, num_classes, width=4):\n"
    assert signature in models.read_text()
    models.write_text(models.read_text().replace(signature, signature + "    open('BUILT', 'w').write('factory ran')\n", 1))
    result = lbtrain_here("scale", "experiment.yaml", "--world-sizes", "1,4", "--dry-run", cwd=project)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == ("design and price: need your model or data to run (model 'ownpkg.models:convnet'), which --dry-run "
                             "never does: --price designs the study from your data's size and prices it from a probe of a few "
                             "steps at each global batch, here\n")
    assert "price probe" not in result.stderr
    assert not (project / "results").exists() and not (project / "BUILT").exists()


def test_price_prints_the_design_with_its_floor_and_price_and_writes_nothing(project, lbtrain_here):
    result = lbtrain_here("scale", "experiment.yaml", "--world-sizes", "1,4", "--price", cwd=project)
    assert result.returncode == 0, result.stderr[-2000:]
    # 288 training samples: world 1 takes 36 steps an epoch, world 4 (batch 32) 9, so both get the floor of 300.
    assert "world    4: global batch     32 (11.11% of the data), 300 updates (floor: 1 epochs would give 9)" in result.stdout
    assert "OUT OF REGIME" in result.stdout and "estimated machine time" in result.stdout
    assert "seeds 1, 2, 3, 4, 5" in result.stdout
    assert not (project / "results").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--world-sizes", "4,1"], "--world-sizes '4,1': give at least two positive world sizes in increasing order"),
    (["--world-sizes", "1,64"], "world size 64 needs a global batch of 512, more than the 288 training samples"),
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
    # Two seeds, as a CI-sized first look: the protocol runs it as exploratory and the answer flags every world size;
    # one tuning seed (the design's 2 would double the tuning).
    arguments = ("scale", "experiment.yaml", "--world-sizes", "1,4", "--seeds", "2", "--tuning-seeds", "1", "--min-updates", "120")
    result = lbtrain_here(*arguments, cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = project / "results" / "own_scale"
    answer = json.loads((folder / "answer.json").read_text())
    for key in ("experiment", "model", "data", "per_world_size", "linear_rule_holds_up_to", "first_worse", "noise_scale", "flags",
                "machine_hours"):
        assert key in answer
    assert answer["model"] == "ownpkg.models:convnet" and answer["data"] == "data.npz"
    summary = read_summary(folder / "summary.csv")
    reference, large = answer["per_world_size"]
    assert (reference["world_size"], large["world_size"], large["global_batch"], large["updates"]) == (1, 4, 32, 120)

    def ok_tests(row):
        return [r["test_accuracy"] for r in summary if r["label"] == row["use"] and r["world_size"] == row["world_size"]
                and r["status"] == "ok"]

    # Whatever the seeds did (a tiny model may collapse on one), each number follows from summary.csv and each gap is flagged.
    assert reference["use"] or large["use"], answer["flags"]
    for row in (reference, large):
        assert {"mean", "low", "high", "n"} <= set(row["test_accuracy"]) and {"mean", "low", "high", "n", "df"} <= set(row["difference"])
        if row["use"] is None:
            assert f"world {row['world_size']}: no arm had every seed ok" in answer["flags"]
            continue
        assert row["test_accuracy"]["mean"] == mean_interval(ok_tests(row)).mean and row["test_accuracy"]["n"] == len(ok_tests(row)) == 2
        assert any(flag.startswith(f"world {row['world_size']}: {row['use']} has 2 ok seeds, fewer than 3") for flag in answer["flags"])
    difference = difference_interval(ok_tests(large) if large["use"] else [], ok_tests(reference) if reference["use"] else [])
    assert large["difference"]["mean"] == pytest.approx(difference.mean) and large["decision"] == claim(difference)
    assert any("global batch 32 is 11.1% of the training set" in flag for flag in answer["flags"])
    assert any("120 updates, fewer than 300" in flag for flag in answer["flags"])
    excluded = sum(r["status"] != "ok" for r in summary)
    assert excluded == 0 or any("left out of every mean" in flag for flag in answer["flags"])
    assert (folder / "answer.md").read_text().startswith("# own_scale: the scaling answer")
    assert (folder / "figures" / "answer_accuracy.png").stat().st_size > 0
    finished = {path: path.stat().st_mtime_ns for path in (folder / "runs").glob("*/metrics.json")}

    again = lbtrain_here(*arguments, cwd=project)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "not in this grid" not in again.stderr  # the controls a rerun finds on disk are the study's own
    assert {path: path.stat().st_mtime_ns for path in (folder / "runs").glob("*/metrics.json")} == finished

    experiment = load_experiment(project / "experiment.yaml")
    evidence = own_evidence(experiment, 4)
    line = _recipe_line(evidence)
    assert line.startswith("LR recipe: from your own scaling study (results/own_scale/answer.json)")
    assert (f"at 4 workers (global batch 32): {large['use']}, test accuracy " in line if large["use"]
            else "no recipe had every seed ok at 4 workers" in line)


def test_advise_without_an_answer_names_the_other_models_study_it_falls_back_to(project):
    experiment = load_experiment(project / "experiment.yaml")
    assert own_evidence(experiment, 4) is None
    fallback = recipe_advice("ownpkg.models:convnet", "data.npz", 4.0)
    line = _recipe_line(fallback)
    assert f"lbtrain's study \"{fallback['title']}\" ({fallback['model']} on {fallback['dataset']}" in line
    assert "another model's evidence, not yours" in line
