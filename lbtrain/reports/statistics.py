"""Confidence intervals for the numbers a study reports: every headline mean comes with its n
and a 95% interval, and so does every difference between two arms.

The intervals are percentile bootstraps (Efron & Tibshirani 1993, ch. 13): resample the seeds'
values with replacement ``resamples`` times, take the mean of each resample, and report the
``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of those means. With three to five seeds a
bootstrap interval is narrow and only indicative (it cannot be wider than the values' range);
it is what the reports state, with n beside it, so a reader can judge.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

DEFAULT_LEVEL = 0.95
DEFAULT_RESAMPLES = 10000


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` values with its bootstrap interval ``[low, high]`` at ``level``
    (``low = high = mean`` for a single value; all None for none)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    level: float = DEFAULT_LEVEL

    def describe(self, digits: int = 3) -> str:
        """``0.884 [0.879, 0.889] (n=3)``; ``-`` when there is no value.

        >>> Estimate(0.8843, 0.879, 0.8891, 3).describe()
        '0.884 [0.879, 0.889] (n=3)'
        """
        if self.mean is None:
            return "-"
        if self.n == 1:
            return f"{self.mean:.{digits}f} (n=1)"
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] (n={self.n})"


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.array([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=np.float64)


def bootstrap_mean(values: Sequence[float | None], *, level: float = DEFAULT_LEVEL, resamples: int = DEFAULT_RESAMPLES,
                   seed: int = 0) -> Estimate:
    """The mean of the finite ``values`` with a percentile-bootstrap interval (module doc).

    >>> bootstrap_mean([0.88, 0.89, 0.90]).mean
    0.89
    >>> bootstrap_mean([0.5]).describe()
    '0.500 (n=1)'
    """
    data = _finite(values)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if data.size == 0:
        return Estimate(None, None, None, 0, level)
    mean = float(np.mean(data))
    if data.size == 1:
        return Estimate(mean, mean, mean, 1, level)
    means = np.random.default_rng(seed).choice(data, size=(resamples, data.size), replace=True).mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(round(mean, 12), float(low), float(high), int(data.size), level)


def bootstrap_difference(first: Sequence[float | None], second: Sequence[float | None], *, level: float = DEFAULT_LEVEL,
                         resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Estimate:
    """``mean(first) - mean(second)`` with a percentile-bootstrap interval, each group
    resampled on its own (the seeds of two arms are independent runs); ``n`` is the smaller
    group's size. None when either group is empty."""
    a, b = _finite(first), _finite(second)
    if a.size == 0 or b.size == 0:
        return Estimate(None, None, None, 0, level)
    difference = float(np.mean(a) - np.mean(b))
    if a.size == 1 and b.size == 1:
        return Estimate(difference, difference, difference, 1, level)
    rng = np.random.default_rng(seed)
    means_a = rng.choice(a, size=(resamples, a.size), replace=True).mean(axis=1)
    means_b = rng.choice(b, size=(resamples, b.size), replace=True).mean(axis=1)
    low, high = np.quantile(means_a - means_b, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(difference, float(low), float(high), int(min(a.size, b.size)), level)


def bootstrap_ratio(numerators: Sequence[float], denominators: Sequence[float], *, level: float = DEFAULT_LEVEL,
                    resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Estimate:
    """``mean(numerators) / mean(denominators)`` over paired observations, with a
    percentile-bootstrap interval (pairs resampled together). The ratio is None where the mean
    denominator is not positive; a bound is None where more than the tail's share of resamples
    have no ratio (the interval is unbounded there).

    >>> bootstrap_ratio([2.0, 4.0], [1.0, 1.0]).mean
    3.0
    """
    pairs = np.array([(float(a), float(b)) for a, b in zip(numerators, denominators)
                      if math.isfinite(float(a)) and math.isfinite(float(b))], dtype=np.float64).reshape(-1, 2)
    if not pairs.size or not pairs[:, 1].mean() > 0:
        return Estimate(None, None, None, len(pairs), level)
    ratio = float(pairs[:, 0].mean() / pairs[:, 1].mean())
    if len(pairs) == 1:
        return Estimate(ratio, ratio, ratio, 1, level)
    picks = np.random.default_rng(seed).integers(0, len(pairs), size=(resamples, len(pairs)))
    tops, bottoms = pairs[picks, 0].mean(axis=1), pairs[picks, 1].mean(axis=1)
    # A resample without a positive denominator has an unbounded ratio: +inf sorts it last.
    ratios = np.where(bottoms > 0, tops / np.where(bottoms > 0, bottoms, 1.0), np.inf)
    low, high = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return Estimate(ratio, float(low) if math.isfinite(low) else None, float(high) if math.isfinite(high) else None,
                    len(pairs), level)


__all__ = ["DEFAULT_LEVEL", "Estimate", "bootstrap_difference", "bootstrap_mean", "bootstrap_ratio"]
