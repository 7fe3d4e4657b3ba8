"""The arms of a tuning protocol (``protocol.json`` of ``lbtrain sweep`` in protocol mode) as the
results page names them, and the summary labels their runs carry."""

from __future__ import annotations

from typing import Any

from lab.results_page.common import failed_text, status_counts


def arm_label(row: dict[str, Any], kind: str) -> str:
    """``momentum+warmup, tuned`` or ``momentum+warmup, linear rule``: a protocol row's arm."""
    if kind == "tuned":
        return f"{row['recipe']}, tuned"
    return f"{row['recipe']}, {row['rule_name']} rule"


def run_labels(row: dict[str, Any], kind: str) -> tuple[str, ...]:
    """The summary labels an arm's runs may carry (``lbtrain.studies.protocol.Arm.label``: the rule's
    name is left out when ``protocol.rules`` names no rules for the recipe)."""
    if kind == "tuned":
        return (f"{row['recipe']} tuned",)
    return (f"{row['recipe']} {row['rule_name']} rule", f"{row['recipe']} rule")


def no_ok_seed(arm: dict[str, Any] | None, runs: list[dict[str, Any]]) -> str:
    """``no ok seed (3 collapsed)``: an arm none of whose seeds was ok, its ``runs`` (the
    study's summary rows) by status; ``not run`` for an arm the study lacks."""
    if arm is None:
        return "not run"
    statuses = {status: count for (size, status), count in status_counts(runs, arm["run_labels"]).items() if size == arm["world_size"]}
    failed = failed_text(statuses)
    return f"no ok seed ({failed})" if failed else "no test accuracy"
