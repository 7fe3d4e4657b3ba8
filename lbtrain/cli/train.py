"""lbtrain train: one resolved run config, in this process's world."""

from __future__ import annotations

import argparse
import logging
import sys

from lbtrain.cli import arguments
from lbtrain.modes import MODE_NAMES, MODES

logger = logging.getLogger(__name__)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``train`` command's arguments."""
    parser = commands.add_parser(
        "train", help="train one resolved run config here: in a Horovod world under horovodrun/mpirun, simulated otherwise, "
                      "or in the world --mode names"
    )
    parser.add_argument("config", help="a run config YAML (data, model, optimizer, lr, training)")
    parser.add_argument("--run-dir", help="where rank 0 writes checkpoints, config.yaml, history.csv, metrics.json")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --run-dir")
    parser.add_argument("--threads", type=arguments.positive_int, help="TensorFlow intra- and inter-op threads per process")
    parser.add_argument("--mode", choices=MODE_NAMES,
                        help="the world: " + "; ".join(f"{mode.name}: {mode.summary}" for mode in MODES.values())
                             + " (default: horovod under horovodrun/mpirun, else simulated)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.config import read_yaml_mapping
    from lbtrain.results import write_run
    from lbtrain.worlds.base import configure_threads
    from lbtrain.worlds.build import prepare_run

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
