"""The advisor's fallback evidence, rendered from this repository's committed studies: what each
found, per multiple of the base batch, which LR recipe held best and which failed, written to
``lbtrain/studies/findings.json`` (``lbtrain.studies.findings`` reads it; its docstring describes
the file). The shipped file names a study only by its public title (``STUDIES``: what the study is
about, then its batches and seeds, from its data), never by its name or a path of ``results/``.

Each study's findings come from its ``results/<study>/report.json`` and ``summary.csv`` (a test
keeps the shipped file equal to what the committed results render, so advice cannot drift from
the data). Recipes are ranked by validation accuracy, never test (their test accuracy is what is
reported), and each carries its ``standing`` on validation (``lbtrain.reports.decisions.standing``
over its seeds' validation accuracies). Runs given another budget than the study's (goyal_bn's
equal-steps re-runs) are listed apart, as what training longer gave, ranked among themselves the
same way. Two labels whose runs are the same runs (the runner copied them: goyal_v3's tuned and
linear-rule arms where tuning found the linear rule's LR) are one recipe, ranked once, the other
label named in ``same_runs_as``. The advisor's calibration comes from
``results/advisor_validation/validation.json`` (``lab.advisor_validation``).

    python -m lab.findings [results]
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from lbtrain.reports.decisions import standing
from lbtrain.results import ADVISOR_VALIDATION_FILE, EXPERIMENT_FILE, REPORT_JSON, SUMMARY_FILE, run_set
from lbtrain.studies.findings import FINDINGS_FILE


@dataclasses.dataclass(frozen=True)
class Study:
    """A committed study the advisor draws on: the zoo model it is about, and what it is about in
    public words (its title without the batches and seeds, which its data give)."""

    model: str
    about: str


# The studies whose accuracy-by-recipe tables the advisor draws on: the third edition (in the
# papers' regime, LR searched on a grid, 5 fresh seeds) first, then the second (tuned at equal
# budgets) and the first. For a model and dataset two studies share, the advisor cites the first
# listed (``lbtrain.studies.findings.recipe_advice``).
STUDIES = {
    "goyal_v3": Study("resnet", "Fashion-MNIST resnet 8-16-32, momentum SGD with and without warmup, LARS with warmup, "
                              "LR tuned on a grid"),
    "goyal_bn": Study("resnet", "Fashion-MNIST (10,000 images) resnet 8-16-32, momentum SGD with and without warmup, "
                              "Nesterov, LARS, LAMB and Adam with warmup, LR tuned"),
    "goyal_scaling": Study("mlp", "Fashion-MNIST mlp 512-512, momentum SGD, no LR scaling, square-root and linear scaling "
                                  "with and without warmup"),
    "goyal_scaling_cnn": Study("cnn", "Fashion-MNIST (12,000 images) cnn 32-64, momentum SGD, no LR scaling, "
                                      "square-root and linear scaling with warmup"),
}


def title(about: str, batches: list[int], seeds: int) -> str:
    """A study's public title: what it is about, its batches and seeds.

    >>> title("Fashion-MNIST mlp", [128, 1024], 3)
    'Fashion-MNIST mlp, batch 128 to 1024, 3 seeds'
    """
    return f"{about}, batch {min(batches)} to {max(batches)}, {seeds} seeds"


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


def study_findings(report: dict[str, Any], summary: list[dict[str, str]], study: Study, dataset: str) -> dict[str, Any]:
    """One study's findings from its report.json and summary.csv rows, under its public title:
    for each global batch (as a multiple of the smallest), at the study's budget (its smallest
    batch's), the recipes whose every run was ``ok`` ranked by mean validation accuracy with
    their standing on validation (``_ranked``; their test accuracy's 95% interval and n
    reported) and the recipes with a run that was not ok; ``longer``: recipes run there with
    another budget, all seeds ok, ranked the same way among themselves."""
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
    seeds = max(record["total"] for record in records)
    return {"title": title(study.about, [row["global_batch"] for row in rows], seeds), "model": study.model, "dataset": dataset,
            "budget": budget, "base_batch": base, "batches": rows}


def advisor_calibration(validation: dict[str, Any]) -> dict[str, Any]:
    """From results/advisor_validation/validation.json: per pair, the measured critical batch
    as a multiple of the probe's B_simple, and their geometric mean."""
    pairs = [{"pair": pair["pair"], "model": pair["model"], "dataset": pair["dataset"],
              "multiple": pair["measured"]["b_crit"] / pair["predicted"]["b_simple"]} for pair in validation["pairs"]]
    mean = math.exp(sum(math.log(pair["multiple"]) for pair in pairs) / len(pairs)) if pairs else None
    return {"pairs": pairs, "geometric_mean": mean}


def render(results: Path) -> dict[str, Any]:
    """The findings of every study in ``STUDIES`` found under ``results``, and the advisor's
    calibration where its validation is there."""
    findings: dict[str, Any] = {"studies": [
        study_findings(json.loads((results / name / REPORT_JSON).read_text()),
                       list(csv.DictReader((results / name / SUMMARY_FILE).read_text().splitlines())), study,
                       yaml.safe_load((results / name / EXPERIMENT_FILE).read_text())["data"]["dataset"])
        for name, study in STUDIES.items() if (results / name / REPORT_JSON).is_file()]}
    validation = results / "advisor_validation" / ADVISOR_VALIDATION_FILE
    if validation.is_file():
        findings["advisor_calibration"] = advisor_calibration(json.loads(validation.read_text()))
    return findings


def main(arguments: list[str]) -> None:
    FINDINGS_FILE.write_text(json.dumps(render(Path(arguments[0]) if arguments else Path("results")), indent=1) + "\n")
    print(f"wrote {FINDINGS_FILE}")


if __name__ == "__main__":
    main(sys.argv[1:])
