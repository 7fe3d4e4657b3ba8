"""The evidence the advisor (``lbtrain advise``) falls back on when a user has none of their own:
what lbtrain's published studies found, per study and per multiple of the base batch, which LR
recipe held best and which failed.

The findings ship with lbtrain as ``lbtrain/studies/findings.json``. Each study is named by a
public title that describes it (its data, model, optimizers, batches and seeds), with its model,
dataset, budget (its smallest batch's), base batch, and per global batch: ``held``, the recipes
whose every run was ok at that budget, ranked by mean validation accuracy (never test; their
test accuracy, its 95% interval and n are what is reported), each with its ``standing`` on
validation (``lbtrain.reports.decisions.standing`` over its seeds: ``best`` only when separable
from every other recipe held there, else ``tied with the best`` or ``below the best``);
``longer``, recipes run there with another budget, ranked the same way among themselves; and
``failed``, the recipes with a run that was not ok. A recipe whose runs are another label's
runs is ranked once, the other label named in ``same_runs_as``. ``advisor_calibration``: the
measured critical batch of each validation pair as a multiple of the probe's ``B_simple``, and
their geometric mean.

The file is rendered from the studies' committed results by the repository's lab (outside the
package), and a test keeps it equal to what those results render.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["FINDINGS_FILE", "load_findings", "recipe_advice"]

FINDINGS_FILE = Path(__file__).with_name("findings.json")


def load_findings() -> dict[str, Any]:
    """The findings shipped with lbtrain."""
    return json.loads(FINDINGS_FILE.read_text())


def _outside(study: dict[str, Any], multiple: float) -> bool:
    """Whether ``multiple`` lies more than one doubling outside the multiples ``study`` measured."""
    measured = [row["multiple"] for row in study["batches"]]
    return multiple > 2 * max(measured) or multiple < min(measured) / 2


def recipe_advice(model: str, dataset: str, multiple: float) -> dict[str, Any] | None:
    """The study row nearest (in log2) to ``multiple`` x the base batch, from the study of the
    same model and dataset, else of the same model, else of the same dataset, else the first;
    among those, the first listed (the findings list the newest study of a model first) unless
    ``multiple`` lies more than one doubling outside its batches and another's covers it. The
    row carries the study's ``title``, model, dataset and budget. None without findings."""
    studies = load_findings()["studies"]
    if not studies:
        return None
    study = min(studies, key=lambda study: (study["model"] != model, study["dataset"] != dataset, _outside(study, multiple)))
    row = min(study["batches"], key=lambda row: (abs(math.log2(row["multiple"]) - math.log2(multiple)), row["multiple"]))
    return {"title": study["title"], "model": study["model"], "dataset": study["dataset"], "budget": study["budget"], **row}
