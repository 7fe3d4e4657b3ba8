"""lab.advisor_validation: the leave-one-out check of the advisor's calibrated B_crit,
and that the committed validation files are what it renders from the committed results."""

import json
import math
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from lab.advisor_validation import OUTPUT, leave_one_out, render_markdown, validation

COMMITTED = Path(REPO_ROOT) / OUTPUT


def pair(name, predicted, measured):
    return {"pair": name, "predicted": {"b_simple": predicted}, "measured": {"b_crit": measured}}


def test_each_pair_is_calibrated_by_the_geometric_mean_multiple_of_the_others_only():
    rows = leave_one_out([pair("a", 100, 800), pair("b", 50, 200), pair("c", 10, 30)])
    by_name = {row["pair"]: row for row in rows}
    assert by_name["a"]["multiple"] == pytest.approx(math.sqrt(4 * 3))  # b: 4x, c: 3x
    assert by_name["a"]["calibrated_b_crit"] == pytest.approx(100 * math.sqrt(12))
    assert by_name["a"]["ratio"] == pytest.approx(100 * math.sqrt(12) / 800)  # 0.433: not within 2x
    assert not by_name["a"]["within_2x"]
    assert by_name["c"]["multiple"] == pytest.approx(math.sqrt(8 * 4)) and by_name["c"]["calibrated_from"] == ["a", "b"]
    assert by_name["c"]["ratio"] == pytest.approx(10 * math.sqrt(32) / 30) and by_name["c"]["within_2x"]  # 1.89
    assert leave_one_out([pair("alone", 100, 800)]) == []


def test_the_committed_validation_holds_the_leave_one_out_rows_of_its_own_pairs():
    committed = json.loads((COMMITTED / "validation.json").read_text())
    assert committed["leave_one_out"] == json.loads(json.dumps(leave_one_out(committed["pairs"])))
    assert "leaving one pair out" in (COMMITTED / "validation.md").read_text()


def test_the_committed_validation_is_what_the_committed_results_render():
    data = validation(Path(REPO_ROOT))
    assert (COMMITTED / "validation.json").read_text() == json.dumps(data, indent=2, allow_nan=False) + "\n", (
        "results/advisor_validation is stale: run python scripts/validate_advisor.py")
    assert (COMMITTED / "validation.md").read_text() == render_markdown(data)


def test_the_advisors_critical_batch_is_checked_at_every_batch_of_the_study():
    """S(B) = S(B_0) (1 + B_c / B) / (1 + B_c / B_0), anchored at the smallest batch: with a
    measured curve of S_min = 100 and B_crit = 400, a raw B_simple of 100 predicts too few
    steps' savings at large batches, a calibrated B_crit of 400 predicts the curve exactly."""
    from lab.advisor_validation import per_batch

    batches = [50, 100, 200, 400, 800, 1600]
    item = {"predicted": {"b_simple": 100.0},
            "measured": {"residuals": [{"global_batch": b, "steps": 100 * (1 + 400 / b)} for b in reversed(batches)]}}
    rows = per_batch(item, calibrated=400.0)
    assert [row["global_batch"] for row in rows] == batches
    assert [row["calibrated"]["ratio"] for row in rows] == pytest.approx([1.0] * 6)
    # Raw: S(1600) = 900 (1 + 100/1600) / (1 + 100/50) = 318.75 against 125 measured.
    assert rows[-1]["raw"]["steps"] == pytest.approx(900 * (1 + 100 / 1600) / 3)
    assert rows[-1]["raw"]["ratio"] == pytest.approx(318.75 / 125) and not rows[-1]["raw"]["within_2x"]
    assert rows[1]["raw"]["within_2x"] and rows[0]["raw"]["ratio"] == pytest.approx(1.0)
    assert all(row["calibrated"] is None for row in per_batch(item, calibrated=None))


def test_the_committed_validation_checks_every_batch_of_every_pair():
    committed = json.loads((COMMITTED / "validation.json").read_text())
    for item in committed["pairs"]:
        assert [row["global_batch"] for row in item["per_batch"]] == sorted(r["global_batch"] for r in item["measured"]["residuals"])
    assert "## Checked at every batch size" in (COMMITTED / "validation.md").read_text()


def test_a_pair_waits_for_its_study_and_its_tracking_run_may_be_named_by_pattern(tmp_path):
    """A pair whose study's report.json is not there is listed as waiting, not an error; once it
    is, the tracking run named by a pattern is the run the pattern matches."""
    import shutil

    root = Path(REPO_ROOT)
    for path in ("results/advisor_validation/mnist1d_cnn/advice.json", "results/advisor_validation_mnist1d/report.json"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / path, tmp_path / path)
    shutil.copytree(root / "results/advisor_validation/mnist1d_cnn/training_run", tmp_path / "study/runs/base-w1-s1-0123456789")
    spec = ("MNIST-1D cnn", "results/advisor_validation/mnist1d_cnn/advice.json", "results/advisor_validation_mnist1d/report.json",
            "study/runs/base-w1-s1-*", "the in-step estimator, as the probe")
    waiting = ("later", "results/advisor_validation/mnist1d_cnn/advice.json", "results/not_yet/report.json", "study/runs/*", "-")
    data = validation(tmp_path, (spec, waiting))
    assert data["waiting"] == [{"pair": "later", "study": "results/not_yet/report.json"}]
    committed = json.loads((COMMITTED / "validation.json").read_text())
    expected = next(item for item in committed["pairs"] if item["pair"] == "MNIST-1D cnn")
    assert [item["pair"] for item in data["pairs"]] == ["MNIST-1D cnn"]
    tracking = data["pairs"][0]["tracking"]
    assert tracking["run_dir"] == "study/runs/base-w1-s1-0123456789"
    assert {**tracking, "run_dir": expected["tracking"]["run_dir"]} == expected["tracking"]
    assert data["pairs"][0]["ratio"] == expected["ratio"]
    assert "Not validated yet, their study not committed: later (results/not_yet/report.json)." in render_markdown(data)


def test_a_study_report_taken_batch_by_batch_is_described_so(tmp_path):
    """The MNIST-1D pair with its study's noise scale rewritten as report.noise_scale_summary now
    writes it (median over batch sizes, range): the pair's text says so, with the range."""
    import shutil

    root = Path(REPO_ROOT)
    for path in ("results/advisor_validation/mnist1d_cnn/advice.json", "results/advisor_validation_mnist1d/report.json"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / path, tmp_path / path)
    shutil.copytree(root / "results/advisor_validation/mnist1d_cnn/training_run", tmp_path / "run")
    report_path = tmp_path / "results/advisor_validation_mnist1d/report.json"
    report = json.loads(report_path.read_text())
    report["noise_scale"] = {**report["noise_scale"], "median": 180.0, "range": [120.0, 260.0], "batches": 5, "runs": 14}
    report_path.write_text(json.dumps(report))
    spec = ("MNIST-1D cnn", "results/advisor_validation/mnist1d_cnn/advice.json", "results/advisor_validation_mnist1d/report.json",
            "run", "the in-step estimator, as the probe")
    text = render_markdown(validation(tmp_path, (spec,)))
    assert ("the study's own runs logged B_simple 180 at the epoch each reached the target (the median over 5 batch sizes of "
            "each batch's median, 14 runs; from 120 to 260 over the batch sizes; the in-step estimator, as the probe)") in text
