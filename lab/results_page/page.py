"""The results page put together: its sections in order, the README's quickstart table, and
writing both."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Callable

from lab.results_page.adam_vit_v4 import STUDY as ADAM_VIT_V4
from lab.results_page.adam_vit_v4 import section_adam_vit_v4
from lab.results_page.anchors import regime_line, section_anchors
from lab.results_page.asynchrony import section_staleness, section_sync_vs_async, staleness_figure
from lab.results_page.common import REGIME_SLOT
from lab.results_page.critical_batch import section_critical_batch, section_steps_to_target
from lab.results_page.critical_batch_v4 import VIT_ADAM, section_critical_batch_v4
from lab.results_page.goyal import goyal_figure, section_accuracy_study, section_goyal_bn, section_warmup_ablation
from lab.results_page.goyal_v3 import COMMAND as THIRD_EDITION_COMMAND
from lab.results_page.goyal_v3 import CRITICAL_BATCH_STUDY, section_goyal_v3, section_lead
from lab.results_page.goyal_v4 import section_goyal_v4
from lab.results_page.keskar import KESKAR_V4, section_keskar_gap, section_keskar_v2, section_keskar_v4
from lab.results_page.lr_scaling import section_adam_scaling, section_goyal_sweep
from lbtrain.reports.report import ReportError
from lbtrain.reports.tables import markdown_table, read_summary
from lbtrain.results import ANSWER_FILE, PROTOCOL_FILE, SUMMARY_FILE
from lbtrain.verdict import is_ok

logger = logging.getLogger(__name__)

PAGE_FILE = "README.md"  # in the results folder of the committed studies


def when_finished(section: Callable[[Path], list[str]], study: str, last: str = PROTOCOL_FILE) -> Callable[[Path], list[str]]:
    """``section``, rendered only once ``study`` has finished (its ``last`` file: ``protocol.json``,
    which a protocol writes last, or the ``answer.json`` ``lbtrain scale`` writes after it);
    nothing before: a fourth-edition study not run yet is absent from the page (docs/results.md
    lists it as not run yet), never a half-done table."""
    def shown(results: Path) -> list[str]:
        return section(results) if (results / study / last).is_file() else []
    shown.__doc__ = section.__doc__
    return shown


# Each section: results folder -> its lines. The third edition's answer first, then the anchors,
# the fourth edition's finished studies, the third edition's, the second edition and the first.
SECTIONS: list[Callable[[Path], list[str]]] = [
    section_lead,
    section_anchors,
    section_goyal_v4,
    section_critical_batch_v4,
    when_finished(section_keskar_v4, KESKAR_V4),
    when_finished(section_adam_vit_v4, ADAM_VIT_V4, ANSWER_FILE),
    functools.partial(section_critical_batch_v4, study=VIT_ADAM),
    section_goyal_v3,
    functools.partial(section_steps_to_target, study=CRITICAL_BATCH_STUDY, command=THIRD_EDITION_COMMAND,
                      title="the critical batch and the noise scale (third edition, study 2)"),
    functools.partial(section_keskar_v2, study="keskar_v3", command=THIRD_EDITION_COMMAND,
                      title="the large-batch gap at equal training loss (third edition, study 3)"),
    section_goyal_bn,
    section_warmup_ablation,
    section_keskar_v2,
    section_adam_scaling,
    section_steps_to_target,
    section_staleness,
    section_sync_vs_async,
    functools.partial(section_accuracy_study, study="goyal_scaling", title="LR rules x world sizes (mlp 512-512, no batch norm)",
                      note="Fashion-MNIST mlp, momentum SGD, fixed base LR, decay clocked after warmup (first edition)."),
    functools.partial(section_accuracy_study, study="goyal_scaling_cnn", title="the same on a conv net",
                      note="Fashion-MNIST cnn without batch norm, fixed base LR (first edition)."),
    section_keskar_gap,
    section_goyal_sweep,
    section_critical_batch,
]

INTRODUCTION = [
    "# Results of the canonical studies",
    "",
    "Rendered by `python scripts/render_results_readme.py --write` from each study's committed `report.json`, "
    "`protocol.json` and `summary.csv` (a test keeps this page equal to what it renders): no number here is typed by "
    "hand. Simulated worlds on 2 CPU cores, real Fashion-MNIST (MNIST-1D where said). Intervals are 95% Student-t "
    "intervals over seeds for a mean (df = n − 1) and Welch's intervals for a difference of two means (n of each arm, "
    "Welch–Satterthwaite df); n counts the seeds whose run was judged ok, and runs that were not (ok-unstable, diverged, "
    "collapsed, failed) are named beside the mean, never averaged in. Whatever is chosen (a bold cell, a recipe per batch, "
    "what to use) is chosen on validation accuracy among arms whose every seed was ok, never on test: test accuracy is only "
    "reported. Each table takes every difference against one reference, named in its caption. Claims follow one decision "
    "rule with a margin of 1 point (the published findings' section says it), and a best is named only when it is separable from every "
    "other arm; otherwise the arms are *tied with the best*. The third edition (sized to the papers' regime: study 1's largest batch "
    "under 1% of the training set with over 800 updates, the LR searched on a grid, five fresh seeds for the headline "
    "study) leads; the second edition (tuned with equal budgets, decay clocked from step 0, precise batch-norm statistics) "
    "and the first follow.",
    "",
]


def render_results_page(results: Path) -> str:
    """The results page (``results/README.md``) of the studies committed in ``results``."""
    lines = list(INTRODUCTION)
    for section in SECTIONS:
        lines += with_regimes(results, section(results))
    return "\n".join(lines).rstrip() + "\n"


def with_regimes(results: Path, lines: list[str]) -> list[str]:
    """``lines`` with each section's regime slot (``common.regime_slot``) replaced by its regime
    label (``anchors.regime_line``): the page, which imports both the sections and the anchors,
    writes what a section cannot ask the anchors itself (they import every section's module)."""
    head, tail = REGIME_SLOT.split("{study}")
    written: list[str] = []
    for line in lines:
        if line.startswith(head) and line.endswith(tail):
            written += regime_line(results, line[len(head):len(line) - len(tail)])
        else:
            written.append(line)
    return written


QUICKSTART_REFERENCE = "quickstart_reference"
QUICKSTART_BEGIN = "<!-- quickstart table: rendered by scripts/render_results_readme.py from results/quickstart_reference -->"
QUICKSTART_END = "<!-- end of the quickstart table -->"


def render_quickstart(results: Path) -> str:
    """The README's quickstart table and the runs that were not ok, from ``make run``'s summary
    as committed in ``results/quickstart_reference`` (``results/quickstart`` itself is each
    user's own run). No recipe is called best: one seed, and the quickstart has no validation
    split to choose on."""
    rows = read_summary(results / QUICKSTART_REFERENCE / SUMMARY_FILE,
                        required=("label", "status", "world_size", "global_batch", "test_accuracy"))
    labels = list(dict.fromkeys(row["label"] for row in rows))
    worlds = sorted({row["world_size"] for row in rows})
    cell = {(row["label"], row["world_size"]): row for row in rows}
    batch = {row["world_size"]: row["global_batch"] for row in rows}

    def accuracy(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        return f"{row['test_accuracy']:.3f}" if is_ok(row["status"]) else str(row["status"])

    table = markdown_table([f"world x {rows[0]['per_worker_batch']}", "global batch", *labels],
                           [[world, batch[world], *[accuracy(cell.get((label, world))) for label in labels]] for world in worlds])
    failed = [f"{row['label']} {row['status']} at {row['world_size']} workers (LR {row['learning_rate']:.4g}: {row['reason']})"
              for row in rows if not is_ok(row["status"])]
    return "\n".join([
        QUICKSTART_BEGIN, table, "",
        f"(test accuracy after {rows[0]['budget']}, one seed: a first look, not a comparison; `lbtrain sweep` with a `protocol` "
        "section makes the tuned, multi-seed one.) " + (f"Not ok: {'; '.join(failed)}." if failed else "Every run was ok."),
        QUICKSTART_END])


def readme_with_quickstart(readme: str, results: Path) -> str:
    """``readme`` with the text between the quickstart markers replaced by ``render_quickstart``.

    Raises:
      ReportError: ``readme`` lacks the markers.
    """
    if QUICKSTART_BEGIN not in readme or QUICKSTART_END not in readme:
        raise ReportError(f"the README has no quickstart table to replace (the lines {QUICKSTART_BEGIN} and {QUICKSTART_END})")
    start, end = readme.index(QUICKSTART_BEGIN), readme.index(QUICKSTART_END) + len(QUICKSTART_END)
    return readme[:start] + render_quickstart(results) + readme[end:]


def write_results_page(results: Path, readme: Path) -> list[Path]:
    """Draws the page's own figures (staleness's and goyal_bn's beside Goyal et al. 2017: the
    page shows a figure only when its file exists), then writes ``results/README.md`` and the
    quickstart table into ``readme``; returns the files written."""
    from lbtrain.files import write_atomic

    readme_text = readme_with_quickstart(readme.read_text(), results)  # a README without the table: nothing is written
    figures = [path for path in (staleness_figure(results), goyal_figure(results)) if path is not None]
    page = write_atomic(results / PAGE_FILE, render_results_page(results).encode())
    write_atomic(readme, readme_text.encode())
    for path in (*figures, page, readme):
        logger.info("wrote %s", path)
    return [*figures, page, readme]
