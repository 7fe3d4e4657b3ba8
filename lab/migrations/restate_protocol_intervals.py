"""Re-estimates the intervals of committed protocol studies from their final runs, without
re-running anything.

For every study folder given (default: every folder of ``results/`` with a ``protocol.json``),
the comparison rows and the equal-steps rows of ``protocol.json`` are computed again from the
folder's ``summary.csv`` and ``experiment.yaml`` by ``lbtrain.studies.protocol``
(``comparison_rows``, ``equal_steps_rows``: Student-t and Welch intervals today, where the
committed files may hold percentile-bootstrap ones); every other key of ``protocol.json`` (trial
counts, LR fits, the arms chosen on validation, ...) is kept as recorded, and ``protocol.md`` is
rendered again from the result. Run from the repository root:
``.venv/bin/python -m lab.migrations.restate_protocol_intervals [results/NAME ...]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lbtrain.config import load_experiment
from lbtrain.files import write_atomic, write_json_atomic
from lbtrain.reports.tables import read_summary
from lbtrain.results import EXPERIMENT_FILE, PROTOCOL_FILE, PROTOCOL_REPORT, SUMMARY_FILE
from lbtrain.studies.protocol import comparison_rows, equal_steps_rows, protocol_arms, protocol_markdown, reference_world_size


def restate(folder: Path) -> list[Path]:
    """Rewrites ``folder``'s protocol.json rows and protocol.md (module doc); returns the files written."""
    experiment = load_experiment(folder / EXPERIMENT_FILE)
    recorded = json.loads((folder / PROTOCOL_FILE).read_text())
    arms, summary, reference = protocol_arms(experiment), read_summary(folder / SUMMARY_FILE), reference_world_size(experiment)
    rows = comparison_rows(arms, summary, recorded["trials"], reference)
    keys = [(row["recipe"], row["rule_name"], row["world_size"]) for row in rows]
    if keys != [(row["recipe"], row["rule_name"], row["world_size"]) for row in recorded["rows"]]:
        raise SystemExit(f"{folder}: today's arms are not the recorded ones; rerun the sweep instead")
    steps = equal_steps_rows(arms, summary, reference)
    data = {**recorded, "rows": rows, **({"equal_steps": steps} if "equal_steps" in recorded or steps else {})}
    seeds = recorded.get("seeds", {}).get("tuning") or None
    markdown = protocol_markdown(experiment, rows, recorded["trials"], recorded.get("lr_fits"), steps,
                                 recorded.get("search") or None, seeds)
    return [write_json_atomic(folder / PROTOCOL_FILE, data), write_atomic(folder / PROTOCOL_REPORT, markdown)]


def main(arguments: list[str]) -> None:
    folders = [Path(a) for a in arguments] or sorted(p.parent for p in Path("results").glob(f"*/{PROTOCOL_FILE}"))
    for folder in folders:
        for path in restate(folder):
            print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
