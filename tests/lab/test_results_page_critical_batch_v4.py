"""The fourth edition's steps-to-target studies on the results page (``lab.results_page.critical_batch_v4``):
critical_batch_v4 (the MLP with momentum SGD, candidates around the linear rule) and critical_batch_vit_v4
(the ViT with Adam, around the square-root rule): each section, every number read back from the committed
report.json (and advisor_validation_v4's validation.json), and their anchors (Shallue et al. 2018,
McCandlish et al. 2018) as the fourth edition, a pair of rows per study, superseding critical_batch_v3's;
absent while a study is not committed."""

import json
import shutil
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from helpers import REPO_ROOT
from lab.advisor_validation import OWN_B_SIMPLE
from lab.results_page import render_results_page
from lab.results_page.anchors import ANCHORS, STEPS_STUDIES, anchor_row, claim_text, regime_line, shown_anchors, superseded_by
from lab.results_page.common import listed
from lab.results_page.critical_batch import anchor_mccandlish, anchor_shallue
from lab.results_page.critical_batch_v4 import (
    STEPS_STUDIES_V4,
    STUDY,
    VIT_ADAM,
    advisor_lines,
    design_text,
    lr_multiples,
    section_critical_batch_v4,
)
from lbtrain.reports.scaling_laws import CriticalBatchFit

RESULTS = Path(REPO_ROOT) / "results"
PAPERS = ("Shallue et al. 2018", "McCandlish et al. 2018")


@pytest.fixture(scope="module")
def report():
    return json.loads((RESULTS / STUDY / "report.json").read_text())


@pytest.fixture(scope="module")
def section():
    return "\n".join(section_critical_batch_v4(RESULTS))


def _row(section, batch):
    return next(line for line in section.splitlines() if line.startswith(f"| {batch:,} |"))


def test_the_section_states_the_design_from_the_data(report, section):
    batches = sorted({row["global_batch"] for row in report["steps_to_target"]})
    every = report["validation_every_steps"]
    assert section.startswith("## critical_batch_v4: the critical batch and the noise scale (fourth edition, study 2)")
    assert f"Machine time on 2 cores: {report['machine_minutes']['runs']:.0f} minutes of runs." in section
    design = next(line for line in section.splitlines() if line.startswith("Design: "))
    assert f"{len(batches)} batches, {batches[0]:,} to {batches[-1]:,}" in design
    experiment = yaml.safe_load((RESULTS / STUDY / "experiment.yaml").read_text())
    lr, multiples, where = experiment["lr"], *_candidates(experiment)
    everywhere = sorted((label for label in where if where[label] == set(batches)), key=multiples.get)
    rule = f"LR {lr['base_lr']} at batch {lr['base_batch']}, grown with the batch"
    assert (f"LR candidates {listed([_fraction(multiples[label]) for label in everywhere])} times the linear rule's ({rule}) at every "
            "batch") in design
    seeds = len(experiment["grid"]["seeds"])
    added = design.split("(extensions of the grid; its experiment.yaml says why each was added): ")[1].split(f"; {seeds} seeds each")[0].split("; ")
    for label in set(where) - set(everywhere):  # each in the group of the batches it ran at
        assert any(part.endswith(f" at {listed([f'{batch:,}' for batch in sorted(where[label])])}")
                   and _fraction(multiples[label]) in part.split(" at ")[0].replace(" and ", ", ").split(", ") for part in added)
    warmup = experiment["lr"]["warmup_epochs"]
    assert f"{warmup:g} epochs of warmup and {experiment['lr']['decay']['type']} decay" in design
    assert f"every {max(every)} steps at batch {batches[0]}" in design and f"to every {min(every)} at batch" in design
    assert experiment["training"]["stop_at"] == {report["metric"]: report["target"]}
    assert f"each run stops at the target (budget: {report['budget']})" in design
    assert lr_multiples(report, experiment) == multiples  # the report's LRs as the experiment's candidates


