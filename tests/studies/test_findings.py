"""The study findings the advisor cites are the committed reports' data."""

import csv
import math
import statistics
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from lbtrain.studies.findings import load_findings, recipe_advice, render


def test_the_shipped_findings_are_what_the_committed_reports_render():
    assert load_findings() == render(Path(REPO_ROOT) / "results"), "rerun: python -m lbtrain.studies.findings"


def test_a_study_row_ranks_the_recipes_that_held_on_validation_and_names_those_that_failed():
    row = recipe_advice("mlp", "fashion_mnist", 16)  # goyal_scaling at 2048 = 16 x 128
    assert (row["study"], row["global_batch"], row["multiple"]) == ("goyal_scaling", 2048, 16)
    summary = list(csv.DictReader((Path(REPO_ROOT) / "results" / "goyal_scaling" / "summary.csv").read_text().splitlines()))
    for cell in row["held"]:
        runs = [r for r in summary if r["label"] == cell["recipe"] and int(r["global_batch"]) == 2048]
        assert cell["validation_accuracy"] == pytest.approx(statistics.fmean(float(r["validation_accuracy"]) for r in runs))
        assert cell["n"] == len(runs) == 3 and all(r["status"] == "ok" for r in runs)
    validation = [cell["validation_accuracy"] for cell in row["held"]]
    assert validation == sorted(validation, reverse=True)
    assert set(row["failed"]) == {"linear", "linear+warmup"}


def test_equal_steps_reruns_are_listed_apart_from_the_studys_budget():
    row = recipe_advice("resnet", "fashion_mnist", 64)  # goyal_bn at 1024 = 64 x 16
    assert (row["study"], row["budget"], row["multiple"]) == ("goyal_bn", "6 epochs", 64)
    assert {cell["budget"] for cell in row["held"]} == {"6 epochs"}
    assert [(cell["recipe"], cell["budget"]) for cell in row["longer"]] == [(f"{row['held'][0]['recipe']} equal steps", "3000 steps")]


def test_the_nearest_multiple_in_log2_and_the_study_of_the_same_model():
    assert recipe_advice("mlp", "fashion_mnist", 6)["multiple"] == 8  # log2 6 is nearer 8 than 4
    assert recipe_advice("mlp", "mnist1d", 10_000)["multiple"] == 64
    cnn = recipe_advice("cnn", "mnist1d", 4)
    assert (cnn["study"], cnn["multiple"], cnn["held"][0]["recipe"]) == ("goyal_scaling_cnn", 4, "linear+warmup")
    assert recipe_advice("resnet", "fashion_mnist", 1)["study"] == "goyal_bn"
    assert recipe_advice("mlp", "fashion_mnist", 1)["study"] == "goyal_scaling"


def test_the_advisor_calibration_is_the_validation_s_measured_over_predicted():
    calibration = load_findings()["advisor_calibration"]
    multiples = [pair["multiple"] for pair in calibration["pairs"]]
    assert len(multiples) >= 2 and all(multiple > 0 for multiple in multiples)
    assert calibration["geometric_mean"] ** len(multiples) == pytest.approx(math.prod(multiples))
