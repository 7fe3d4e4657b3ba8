"""Confidence intervals for the numbers a study reports: every headline mean comes with its n,
its degrees of freedom and a 95% interval, and so does every difference between two arms.

- **A mean** (``mean_interval``): the Student-t interval (Student 1908),
  ``mean ± t_{(1 + level)/2, n-1} · s / sqrt(n)`` with ``s`` the sample standard deviation
  (divisor n − 1) and ``df = n − 1``. Exact for normal values at every n >= 2; a single value
  has no interval.
- **A difference of two means** (``difference_interval``): Welch's interval (Welch 1947), the
  two arms' seeds being independent runs with possibly unequal variances:
  ``d = mean_1 − mean_2``, ``se = sqrt(s_1²/n_1 + s_2²/n_2)``, ``d ± t_{(1 + level)/2, df} · se``
  with the Welch–Satterthwaite degrees of freedom
  ``df = se⁴ / ((s_1²/n_1)² / (n_1 − 1) + (s_2²/n_2)² / (n_2 − 1))`` (Satterthwaite 1946),
  between ``min(n_1, n_2) − 1`` and ``n_1 + n_2 − 2``. Each arm needs two values or more.
- **A ratio of means over paired observations** (``bootstrap_ratio``, the gradient noise scale
  over a probe's steps) has no t form: a percentile bootstrap (Efron & Tibshirani 1993, ch. 13)
  resampling the pairs, whose bounds are given only from ``BOOTSTRAP_MIN_N`` = 20 pairs. Below
  that the percentile interval is too narrow to be worth printing: for a mean of normal values
  its half-width is about ``z · s · sqrt((n − 1)/n) / sqrt(n)`` against t's
  ``t_{n-1} · s / sqrt(n)``, so a "95%" interval covers about 78% at n = 3, 90% at n = 10 and
  93% at n = 20.

Every ``Estimate`` says its n (and for a difference the second arm's n) and its df, and
``Estimate.describe`` prints them: ``0.884 [0.879, 0.889] (n=3, df=2)``. The claims the reports
draw from these intervals are made in one place, ``lbtrain.reports.decisions``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
import scipy.stats

DEFAULT_LEVEL = 0.95
DEFAULT_RESAMPLES = 10000
# Below this many observations a percentile bootstrap gives no bounds (module doc).
BOOTSTRAP_MIN_N = 20


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` values (or a difference of two means over ``n`` and ``n_second``
    values) with its interval ``[low, high]`` at ``level`` and the interval's degrees of freedom
    ``df``; ``low = high = None`` where there is no interval (a single value), all None for no
    value."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    level: float = DEFAULT_LEVEL
    df: float | None = None
    n_second: int | None = None

    def count_text(self) -> str:
        """``n=3, df=2``; ``n=3 vs 4, df=4.9`` for a difference; ``n=1`` without an interval.

        >>> Estimate(0.1, 0.0, 0.2, 3, df=3.9, n_second=3).count_text()
        'n=3 vs 3, df=3.9'
        """
        sizes = f"n={self.n}" if self.n_second is None else f"n={self.n} vs {self.n_second}"
        if self.df is None:
            return sizes
        df = f"{self.df:.0f}" if float(self.df).is_integer() else f"{self.df:.1f}"
        return f"{sizes}, df={df}"

    def describe(self, digits: int = 3, signed: bool = False) -> str:
        """``0.884 [0.879, 0.889] (n=3, df=2)``; ``+0.012 [...]`` with ``signed``; the mean and
        its n alone without an interval; ``-`` when there is no value.

        >>> Estimate(0.8843, 0.879, 0.8891, 3, df=2).describe()
        '0.884 [0.879, 0.889] (n=3, df=2)'
        >>> Estimate(0.5, None, None, 1).describe()
        '0.500 (n=1)'
        """
        if self.mean is None:
            return "-"
        number = f"{{:{'+' if signed else ''}.{digits}f}}".format
        if self.low is None or self.high is None:
            return f"{number(self.mean)} ({self.count_text()})"
        return f"{number(self.mean)} [{number(self.low)}, {number(self.high)}] ({self.count_text()})"


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.array([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=np.float64)


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def t_quantile(level: float, df: float | np.ndarray) -> float | np.ndarray:
    """The two-sided Student-t critical value ``t_{(1 + level)/2, df}`` (scipy.stats.t)."""
    _check_level(level)
    return scipy.stats.t.ppf((1 + level) / 2, df)


def welch_df(variance_first: float, n_first: int, variance_second: float, n_second: int) -> float | None:
    """The Welch–Satterthwaite degrees of freedom of a difference of two means (module doc) from
    the sample variances and sizes; None when both variances are 0 (the formula is 0/0).

    >>> welch_df(1.0, 3, 1.0, 3)
    4.0
    """
    if n_first < 2 or n_second < 2:
        raise ValueError(f"Welch's df needs two values or more per arm, got {n_first} and {n_second}")
    a, b = variance_first / n_first, variance_second / n_second
    if a + b == 0:
        return None
    return (a + b) ** 2 / (a ** 2 / (n_first - 1) + b ** 2 / (n_second - 1))


def t_intervals(samples: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Student-t intervals of many samples at once: ``(means, lows, highs)`` of the rows of
    ``samples`` (shape ``[k, n]``, n >= 2, ``df = n − 1``; module doc)."""
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim != 2 or samples.shape[1] < 2:
        raise ValueError(f"t intervals need rows of two values or more, got shape {samples.shape}")
    n = samples.shape[1]
    means = samples.mean(axis=1)
    half = t_quantile(level, n - 1) * samples.std(axis=1, ddof=1) / math.sqrt(n)
    return means, means - half, means + half


