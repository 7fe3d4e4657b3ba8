"""The ``lbtrain`` command line.

Bad input never yields a traceback: a user error prints one line ``lbtrain: error: ...``
and exits with code 2 (argparse's convention for usage errors).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


USAGE_ERROR = 2


def _datasets_command(args: argparse.Namespace) -> int:
    from lbtrain.data import DATASETS

    header = f"{'name':<14} {'train':>7} {'test':>6} {'input':<12} {'classes':>7}  source on this machine"
    print(header)
    for info in DATASETS.values():
        shape = "x".join(str(d) for d in info.input_shape)
        print(f"{info.name:<14} {info.train_size:>7} {info.test_size:>6} {shape:<12} {info.num_classes:>7}  {info.locate()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lbtrain", description="Large-batch training studies with Keras and Horovod.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    datasets = commands.add_parser("datasets", help="list datasets, their sizes and where each loads from here")
    datasets.set_defaults(handler=_datasets_command)
    return parser


def user_errors() -> tuple[type[Exception], ...]:
    """Exception types that mean bad input, reported in one line with exit code 2."""
    from lbtrain.data import DatasetError
    from lbtrain.models import ModelError

    return (DatasetError, ModelError)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except user_errors() as error:
        print(f"lbtrain: error: {error}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