# The multiple of the rule each label names (the experiments' headers), and how the page writes it.
LABELS = {"thirty-second": (Fraction(1, 32), "1/32"), "sixteenth": (Fraction(1, 16), "1/16"), "eighth": (Fraction(1, 8), "1/8"),
          "quarter": (Fraction(1, 4), "1/4"), "half": (Fraction(1, 2), "1/2"), "linear": (Fraction(1), "1"),
          "sqrt": (Fraction(1), "1"), "double": (Fraction(2), "2"), "quadruple": (Fraction(4), "4")}


def _candidates(experiment, exponent=1.0):
    """Each candidate's multiple of the rule (LR ~ B^exponent: 1 linear, 0.5 sqrt), the one its label
    names, checked against its LR at every batch it ran at (to the 6 digits the experiment writes);
    and those batches."""
    lr, per_worker = experiment["lr"], experiment["training"]["per_worker_batch"]
    multiples, where = {}, {}
    for variant in experiment["grid"]["variants"]:
        batch = variant["training.world_size"] * per_worker
        multiple = LABELS[variant["label"]][0]
        assert variant["lr.base_lr"] == pytest.approx(lr["base_lr"] * (batch / lr["base_batch"]) ** exponent * float(multiple), rel=1e-5)
        multiples[variant["label"]] = float(multiple)
        where.setdefault(variant["label"], set()).add(batch)
    return multiples, where


def _fraction(value):
    return next(text for multiple, text in LABELS.values() if multiple == value)


def test_where_the_runs_stop_is_read_from_the_experiment(tmp_path, report):
    experiment = yaml.safe_load((RESULTS / STUDY / "experiment.yaml").read_text())
    (tmp_path / STUDY).mkdir()

    def design(training):
        (tmp_path / STUDY / "experiment.yaml").write_text(yaml.safe_dump({**experiment, "training": training}))
        return design_text(tmp_path, report)

    without = {key: value for key, value in experiment["training"].items() if key != "stop_at"}
    assert f"each run trains its whole budget, past the target (budget: {report['budget']})" in design(without)
    other = {report["metric"]: report["target"] + 0.01}
    assert (f"the runs stop at {report['metric']} {report['target'] + 0.01:g} (`training.stop_at`)"
            in design({**without, "stop_at": other}))


def test_candidates_that_ran_at_no_common_batch_are_each_named_where_they_ran(tmp_path, report):
    """No candidate at every batch: each is named at the batches it ran (a synthetic experiment)."""
    (tmp_path / STUDY).mkdir()
    (tmp_path / STUDY / "experiment.yaml").write_text(yaml.safe_dump({"lr": {"base_lr": 1.0, "base_batch": 32}}))
    rows = [{"recipe": "quarter", "global_batch": 32, "runs": 4}, {"recipe": "half", "global_batch": 64, "runs": 4}]
    accuracy = [{"recipe": "quarter", "global_batch": 32, "learning_rate": 0.25}, {"recipe": "half", "global_batch": 64, "learning_rate": 1.0}]
    text = design_text(tmp_path, {**report, "steps_to_target": rows, "accuracy": accuracy})
    assert "; LR candidates as multiples of the linear rule's (LR 1.0 at batch 32, grown with the batch): 1/4 at 32; 1/2 at 64; " in text


def test_every_candidates_steps_are_shown_with_n_and_an_interval_only_from_three_seeds(report, section):
    fit = report["critical_batch"]
    points = {point["global_batch"]: point for point in fit["residuals"]}
    for row in report["steps_to_target"]:
        line = _row(section, row["global_batch"])
        if not row["reached"]:
            assert f"none of {row['runs']} reached" in line
        elif row["reached"] < 3:
            assert f"{row['steps_to_target']:.0f} (n={row['reached']}; 1 or 2 seeds: no interval); {row['reached']} of {row['runs']} reached" in line
        else:
            cell = f"{row['steps_to_target']:.0f} [{row['low']:.0f}, {row['high']:.0f}] (n={row['reached']})"
            best = points.get(row["global_batch"], {}).get("recipe") == row["recipe"]
            assert (f"**{cell}**" if best else cell) in line
    for batch, point in points.items():
        assert _row(section, batch).endswith(f"| {point['fitted_steps']:.0f} | {'perfect scaling' if batch <= fit['b_crit'] / 10 else 'diminishing returns'} |")
    assert "| global batch | thirty-second (1/32x) | sixteenth (1/16x) | eighth (1/8x) | quarter (1/4x) | half (1/2x) | linear (1x) | double (2x) | fit | region |" in section