def welch_intervals(first: np.ndarray, second: np.ndarray,
                    level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Welch intervals of many pairs of samples at once: ``(differences, lows, highs, dfs)`` of
    row i of ``first`` (``[k, n_1]``) minus row i of ``second`` (``[k, n_2]``), n_1, n_2 >= 2
    (module doc). A pair without any spread has the interval ``[d, d]`` and df NaN."""
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if first.ndim != 2 or second.ndim != 2 or first.shape[0] != second.shape[0] or min(first.shape[1], second.shape[1]) < 2:
        raise ValueError(f"Welch intervals need as many rows of two values or more on each side, got {first.shape} and {second.shape}")
    n_1, n_2 = first.shape[1], second.shape[1]
    a, b = first.var(axis=1, ddof=1) / n_1, second.var(axis=1, ddof=1) / n_2
    # Equal values can leave a variance of rounding noise (1e-32): no spread below 1e-12 of the means.
    scale = np.maximum(1.0, np.maximum(np.abs(first.mean(axis=1)), np.abs(second.mean(axis=1))))
    spread = np.sqrt(a + b) > 1e-12 * scale
    df = np.where(spread, (a + b) ** 2 / np.where(spread, a ** 2 / (n_1 - 1) + b ** 2 / (n_2 - 1), 1.0), np.nan)
    half = np.where(spread, t_quantile(level, np.where(spread, df, 1.0)) * np.sqrt(a + b), 0.0)
    differences = first.mean(axis=1) - second.mean(axis=1)
    return differences, differences - half, differences + half, df


def mean_interval(values: Sequence[float | None], *, level: float = DEFAULT_LEVEL) -> Estimate:
    """The mean of the finite ``values`` with its Student-t interval and ``df = n − 1`` (module
    doc, ``t_intervals``); no interval for a single value, no mean for none.

    >>> mean_interval([1.0, 2.0, 3.0]).describe(2)
    '2.00 [-0.48, 4.48] (n=3, df=2)'
    >>> mean_interval([0.5]).describe()
    '0.500 (n=1)'
    """
    _check_level(level)
    data = _finite(values)
    if data.size == 0:
        return Estimate(None, None, None, 0, level)
    mean = round(float(np.mean(data)), 12)
    if data.size == 1:
        return Estimate(mean, None, None, 1, level)
    _, (low,), (high,) = t_intervals(data[None, :], level)
    return Estimate(mean, float(low), float(high), int(data.size), level, df=int(data.size - 1))


def difference_interval(first: Sequence[float | None], second: Sequence[float | None], *,
                        level: float = DEFAULT_LEVEL) -> Estimate:
    """``mean(first) − mean(second)`` of the finite values with Welch's interval and the
    Welch–Satterthwaite df (module doc, ``welch_intervals``); ``n`` and ``n_second`` are the two
    arms' sizes. No interval when either arm has fewer than two values; no difference when
    either has none. Two arms without any spread have the interval ``[d, d]`` and no df.

    >>> difference_interval([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]).describe(2)
    '1.00 [-1.27, 3.27] (n=3 vs 3, df=4)'
    """
    _check_level(level)
    a, b = _finite(first), _finite(second)
    if a.size == 0 or b.size == 0:
        return Estimate(None, None, None, int(a.size), level, n_second=int(b.size))
    difference = float(np.mean(a) - np.mean(b))
    if a.size < 2 or b.size < 2:
        return Estimate(difference, None, None, int(a.size), level, n_second=int(b.size))
    _, (low,), (high,), (df,) = welch_intervals(a[None, :], b[None, :], level)
    return Estimate(difference, float(low), float(high), int(a.size), level,
                    df=None if math.isnan(df) else float(df), n_second=int(b.size))


def bootstrap_ratio(numerators: Sequence[float], denominators: Sequence[float], *, level: float = DEFAULT_LEVEL,
                    resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Estimate:
    """``mean(numerators) / mean(denominators)`` over paired observations, with a
    percentile-bootstrap interval (pairs resampled together) from ``BOOTSTRAP_MIN_N`` pairs on
    (module doc; fewer pairs: the ratio alone). The ratio is None where the mean denominator is
    not positive; a bound is None where more than the tail's share of resamples have no ratio
    (the interval is unbounded there).

    >>> bootstrap_ratio([2.0, 4.0], [1.0, 1.0]).describe(1)
    '3.0 (n=2)'
    """
    _check_level(level)
    pairs = np.array([(float(a), float(b)) for a, b in zip(numerators, denominators)
                      if math.isfinite(float(a)) and math.isfinite(float(b))], dtype=np.float64).reshape(-1, 2)
    if not pairs.size or not pairs[:, 1].mean() > 0:
        return Estimate(None, None, None, len(pairs), level)
    ratio = float(pairs[:, 0].mean() / pairs[:, 1].mean())
    if len(pairs) < BOOTSTRAP_MIN_N:
        return Estimate(ratio, None, None, len(pairs), level)
    picks = np.random.default_rng(seed).integers(0, len(pairs), size=(resamples, len(pairs)))
    tops, bottoms = pairs[picks, 0].mean(axis=1), pairs[picks, 1].mean(axis=1)
    # A resample without a positive denominator has an unbounded ratio: +inf sorts it last.
    ratios = np.where(bottoms > 0, tops / np.where(bottoms > 0, bottoms, 1.0), np.inf)
    low, high = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return Estimate(ratio, float(low) if math.isfinite(low) else None, float(high) if math.isfinite(high) else None,
                    len(pairs), level)


__all__ = ["BOOTSTRAP_MIN_N", "DEFAULT_LEVEL", "DEFAULT_RESAMPLES", "Estimate", "bootstrap_ratio", "difference_interval",
           "mean_interval", "t_intervals", "t_quantile", "welch_df",
           "welch_intervals"]
