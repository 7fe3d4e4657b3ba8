"""lbtrain train: one resolved run config, in this process's world."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from lbtrain.cli import arguments
from lbtrain.worlds.modes import MODE_NAMES, MODES

logger = logging.getLogger(__name__)

# TensorFlow threads per process one machine takes without --force-threads: TensorFlow starts its
# pools at start-up, and a hundred thousand threads hang it there without a word.
THREADS_PER_CORE = 8


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``train`` command's arguments."""
    parser = commands.add_parser(
        "train", help="train one resolved run config here: in a Horovod world under horovodrun/mpirun, simulated otherwise, "
                      "or in the world --mode names"
    )
    parser.add_argument("config", help="a run config YAML (data, model, optimizer, lr, training)")
    parser.add_argument("--run-dir", help="where rank 0 writes checkpoints, config.yaml, history.csv, metrics.json")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --run-dir")
    parser.add_argument("--threads", type=arguments.positive_int,
                        help=f"TensorFlow intra- and inter-op threads per process (at most {THREADS_PER_CORE} per core, "
                             f"{THREADS_PER_CORE * (os.cpu_count() or 1)} on this machine, unless --force-threads)")
    parser.add_argument("--force-threads", action="store_true", help="allow more --threads than the per-core cap")
    parser.add_argument("--mode", choices=MODE_NAMES,
                        help="the world: " + "; ".join(f"{mode.name}: {mode.summary}" for mode in MODES.values())
                             + " (default: horovod under horovodrun/mpirun, else simulated)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.config import read_yaml_mapping
    from lbtrain.results import write_run
    from lbtrain.worlds.base import configure_threads
    from lbtrain.worlds.build import prepare_run

    _check_threads(args.threads, args.force_threads)
    if args.run_dir:
        _check_run_dir(Path(args.run_dir))
    configure_threads(args.threads, args.threads)
    world, config = prepare_run(read_yaml_mapping(args.config), args.mode)
    if world is None:  # a worker or parameter server whose server stopped
        return 1
    from lbtrain.trainer import train  # after the world: importing it starts TensorFlow's runtime

    # Keras's progress bar: rank 0's, on a terminal, unless --quiet.
    verbose = 1 if world.is_root and sys.stdout.isatty() and logger.isEnabledFor(logging.INFO) else 0
    result = train(config, world, run_dir=args.run_dir, resume=args.resume, verbose=verbose)
    if world.is_root:
        if args.run_dir:
            write_run(args.run_dir, result)
        metrics = result.metrics
        print(
            f"{result.status}: {config.training.world_text} = batch {result.global_batch}, "
            f"lr {result.learning_rate:.4g}, train acc {metrics.get('train_accuracy', float('nan')):.4f}, "
            f"test acc {metrics.get('test_accuracy', float('nan')):.4f}, {result.samples_per_second:.0f} samples/s"
            + (f" ({result.reason})" if result.reason else "")
        )
    return 0


def _check_threads(threads: int | None, forced: bool) -> None:
    """``ConfigError`` for more ``--threads`` than ``THREADS_PER_CORE`` per core without ``--force-threads``."""
    from lbtrain.config import ConfigError

    cap = THREADS_PER_CORE * (os.cpu_count() or 1)
    if threads is not None and threads > cap and not forced:
        raise ConfigError(f"--threads {threads} is more than {THREADS_PER_CORE} per core ({cap} on this machine); "
                          "add --force-threads to use them anyway")


def _check_run_dir(run_dir: Path) -> None:
    """``ConfigError`` before anything trains when ``--run-dir`` cannot be the run's folder: a file
    is there (or above it), or the folder it would be made in is not writable (checkpoints would
    fail at the end of the first epoch)."""
    from lbtrain.config import ConfigError

    existing = next((path for path in (run_dir, *run_dir.parents) if path.exists()), Path.cwd())
    if not existing.is_dir():
        where = "" if existing == run_dir else f" ({existing} is)"
        raise ConfigError(f"--run-dir {run_dir}: a file, not a folder{where}; give a folder (new, or one of an earlier run)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--run-dir {run_dir}: {existing} is not writable; give a folder this user can write")