def test_the_fit_and_the_noise_scale_are_read_from_the_report(report, section):
    fit = report["critical_batch"]
    low, high = fit["b_crit_profile"]
    assert (f"Measured critical batch B_crit = {fit['b_crit']:.0f} [{low:.0f}, {high:.0f}] ({fit['batches']} batch sizes, "
            f"{fit['seeds']} seeds or more each)") in section
    assert f"relative rms error {100 * fit['relative_rms']:.1f}%." in section
    assert f"B_crit and its interval by profile likelihood (the F-profile of the weighted fit): 95% profile-likelihood interval [{low:.0f}, {high:.0f}]" in section
    spread, training = fit["noise_scale_range"], fit["noise_scale_training_range"]
    ratio = CriticalBatchFit.from_dict(fit).noise_scale_ratio_interval
    assert (f"B_simple = {fit['noise_scale']:,.0f} (at the target, the median over batch sizes; from {spread[0]:,.0f} to {spread[1]:,.0f} "
            f"over them; from {training[0]:,.0f} to {training[1]:,.0f} over the second half of each run's way to the target), "
            f"{fit['noise_scale_ratio']:.2f}x the measured B_crit [{ratio[0]:.2f}, {ratio[1]:.2f}] over B_crit's interval and "
            "B_simple's ranges (their hull).") in section
    assert "[report](critical_batch_v4/report.md)" in section
    assert "![steps to the target against the global batch, every LR candidate](critical_batch_v4/figures/steps_to_target.png)" in section


def test_the_advisors_prediction_is_set_against_the_measured_b_crit(report, section):
    record = json.loads((RESULTS / "advisor_validation_v4" / "validation.json").read_text())
    predicted = next(study for study in record["studies"] if study["study"] == STUDY)["b_crit"]["predicted"]
    calibrated = next(item for item in predicted if item["by"] == "lbtrain advise: calibrated B_crit")
    ratio = calibrated["ratio"]
    assert (f"- lbtrain advise: calibrated B_crit: {calibrated['value']:,.0f} [{calibrated['low']:,.0f}, {calibrated['high']:,.0f}] "
            f"({calibrated['spread']}), predicted / measured {ratio['ratio']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]: "
            f"**{ratio['decision']}**") in section
    assert OWN_B_SIMPLE in {item["by"] for item in predicted}  # the advisor's name for the study's own B_simple
    assert f"- {OWN_B_SIMPLE}" not in section  # the study's own, set against B_crit above


def test_only_the_studys_own_b_simple_is_left_out_not_a_prediction_of_its_value(tmp_path, report):
    record = json.loads((RESULTS / "advisor_validation_v4" / "validation.json").read_text())
    predicted = next(study for study in record["studies"] if study["study"] == STUDY)["b_crit"]["predicted"]
    fit = CriticalBatchFit.from_dict(report["critical_batch"])
    other = next(item for item in predicted if item["by"] != OWN_B_SIMPLE and item.get("ratio"))
    other["value"] = fit.noise_scale  # another prediction that happens to equal the study's B_simple
    (tmp_path / "advisor_validation_v4").mkdir()
    (tmp_path / "advisor_validation_v4" / "validation.json").write_text(json.dumps(record))
    lines = advisor_lines(tmp_path, fit)
    assert any(line.startswith(f"- {other['by']}: {fit.noise_scale:,.0f} ") for line in lines)
    assert not any(line.startswith(f"- {OWN_B_SIMPLE}") for line in lines)


