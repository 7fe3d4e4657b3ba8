"""adam_vit_v4 on the results page (``lab.results_page.adam_vit_v4``): a synthetic study in
``tmp_path`` made of goyal_v4's committed files with its recipes renamed (momentum+warmup as
adam+warmup, lars+warmup as lamb+warmup), so that every number the tests expect is read from those
files: the section's exponent sentence, the sqrt rule's and LAMB's decisions per batch, Malladi et
al.'s fourth-edition row superseding adam_scaling's, and You et al. 2020's LAMB row. The real
results/ shows nothing of adam_vit_v4 until its answer.json is committed."""

import csv
import json
import shutil
from pathlib import Path

import pytest
import test_results_page_fourth_edition as fourth_edition

from helpers import REPO_ROOT
from lab.results_page import render_results_page
from lab.results_page.adam_vit_v4 import LAMB, anchor_lamb, section_adam_vit_v4
from lab.results_page.anchors import ANCHORS, MALLADI, YOU_LAMB, anchor_row, claim_text, regime_line, shown_anchors, superseded_by
from lab.results_page.common import listed
from lab.results_page.goyal_v4 import decisions_by_batch, layerwise_text, recipe_search_studies, tuned_decisions
from lab.results_page.lr_scaling import sqrt_rule_claim
from lbtrain.reports.decisions import claim
from lbtrain.reports.regime import study_regimes
from lbtrain.reports.scaling_laws import LrExponentFit
from lbtrain.reports.statistics import difference_interval

RESULTS = Path(REPO_ROOT) / "results"
STUDY = "adam_vit_v4"
# goyal_v4's names as adam_vit_v4's (labels, search studies and run ids, the study's name).
RENAMED = {"momentum+warmup": "adam+warmup", "lars+warmup": "lamb+warmup", "momentum-warmup": "adam-warmup",
           "lars-warmup": "lamb-warmup", "goyal_v4": STUDY}


def _renamed(text: str) -> str:
    for old, new in RENAMED.items():
        text = text.replace(old, new)
    return text


def write_adam_vit_v4(results: Path) -> Path:
    """goyal_v4's answer, protocol, summary, experiment, storage, figures and runs' metrics under
    ``results/adam_vit_v4``, renamed; adam_scaling beside it (the second edition's Malladi row)."""
    source, folder = RESULTS / "goyal_v4", results / STUDY
    folder.mkdir(parents=True)
    for name in ("answer.json", "protocol.json", "summary.csv", "experiment.yaml"):
        (folder / name).write_text(_renamed((source / name).read_text()))
    shutil.copy(source / "optuna.db", folder / "optuna.db")
    shutil.copytree(source / "figures", folder / "figures")
    for path in (source / "runs").glob("*/metrics.json"):
        run = folder / "runs" / _renamed(path.parent.name)
        run.mkdir(parents=True)
        (run / "metrics.json").write_text(_renamed(path.read_text()))
    shutil.copytree(RESULTS / "adam_scaling", results / "adam_scaling",
                    ignore=shutil.ignore_patterns("figures", "*.db", "history.csv", "config.yaml"))
    return folder


def _answer(results: Path) -> dict:
    return json.loads((results / STUDY / "answer.json").read_text())


def _by_batch(answer: dict, rule: str) -> list[tuple[int, str]]:
    return [(row["global_batch"], row["rules"][rule]["decision"]) for row in answer["per_world_size"] if rule in row["rules"]]


def _words(decisions: list[tuple[int, str]]) -> str:
    """The page's words for decisions per batch (``goyal_v4.decisions_by_batch``, its doctest)."""
    return decisions_by_batch([(batch, {"decision": word}) for batch, word in decisions])


def _largest_regime(results: Path) -> str:
    """The regime of the study's largest batch in words (``Regime.describe``, lbtrain's reader)."""
    return max(study_regimes(results, STUDY), key=lambda regime: regime.global_batch).describe()


def _lamb_decisions(results: Path, answer: dict) -> dict[int, dict]:
    """LAMB tuned at each batch minus world size 1's chosen arm, computed from the summary here."""
    rows = list(csv.DictReader((results / STUDY / "summary.csv").open()))
    use = answer["per_world_size"][0]["use"]

    def tests(label, size):
        return [float(row["test_accuracy"]) for row in rows if row["label"] == label and int(row["world_size"]) == size and row["status"] == "ok"]

    reference = tests(use, answer["reference_world_size"])
    return {row["global_batch"]: difference_interval(tests("lamb+warmup tuned", row["world_size"]), reference)
            for row in answer["per_world_size"][1:]}


