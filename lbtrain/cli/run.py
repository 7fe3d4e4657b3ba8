"""lbtrain run: every run of an experiment's grid, resumable; the summary table."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from lbtrain.cli import arguments
from lbtrain.results import SUMMARY_FILE

logger = logging.getLogger(__name__)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``run`` command's arguments."""
    parser = commands.add_parser("run", help="run an experiment YAML: every grid point, resumable; results in results/<name>/")
    parser.add_argument("experiment", help="an experiment YAML, e.g. experiments/quickstart.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field, e.g. --set training.epochs=1")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the runs without training, and price them where they use only lbtrain's models and datasets "
                             "(a probe trains a few steps of them here); no model or loader of yours runs")
    parser.add_argument("--price", action="store_true",
                        help="list the runs and price those left to train, training nothing: a probe trains a few steps at each "
                             "global batch here (your model and loader run, as in a run)")
    parser.add_argument("--fresh", action="store_true", help="delete this experiment's previous runs and start over")
    parser.add_argument("--workers", type=arguments.workers, default=None, metavar="auto|N",
                        help="runs trained at once (default auto: as many as the cores allow with a core per process, "
                             "or one per GPU); each process gets its share of the cores as TensorFlow threads")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.config import load_experiment
    from lbtrain.studies.plan import expand
    from lbtrain.studies.price import code_of_yours
    from lbtrain.studies.runner import price_runs, run_experiment, summary_table

    experiment = load_experiment(args.experiment, args.set)
    planned = expand(experiment)
    if args.dry_run or args.price:
        print(f"{experiment.name}: {len(planned)} runs ({experiment.mode}) -> {experiment.results_dir}")
        for run in planned:
            settings = run.config.training
            print(f"  {run.run_id}  {run.label}  {settings.world_text}  "
                  f"{run.config.optimizer.name}  rule {run.config.lr.rule}  seed {settings.seed}")
        yours = None if args.price else code_of_yours(experiment, [run.config for run in planned], getattr(args, "imports", []))
        if yours is None:
            print(price_runs(experiment, planned, args.workers).describe())
        else:
            print(f"price: needs your model or data to run ({yours}), which --dry-run never does: --price prices the "
                  "runs from a probe of a few steps at each global batch, here")
        return 0
    rows = run_experiment(experiment, config_file=str(Path(args.experiment).resolve()), fresh=args.fresh, workers=args.workers)
    print(summary_table(rows))
    print(f"wrote {experiment.results_dir / SUMMARY_FILE}")
    failed = sum(row["status"] == "failed" for row in rows)
    if failed:
        logger.warning("%d of %d runs failed (reasons in %s); a rerun retries them", failed, len(rows),
                       experiment.results_dir / SUMMARY_FILE)
        return 1
    return 0