def test_an_advisor_record_of_another_b_crit_is_not_shown_as_this_ones(tmp_path, report):
    (tmp_path / "advisor_validation_v4").mkdir()
    record = json.loads((RESULTS / "advisor_validation_v4" / "validation.json").read_text())
    next(study for study in record["studies"] if study["study"] == STUDY)["b_crit"]["measured"]["b_crit"] = 400.0
    (tmp_path / "advisor_validation_v4" / "validation.json").write_text(json.dumps(record))
    lines = advisor_lines(tmp_path, CriticalBatchFit.from_dict(report["critical_batch"]))
    assert lines[0].startswith("[advisor_validation_v4](advisor_validation_v4/validation.md) set its predictions against B_crit = 400, "
                               f"not this report's {report['critical_batch']['b_crit']:.0f}")
    assert advisor_lines(tmp_path / "none", CriticalBatchFit.from_dict(report["critical_batch"])) == []


def test_the_fourth_edition_judges_shallue_and_mccandlish_on_each_workloads_study_and_supersedes_v3():
    assert STEPS_STUDIES == {4: (("critical_batch_v4",), ("critical_batch_vit_v4",)), 3: (("critical_batch_v3",),),
                             2: (("steps_to_target", "critical_batch"),)}
    rows = {(anchor.paper, anchor.edition, anchor.judge.keywords["studies"]): anchor for anchor in ANCHORS if anchor.paper in PAPERS}
    assert set(rows) == {(paper, edition, studies) for paper in PAPERS for edition, studies in
                         ((4, ("critical_batch_v4",)), (4, ("critical_batch_vit_v4",)), (3, ("critical_batch_v3",)),
                          (2, ("steps_to_target", "critical_batch")))}
    committed = [study for (study,) in STEPS_STUDIES[4] if (RESULTS / study / "report.json").is_file()]
    for paper, judge in zip(PAPERS, (anchor_shallue, anchor_mccandlish)):
        verdict, evidence = judge(RESULTS, studies=("critical_batch_v4",))
        row = anchor_row(RESULTS, rows[(paper, 4, ("critical_batch_v4",))])
        assert row[2] == "fourth" and row[4].startswith("critical_batch_v4: batch 2,048 = 3.79% of 53,984; 800 updates")
        assert row[5].startswith(f"**{verdict}**") and row[6] == evidence and evidence.startswith("critical_batch_v4: ")
        third = rows[(paper, 3, ("critical_batch_v3",))]
        assert superseded_by(RESULTS, third) == committed
        assert anchor_row(RESULTS, third)[5].endswith(f"(superseded by {', '.join(committed)})")
        assert superseded_by(RESULTS, rows[(paper, 2, ("steps_to_target", "critical_batch"))]) == ["critical_batch_v3"]
    shallue = rows[("Shallue et al. 2018", 4, ("critical_batch_v4",))]
    verdict, _ = anchor_shallue(RESULTS, studies=("critical_batch_v4",))
    assert anchor_row(RESULTS, shallue)[5] == f"**{verdict}**: {claim_text(verdict, shallue.supports)}"
    assert regime_line(RESULTS, STUDY)[0].endswith("**in regime** for Shallue et al. 2018 and McCandlish et al. 2018.")


def test_the_section_sits_with_the_fourth_editions_and_is_absent_until_the_study_is_committed(tmp_path):
    page = render_results_page(RESULTS)
    order = [page.index(f"\n## {study}:") for study in ("goyal_v4", "critical_batch_v4", "keskar_v4", "goyal_v3", "critical_batch_v3")]
    assert order == sorted(order)
    assert section_critical_batch_v4(tmp_path) == []
    assert not [anchor for anchor in shown_anchors(tmp_path) if anchor.edition == 4]
    shutil.copytree(RESULTS / STUDY, tmp_path / STUDY, ignore=shutil.ignore_patterns("runs"))
    assert section_critical_batch_v4(tmp_path)[0].startswith("## critical_batch_v4:")
    assert {anchor.paper for anchor in shown_anchors(tmp_path) if anchor.edition == 4} == set(PAPERS)


