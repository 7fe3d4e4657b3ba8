"""adam_vit_v4, the fourth edition's second workload (a small ViT with Adam and LAMB), on the results
page: its section, Malladi et al. 2022's square-root rule for Adam and You et al. 2020's LAMB
judged on it.

Made by ``lbtrain scale`` as goyal_v4 is, so the page reads the same files (``answer.json``,
``protocol.json``) with goyal_v4's code, each function given this study and its recipes: Adam
with warmup (``ADAM``) tuned at every world size and carried from world size 1 by the linear,
sqrt and no-scaling rules, LAMB with warmup (``LAMB``) tuned at every world size. The answer
decides the rules against world size 1's chosen arm; LAMB's decision at each batch is taken the
same way from the summary (``goyal_v4.tuned_decisions``). Malladi et al.'s claim is judged on the
tuned LR's exponent (``lr_scaling.sqrt_rule_claim``, the rule that judges adam_scaling), the sqrt
arm's decisions in the evidence; You et al. 2020's on LAMB at the largest batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.results_page.common import listed, opening, study_json
from lab.results_page.goyal_v3 import control_sentence, study_batch_regimes
from lab.results_page.goyal_v4 import (
    LINEAR,
    NONE,
    RULE_NAMES,
    SQRT,
    answer_tables,
    decisions_by_batch,
    entry_text,
    exponent_text,
    layerwise_text,
    machine_text,
    made_by_text,
    not_run_controls,
    recipe_search_studies,
    rule_decisions,
    tuned_decisions,
)
from lab.results_page.lr_scaling import sqrt_rule_claim
from lbtrain.reports.decisions import INCONCLUSIVE
from lbtrain.results import ANSWER_FILE, PROTOCOL_FILE

STUDY = "adam_vit_v4"
COMMAND = "lbtrain scale experiments/adam_vit_v4.yaml --world-sizes 1,4,16,64 --min-updates 800"
TITLE = "Adam's square-root rule and LAMB on a small ViT (fourth edition, the second workload)"
# The recipes of experiments/adam_vit_v4.yaml, in the answer's words.
ADAM, LAMB = "adam+warmup", "lamb+warmup"


def study_answer(results: Path) -> dict[str, Any] | None:
    """adam_vit_v4's ``answer.json`` (``lbtrain scale``), or None when it is not committed."""
    return study_json(results, STUDY, ANSWER_FILE)


def _decisions_text(decisions: list[tuple[int, dict[str, Any]]]) -> str:
    """``batch 128: +0.1 [-0.2, +0.4] (n=5 vs 5, df=7.9) points: matches; batch 512: ...``."""
    return "; ".join(f"batch {batch:,}: {entry_text(entry)}" for batch, entry in decisions)


def arms_text(answer: dict[str, Any], protocol: dict[str, Any]) -> str:
    """The arms, from the protocol's rows: each recipe tuned at every world size and the rules
    carrying world size 1's tuning, and each grid's size (its searches' values at world size 1)."""
    recipes: dict[str, list[str]] = {}
    for row in protocol["rows"]:
        rules = recipes.setdefault(row["recipe"], [])
        if row["rule_name"] not in ("reference", "-") and row["rule_name"] not in rules:
            rules.append(row["rule_name"])
    reference = answer["reference_world_size"]
    parts = []
    for recipe, rules in recipes.items():
        search = recipe_search_studies(protocol, STUDY, recipe).get(reference) or {}
        field = next(iter(search.get("fields", {}).values()), {})
        grid = f" (a grid of {len(field['values'])} base LRs at world size {reference})" if field.get("values") else ""
        carried = f" and carried from world size {reference} with {listed([RULE_NAMES.get(rule, rule) for rule in rules])}" if rules else ""
        parts.append(f"{recipe} tuned at every world size{grid}{carried}")
    return "Arms: " + "; ".join(parts) + ". "


