"""lbtrain sweep: tune an experiment's search space with Optuna (one study per world size), or run its tuning protocol."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lbtrain.cli import arguments
from lbtrain.results import SWEEP_SUMMARY_FILE

# Sweep workers one machine takes without --force-workers: each trains on its own threads.
WORKERS_PER_CORE = 4


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``sweep`` command's arguments."""
    parser = commands.add_parser("sweep", help="tune the experiment's search space with Optuna, one study per world size")
    parser.add_argument("experiment", help="an experiment YAML with a search section")
    parser.add_argument("--trials", type=arguments.positive_int, help="finished trials per world size (default sweep.trials); a rerun tops up")
    parser.add_argument("--storage", help="an SQLAlchemy URL (default: $LBTRAIN_STORAGE, else sweep.storage, else "
                                          "sqlite:///results/<name>/optuna.db); a password is better kept in $LBTRAIN_STORAGE, "
                                          "out of ps")
    # Not given: absent (SUPPRESS), so the command's default applies: automatic with a protocol, 1 for a plain sweep.
    parser.add_argument("--workers", type=arguments.positive_int, default=argparse.SUPPRESS,
                        help="processes sharing the studies, each with its share of the cores as TensorFlow threads (default: "
                             "with a protocol, as many as the cores allow with a core per process, or one per GPU, and as many "
                             "runs at once for its finals; 1 for a plain sweep, whose TPE draws depend on it; at most the trials "
                             f"per study, and {WORKERS_PER_CORE} per core unless --force-workers)")
    parser.add_argument("--force-workers", action="store_true", help="allow more workers than the per-core cap")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    # A worker's index, threads and environment, from the process that started it (lbtrain.studies.sweep.run_workers).
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=arguments.positive_int, help=argparse.SUPPRESS)
    parser.add_argument("--environment", action="append", default=[], help=argparse.SUPPRESS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.config import load_experiment
    from lbtrain.storage_urls import describe, environment_storage
    from lbtrain.studies.sweep import run_sweep, storage_url, worker_process

    if args.worker is not None:
        worker_process(args.threads, args.environment)
    experiment = load_experiment(args.experiment, args.set)
    args.storage = args.storage or environment_storage()
    if experiment.protocol is not None:
        return _protocol(args, experiment)
    workers = getattr(args, "workers", 1)
    _check_workers(workers, args.trials or experiment.sweep.trials, args.force_workers)
    try:
        outputs = run_sweep(experiment, experiment_path=args.experiment, overrides=args.set, trials=args.trials,
                            storage=args.storage, workers=workers, worker=args.worker)
    except RuntimeError as error:
        from lbtrain.cli import one_line

        print(f"lbtrain: error: {one_line(str(error))}", file=sys.stderr)
        return 1
    if outputs is None:
        return 0
    rows, fit = outputs
    for row in rows:
        best = row.get("best_validation_accuracy")
        print(f"world {row['world_size']:>3}: {row['complete']} complete, {row['pruned']} pruned, "
              f"{row['diverged']} diverged, {row['collapsed']} collapsed"
              + (f", best ok validation {best:.4f} (test {row['best_test_accuracy']:.4f}) at lr {row['best_learning_rate']:.4g}"
                 if best is not None else ", no ok trial"))
    print(fit.describe())
    print(f"wrote {experiment.results_dir / SWEEP_SUMMARY_FILE} (studies in {describe(args.storage or storage_url(experiment))})")
    return 0


def _check_workers(workers: int, trials: int | None, forced: bool) -> None:
    """``ConfigError`` for more sweep workers than ``trials`` per study (the rest would start,
    find no trial, and end; None: the protocol's, whose grids decide their trials), or than
    ``WORKERS_PER_CORE`` per core without ``--force-workers``: each is a TensorFlow process, and
    thousands of them exhaust the machine before any trial ends."""
    from lbtrain.config import ConfigError

    if trials is not None and workers > trials:
        raise ConfigError(f"--workers {workers} is more than the {trials} trials per study: at most {trials}")
    cap = WORKERS_PER_CORE * (os.cpu_count() or 1)
    if workers > cap and not forced:
        raise ConfigError(f"--workers {workers} is more than {WORKERS_PER_CORE} per core ({cap} on this machine); "
                          "add --force-workers to start them anyway")


def _protocol(args: argparse.Namespace, experiment) -> int:
    """``lbtrain sweep`` on an experiment with a ``protocol`` section (``lbtrain.studies.protocol``):
    the whole protocol, or (``--worker``) one of the processes its tuning started."""
    from lbtrain.config import ConfigError
    from lbtrain.studies.protocol import PROTOCOL_REPORT, protocol_arms, run_protocol, tune, tuned_studies
    from lbtrain.studies.sweep import storage_url

    if args.trials is not None:
        raise ConfigError("the tuning protocol tunes each arm with sweep.trials trials or its grid (--trials is for plain sweeps)")
    storage = args.storage or storage_url(experiment)
    if args.worker is not None:
        tune(experiment, tuned_studies(protocol_arms(experiment)), storage, args.worker)
        return 0
    workers = getattr(args, "workers", None)
    if workers is not None:
        _check_workers(workers, None, args.force_workers)
    run_protocol(experiment, storage=storage, config_file=str(Path(args.experiment).resolve()), workers=workers)
    report = experiment.results_dir / PROTOCOL_REPORT
    print(report.read_text(), end="")
    print(f"wrote {report}")
    return 0
