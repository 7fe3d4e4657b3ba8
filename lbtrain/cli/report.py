"""lbtrain report: report.md and figures of a results folder, or the results page of every study."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

RESULTS = "results"


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``report`` command's arguments."""
    parser = commands.add_parser("report", help="write report.md and figures for an experiment's (or sweep's) results folder")
    parser.add_argument("results", nargs="?", help="a results folder, e.g. results/quickstart (with --results-page: the folder "
                        f"of the studies, default {RESULTS})")
    parser.add_argument("--target", type=float, help="validation accuracy counted to in steps-to-target (default: the highest every batch reaches)")
    parser.add_argument("--metric", help="per-epoch metric of curves and steps to target (default val_accuracy, else accuracy)")
    parser.add_argument("--results-page", action="store_true",
                        help="print the results page of the committed studies (results/README.md) instead")
    parser.add_argument("--write", action="store_true",
                        help="with --results-page: write results/README.md and the quickstart table of the README beside it")
    parser.set_defaults(handler=run, usage_error=parser.error)


def run(args: argparse.Namespace) -> int:
    if args.results_page:
        return _results_page(args)
    if args.write:
        args.usage_error("--write needs --results-page (a results folder's report is always written)")
    if args.results is None:
        args.usage_error("the following arguments are required: results (or give --results-page)")
    import tensorflow as tf

    from lbtrain.reports.report import ReportError, write_report

    tf.get_logger().setLevel("ERROR")  # rebuilding many schedules makes TensorFlow warn about retracing
    try:
        path = write_report(args.results, target=args.target, metric=args.metric,
                            on_damaged=lambda problem: print(f"lbtrain: warning: {problem}", file=sys.stderr))
    except ReportError as error:
        raise ReportError(f"{error}; {_storage_hint(Path(args.results))}") if _unreadable_storage(error) else error from None
    print(f"wrote {path} and its figures in {path.parent / 'figures'}")
    return 0


def _unreadable_storage(error: BaseException) -> bool:
    from lbtrain.reports.tuning import StorageReadError

    return isinstance(error.__cause__, StorageReadError)


def _storage_hint(results: Path) -> str:
    """How to report a folder whose sweep storage cannot be read (a damaged ``optuna.db``)."""
    from lbtrain.reports.tuning import results_storage
    from lbtrain.storage_urls import local_path

    url = results_storage(results)
    path = local_path(url) if url else None
    if path is None:
        return "check that its database server runs and is reachable, then report again"
    return (f"if the file is damaged, move it aside (mv {path} {path}.damaged) or restore it from a backup, then report "
            "again (without the storage the report leaves out the tuning time)")


def _results_page(args: argparse.Namespace) -> int:
    """``--results-page``: the page printed, or with ``--write`` written (no TensorFlow)."""
    from lbtrain.reports.report import ReportError
    from lbtrain.reports.results_page import PAGE_FILE, render_results_page, write_results_page

    if args.target is not None or args.metric is not None:
        args.usage_error("--target and --metric are for a results folder's report, not --results-page")
    results = Path(args.results or RESULTS)
    if not results.is_dir():
        raise ReportError(f"{results} is not a folder of studies (give the repository's results folder)")
    if not args.write:
        print(render_results_page(results), end="")
        return 0
    readme = results.resolve().parent / "README.md"
    write_results_page(results, readme)
    print(f"wrote {results / PAGE_FILE} and the quickstart table in {readme}")
    return 0