def test_the_section_states_adams_exponent_the_sqrt_rules_and_lambs_decisions_per_batch(tmp_path):
    write_adam_vit_v4(tmp_path)
    answer = _answer(tmp_path)
    text = "\n".join(section_adam_vit_v4(tmp_path))
    assert text.startswith("## adam_vit_v4: Adam's square-root rule and LAMB on a small ViT (fourth edition, the second workload)")
    assert "<!-- the regime of adam_vit_v4 -->" in text and f"answer states {answer['machine_hours']:.2f}" in text

    fit = LrExponentFit.from_dict(answer["lr_exponent"]["adam+warmup"])
    where = {value: "inside it" if fit.low <= value <= fit.high else "above it" if value > fit.high else "below it" for value in (0.5, 1.0)}
    assert (f"- Adam's tuned LR against the batch, adam+warmup: {fit.describe()}: the sqrt rule's 0.5 lies {where[0.5]}, "
            f"the linear rule's 1 {where[1.0]}.") in text

    sqrt = _by_batch(answer, "sqrt")
    first = answer["per_world_size"][1]["global_batch"]
    assert f"chosen arm: **{_words(sqrt)}** (batch {first:,}: " in text
    for batch, word in sqrt:
        assert f"batch {batch:,}: " in text.split(f"**{_words(sqrt)}** (")[1]
    assert f"; the linear rule: {_words(_by_batch(answer, 'linear'))}; no scaling: {_words(_by_batch(answer, 'none'))}." in text

    lamb = _lamb_decisions(tmp_path, answer)
    largest = answer["per_world_size"][-1]["global_batch"]
    assert f"{100 * lamb[largest].mean:+.1f} [{100 * lamb[largest].low:+.1f}, {100 * lamb[largest].high:+.1f}]" in text
    assert "LAMB with warmup, tuned on its own grid at every world size" in text
    words = _words([(batch, claim(difference, answer["margin"])) for batch, difference in lamb.items()])
    reference = answer["per_world_size"][0]["use"]
    assert f"Against world size 1's chosen arm ({reference}): **{words}** (batch {first:,}: " in text
    assert "Tuned LR, lamb+warmup: tuned lr ~ global_batch^" in text
    # Where LAMB is the chosen arm, its difference is the answer's.
    for row in answer["per_world_size"][1:]:
        if row["use"] == "lamb+warmup tuned":
            assert lamb[row["global_batch"]].mean == pytest.approx(row["difference"]["mean"])

    protocol = json.loads((tmp_path / STUDY / "protocol.json").read_text())
    grids = {recipe: len(next(iter(protocol["search"][f"{STUDY}-{slug}-w1"]["fields"].values()))["values"])
             for recipe, slug in (("adam+warmup", "adam-warmup"), ("lamb+warmup", "lamb-warmup"))}
    rules = list(dict.fromkeys(row["rule_name"] for row in protocol["rows"] if row["recipe"] == "adam+warmup"
                               and row["rule_name"] not in ("reference", "-")))
    names = {"linear": "the linear rule", "sqrt": "the sqrt rule", "none": "no scaling"}  # as the bullets name them
    assert (f"Arms: adam+warmup tuned at every world size (a grid of {grids['adam+warmup']} base LRs at world size 1) and carried from "
            f"world size 1 with {listed([names[rule] for rule in rules])}; lamb+warmup tuned at every world size (a grid of "
            f"{grids['lamb+warmup']} base LRs at world size 1).") in text
    assert "Convergence controls (is the equal-epoch budget enough to converge?): adam+warmup tuned at world size 1" in text
    assert "The control of adam+warmup linear rule at world size 64 (3x) was not run: 0 of its 5 runs ended ok" in text
    assert "| world size | global batch | share of the data |" in text and "adam_vit_v4/figures/answer_accuracy.png" in text


