"""lbtrain compare: one grid run in two modes, side by side."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``compare`` command's arguments."""
    parser = commands.add_parser("compare", help="compare two results folders of one grid run in two modes (e.g. sync vs async)")
    parser.add_argument("first", help="a results folder, e.g. results/sync_vs_async_sync")
    parser.add_argument("second", help="the same grid in another mode, e.g. results/sync_vs_async_async")
    parser.add_argument("--output", required=True, help="folder of compare.md, compare.json and figures/")
    parser.add_argument("--target", type=float, help="validation accuracy counted to (default: the highest every world reaches in both)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.reports.comparison import write_comparison
    from lbtrain.results import FIGURES_FOLDER, check_output_folder

    check_output_folder(Path(args.output), "--output")
    path = write_comparison(args.first, args.second, args.output, target=args.target,
                            on_damaged=logger.warning)
    print(f"wrote {path} and its figures in {path.parent / FIGURES_FOLDER}")
    return 0