def _vit_report():
    path = RESULTS / VIT_ADAM.name / "report.json"
    if not path.is_file():
        pytest.skip("critical_batch_vit_v4 is not committed yet: its section is absent (test_the_vit_section_is_absent_...)")
    return json.loads(path.read_text())


def test_the_vit_sections_candidates_are_multiples_of_the_square_root_rule_from_its_experiment():
    report = _vit_report()
    experiment = yaml.safe_load((RESULTS / VIT_ADAM.name / "experiment.yaml").read_text())
    lr, (multiples, where) = experiment["lr"], _candidates(experiment, 0.5)
    assert lr_multiples(report, experiment, "sqrt") == multiples and multiples["sqrt"] == 1.0
    section = "\n".join(section_critical_batch_v4(RESULTS, VIT_ADAM))
    assert section.startswith(f"## {VIT_ADAM.name}: {VIT_ADAM.title}")
    design = next(line for line in section.splitlines() if line.startswith("Design: "))
    batches = sorted({row["global_batch"] for row in report["steps_to_target"]})
    everywhere = sorted((label for label in where if where[label] == set(batches)), key=multiples.get)
    assert design.startswith(f"Design: vit on fashion_mnist (adam_vit_v4's workload); {len(batches)} batches, {batches[0]:,} to "
                             f"{batches[-1]:,}; LR candidates {listed([_fraction(multiples[label]) for label in everywhere])} times "
                             f"the square-root rule's (LR {lr['base_lr']} at batch {lr['base_batch']}, grown with the square root of "
                             "the batch) at every batch")
    assert "optimizer `adam` with 0.25 epochs of warmup and cosine decay, as adam_vit_v4" in design
    fit = report["critical_batch"]
    if fit.get("b_crit") is not None:
        low, high = fit["b_crit_profile"]
        assert f"Measured critical batch B_crit = {fit['b_crit']:.0f} [{low:.0f}, {high:.0f}]" in section
        record = json.loads((RESULTS / "advisor_validation_v4" / "validation.json").read_text())
        predicted = next(study for study in record["studies"] if study["study"] == VIT_ADAM.name)["b_crit"]["predicted"]
        probe = next(item for item in predicted if item["by"] == "lbtrain advise: probe B_simple")
        assert f"- lbtrain advise: probe B_simple: {probe['value']:,.0f} [{probe['low']:,.0f}, {probe['high']:,.0f}]" in section


def test_the_vit_section_follows_adam_vit_v4_and_both_workloads_are_judged_on_rows_of_their_own():
    _vit_report()
    page = render_results_page(RESULTS)
    assert page.index("\n## adam_vit_v4:") < page.index(f"\n## {VIT_ADAM.name}:") < page.index("\n## goyal_v3:")
    fourth = [anchor for anchor in shown_anchors(RESULTS) if anchor.paper in PAPERS and anchor.edition == 4]
    assert [(anchor.paper, anchor.studies(RESULTS)) for anchor in fourth] == [
        (paper, [study]) for study in ("critical_batch_v4", VIT_ADAM.name) for paper in PAPERS]
    for anchor in fourth[2:]:
        verdict, evidence = anchor.judge(RESULTS)
        row = anchor_row(RESULTS, anchor)
        assert row[4].startswith(f"{VIT_ADAM.name}: batch 2,048 = ") and evidence.startswith(f"{VIT_ADAM.name}: ")
        assert row[5].startswith(f"**{verdict}**: {claim_text(verdict, anchor.supports)}")  # in regime: the judge's own verdict


def test_the_vit_section_is_absent_until_its_study_is_committed(tmp_path):
    assert section_critical_batch_v4(tmp_path, VIT_ADAM) == []
    (tmp_path / VIT_ADAM.name).mkdir()
    assert section_critical_batch_v4(tmp_path, VIT_ADAM) == []


def test_each_studys_candidates_are_multiples_of_the_rule_its_workload_study_centres_its_grid_on():
    for study in STEPS_STUDIES_V4:
        workload = yaml.safe_load((RESULTS / study.workload_of / "experiment.yaml").read_text())
        assert workload["lr"]["rule"] == study.rule, study.name