def test_malladis_fourth_edition_row_judges_the_answers_exponent_and_supersedes_adam_scaling(tmp_path):
    write_adam_vit_v4(tmp_path)
    answer = _answer(tmp_path)
    malladi = {anchor.edition: anchor for anchor in ANCHORS if anchor.claim == MALLADI}
    fit = answer["lr_exponent"]["adam+warmup"]
    verdict, band = sqrt_rule_claim(fit)
    low, high = fit["alpha_95_low"], fit["alpha_95_high"]
    # The band 0.5 ± 0.15: within it, wholly outside it, or across an edge.
    expected = "matches" if 0.35 < low and high < 0.65 else "worse" if high < 0.35 or low > 0.65 else "inconclusive"
    where = {"matches": "the interval lies within", "worse": "the interval lies wholly outside"}.get(expected, "the interval overlaps an edge of")
    assert verdict == expected
    row = anchor_row(tmp_path, malladi[4])
    assert row[:3] == ["Malladi et al. 2022", MALLADI, "fourth"]
    assert row[4] == f"adam_vit_v4: {_largest_regime(tmp_path)}; in regime"
    assert row[5] == f"**{expected}**: {claim_text(expected, malladi[4].supports)}"
    assert row[6].startswith(f"adam_vit_v4 (`lbtrain scale`), adam+warmup tuned at every world size: {band}")
    assert (f"Adam's tuned LR grows as batch^{fit['alpha']:.2f} (95% interval {low:.2f} to {high:.2f}) "
            f"over {fit['points']} batch sizes: {where} the sqrt rule's band 0.35 to 0.65") in band
    assert "; the sqrt rule carrying world size 1's tuned LR, against world size 1's chosen arm: batch 128: " in row[6]
    for batch, word in _by_batch(answer, "sqrt"):
        assert f"batch {batch:,}: " in row[6] and word in row[6]

    older = anchor_row(tmp_path, malladi[2])
    assert superseded_by(tmp_path, malladi[2]) == ["adam_vit_v4"]
    assert older[5].endswith("(superseded by adam_vit_v4)") and older[4].startswith("adam_scaling: ")


def test_the_lamb_row_is_judged_at_the_largest_batch_with_every_batch_in_its_evidence(tmp_path):
    write_adam_vit_v4(tmp_path)
    answer = _answer(tmp_path)
    lamb = _lamb_decisions(tmp_path, answer)
    anchor = next(anchor for anchor in ANCHORS if anchor.claim == YOU_LAMB)
    assert anchor.paper == "You et al. 2020" and anchor.edition == 4
    row = anchor_row(tmp_path, anchor)
    assert row[3].startswith("BERT-Large pre-training on Wikipedia and BooksCorpus") and "batch 512–65,536" in row[3]
    assert row[4] == f"adam_vit_v4: {_largest_regime(tmp_path)}; in regime"
    largest = answer["per_world_size"][-1]["global_batch"]
    decision = claim(lamb[largest], answer["margin"])
    assert row[5] == f"**{decision}**: {claim_text(decision, anchor.supports)}"
    assert row[6].startswith("adam_vit_v4 (`lbtrain scale`), lamb+warmup tuned on its own grid at every world size minus world size "
                             f"1's chosen arm ({answer['per_world_size'][0]['use']}): batch {answer['per_world_size'][1]['global_batch']:,}: ")
    for batch, difference in lamb.items():
        assert f"batch {batch:,}: {100 * difference.mean:+.1f} [{100 * difference.low:+.1f}, {100 * difference.high:+.1f}]" in row[6]
    assert f"; judged at the largest, batch {largest:,}. Tuned LR, lamb+warmup: " in row[6]

    # Worse at the largest batch (5 points off every seed): the claim does not hold; no final run there: inconclusive.
    summary = tmp_path / STUDY / "summary.csv"
    rows = list(csv.DictReader(summary.open()))
    header = list(rows[0])

    def rewrite(kept):
        with summary.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, header)
            writer.writeheader()
            writer.writerows(kept)

    size = str(answer["per_world_size"][-1]["world_size"])
    at_largest = [row for row in rows if row["label"] == "lamb+warmup tuned" and row["world_size"] == size]
    rewrite([{**row, "test_accuracy": float(row["test_accuracy"]) - 0.05} if row in at_largest else row for row in rows])
    assert anchor_row(tmp_path, anchor)[5] == "**worse**: the claim does not hold"
    rewrite([row for row in rows if row not in at_largest])
    verdict, evidence = anchor_lamb(tmp_path)
    assert verdict == "inconclusive" and f"no final run at the largest, batch {largest:,} (its search found no ok trial there)" in evidence


