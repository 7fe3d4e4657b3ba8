"""lab.findings: the advisor's fallback evidence shipped in lbtrain is what this repository's
committed studies render, each study named by its public title."""

import csv
import statistics
from pathlib import Path

import pytest

from helpers import REPO_ROOT
from lab.findings import STUDIES, Study, render, study_findings
from lbtrain.studies.findings import FINDINGS_FILE, load_findings, recipe_advice

RESULTS = Path(REPO_ROOT) / "results"


def study_of(row: dict) -> str:
    """The committed study a shipped row's title names."""
    [name] = [name for name, study in STUDIES.items() if row["title"].startswith(f"{study.about}, batch ")]
    return name


def test_the_shipped_findings_are_what_the_committed_reports_render():
    assert load_findings() == render(RESULTS), "rerun: python -m lab.findings"


def test_the_shipped_findings_name_no_study_and_no_path_of_this_repository():
    text = FINDINGS_FILE.read_text()
    assert [word for word in (*STUDIES, "results/", "report.md") if word in text] == []
    titles = [study["title"] for study in load_findings()["studies"]]
    assert titles[0] == ("Fashion-MNIST resnet 8-16-32, momentum SGD with and without warmup, LARS with warmup, LR tuned on a grid, "
                         "batch 32 to 512, 5 seeds")
    assert len(set(titles)) == len(titles) == len(STUDIES)


def test_a_study_row_ranks_the_recipes_that_held_on_validation_and_names_those_that_failed():
    row = recipe_advice("mlp", "fashion_mnist", 16)  # goyal_scaling at 2048 = 16 x 128
    assert (study_of(row), row["global_batch"], row["multiple"]) == ("goyal_scaling", 2048, 16)
    summary = list(csv.DictReader((RESULTS / "goyal_scaling" / "summary.csv").read_text().splitlines()))
    for cell in row["held"]:
        runs = [r for r in summary if r["label"] == cell["recipe"] and int(r["global_batch"]) == 2048]
        assert cell["validation_accuracy"] == pytest.approx(statistics.fmean(float(r["validation_accuracy"]) for r in runs))
        assert cell["n"] == len(runs) == 3 and all(r["status"] == "ok" for r in runs)
    validation = [cell["validation_accuracy"] for cell in row["held"]]
    assert validation == sorted(validation, reverse=True)
    assert set(row["failed"]) == {"linear", "linear+warmup"}


def test_equal_steps_reruns_are_listed_apart_from_the_studys_budget():
    row = recipe_advice("resnet", "fashion_mnist", 64)  # goyal_bn at 1024 = 64 x 16
    assert (study_of(row), row["budget"], row["multiple"]) == ("goyal_bn", "6 epochs", 64)
    assert {cell["budget"] for cell in row["held"]} == {"6 epochs"}
    assert [(cell["recipe"], cell["budget"]) for cell in row["longer"]] == [(f"{row['held'][0]['recipe']} equal steps", "3000 steps")]


def test_the_study_of_the_same_model_and_the_newest_first():
    cnn = recipe_advice("cnn", "mnist1d", 4)
    assert (study_of(cnn), cnn["multiple"], cnn["held"][0]["recipe"]) == ("goyal_scaling_cnn", 4, "linear+warmup")
    # The resnet: the third edition (goyal_v3, multiples 1 to 16) first, the second (goyal_bn, to 64)
    # for a batch more than one doubling beyond goyal_v3's largest.
    assert [study_of(recipe_advice("resnet", "fashion_mnist", multiple)) for multiple in (1, 16, 32, 64)] == [
        "goyal_v3", "goyal_v3", "goyal_v3", "goyal_bn"]
    assert study_of(recipe_advice("mlp", "fashion_mnist", 1)) == "goyal_scaling"


