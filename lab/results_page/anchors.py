"""The page's first table: each published finding the studies test, judged from the committed data
by its study's module, beside the paper's regime and the study's (``lbtrain.reports.regime``): a
study outside the paper's regime reads ``out of regime``, its judge's verdict shown as evidence only."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Callable, Mapping, NamedTuple

from lab.results_page.adam_vit_v4 import STUDY as ADAM_VIT_V4
from lab.results_page.adam_vit_v4 import anchor_lamb, anchor_malladi_v4
from lab.results_page.asynchrony import anchor_async_lr, anchor_staleness, anchor_staleness_damping
from lab.results_page.common import DOES_NOT_HOLD, HOLDS, UNDECIDED, figure_lines, study_json, study_runs
from lab.results_page.critical_batch import EARLIER_STEPS_STUDIES, anchor_mccandlish, anchor_shallue
from lab.results_page.critical_batch_v4 import STEPS_STUDIES_V4
from lab.results_page.goyal import (
    GOYAL_2017_BASE_ERROR,
    GOYAL_2017_ERROR_AT_32X,
    GOYAL_FIGURE,
    anchor_goyal_linear_warmup,
    anchor_goyal_no_warmup,
    anchor_lars,
    anchor_nado,
)
from lab.results_page.goyal_v3 import CRITICAL_BATCH_STUDY, anchor_goyal_v3_longer
from lab.results_page.goyal_v4 import STUDY as GOYAL_V4
from lab.results_page.goyal_v4 import anchor_goyal_v4_linear
from lab.results_page.keskar import (
    KESKAR_V4,
    KESKAR_V4_REGIMES,
    anchor_hoffer,
    anchor_keskar,
    anchor_keskar_v3,
    anchor_keskar_v4,
    keskar_v4_claim,
)
from lab.results_page.lr_scaling import anchor_malladi
from lbtrain.reports.decisions import BETTER, CLAIMS, MATCHES, WORSE
from lbtrain.reports.regime import (
    MAX_BATCH_FRACTION,
    MIN_UPDATES,
    OUT_OF_REGIME,
    PAPER_REGIMES,
    PaperRegime,
    Regime,
    in_regime,
    largest_in_regime,
    study_regimes,
)
from lbtrain.reports.tables import markdown_table
from lbtrain.results import ANSWER_FILE, COMPARE_JSON, PROTOCOL_FILE, REPORT_JSON, SUMMARY_FILE

NOT_MEASURED_YET = "not measured yet"


def _each(*studies: str) -> Callable[[Path], list[str]]:
    """The judge reads every one of ``studies`` that is committed."""
    return lambda results: [study for study in studies if (results / study / SUMMARY_FILE).is_file()]


def _first(*studies: str) -> Callable[[Path], list[str]]:
    """The judge reads the first of ``studies`` with a ``report.json`` (of the earlier editions'
    ``STEPS_STUDIES``, steps_to_target where committed, else critical_batch), as
    ``critical_batch._steps_study`` chooses."""
    return lambda results: next(([study] for study in studies if (results / study / REPORT_JSON).is_file()), [])


def _finished(study: str, last: str = PROTOCOL_FILE) -> Callable[[Path], list[str]]:
    """The judge reads ``study`` once its ``last`` file is written: a protocol writes
    ``protocol.json`` last, ``lbtrain scale`` its ``answer.json`` after it, so a study still running
    (its ``summary.csv`` growing) is not read half done."""
    return lambda results: [study] if (results / study / last).is_file() else []


def _compared(study: str) -> Callable[[Path], list[str]]:
    """The judge reads ``lbtrain compare``'s record ``study``: the two studies its ``compare.json``
    sets side by side."""
    def studies(results: Path) -> list[str]:
        path = results / study / COMPARE_JSON
        record = json.loads(path.read_text()) if path.is_file() else None
        return [] if record is None else [record[side]["name"] for side in ("first", "second")]
    return studies


# Which decision on the difference supports a claim (``HOLDS``) and which contradicts it
# (``DOES_NOT_HOLD``); a decision not named leaves the claim inconclusive (``UNDECIDED``).
# A claim that the arm is as good (linear scaling with warmup matches the small batch; LARS holds):
AS_GOOD = {MATCHES: HOLDS, BETTER: HOLDS, WORSE: DOES_NOT_HOLD}
# A claim that the arm loses (without warmup, large batches, staleness):
LOSES = {WORSE: HOLDS, MATCHES: DOES_NOT_HOLD, BETTER: DOES_NOT_HOLD}
# A claim that the arm gains (damping the LR, a smaller asynchronous LR): no worse is no support.
GAINS = {BETTER: HOLDS, WORSE: DOES_NOT_HOLD}
# A value against the value a paper claims (``common.departure_claim``, the fits): never better.
AGREES = {MATCHES: HOLDS, WORSE: DOES_NOT_HOLD}


class Anchor(NamedTuple):
    """One published finding: its paper (a key of ``PAPER_REGIMES``), the claim, its judge
    (results folder -> (verdict, evidence)), the studies the judge reads (results folder -> the
    committed ones), the edition of the studies that test it (4: the fourth edition, 3: the
    third, both in the papers' regime; 2: the second and the first; ``EDITIONS``) and which
    decision supports the claim (``supports``: decision -> ``HOLDS`` or ``DOES_NOT_HOLD``;
    ``claim_text``). ``row`` and ``world_size``: a study judged on more than one row (keskar_v4's
    batch 1,024 and Keskar's own 10% of the data) names each row and the world size of its
    large batch, whose regime the row shows; None: the study's largest batch. ``reading``: for a
    claim made of parts, which one decision cannot speak for (Keskar et al.'s: sharper minima and
    worse tests), what the data say of each part (results folder -> ``the claim holds in part:
    sharper, ...``), shown instead of ``claim_text``; None: ``claim_text`` of the verdict."""

    paper: str
    claim: str
    judge: Callable[[Path], tuple[str, str]]
    studies: Callable[[Path], list[str]]
    edition: int = 2
    supports: Mapping[str, str] = AS_GOOD
    row: str = ""
    world_size: int | None = None
    reading: Callable[[Path], str] | None = None


# The words of the table's edition column.
EDITIONS = {4: "fourth", 3: "third", 2: "second and first"}
# A fourth-edition study is on the page only once it has finished: its rows are absent before
# (docs/results.md lists it as not run yet), where an earlier edition's read *not measured yet*.
SHOWN_ONLY_WHEN_RUN = 4


def claim_text(verdict: str, supports: Mapping[str, str]) -> str:
    """What the decision ``verdict`` on the difference says of the claim, by ``supports``: ``the
    claim holds``, ``the claim does not hold`` or ``the claim is inconclusive``; a verdict per place
    (``common.claims_at``) gives one per place; empty for a verdict that is not a decision (not
    measured yet); one word when every place gives the same.

    >>> claim_text("worse", LOSES), claim_text("matches", LOSES), claim_text("matches", AS_GOOD), claim_text("matches", GAINS)
    ('the claim holds', 'the claim does not hold', 'the claim holds', 'the claim is inconclusive')
    >>> claim_text("matches at batch 128; inconclusive at batch 512", AS_GOOD)
    'the claim holds at batch 128; the claim is inconclusive at batch 512'
    >>> claim_text("matches at W=2; inconclusive at W=4", GAINS)
    'the claim is inconclusive'
    """
    parts = []
    for part in verdict.split("; "):
        decision = next((word for word in CLAIMS if part == word or part.startswith(word + " ")), None)
        if decision is None:
            return ""
        parts.append((supports.get(decision, UNDECIDED), part[len(decision):]))
    if len({word for word, _ in parts}) == 1:
        return parts[0][0]
    return "; ".join(word + place for word, place in parts)


GOYAL_LINEAR = "linear scaling with gradual warmup matches the small batch (up to 8k on ImageNet)"
GOYAL_NO_WARMUP = "without warmup, linear scaling loses accuracy at the large batch"
SHALLUE = "steps to a target fall perfectly with the batch, then with diminishing returns"
MCCANDLISH = "the critical batch is predicted by the gradient noise scale"
HOFFER = "training longer with ghost batch norm closes the large-batch gap"
YOU = "LARS with warmup holds at large batches"
YOU_LAMB = "LAMB holds accuracy at large batches"
MALLADI = "Adam's LR should grow as the square root of the batch"
KESKAR = "large batches reach sharper minima and test worse"

# The steps-to-target studies each edition judges Shallue et al. and McCandlish et al. on, a pair of
# rows per group, each judged on the first committed study of its group: the fourth edition's
# critical_batch_v4 and critical_batch_vit_v4 on rows of their own (one workload each:
# ``critical_batch_v4.STEPS_STUDIES_V4``); the third's critical_batch_v3; the second and first
# editions' steps_to_target, else critical_batch.
STEPS_STUDIES = {4: tuple((study.name,) for study in STEPS_STUDIES_V4), 3: ((CRITICAL_BATCH_STUDY,),), 2: (EARLIER_STEPS_STUDIES,)}


def steps_anchors(edition: int) -> list[Anchor]:
    """Shallue et al.'s and McCandlish et al.'s anchors of ``edition``, a pair per group of its
    ``STEPS_STUDIES``, judged by ``critical_batch``'s judges."""
    return [Anchor(paper, claim, functools.partial(judge, studies=studies), _first(*studies), edition, AGREES)
            for studies in STEPS_STUDIES[edition]
            for paper, claim, judge in (("Shallue et al. 2018", SHALLUE, anchor_shallue),
                                        ("McCandlish et al. 2018", MCCANDLISH, anchor_mccandlish))]


# In the table's order: the fourth edition's anchors first, then the third's, then the second's
# (and the first's), each kept and marked superseded where the next edition re-tests its claim.
ANCHORS: list[Anchor] = [
    Anchor("Goyal et al. 2017", GOYAL_LINEAR, anchor_goyal_v4_linear, _finished(GOYAL_V4), 4),
    *[Anchor("Keskar et al. 2017", KESKAR, functools.partial(anchor_keskar_v4, regime=regime), _finished(KESKAR_V4), 4, LOSES,
             row=regime, world_size=world_size, reading=functools.partial(keskar_v4_claim, regime=regime))
      for regime, world_size in KESKAR_V4_REGIMES.items()],
    *steps_anchors(4),
    Anchor("Malladi et al. 2022", MALLADI, anchor_malladi_v4, _finished(ADAM_VIT_V4, ANSWER_FILE), 4, AGREES),
    Anchor("You et al. 2020", YOU_LAMB, anchor_lamb, _finished(ADAM_VIT_V4, ANSWER_FILE), 4),
    Anchor("Goyal et al. 2017", GOYAL_LINEAR, functools.partial(anchor_goyal_linear_warmup, study="goyal_v3"), _each("goyal_v3"), 3),
    Anchor("Goyal et al. 2017", GOYAL_NO_WARMUP, functools.partial(anchor_goyal_no_warmup, study="goyal_v3"), _each("goyal_v3"), 3,
           LOSES),
    Anchor("Keskar et al. 2017", KESKAR, anchor_keskar_v3, _each("keskar_v3"), 3, LOSES),
    *steps_anchors(3),
    Anchor("Hoffer et al. 2017", HOFFER, anchor_goyal_v3_longer, _each("goyal_v3"), 3),
    Anchor("You et al. 2017", YOU, functools.partial(anchor_lars, study="goyal_v3"), _each("goyal_v3"), 3),
    Anchor("Goyal et al. 2017", GOYAL_LINEAR, anchor_goyal_linear_warmup, _each("goyal_bn")),
    Anchor("Goyal et al. 2017", GOYAL_NO_WARMUP, anchor_goyal_no_warmup, _each("goyal_bn"), supports=LOSES),
    Anchor("Keskar et al. 2017", KESKAR, functools.partial(anchor_keskar, studies=("keskar_v2",)), _each("keskar_v2"), supports=LOSES),
    Anchor("Keskar et al. 2017", KESKAR, functools.partial(anchor_keskar, studies=("keskar_gap",)), _each("keskar_gap"), supports=LOSES),
    *steps_anchors(2),
    Anchor("Hoffer et al. 2017", HOFFER, anchor_hoffer, _each("keskar_v2", "goyal_bn")),
    Anchor("You et al. 2017", YOU, anchor_lars, _each("goyal_bn")),
    Anchor("Nado et al. 2021", "tuned Nesterov momentum matches LARS and LAMB at large batches", anchor_nado,
           _each("goyal_bn")),
    Anchor("Malladi et al. 2022", MALLADI, anchor_malladi, _each("adam_scaling"), supports=AGREES),
    Anchor("Lian et al. 2015; Dutta et al. 2018", "asynchronous SGD degrades as the staleness grows", anchor_staleness,
           _each("staleness"), supports=LOSES),
    Anchor("Zhang et al. 2016", "dividing the LR by the staleness keeps asynchronous SGD training", anchor_staleness_damping,
           _each("staleness"), supports=GAINS),
    Anchor("Mitliagkas et al. 2016", "asynchrony acts as implicit momentum: per sample, the best asynchronous LR is smaller "
           "than synchronous SGD's", anchor_async_lr, _compared("sync_vs_async"), supports=GAINS),
]


def superseded_by(results: Path, anchor: Anchor) -> list[str]:
    """The committed studies of the next edition that re-tests ``anchor``'s claim and gives a
    verdict on it (not ``not measured yet``: a study still running, or one without the arm the
    claim needs, supersedes nothing): goyal_bn's by goyal_v3, goyal_v3's by goyal_v4, adam_scaling's
    by adam_vit_v4; empty when no later edition does."""
    later: dict[int, list[str]] = {}
    for other in ANCHORS:
        if other.edition > anchor.edition and (other.paper, other.claim) == (anchor.paper, anchor.claim) \
                and other.judge(results)[0] != NOT_MEASURED_YET:
            later.setdefault(other.edition, []).extend(other.studies(results))
    return list(dict.fromkeys(later[min(later)])) if later else []


def shown_anchors(results: Path) -> list[Anchor]:
    """``ANCHORS`` as the page shows them: a fourth-edition anchor only once its study has
    finished (``SHOWN_ONLY_WHEN_RUN``)."""
    return [anchor for anchor in ANCHORS if anchor.edition < SHOWN_ONLY_WHEN_RUN or anchor.studies(results)]


def row_regime(results: Path, anchor: Anchor, study: str) -> tuple[Regime | None, list[Regime]]:
    """The regime ``anchor``'s row reads ``study`` at (``lbtrain.reports.regime.study_regimes``): its large
    batch's (``Anchor.world_size``, found in the study's summary) or the study's largest; and
    every regime of the study. None when no committed run records it."""
    regimes = study_regimes(results, study)
    if not regimes:
        return None, regimes
    if anchor.world_size is None:
        return regimes[-1], regimes
    batches = {int(row["global_batch"]) for row in study_runs(results, study) if int(row["world_size"]) == anchor.world_size}
    return next((regime for regime in regimes if regime.global_batch in batches), None), regimes


def anchor_row(results: Path, anchor: Anchor) -> list[str]:
    """One row of the table: paper, claim, edition, the paper's regime, each judged study's
    regime, the verdict shown with what it says of the claim (``claim_text``, or the anchor's
    ``reading`` of a claim made of parts) and the evidence.
    The verdict shown is ``out of regime`` when any
    study the judge reads lies outside the paper's regime (``lbtrain.reports.regime.in_regime``
    at its largest batch, or at the row's own batch: ``row_regime``), with the judge's own verdict
    kept in the evidence as ``(judged anyway: ...)``; else the judge's verdict (``not measured
    yet`` when no study is committed). An earlier edition's verdict is kept and marked
    ``(superseded by <study>)`` when a committed study of the next edition re-tests its claim
    (``superseded_by``)."""
    paper = PAPER_REGIMES[anchor.paper]
    verdict, evidence = anchor.judge(results)
    cells, out = [], []
    for study in anchor.studies(results):
        regime, regimes = row_regime(results, anchor, study)
        if regime is None:
            continue
        inside, reason = in_regime(paper, regime)
        name = f"{study}, {anchor.row}" if anchor.row else study
        cell = f"{name}: {regime.describe()}; " + (("in regime" + (f" ({reason})" if anchor.row else "")) if inside
                                                   else f"out of regime ({reason})")
        widest = None if inside else largest_in_regime(paper, regimes)
        if widest is not None:
            cell += f"; in regime up to batch {widest.global_batch:,}"
        cells.append(cell)
        out += [] if inside else [study]
    if out and verdict != NOT_MEASURED_YET:
        verdict, evidence = OUT_OF_REGIME, f"(judged anyway: {verdict}) {evidence}"
    judged = verdict not in (OUT_OF_REGIME, NOT_MEASURED_YET)
    claim = anchor.reading(results) if anchor.reading is not None and judged else claim_text(verdict, anchor.supports)
    shown = f"**{verdict}**" + (f": {claim}" if claim else "")
    later = superseded_by(results, anchor)
    if later:
        shown += f" (superseded by {', '.join(later)})"
    return [anchor.paper, anchor.claim, EDITIONS[anchor.edition], paper.describe(), "<br>".join(cells) or "-", shown, evidence]


# The page's own rule where no published finding reads a study: its largest batch at most 5% of
# the training set, with at least 300 updates (``lbtrain.reports.regime``).
PAGE_RULE = PaperRegime(paper="the page's rule", data="-", source="lbtrain.reports.regime: MAX_BATCH_FRACTION, MIN_UPDATES")


def _verdicts_text(papers: list[str], regime: Regime) -> str:
    """``**in regime** for Goyal et al. 2017 and You et al. 2017; **out of regime** (...) for ...``."""
    verdicts: dict[str, list[str]] = {}
    for paper in papers or [PAGE_RULE.paper]:
        inside, reason = in_regime(PAPER_REGIMES.get(paper, PAGE_RULE), regime)
        verdicts.setdefault("**in regime**" if inside else f"**{OUT_OF_REGIME}** ({reason})", []).append(paper)
    return "; ".join(f"{verdict} for {' and '.join(names)}" for verdict, names in verdicts.items())


def regime_line(results: Path, study: str) -> list[str]:
    """A section's regime label: the study's largest batch (``lbtrain.reports.regime.study_regimes``; for an
    ``lbtrain compare`` record, its compared folders') and, for each paper whose finding the page
    judges on this study (``ANCHORS``), *in regime* or *out of regime* with why, judged on this
    study alone (another study on the finding's row does not move it); the page's own rule
    (``PAGE_RULE``) where no finding reads it; *not read* when no committed run records it. A
    study judged on rows of its own (``Anchor.row``) gets a label per row, at that row's batch.
    The page writes it where the section's opening left its slot (``common.regime_slot``)."""
    compared = study_json(results, study, COMPARE_JSON)
    folders = [compared["first"]["name"], compared["second"]["name"]] if compared else [study]
    regimes = [regime for folder in folders for regime in study_regimes(results, folder)[-1:]]
    if not regimes:
        return ["*Regime*: not read (no committed run records its batches and updates).", ""]
    reading = [anchor for anchor in ANCHORS if {study, *folders} & set(anchor.studies(results))]
    rows = [anchor for anchor in reading if anchor.row]
    if rows:
        parts = []
        for anchor in rows:
            regime, _ = row_regime(results, anchor, study)
            if regime is not None:
                parts.append(f"{anchor.row}, {regime.describe()}: {_verdicts_text([anchor.paper], regime)}")
        return ["*Regime*, each row at its own large batch: " + "; ".join(parts) + ".", ""]
    largest = max(regimes, key=lambda regime: (regime.fraction, -regime.updates))
    papers = list(dict.fromkeys(anchor.paper for anchor in reading))
    return [f"*Regime* at its largest batch, {largest.describe()}: {_verdicts_text(papers, largest)}.", ""]


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3g}%"


def section_anchors(results: Path) -> list[str]:
    """The table of ``ANCHORS`` with each paper's regime and its studies', each verdict and its
    evidence, and goyal_bn's figure beside Goyal et al. 2017's numbers."""
    rows = [anchor_row(results, anchor) for anchor in shown_anchors(results)]
    widened = "; ".join(f"{regime.paper} {_percent(regime.max_fraction())}" for regime in PAPER_REGIMES.values()
                        if regime.max_fraction() not in (None, MAX_BATCH_FRACTION))
    fewer = "; ".join(f"{regime.paper} {regime.min_updates():,}" for regime in PAPER_REGIMES.values()
                      if regime.min_updates() not in (None, MIN_UPDATES))
    unbounded = "; ".join(f"{regime.paper} ({regime.unbounded_because})" for regime in PAPER_REGIMES.values()
                          if not (regime.bounds_fraction and regime.bounds_updates))
    return ["## Published findings: what the data say", "",
            "Each verdict is computed from the data below (scripts/render_results_readme.py says how); intervals as everywhere "
            "on this page. Verdicts on a difference of accuracies (the evidence names arm − reference) follow one decision rule "
            "(lbtrain/reports/decisions.py) with a margin of 1 point: *matches* when the whole 95% interval lies above −1 point "
            "(non-inferiority), *better* when it lies above +1 point, *worse* when it lies below −1 point, *inconclusive* "
            "otherwise or without an interval (one seed, no ok run).", "",
            "Each claim was made in a regime: the global batch as a fraction of the training set, and the updates the "
            "largest batch gets (lbtrain/reports/regime.py). A study is *in regime* when, at its largest batch, the batch is "
            f"at most {_percent(MAX_BATCH_FRACTION)} of its training set and gets at least {MIN_UPDATES:,} updates; a paper "
            f"that itself went further widens its own bounds (largest fraction: {widened}; fewest updates: {fewer}) and a "
            f"claim about the whole range of batches drops them: {unbounded}. A claim judged on a study outside the "
            f"paper's regime reads *{OUT_OF_REGIME}*, whatever its data say: the judge's own verdict stays in the evidence "
            "as *judged anyway*. The fourth edition's finished studies come first (made by the commands a user runs, "
            "`lbtrain scale`, `lbtrain sweep`, or `lbtrain run` and `lbtrain report`; a study judged on more than one row "
            "names each row and shows its regime at that row's batch), then the third edition's (in the papers' regime, the sound protocol: a searched LR, "
            "fresh seeds, five of them for the headline study); the second and first editions' verdicts are kept "
            "below. Each is marked *superseded* where a committed study of the next edition re-tests the claim.", "",
            markdown_table(["paper", "claim", "edition", "paper's regime", "study's regime", "here", "evidence"], rows), "",
            *figure_lines(results, "goyal_bn", GOYAL_FIGURE, "goyal_bn's linear rule with and without gradual warmup beside Goyal et al. 2017's "
                          f"ImageNet numbers (Table 1: top-1 error {GOYAL_2017_BASE_ERROR:.2f} at batch 256, at 8k "
                          + ", ".join(f"{error:.2f} with {label.split(', ')[-1].replace('linear + ', '')}"
                                      for label, error in GOYAL_2017_ERROR_AT_32X.items()) + ")")]
