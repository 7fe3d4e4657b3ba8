"""A study outside a paper's regime reads ``out of regime`` on the results page's anchors, never a
claim on the paper (the regimes themselves: tests/reports/test_regime.py)."""

from pathlib import Path

from helpers import REPO_ROOT
from lab.results_page.anchors import ANCHORS, anchor_row, section_anchors
from lbtrain.reports.regime import OUT_OF_REGIME, PAPER_REGIMES

RESULTS = Path(REPO_ROOT) / "results"


def test_every_anchor_names_a_paper_with_a_regime():
    assert {anchor.paper for anchor in ANCHORS} <= set(PAPER_REGIMES)


def test_the_anchors_on_goyal_bn_read_out_of_regime_with_both_regimes_shown():
    lines = section_anchors(RESULTS)
    table = next(line for line in lines if line.startswith("| paper |"))
    assert table.splitlines()[0] == "| paper | claim | edition | paper's regime | study's regime | here | evidence |"
    rows = {tuple(row.split(" | ")[1:3]): row for row in table.splitlines()[2:]}
    for claim in ("linear scaling with gradual warmup matches the small batch (up to 8k on ImageNet)",
                  "LARS with warmup holds at large batches", "tuned Nesterov momentum matches LARS and LAMB at large batches"):
        row = rows[(claim, "second and first")]
        assert f"**{OUT_OF_REGIME}**" in row
        assert "goyal_bn: batch 1,024 = 12.8% of 8,000; 42 updates (6 epochs); out of regime" in row
        assert "batch 256–" in row or "batch 32,768" in row
        assert "(judged anyway: " in row
    text = "\n".join(lines)
    assert "at most 5% of its training set and gets at least 300 updates" in text
    for row in rows.values():  # any study out of regime: the verdict shown is out of regime, whatever the judge said
        cells = row.split(" | ")
        assert ("out of regime (" in cells[4]) == cells[5].startswith(f"**{OUT_OF_REGIME}**")


def test_an_anchor_with_no_study_committed_stays_not_measured_yet(tmp_path):
    anchor = next(anchor for anchor in ANCHORS if anchor.paper == "You et al. 2017")
    assert anchor_row(tmp_path, anchor)[4:6] == ["-", "**not measured yet**"]


def test_every_section_of_every_edition_carries_its_regime_label():
    """Each study's section opens with its regime at its largest batch, in or out of regime for
    each finding the page judges on it; keskar_gap (Keskar et al.'s own 10% of the data, 200
    updates) is in regime on its own row, whatever keskar_v2 on the same claim says."""
    from lab.results_page import render_results_page

    page = render_results_page(RESULTS)
    sections = page.split("\n## ")[1:]
    studies = [section for section in sections if not section.startswith("Published findings")]
    assert studies and all("*Regime*" in section for section in studies)
    gap = next(section for section in sections if section.startswith("keskar_gap:"))
    assert ("*Regime* at its largest batch, batch 6,000 = 10% of 60,000; 200 updates (20 epochs): **in regime** for Keskar et al. 2017."
            in gap)
    first_edition = next(section for section in sections if section.startswith("goyal_scaling:"))
    assert "**out of regime** (15.2% of the data > 5%; 60 updates < 300) for the page's rule." in first_edition
    rows = [anchor_row(RESULTS, anchor) for anchor in ANCHORS if anchor.paper == "Keskar et al. 2017" and anchor.edition == 2]
    assert [(row[4].split(":")[0], row[5].split(" (superseded")[0]) for row in rows] == [
        ("keskar_v2", f"**{OUT_OF_REGIME}**"), ("keskar_gap", "**worse**: the claim holds")]


def test_each_anchor_says_what_the_decision_says_of_its_claim():
    """"matches" supports Goyal's claim and contradicts Keskar's: each anchor names the decisions
    that support its claim."""
    from lab.results_page.anchors import AGREES, AS_GOOD, DOES_NOT_HOLD, HOLDS, LOSES, claim_text

    goyal = next(anchor for anchor in ANCHORS if anchor.paper == "Goyal et al. 2017" and anchor.edition == 3 and "matches" in anchor.claim)
    keskar = next(anchor for anchor in ANCHORS if anchor.paper == "Keskar et al. 2017" and anchor.edition == 3)
    assert (goyal.supports, keskar.supports) == (AS_GOOD, LOSES)
    assert (claim_text("matches", goyal.supports), claim_text("matches", keskar.supports)) == (HOLDS, DOES_NOT_HOLD)
    shown = {(anchor.paper, anchor.edition): anchor_row(RESULTS, anchor)[5] for anchor in ANCHORS}
    assert shown[("Keskar et al. 2017", 3)] == "**matches**: the claim does not hold (superseded by keskar_v4)"
    # McCandlish et al.'s claim that the value agrees: matches holds it, worse contradicts it, inconclusive leaves it
    # (critical_batch_v3's B_crit interval [303, 584] since 0f0a9f3 leaves B_simple / B_crit inconclusive).
    mccandlish = next(anchor for anchor in ANCHORS if anchor.paper == "McCandlish et al. 2018" and anchor.edition == 3)
    verdict = mccandlish.judge(RESULTS)[0]
    later = [study for study in ("critical_batch_v4", "critical_batch_vit_v4") if (RESULTS / study / "report.json").is_file()]
    assert later[0] == "critical_batch_v4"  # every fourth-edition steps study committed supersedes it
    assert shown[("McCandlish et al. 2018", 3)] == f"**{verdict}**: {claim_text(verdict, AGREES)} (superseded by {', '.join(later)})"
    assert claim_text("matches", AGREES) == HOLDS and claim_text("inconclusive", AGREES) == "the claim is inconclusive"
