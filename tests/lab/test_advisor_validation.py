"""lab.advisor_validation: the leave-one-out check of the advisor's calibrated B_crit,
and that the committed validation files are what it renders from the committed results."""

import json
import math
from pathlib import Path

import pytest

from helpers import REPO_ROOT
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


# The fourth edition (issue 56, item 6): results/advisor_validation_v4.

COMMITTED_V4 = Path(REPO_ROOT) / "results" / "advisor_validation_v4"


def test_the_committed_fourth_edition_check_is_what_the_committed_results_render():
    from lab.advisor_validation import fourth_edition, render_fourth_edition

    data = fourth_edition(Path(REPO_ROOT))
    assert (COMMITTED_V4 / "validation.json").read_text() == json.dumps(data, indent=2, allow_nan=False) + "\n", (
        "results/advisor_validation_v4 is stale: run python scripts/validate_advisor.py")
    assert (COMMITTED_V4 / "validation.md").read_text() == render_fourth_edition(data)


def test_goyal_v4_measured_the_lr_exponent_that_neither_prediction_matches():
    """goyal_v4's answer: the tuned LR grows as B^0.56 [0.34, 0.80] over 6 batches 32 to 2,048.
    lbtrain scale's design rule there (linear, 1) and the advisor's findings recipe at its
    recommended 4 workers (linear+warmup, 1) lie outside it; sqrt (0.5) is the one rule inside.
    Its workload's critical-batch study is not committed: B_crit measured reads "not run yet",
    and the linear rule's break (matches to batch 256, worse from 1,024) is set beside, no ratio."""
    from lab.advisor_validation import fourth_edition

    data = fourth_edition(Path(REPO_ROOT))
    goyal = next(item for item in data["studies"] if item["study"] == "goyal_v4")
    exponent = goyal["exponent"]
    assert exponent["measured"]["alpha"] == pytest.approx(0.557, abs=1e-3) and exponent["measured"]["points"] == 6
    assert (exponent["measured"]["low"], exponent["measured"]["high"]) == pytest.approx((0.343, 0.795), abs=1e-3)
    assert exponent["batches"] == [32, 128, 256, 512, 1024, 2048] and exponent["measured"]["arm"] == "momentum+warmup"
    assert exponent["scale"] == {"rule": "linear", "exponent": 1.0, "decision": "does not match"}
    assert exponent["advisor"]["recipe"] == "linear+warmup" and exponent["advisor"]["decision"] == "does not match"
    assert exponent["rules_inside"] == ["sqrt"]
    b_crit = goyal["b_crit"]
    if not (Path(REPO_ROOT) / "results/critical_batch_v4/report.json").is_file():
        assert b_crit["measured"] == {"status": "not run yet", "study": "results/critical_batch_v4"}
        assert all(prediction["ratio"] is None for prediction in b_crit["predicted"])
    assert b_crit["linear_break"] == {"holds_up_to": 256, "first_worse": 1024}
    by = {prediction["by"]: prediction for prediction in b_crit["predicted"]}
    noise_scale = json.loads((Path(REPO_ROOT) / "results/goyal_v4/answer.json").read_text())["noise_scale"]
    assert by["lbtrain scale: B_simple"]["value"] == pytest.approx(noise_scale["b_simple"])
    assert (by["lbtrain scale: B_simple"]["low"], by["lbtrain scale: B_simple"]["high"]) == pytest.approx((noise_scale["low"], noise_scale["high"]))
    probe = by["lbtrain advise: probe B_simple"]
    assert probe["low"] < probe["value"] < probe["high"]
    for item in data["studies"]:
        folder = Path(REPO_ROOT) / item["folder"]
        committed = (folder / "answer.json").is_file() or (folder / "report.json").is_file()
        assert (item["status"] == "not run yet") == (not committed)


