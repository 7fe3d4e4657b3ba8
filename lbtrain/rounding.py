"""Rounding a float that stands for a whole number: one tolerance, named once.

A ratio or a logarithm that is a whole number in exact arithmetic can come out a hair below it in
binary floating point (``0.7 / 0.1 = 6.999999999999999``), and ``math.floor`` then loses a
whole grid point, step or decade. Each function here first moves its argument by
``ROUNDING_TOLERANCE`` (1e-9, far above float64's relative error of about 1e-16 for the few
operations behind such a number and far below any step lbtrain counts), and ``is_close`` compares
two floats with it as the relative tolerance (``math.isclose``'s own default).
"""

from __future__ import annotations

import math

ROUNDING_TOLERANCE = 1e-9


def floor_tolerant(value: float) -> int:
    """``floor(value + ROUNDING_TOLERANCE)``: the whole number below ``value``, or ``value``'s own
    when it is one up to rounding.

    >>> import math
    >>> math.floor(0.7 / 0.1), floor_tolerant(0.7 / 0.1)
    (6, 7)
    >>> floor_tolerant(6.5)
    6
    """
    return math.floor(value + ROUNDING_TOLERANCE)


def ceil_tolerant(value: float) -> int:
    """``ceil(value - ROUNDING_TOLERANCE)``: the whole number above ``value``, or ``value``'s own
    when it is one up to rounding.

    >>> import math
    >>> math.ceil(0.1 * 3 / 0.1), ceil_tolerant(0.1 * 3 / 0.1)
    (4, 3)
    >>> ceil_tolerant(6.5)
    7
    """
    return math.ceil(value - ROUNDING_TOLERANCE)


def is_close(a: float, b: float) -> bool:
    """Whether ``a`` and ``b`` are the same number up to rounding: relative difference at most
    ``ROUNDING_TOLERANCE``.

    >>> is_close(0.1 * 3, 0.3), is_close(0.3, 0.3001)
    (True, False)
    """
    return math.isclose(a, b, rel_tol=ROUNDING_TOLERANCE)


__all__ = ["ROUNDING_TOLERANCE", "ceil_tolerant", "floor_tolerant", "is_close"]
