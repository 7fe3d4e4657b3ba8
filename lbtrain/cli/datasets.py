"""lbtrain datasets: the datasets, their sizes and where each loads from here."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``datasets`` command's arguments."""
    parser = commands.add_parser("datasets", help="list datasets, their sizes and where each loads from here")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.data import DATASETS

    header = f"{'name':<14} {'train':>7} {'test':>6} {'input':<12} {'classes':>7}  source on this machine"
    print(header)
    for info in DATASETS.values():
        shape = "x".join(str(d) for d in info.input_shape)
        print(f"{info.name:<14} {info.train_size:>7} {info.test_size:>6} {shape:<12} {info.num_classes:>7}  {info.locate()}")
    return 0
