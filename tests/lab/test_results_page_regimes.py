"""A study outside a paper's regime reads ``out of regime`` on the results page's anchors, never a
claim on the paper (the regimes themselves: tests/reports/test_regime.py)."""

from pathlib import Path

from conftest import REPO_ROOT
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
