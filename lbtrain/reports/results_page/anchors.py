"""The page's first table: each published finding the studies test, judged reproduced or not from
the committed data by its study's module."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from lbtrain.reports.results_page.asynchrony import anchor_async_lr, anchor_staleness, anchor_staleness_damping
from lbtrain.reports.results_page.common import figure_lines
from lbtrain.reports.results_page.critical_batch import anchor_mccandlish, anchor_shallue
from lbtrain.reports.results_page.goyal import (
    GOYAL_2017_BASE_ERROR,
    GOYAL_2017_ERROR_AT_32X,
    GOYAL_FIGURE,
    anchor_goyal_linear_warmup,
    anchor_goyal_no_warmup,
    anchor_lars,
    anchor_nado,
)
from lbtrain.reports.results_page.keskar import anchor_hoffer, anchor_keskar
from lbtrain.reports.results_page.lr_scaling import anchor_malladi
from lbtrain.reports.tables import markdown_table

# (paper, claim, the judge: results folder -> (verdict, evidence)), in the table's order.
ANCHORS: list[tuple[str, str, Callable[[Path], tuple[str, str]]]] = [
    ("Goyal et al. 2017", "linear scaling with gradual warmup matches the small batch (up to 8k on ImageNet)", anchor_goyal_linear_warmup),
    ("Goyal et al. 2017", "without warmup, linear scaling loses accuracy at the large batch", anchor_goyal_no_warmup),
    ("Keskar et al. 2017", "large batches reach sharper minima and test worse", anchor_keskar),
    ("Shallue et al. 2018", "steps to a target fall perfectly with the batch, then with diminishing returns", anchor_shallue),
    ("McCandlish et al. 2018", "the critical batch is predicted by the gradient noise scale", anchor_mccandlish),
    ("Hoffer et al. 2017", "training longer with ghost batch norm closes the large-batch gap", anchor_hoffer),
    ("You et al. 2017", "LARS with warmup holds at large batches", anchor_lars),
    ("Nado et al. 2021", "tuned Nesterov momentum matches LARS and LAMB at large batches", anchor_nado),
    ("Malladi et al. 2022", "Adam's LR should grow as the square root of the batch", anchor_malladi),
    ("Lian et al. 2015; Dutta et al. 2018", "asynchronous SGD degrades as the staleness grows", anchor_staleness),
    ("Zhang et al. 2016", "dividing the LR by the staleness keeps asynchronous SGD training", anchor_staleness_damping),
    ("Mitliagkas et al. 2016", "asynchrony acts as implicit momentum: per sample, the best asynchronous LR is smaller than "
     "synchronous SGD's", anchor_async_lr),
]


def section_anchors(results: Path) -> list[str]:
    """The table of ``ANCHORS`` with each verdict and its evidence, and goyal_bn's figure beside
    Goyal et al. 2017's numbers."""
    rows = []
    for paper, claim, judge in ANCHORS:
        verdict, evidence = judge(results)
        rows.append([paper, claim, f"**{verdict}**", evidence])
    return ["## Published findings: what the data say", "",
            "Each verdict is computed from the data below (scripts/render_results_readme.py says how); intervals as everywhere "
            "on this page. Verdicts on a difference of accuracies (the evidence names arm − reference) follow one decision rule "
            "(lbtrain/reports/decisions.py) with a margin of 1 point: *matches* when the whole 95% interval lies above −1 point "
            "(non-inferiority), *better* when it lies above +1 point, *worse* when it lies below −1 point, *inconclusive* "
            "otherwise or without an interval (one seed, no ok run).", "",
            markdown_table(["paper", "claim", "here", "evidence"], rows), "",
            *figure_lines(results, "goyal_bn", GOYAL_FIGURE, "goyal_bn's linear rule with and without gradual warmup beside Goyal et al. 2017's "
                          f"ImageNet numbers (Table 1: top-1 error {GOYAL_2017_BASE_ERROR:.2f} at batch 256, at 8k "
                          + ", ".join(f"{error:.2f} with {label.split(', ')[-1].replace('linear + ', '')}"
                                      for label, error in GOYAL_2017_ERROR_AT_32X.items()) + ")")]