def test_the_second_workload_sets_its_probe_against_the_vit_critical_batch_study():
    """adam_vit_v4 and critical_batch_vit_v4 share a workload (the ViT with Adam): both read the
    advisor's committed probe of it and B_crit as critical_batch_vit_v4's report.json fits it, each
    prediction's ratio its value over that B_crit, over the hull of its spread and B_crit's interval."""
    from lab.advisor_validation import fourth_edition, ratio_decision

    data = fourth_edition(Path(REPO_ROOT))
    advice = json.loads((Path(REPO_ROOT) / "results/advisor_validation_v4/adam_vit_v4/advice.json").read_text())
    assert advice["probe"]["model"] == "vit" and advice["probe"]["global_batch"] == 32
    fit = json.loads((Path(REPO_ROOT) / "results/critical_batch_vit_v4/report.json").read_text())["critical_batch"]
    low, high = fit["b_crit_interval"]
    for name in ("adam_vit_v4", "critical_batch_vit_v4"):
        b_crit = next(study for study in data["studies"] if study["study"] == name)["b_crit"]
        assert (b_crit["measured"]["b_crit"], b_crit["measured"]["low"], b_crit["measured"]["high"]) == (fit["b_crit"], low, high)
        assert b_crit["measured"]["batches"] == fit["batches"] == 7
        by = {prediction["by"]: prediction for prediction in b_crit["predicted"]}
        probe = by["lbtrain advise: probe B_simple"]
        assert (probe["value"], probe["low"], probe["high"]) == (advice["noise_scale"]["mean"], advice["noise_scale"]["low"],
                                                                 advice["noise_scale"]["high"])
        interval = (probe["low"] / high, probe["high"] / low)
        assert probe["ratio"] == pytest.approx({"ratio": probe["value"] / fit["b_crit"], "low": interval[0], "high": interval[1],
                                                "decision": ratio_decision(interval)})


