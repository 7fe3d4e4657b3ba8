"""lbtrain report: report.md and figures of a results folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``report`` command's arguments."""
    parser = commands.add_parser("report", help="write report.md and figures for an experiment's (or sweep's) results folder")
    parser.add_argument("results", help="a results folder, e.g. results/quickstart")
    parser.add_argument("--target", type=float, help="validation accuracy counted to in steps-to-target (default: the highest every batch reaches)")
    parser.add_argument("--metric", help="per-epoch metric of curves and steps to target (default val_accuracy, else accuracy)")
    parser.set_defaults(handler=run, usage_error=parser.error)


def run(args: argparse.Namespace) -> int:
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
    return "if it is damaged, move it aside or restore a backup, then report again (leaving out the tuning time)"
