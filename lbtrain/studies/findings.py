"""What lbtrain's own committed studies found: per study and per multiple of the base batch,
which LR recipe held best and which failed. The advisor (``lbtrain advise``) cites it.

The findings ship with lbtrain as ``lbtrain/studies/findings.json``, rendered from the studies'
``results/<study>/report.json`` and ``summary.csv`` by ``python -m lbtrain.studies.findings`` (a test
checks the shipped file equals what the committed results render, so advice cannot drift from
the data). Recipes are ranked by validation accuracy, never test (their test accuracy is what
is reported), and each carries its ``standing`` on validation
(``lbtrain.reports.decisions.standing`` over its seeds' validation accuracies): ``best`` only
when separable from every other recipe held there, else ``tied with the best`` or ``below the
best``. Runs given another budget than the study's (goyal_bn's equal-steps re-runs) are listed
apart, as what training longer gave, ranked among themselves the same way. Two labels whose runs
are the same runs (the runner copied them: goyal_v3's tuned and linear-rule arms where tuning found
the linear rule's LR) are one recipe, ranked once, the other label named in ``same_runs_as``.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from lbtrain.reports.decisions import standing
from lbtrain.results import ADVISOR_VALIDATION_FILE, EXPERIMENT_FILE, REPORT_JSON, SUMMARY_FILE, run_set

FINDINGS_FILE = Path(__file__).with_name("findings.json")
# The studies whose accuracy-by-recipe tables the advisor draws on, and the model each is about:
# the third edition (in the papers' regime, LR searched on a grid, 5 fresh seeds) first, then the
# second (tuned at equal budgets) and the first. For a model and dataset two studies share, the
# advisor cites the first listed (``recipe_advice``).
STUDIES = {"goyal_v3": "resnet", "goyal_bn": "resnet", "goyal_scaling": "mlp", "goyal_scaling_cnn": "cnn"}


logger = logging.getLogger(__name__)


def _cell(record: dict[str, Any], validation: list[float], budget: str) -> dict[str, Any]:
    return {"recipe": record["recipe"], "validation_accuracy": statistics.fmean(validation) if validation else None,
            "validation_seeds": validation, "test_accuracy": record["test_accuracy"],
            "low": record["low"], "high": record["high"], "n": record["ok_runs"], "budget": budget}


def _ranked(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``cells`` by mean validation accuracy, highest first (none last), each with its
    ``standing`` among them on validation (``lbtrain.reports.decisions.standing``; None without
    a validation accuracy) instead of its seeds."""
    ranks = standing({cell["recipe"]: cell["validation_seeds"] for cell in cells})
    ordered = sorted(cells, key=lambda cell: -(cell["validation_accuracy"] if cell["validation_accuracy"] is not None else -math.inf))
    return [{**{key: value for key, value in cell.items() if key != "validation_seeds"}, "standing": ranks.get(cell["recipe"])}
            for cell in ordered]


def _runs_by_cell(summary: list[dict[str, str]]) -> dict[tuple[str, int], list[dict[str, str]]]:
    cells: dict[tuple[str, int], list[dict[str, str]]] = {}
    for row in summary:
        cells.setdefault((row["label"], int(row["global_batch"])), []).append(row)
    return cells


def study_findings(report: dict[str, Any], summary: list[dict[str, str]], model: str, dataset: str) -> dict[str, Any]:
    """One study's findings from its report.json and summary.csv rows: for each global batch (as a
    multiple of the smallest), at the study's budget (its smallest batch's), the recipes whose
    every run was ``ok`` ranked by mean validation accuracy with their standing on validation
    (``_ranked``; their test accuracy's 95% interval and n reported) and the recipes with a run
    that was not ok; ``longer``: recipes run there with another budget, all seeds ok, ranked the
    same way among themselves."""
    runs = _runs_by_cell(summary)
    records = report["accuracy"]
    base = min(record["global_batch"] for record in records)
    budget = runs[next((r["recipe"], r["global_batch"]) for r in records if r["global_batch"] == base)][0]["budget"]
    rows = []
    for batch in sorted({record["global_batch"] for record in records}):
        cells, ranked = [], []
        owners: dict[frozenset[str], dict[str, Any]] = {}
        for record in (record for record in records if record["global_batch"] == batch):
            mine = runs[(record["recipe"], batch)]
            runs_of = run_set(mine)
            if runs_of is not None and runs_of in owners:  # another label's runs, copied by the runner: one recipe, ranked once
                owners[runs_of].setdefault("same_runs_as", []).append(record["recipe"])
                continue
            cells.append(record)
            cell = _cell(record, [float(row["validation_accuracy"]) for row in mine if row["validation_accuracy"]], mine[0]["budget"])
            if runs_of is not None:
                owners[runs_of] = cell
            if record["ok_runs"] == record["total"] and record["total"]:
                ranked.append(cell)
        rows.append({"global_batch": batch, "multiple": batch // base,
                     "held": _ranked([cell for cell in ranked if cell["budget"] == budget]),
                     "longer": _ranked([cell for cell in ranked if cell["budget"] != budget]),
                     "failed": sorted(record["recipe"] for record in cells
                                      if record["ok_runs"] < record["total"] and runs[(record["recipe"], batch)][0]["budget"] == budget)})
    return {"study": report["experiment"], "model": model, "dataset": dataset, "budget": budget, "base_batch": base,
            "report": f"results/{report['experiment']}/report.md", "batches": rows}


def advisor_calibration(validation: dict[str, Any]) -> dict[str, Any]:
    """From results/advisor_validation/validation.json: per pair, the measured critical batch
    as a multiple of the probe's B_simple, and their geometric mean."""
    pairs = [{"pair": pair["pair"], "model": pair["model"], "dataset": pair["dataset"],
              "multiple": pair["measured"]["b_crit"] / pair["predicted"]["b_simple"]} for pair in validation["pairs"]]
    mean = math.exp(sum(math.log(pair["multiple"]) for pair in pairs) / len(pairs)) if pairs else None
    return {"pairs": pairs, "geometric_mean": mean, "report": "results/advisor_validation/validation.md"}


def render(results: Path) -> dict[str, Any]:
    """The findings of every study in ``STUDIES`` found under ``results``, and the advisor's
    calibration where its validation is there."""
    findings: dict[str, Any] = {"studies": [
        study_findings(json.loads((results / study / REPORT_JSON).read_text()),
                       list(csv.DictReader((results / study / SUMMARY_FILE).read_text().splitlines())), model,
                       yaml.safe_load((results / study / EXPERIMENT_FILE).read_text())["data"]["dataset"])
        for study, model in STUDIES.items() if (results / study / REPORT_JSON).is_file()]}
    validation = results / "advisor_validation" / ADVISOR_VALIDATION_FILE
    if validation.is_file():
        findings["advisor_calibration"] = advisor_calibration(json.loads(validation.read_text()))
    return findings


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
    among those, the first listed (``STUDIES``: the newest edition) unless ``multiple`` lies more
    than one doubling outside its batches and another's covers it. None without findings."""
    studies = load_findings()["studies"]
    if not studies:
        return None
    study = min(studies, key=lambda study: (study["model"] != model, study["dataset"] != dataset, _outside(study, multiple)))
    row = min(study["batches"], key=lambda row: (abs(math.log2(row["multiple"]) - math.log2(multiple)), row["multiple"]))
    return {"study": study["study"], "model": study["model"], "dataset": study["dataset"], "budget": study["budget"],
            "report": study["report"], **row}


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("results")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    FINDINGS_FILE.write_text(json.dumps(render(root), indent=1) + "\n")
    logger.info("wrote %s", FINDINGS_FILE)
