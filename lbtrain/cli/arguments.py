"""argparse types shared by the commands: each turns a bad value into argparse's one-line error."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def workers(text: str) -> int | None:
    """argparse type: ``auto`` (None: the machine decides) or a whole number >= 1."""
    if text == "auto":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {text!r}") from None


def comma_list(text: str) -> list[str]:
    """argparse type: comma-separated names, none empty."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return items


def positive_ints(text: str) -> list[int]:
    """argparse type: comma-separated whole numbers >= 1."""
    return [positive_int(item) for item in comma_list(text)]


def worlds(text: str) -> list:
    """argparse type: comma-separated worlds of ``lbtrain bench`` (``single``, ``simulated:4``, ...)."""
    from lbtrain.bench import BenchError, WorldSpec

    try:
        return [WorldSpec.parse(item) for item in comma_list(text)]
    except BenchError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value