def section_adam_vit_v4(results: Path) -> list[str]:
    """adam_vit_v4's section: the design, Adam's tuned LR exponent with its interval, each rule's
    decision against world size 1 per batch (the sqrt rule first: it is Malladi et al.'s claim),
    LAMB tuned at every batch against world size 1's chosen arm, the convergence controls, the
    answer per world size, every arm against world size 1 and the answer's figures."""
    lines, protocol = opening(results, STUDY, TITLE, PROTOCOL_FILE, COMMAND)
    answer = study_answer(results)
    if protocol is None or answer is None:
        return lines if protocol is None else lines + [f"{STUDY} has no {ANSWER_FILE}: `{COMMAND}` writes it.", ""]
    reference = answer["reference_world_size"]
    sqrt = rule_decisions(answer, SQRT)
    controls = control_sentence(protocol, lead="Convergence controls (is the equal-epoch budget enough to converge?): ")
    missing = not_run_controls(results, answer, STUDY)
    lamb = layerwise_text(results, protocol, answer, LAMB, STUDY, decisions=tuned_decisions(results, answer, LAMB, STUDY))
    bullets = [
        f"- Adam's tuned LR against the batch, {exponent_text(answer, ADAM)}.",
        f"- The sqrt rule (Malladi et al. 2022) carrying world size {reference}'s tuned LR, against world size {reference}'s "
        f"chosen arm: **{decisions_by_batch(sqrt)}** ({_decisions_text(sqrt)}); the linear rule: "
        f"{decisions_by_batch(rule_decisions(answer, LINEAR))}; no scaling: {decisions_by_batch(rule_decisions(answer, NONE))}.",
        *([f"- {lamb}"] if lamb else []),
        f"- {controls}" + (f" The control of {missing}." if missing else ""),
    ]
    return lines + [
        machine_text(results, answer, STUDY), "",
        made_by_text(answer, protocol, STUDY, f"`{COMMAND}`", arms=arms_text(answer, protocol)),
        "",
        *bullets,
        "",
        *answer_tables(results, STUDY, answer, protocol, study_batch_regimes(results, STUDY)),
    ]


def anchor_malladi_v4(results: Path) -> tuple[str, str]:
    """Malladi et al. 2022 on adam_vit_v4: the answer's fit of Adam's tuned LR against the batch
    judged by ``sqrt_rule_claim`` (the band adam_scaling is judged by), with the sqrt rule's
    decision against world size 1's chosen arm at each batch as evidence."""
    answer = study_answer(results)
    if answer is None:
        return "not measured yet", f"{STUDY} is not committed"
    fit = (answer.get("lr_exponent") or {}).get(ADAM)
    if fit is None:
        return "not measured yet", f"{STUDY} has no fit of {ADAM}'s tuned LR"
    verdict, evidence = sqrt_rule_claim(fit)
    reference = answer["reference_world_size"]
    sqrt = rule_decisions(answer, SQRT)
    carried = (f"; the sqrt rule carrying world size {reference}'s tuned LR, against world size {reference}'s chosen arm: "
               f"{_decisions_text(sqrt)}") if sqrt else ""
    return verdict, f"{STUDY} (`lbtrain scale`), {ADAM} tuned at every world size: {evidence}{carried}"


def anchor_lamb(results: Path) -> tuple[str, str]:
    """You et al. 2020 on adam_vit_v4: LAMB with warmup tuned at the largest batch against world
    size 1's chosen arm (``goyal_v4.tuned_decisions``: the answer's reference and decision rule),
    every batch's decision in the evidence; ``inconclusive`` when LAMB has no final run at the
    largest batch (its search found no ok trial there)."""
    answer = study_answer(results)
    if answer is None:
        return "not measured yet", f"{STUDY} is not committed"
    decisions = tuned_decisions(results, answer, LAMB, STUDY)
    if not decisions:
        return "not measured yet", f"{STUDY} has no final run of {LAMB} beyond world size {answer['reference_world_size']}"
    reference = next(row for row in answer["per_world_size"] if row["world_size"] == answer["reference_world_size"])
    largest = answer["per_world_size"][-1]["global_batch"]
    entry = dict(decisions).get(largest)
    judged = (f"judged at the largest, batch {largest:,}" if entry is not None else
              f"no final run at the largest, batch {largest:,} (its search found no ok trial there)")
    evidence = (f"{STUDY} (`lbtrain scale`), {LAMB} tuned on its own grid at every world size minus world size "
                f"{reference['world_size']}'s chosen arm ({reference['use']}): {_decisions_text(decisions)}; {judged}. "
                f"Tuned LR, {exponent_text(answer, LAMB)}")
    return (INCONCLUSIVE if entry is None else entry["decision"]), evidence


__all__ = ["ADAM", "COMMAND", "LAMB", "STUDY", "anchor_lamb", "anchor_malladi_v4", "arms_text", "section_adam_vit_v4", "study_answer"]