def test_a_synthetic_fourth_edition_judges_each_prediction_by_its_interval(tmp_path):
    """goyal_v4's answer with a synthetic critical_batch_v4 (B_crit 400 [300, 450], B_simple at
    the target 360, 230 to 500 over the batches), a synthetic probe (B_simple 120 [100, 140],
    calibrated x5: 600 [500, 700]) and a keskar_v4 whose sweep fit has too few batches:

    - probe / measured: 0.30, [100 / 450, 140 / 300] = [0.22, 0.47], wholly below 1/2: does not match;
    - calibrated: 1.50, [500 / 450, 700 / 300] = [1.11, 2.33]: inconclusive;
    - the study's own B_simple: 0.90, [230 / 450, 500 / 300] = [0.51, 1.67]: matches;
    - adam_vit_v4, not there: not run yet."""
    import shutil

    from lab.advisor_validation import fourth_edition, render_fourth_edition

    root = Path(REPO_ROOT)
    for name in ("answer.json", "experiment.yaml"):
        (tmp_path / "results/goyal_v4").mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "results/goyal_v4" / name, tmp_path / "results/goyal_v4" / name)
    study = tmp_path / "results/critical_batch_v4"
    study.mkdir(parents=True)
    (study / "report.json").write_text(json.dumps({
        "target": 0.87, "metric": "val_accuracy",
        "critical_batch": {"b_crit": 400.0, "b_crit_interval": [300.0, 450.0], "batches": 7, "seeds": 4,
                           "estimate_method": "profile likelihood", "interval_method": "profile"},
        "noise_scale": {"median": 360.0, "range": [230.0, 500.0], "batches": 7}}))
    (study / "experiment.yaml").write_text((root / "experiments/critical_batch_v4.yaml").read_text())
    advice = {"noise_scale": {"mean": 120.0, "low": 100.0, "high": 140.0, "n": 50, "level": 0.95}, "recommended_world_size": 4,
              "probe": {"steps": 100, "global_batch": 32, "per_worker_batch_advised": 32,
                        "calibrated": {"b_crit": 600.0, "multiple": 5.0, "pairs": [{}, {}, {}]}}}
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe/advice.json").write_text(json.dumps(advice))
    keskar = tmp_path / "results/keskar_v4"
    keskar.mkdir(parents=True)
    (keskar / "report.json").write_text(json.dumps({}))
    (keskar / "experiment.yaml").write_text((root / "experiments/keskar_v4.yaml").read_text())
    (keskar / "sweep_fit.json").write_text(json.dumps({"alpha": None, "alpha_95_low": None, "alpha_95_high": None, "points": 3,
                                                       "intercept": None, "top_k": 3, "batches": [{"global_batch": 128}],
                                                       "note": "not enough points (n = 3 batch sizes < 4)"}))
    studies = (("goyal_v4", "results/goyal_v4", "results/critical_batch_v4", "probe/advice.json"),
               ("critical_batch_v4", "results/critical_batch_v4", "results/critical_batch_v4", "probe/advice.json"),
               ("keskar_v4", "results/keskar_v4", None, None), ("adam_vit_v4", "results/adam_vit_v4", None, None))
    data = fourth_edition(tmp_path, studies)
    goyal, critical, keskar_item, adam = data["studies"]
    by = {prediction["by"]: prediction["ratio"] for prediction in goyal["b_crit"]["predicted"]}
    assert by["lbtrain advise: probe B_simple"] == pytest.approx({"ratio": 0.30, "low": 100 / 450, "high": 140 / 300,
                                                                  "decision": "does not match"})
    assert by["lbtrain advise: calibrated B_crit"] == pytest.approx({"ratio": 1.5, "low": 500 / 450, "high": 700 / 300,
                                                                     "decision": "inconclusive"})
    own = next(prediction for prediction in critical["b_crit"]["predicted"] if prediction["by"] == "the study's B_simple at the target")
    assert own["ratio"] == pytest.approx({"ratio": 0.9, "low": 230 / 450, "high": 500 / 300, "decision": "matches"})
    assert critical["exponent"] is None and critical["b_crit"]["linear_break"] is None
    assert keskar_item["exponent"]["measured"]["alpha"] is None and keskar_item["b_crit"]["measured"] == {
        "status": "no critical-batch study on this workload"}
    assert adam == {"study": "adam_vit_v4", "folder": "results/adam_vit_v4", "status": "not run yet"}
    text = render_fourth_edition(data)
    assert "- B_crit measured by results/critical_batch_v4: 400 [300, 450] (profile likelihood estimate, profile interval" in text
    assert "predicted / measured = 0.30 [0.22, 0.47]: **does not match** (tolerance: within 2x)" in text
    assert "predicted / measured = 0.90 [0.51, 1.67]: **matches**" in text
    assert "- LR exponent: not fitted (not enough points (n = 3 batch sizes < 4); sweep_fit.json)." in text
    assert "## adam_vit_v4\n\nNot run yet (no answer.json or report.json in results/adam_vit_v4)." in text
    # B_simple's range over training widens the study's own ratio, as the report's does: [150 / 450, 900 / 300] = [0.33, 3.0].
    report = json.loads((study / "report.json").read_text())
    report["noise_scale"]["training_range"] = [150.0, 900.0]
    (study / "report.json").write_text(json.dumps(report))
    critical = fourth_edition(tmp_path, studies)["studies"][1]
    own = next(prediction for prediction in critical["b_crit"]["predicted"] if prediction["by"] == "the study's B_simple at the target")
    assert (own["low"], own["high"]) == (150.0, 900.0) and "over the second half of each run's way to the target" in own["spread"]
    assert own["ratio"] == pytest.approx({"ratio": 0.9, "low": 150 / 450, "high": 900 / 300, "decision": "inconclusive"})


def test_a_recipe_names_the_rule_whose_exponent_it_predicts():
    from lab.advisor_validation import recipe_exponent, rule_exponent

    assert [recipe_exponent(label) for label in ("sqrt+warmup", "linear capped", "none", "momentum+warmup sqrt rule",
                                                  "momentum+warmup tuned", "lars+warmup tuned")] == [0.5, 1.0, 0.0, 0.5, None, None]
    assert (rule_exponent("linear"), rule_exponent("sqrt"), rule_exponent(0.75), rule_exponent("cubic")) == (1.0, 0.5, 0.75, None)