def test_recipes_are_ranked_and_stood_on_validation_when_test_says_otherwise():
    # At batch 64, "b" tests 5 points higher but validates 2 points lower than "a"; "c" validates
    # highest of all but one of its runs diverged. At batch 128, "a" and "b" overlap on validation.
    seeds = {("a", 64): ([0.90, 0.901, 0.902], 0.85), ("b", 64): ([0.88, 0.881, 0.882], 0.90),
             ("a", 128): ([0.86, 0.87, 0.88], 0.80), ("b", 128): ([0.85, 0.87, 0.89], 0.82)}
    summary = [{"label": label, "global_batch": str(batch), "status": "ok", "budget": "2 epochs", "validation_accuracy": str(v)}
               for (label, batch), (values, _) in seeds.items() for v in values]
    summary += [{"label": "c", "global_batch": "64", "status": status, "budget": "2 epochs", "validation_accuracy": value}
                for status, value in (("ok", "0.95"), ("diverged", ""))]
    report = {"experiment": "toy", "accuracy": [
        {"recipe": label, "global_batch": batch, "test_accuracy": test, "low": test - 0.01, "high": test + 0.01, "ok_runs": 3, "total": 3}
        for (label, batch), (_, test) in seeds.items()] + [
        {"recipe": "c", "global_batch": 64, "test_accuracy": 0.95, "low": None, "high": None, "ok_runs": 1, "total": 2}]}
    found = study_findings(report, summary, Study("mlp", "a toy mlp"), "fashion_mnist")
    assert found["title"] == "a toy mlp, batch 64 to 128, 3 seeds" and "toy" not in {found["model"], found["dataset"]}
    at_64, at_128 = found["batches"]
    assert [(cell["recipe"], cell["standing"]) for cell in at_64["held"]] == [("a", "best"), ("b", "below the best")]
    assert at_64["failed"] == ["c"] and at_64["held"][0]["test_accuracy"] == 0.85  # its test accuracy is only reported
    assert [(cell["recipe"], cell["standing"]) for cell in at_128["held"]] == [("a", "tied with the best"), ("b", "tied with the best")]
    assert at_128["held"][0]["validation_accuracy"] == pytest.approx(0.87)


def test_the_third_editions_convergence_control_is_listed_apart_at_its_batch():
    """goyal_v3 at 512 = 16 x 32: its arms at the study's 8 epochs are ranked; the best arm re-run
    3x longer (another budget) is listed apart, as what training longer gave."""
    row = recipe_advice("resnet", "fashion_mnist", 16)
    assert (study_of(row), row["budget"], row["multiple"]) == ("goyal_v3", "8 epochs", 16)
    assert {cell["budget"] for cell in row["held"]} == {"8 epochs"} and row["failed"] == []
    (longer,) = row["longer"]
    assert longer["recipe"].endswith(" 3x longer") and longer["recipe"].removesuffix(" 3x longer") in [c["recipe"] for c in row["held"]]


def test_two_labels_with_the_same_runs_are_one_recipe_ranked_once():
    """goyal_v3's tuned arm at 4 and 16 found the linear rule's LR: the runner copied its runs to
    the linear-rule label (same hashes), and the findings rank them once, naming the other label."""
    summary = list(csv.DictReader((RESULTS / "goyal_v3" / "summary.csv").read_text().splitlines()))
    for multiple in (4, 16):
        row = recipe_advice("resnet", "fashion_mnist", multiple)
        recipes = [cell["recipe"] for cell in row["held"]]
        assert "momentum+warmup linear rule" not in recipes
        tuned = next(cell for cell in row["held"] if cell["recipe"] == "momentum+warmup tuned")
        assert tuned["same_runs_as"] == ["momentum+warmup linear rule"]
        hashes = {label: {r["run_id"].rsplit("-", 1)[1] for r in summary if r["label"] == label and int(r["global_batch"]) == 32 * multiple}
                  for label in ("momentum+warmup tuned", "momentum+warmup linear rule")}
        assert hashes["momentum+warmup tuned"] == hashes["momentum+warmup linear rule"] and len(hashes["momentum+warmup tuned"]) == 5
