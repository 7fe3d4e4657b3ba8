"""The findings the advisor falls back on (``lbtrain.studies.findings``): the row nearest a
multiple of the base batch, from the study of the same model, and the calibration's mean. What
they hold is checked against the committed studies in tests/lab/test_findings.py."""

import math

import pytest

from lbtrain.studies.findings import load_findings, recipe_advice


def test_the_nearest_multiple_in_log2_of_the_study_of_the_same_model():
    assert recipe_advice("mlp", "fashion_mnist", 6)["multiple"] == 8  # log2 6 is nearer 8 than 4
    assert recipe_advice("mlp", "mnist1d", 10_000)["multiple"] == 64
    row = recipe_advice("cnn", "mnist1d", 4)
    assert (row["model"], row["dataset"], row["multiple"]) == ("cnn", "fashion_mnist", 4)
    assert set(row) >= {"title", "budget", "global_batch", "held", "longer", "failed"}


def test_a_study_is_named_by_its_title_alone():
    for study in load_findings()["studies"]:
        assert set(study) == {"title", "model", "dataset", "budget", "base_batch", "batches"}
        assert study["model"] in study["title"] and study["title"].endswith(" seeds")


def test_the_advisor_calibration_is_the_validation_s_measured_over_predicted():
    calibration = load_findings()["advisor_calibration"]
    assert set(calibration) == {"pairs", "geometric_mean"}
    multiples = [pair["multiple"] for pair in calibration["pairs"]]
    assert len(multiples) >= 2 and all(multiple > 0 for multiple in multiples)
    assert calibration["geometric_mean"] ** len(multiples) == pytest.approx(math.prod(multiples))