def test_the_page_places_the_section_after_keskar_v4s_with_its_regime_and_rows(tmp_path):
    write_adam_vit_v4(tmp_path)
    fourth_edition.write_keskar_v4(tmp_path / "keskar_v4", longer_loss=0.19)
    assert regime_line(tmp_path, STUDY)[0] == (f"*Regime* at its largest batch, {_largest_regime(tmp_path)}: "
                                               "**in regime** for Malladi et al. 2022 and You et al. 2020.")
    page = render_results_page(tmp_path)
    assert "## adam_vit_v4: Adam's square-root rule and LAMB" in page and "<!-- the regime of adam_vit_v4 -->" not in page
    assert page.index("## keskar_v4:") < page.index("## adam_vit_v4:") < page.index("## goyal_v3:")
    fourth = [anchor.claim for anchor in shown_anchors(tmp_path) if anchor.edition == 4 and anchor.studies(tmp_path) == [STUDY]]
    assert fourth == [MALLADI, YOU_LAMB]
    table = page.split("## Published findings")[1].split("\n## ")[0]
    assert table.index("| Malladi et al. 2022 | " + MALLADI + " | fourth |") < table.index("| You et al. 2020 | ") \
        < table.index("| third |") < table.index("| Malladi et al. 2022 | " + MALLADI + " | second and first |")

    (tmp_path / STUDY / "answer.json").unlink()  # still running: protocol.json written, no answer yet
    page = render_results_page(tmp_path)
    assert "adam_vit_v4" not in page and not [anchor for anchor in shown_anchors(tmp_path) if anchor.studies(tmp_path) == [STUDY]]


@pytest.mark.skipif((RESULTS / STUDY / "answer.json").is_file(), reason="adam_vit_v4's answer is committed: its section is on the page")
def test_the_real_page_shows_nothing_of_adam_vit_v4_before_its_answer():
    page = render_results_page(RESULTS)
    assert "## adam_vit_v4" not in page and "adam_vit_v4:" not in page
    assert not [anchor for anchor in shown_anchors(RESULTS) if anchor.studies(RESULTS) == [STUDY]]


def test_lambs_decisions_follow_the_answers_margin_and_its_bullet_says_what_is_missing(tmp_path):
    """LAMB is decided as the answer decides a rule (its margin, read from answer.json); its bullet
    renders no empty decision, best or reference, and its LRs from the runs without experiment.yaml."""
    write_adam_vit_v4(tmp_path)
    path = tmp_path / STUDY / "answer.json"
    answer = {**_answer(tmp_path), "margin": 0.002}
    path.write_text(json.dumps(answer))
    lamb = _lamb_decisions(tmp_path, answer)
    decisions = tuned_decisions(tmp_path, answer, LAMB, STUDY)
    assert {batch: entry["decision"] for batch, entry in decisions} == {batch: claim(difference, 0.002) for batch, difference in lamb.items()}
    assert any(claim(difference, 0.002) != claim(difference, 0.01) for difference in lamb.values())  # the margin tells them apart

    protocol = json.loads((tmp_path / STUDY / "protocol.json").read_text())
    rows = list(csv.DictReader((tmp_path / STUDY / "summary.csv").open()))
    trained = {int(row["world_size"]): float(row["learning_rate"]) for row in rows if row["label"] == f"{LAMB} tuned"}
    (tmp_path / STUDY / "experiment.yaml").unlink()  # the LRs are the runs' own
    text = layerwise_text(tmp_path, protocol, answer, LAMB, STUDY, decisions=[])
    sizes = {row["world_size"]: row["global_batch"] for row in answer["per_world_size"]}
    for size, learning_rate in trained.items():
        assert f"{sizes[size]:,}: {learning_rate:.4g}" in text
    assert "It has no final run beyond world size 1: no decision against world size 1." in text and "****" not in text

    searches = {name: {**entry, "fields": {key: {**field, "best": None} for key, field in entry["fields"].items()}}
                for name, entry in protocol["search"].items()}
    searches["adam_vit_v4-lamb-warmup"] = searches["unrelated-w"] = {}  # names of another shape are skipped
    answer["per_world_size"][0]["use"] = None
    text = layerwise_text(tmp_path, {**protocol, "search": searches}, answer, LAMB, STUDY, decisions=decisions)
    assert "its best LR at batch" not in text and "(None)" not in text
    assert "Against world size 1 (no arm whose every seed was ok there): **" in text
    assert set(recipe_search_studies({"search": searches}, STUDY, LAMB)) == set(sizes)
