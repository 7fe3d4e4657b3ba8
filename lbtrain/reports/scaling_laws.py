"""The critical batch size and the learning rate's exponent in the batch, fitted to measured
steps to a target (``lbtrain.measures.steps_to_target``) and sweeps.

Shallue et al. 2018 ("Measuring the Effects of Data Parallelism on Neural Network Training")
measure, per batch size B, the training steps S(B) needed to reach a target validation
metric: with perfect scaling S halves when B doubles; past some B it stops falling.
McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", eq. 2.11) model the
trade-off as::

    S(B) = S_min * (1 + B_crit / B)        (E(B) = B * S(B) = E_min * (1 + B / B_crit))

with the critical batch ``B_crit = E_min / S_min``, predicted by the gradient noise scale
``B_simple = tr(Sigma) / |G|^2`` (``lbtrain.measures.noise_scale``).

A fit is only as good as its points: two free parameters through two or three batch sizes
always fit (0% error says nothing), so ``critical_batch`` needs ``MIN_FIT_BATCHES`` batch sizes
and reports every point's residual. A point is a recipe's mean steps over its seeds, and only
when every seed reached the target (``SEED_RULE``): averaging the seeds that got there would
favour the recipe that loses seeds. ``B_crit`` and its interval come from one method, profile
likelihood (``profile_interval``: the estimate is the minimum of the weighted residual sum of
squares and the interval its F-profile, valid with 3 to 5 seeds a batch, where a seed bootstrap
is too narrow), with the seed bootstrap and the
leave-one-seed-out range recorded beside it (``CriticalBatchFit.b_crit_interval`` says which
claims use). ``lr_exponent`` takes the best *region* of a sweep (top-k
trials per batch) and bootstraps over trials for its interval, so one lucky trial cannot move it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.optimize
import scipy.stats

from lbtrain.reports.statistics import DEFAULT_LEVEL, DEFAULT_RESAMPLES
from lbtrain.rounding import floor_tolerant
from lbtrain.verdict import OK, is_ok


def reachable_target(best_by_batch: Iterable[float], step: float = 0.005) -> float:
    """The highest target every batch size reaches: the smallest of the per-batch best values,
    rounded down to a multiple of ``step``."""
    values = [float(value) for value in best_by_batch]
    if not values:
        raise ValueError("no runs to choose a target from")
    return floor_tolerant(min(values) / step) * step


MIN_FIT_BATCHES = 4

# The rule for a seed that never reaches the target (``counts_in_fit``), as the reports state it.
SEED_RULE = ("every seed must reach it — a recipe's steps at a batch enter the fit only when all its runs were ok and "
             "reached the target (a seed that never does leaves that recipe out at that batch, not just its own value), "
             "and each batch enters through the fewest mean steps among the recipes left")


def _batch_sizes(count: int) -> str:
    return f"{count} batch size{'' if count == 1 else 's'}"


def counts_in_fit(row: Mapping[str, Any]) -> bool:
    """Whether a (recipe, global batch) row of steps to target may stand for its batch in the
    fit (``SEED_RULE``): it has steps (``steps_to_target`` not None), they are not an upper bound
    (``upper_bound``: reached by the first epoch's end, the first point measured), and every run
    reached the target (``reached == runs``; a run that diverged, collapsed or failed did not).

    Why every seed: the mean over only the seeds that got there is biased low, and the more
    seeds fall short the lower, so the recipe that loses seeds would look fastest (in
    ``results/steps_to_target`` one seed of three reached at batch 1024 and was the "best").
    Rows without ``reached``/``runs`` (a single value per batch) count when they have steps."""
    return row.get("steps_to_target") is not None and not row.get("upper_bound", False) and row.get("reached") == row.get("runs")


def _fit(batches: np.ndarray, steps: np.ndarray, counts: Sequence[int] | None = None) -> tuple[float, float]:
    """``(S_min, B_crit)`` of ``S = S_min (1 + B_crit / B)``: non-negative least squares of
    ``S = a + b / B`` on relative residuals, each point's squared residual weighted by its seeds
    ``counts`` (equal weights without them); ``(0, inf)`` when ``a`` -> 0 (the steps keep halving),
    ``B_crit = 0`` when ``b`` is round-off of flat steps.

    With counts this is the maximiser of ``profile_interval``'s likelihood: the weights
    ``n_i / (cv^2 y_i^2)`` there are these up to the common ``cv^2``, which moves no minimum, and
    ``a, b >= 0`` is ``S_min >= 0``, ``B_crit`` in ``[0, inf]``. The counts enter relative to the
    largest, so equal counts give the unweighted fit bit for bit."""
    design = np.stack([np.ones_like(batches), 1.0 / batches], axis=1) / steps[:, None]
    target = np.ones_like(steps)
    if counts is not None:
        scale = np.sqrt(np.asarray(counts, dtype=np.float64) / max(counts))
        design, target = design * scale[:, None], target * scale
    (s_min, slope), _ = scipy.optimize.nnls(design, target)
    if s_min <= 1e-6 * steps.min():
        return 0.0, math.inf
    b_crit = float(slope / s_min)
    return float(s_min), 0.0 if b_crit < 1e-6 * batches.min() else b_crit


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _pair(interval: tuple[float, float] | None) -> list[float | None] | None:
    """An interval as JSON: ``[low, high]``, an unbounded end as None."""
    return None if interval is None else [_finite_or_none(interval[0]), _finite_or_none(interval[1])]


def _hull(first: tuple[float, float] | None, second: tuple[float, float] | None) -> tuple[float, float] | None:
    if first is None or second is None:
        return None
    return min(first[0], second[0]), max(first[1], second[1])


def _range_text(interval: tuple[float, float] | None, digits: int) -> str:
    low, high = interval
    return f"[{low:.{digits}f}, " + ("unbounded]" if not math.isfinite(high) else f"{high:.{digits}f}]")


# As the reports state it: no years or section numbers (a report's prose states only numbers from its data;
# the references are profile_interval's: Bates & Watts 1988, sec. 6.1; Venables & Ripley 2002, sec. 8.4).
PROFILE_METHOD = ("profile likelihood (the F-profile of Bates & Watts and Venables & Ripley: the weighted residual sum of squares "
                  "of S(B) = S_min (1 + B_crit / B) over B_crit, S_min profiled out, around its minimum, the B_crit reported)")


def _profile_rss(batches: np.ndarray, steps: np.ndarray, weights: np.ndarray, b_crit: float) -> float:
    """The weighted residual sum of squares at ``b_crit`` with ``S_min`` at its best (linear in
    it: ``S_min = sum w y x / sum w x^2``, ``x = 1 + b_crit / B``); ``b_crit = inf`` is the limit
    ``S = b / B`` (steps that keep halving)."""
    x = 1.0 / batches if math.isinf(b_crit) else 1.0 + b_crit / batches
    scale = np.sum(weights * steps * x) / np.sum(weights * x * x)
    return float(np.sum(weights * (steps - scale * x) ** 2))


@dataclasses.dataclass(frozen=True)
class ProfileInterval:
    """``profile_interval``'s result: ``b_crit`` and ``s_min`` (the point estimate: the maximiser
    of the likelihood the interval profiles, ``c_hat`` there), ``interval`` (an end may be
    0 or ``inf``: the data cannot rule it out), ``threshold`` (the rise of the weighted residual
    sum of squares that bounds it), ``rss`` (its minimum), ``dispersion`` (``rss / (k - 2)``),
    ``df`` (the pooled seeds' degrees of freedom, ``sum (n_i - 1)``), ``points`` (k) and
    ``lack_of_fit`` (whether the threshold came from the residuals: the curve misses the points)."""

    b_crit: float
    interval: tuple[float, float]
    threshold: float
    rss: float
    dispersion: float
    df: int
    points: int
    lack_of_fit: bool = False
    s_min: float | None = None


def profile_interval(batches: Sequence[float], seed_steps: Sequence[Sequence[float]], level: float = DEFAULT_LEVEL) -> ProfileInterval:
    """A profile-likelihood interval for ``B_crit`` of ``S(B) = S_min (1 + B_crit / B)`` fitted
    to per-batch mean steps, valid with few seeds a batch (Bates & Watts 1988, "Nonlinear
    Regression Analysis and Its Applications", sec. 6.1; Venables & Ripley 2002, "Modern Applied
    Statistics with S", sec. 8.4: the F-profile).

    The data: at each of k batch sizes ``B_i`` the steps of its ``n_i >= 2`` seeds, mean ``y_i``.
    The variance: seed-to-seed scatter of steps grows with the steps, so it is modelled as a common
    coefficient of variation, pooled over every batch (``cv^2 = sum (n_i - 1) s_i^2 / y_i^2 / nu``,
    ``nu = sum (n_i - 1)`` degrees of freedom: 16 at 8 batches of 3 seeds, where one batch's own
    variance has 2); the mean's standard error is ``se_i = cv y_i / sqrt(n_i)`` and its weight
    ``w_i = 1 / se_i^2``. ``RSS(c)`` is the weighted residual sum of squares with ``B_crit = c`` and
    ``S_min`` at its best for that c (it is linear given c), ``c_hat`` its minimiser: the point
    estimate, the maximum of the Gaussian likelihood with these standard errors, found in closed
    form as ``S = a + b / B`` is linear in ``a = S_min``, ``b = S_min B_crit`` (non-negative least
    squares with the weights ``w_i``, ``_fit``; ``c_hat = b / a`` in ``[0, inf]``). Estimate and
    interval are one method; ``critical_batch`` reports this estimate. The interval
    is ``{c : RSS(c) - RSS(c_hat) <= threshold}`` with

        threshold = F(level; 1, nu)                              the curve fits within the seeds' scatter
        threshold = RSS(c_hat) / (k - 2) * F(level; 1, k - 2)    lack of fit

    The first is the profile's F-test with the pooled seed variance (the chi-square with 1 df of
    a known variance, widened for estimating it from nu degrees of freedom). When the curve misses
    the points by more than the seeds scatter, by the lack-of-fit test ``RSS(c_hat) / (k - 2) >
    F(level; k - 2, nu)`` (pure error against lack of fit: Draper & Smith 1998, "Applied
    Regression Analysis", sec. 2.1), the variance is estimated from the fit's residuals instead
    (k - 2 degrees of freedom), which widens the interval by how badly the curve fits.
    ``lack_of_fit`` says which. An end is 0 or ``inf`` when ``RSS`` at that end stays below the
    threshold (no critical batch, or the steps keep halving, cannot be ruled out).
    ``tests/reports/test_scaling_laws.py`` checks its coverage on simulated studies.

    >>> batches = [32, 64, 128, 256, 512, 1024]
    >>> seeds = [[s * f for f in (0.95, 1.0, 1.05)] for s in (100 * (1 + 300 / b) for b in batches)]
    >>> found = profile_interval(batches, seeds)
    >>> round(found.b_crit), [round(end) for end in found.interval]
    (300, [270, 334])
    """
    x = np.asarray(batches, dtype=np.float64)
    groups = [np.asarray(values, dtype=np.float64) for values in seed_steps]
    if len(x) != len(groups) or len(x) < 3:
        raise ValueError(f"give the seeds' steps at each of 3 batch sizes or more (got {len(groups)} groups for {len(x)} batches)")
    if any(len(group) < 2 for group in groups):
        raise ValueError("every batch needs 2 seeds or more: the variance is pooled from the seeds")
    means = np.array([group.mean() for group in groups])
    df = int(sum(len(group) - 1 for group in groups))
    cv2 = sum(((group - group.mean()) ** 2).sum() / group.mean() ** 2 for group in groups) / df
    if not cv2 > 0:
        raise ValueError("the seeds' steps do not vary: no variance to weigh the points by")
    weights = np.array([len(group) for group in groups]) / (cv2 * means ** 2)

    def rss(log_c: float) -> float:
        return _profile_rss(x, means, weights, math.exp(log_c))

    s_min, b_crit = _fit(x, means, [len(group) for group in groups])
    best_rss = _profile_rss(x, means, weights, b_crit)
    low_log, high_log = math.log(x.min() * 1e-3), math.log(x.max() * 1e3)
    best_log = min(max(math.log(b_crit), low_log), high_log) if b_crit > 0 else low_log
    k = len(x)
    dispersion = best_rss / (k - 2) if k > 2 else math.inf
    lack_of_fit = k > 2 and dispersion > float(scipy.stats.f.ppf(level, k - 2, df))
    threshold = (dispersion * float(scipy.stats.f.ppf(level, 1, k - 2)) if lack_of_fit
                 else float(scipy.stats.f.ppf(level, 1, df)))

    def excess(log_c: float) -> float:
        return rss(log_c) - best_rss - threshold

    lower = 0.0 if _profile_rss(x, means, weights, 0.0) - best_rss <= threshold else math.exp(
        scipy.optimize.brentq(excess, _crossing(excess, best_log, low_log), best_log))
    upper = math.inf if _profile_rss(x, means, weights, math.inf) - best_rss <= threshold else math.exp(
        scipy.optimize.brentq(excess, best_log, _crossing(excess, best_log, high_log + math.log(1e3))))
    return ProfileInterval(b_crit, (lower, upper), threshold, float(best_rss), dispersion, df, k, bool(lack_of_fit), s_min)


def _crossing(excess, start: float, end: float, count: int = 200) -> float:
    """The first log B_crit from ``start`` towards ``end`` where ``excess`` is above 0 (one exists:
    the caller checked the limit beyond ``end``)."""
    for value in np.linspace(start, end, count)[1:]:
        if excess(value) > 0:
            return float(value)
    return end


def noise_scale_spread(*ranges: Sequence[float] | None) -> tuple[float, float] | None:
    """B_simple's spread as claims use it: the hull of the ``(low, high)`` ranges given (its range over
    the batch sizes at the target, over the second half of each run's way to the target), those
    that are None left out; None when none is given.

    >>> noise_scale_spread((302.0, 375.0), (134.0, 3478.0)), noise_scale_spread((302.0, 375.0), None), noise_scale_spread(None)
    ((134.0, 3478.0), (302.0, 375.0), None)
    """
    given = [bounds for bounds in ranges if bounds]
    return (min(bounds[0] for bounds in given), max(bounds[1] for bounds in given)) if given else None


@dataclasses.dataclass(frozen=True)
class CriticalBatchFit:
    """``S(B) = s_min * (1 + b_crit / B)`` fitted to steps to target at ``batches`` global batch
    sizes, or, when ``note`` says why there is none, no fitted number at all (``s_min``,
    ``b_crit`` and ``relative_rms`` None, no residuals).

    ``residuals`` holds one record per measured point: ``global_batch``, ``steps`` (measured),
    ``fitted_steps``, ``relative_residual = (fitted - measured) / measured``, and, when the rows
    said them, ``recipe`` (the recipe standing for the batch) and ``seeds`` (its runs).

    The uncertainty over seeds (``critical_batch``): ``b_crit_bootstrap`` / ``s_min_bootstrap``,
    the ``level`` percentile seed bootstrap, and ``b_crit_leave_one_out`` / ``s_min_leave_one_out``,
    the range of the refits with one seed left out; an upper end may be ``inf`` (some resample's
    steps keep halving: no critical batch in range). ``interval_note`` says why there is none.
    ``seeds`` is the fewest seeds behind a fitted point; ``excluded`` lists the rows ``SEED_RULE``
    left out (``recipe``, ``global_batch``, ``reached``, ``runs``, ``upper_bound``) and
    ``excluded_batches`` the batch sizes that had steps but lost every recipe to it.

    Every field after ``min_batches`` is optional: a ``report.json`` written before them still
    reads as a fit without an interval."""

    batches: int
    s_min: float | None = None
    b_crit: float | None = None
    relative_rms: float | None = None
    residuals: tuple[dict[str, Any], ...] = ()
    noise_scale: float | None = None
    note: str | None = None
    min_batches: int = MIN_FIT_BATCHES
    b_crit_bootstrap: tuple[float, float] | None = None
    b_crit_leave_one_out: tuple[float, float] | None = None
    s_min_bootstrap: tuple[float, float] | None = None
    s_min_leave_one_out: tuple[float, float] | None = None
    interval_note: str | None = None
    seeds: int | None = None
    excluded: tuple[dict[str, Any], ...] = ()
    excluded_batches: tuple[int, ...] = ()
    level: float = DEFAULT_LEVEL
    resamples: int | None = None
    noise_scale_range: tuple[float, float] | None = None
    b_crit_profile: tuple[float, float] | None = None
    profile_lack_of_fit: bool | None = None
    noise_scale_training_range: tuple[float, float] | None = None

    @property
    def fitted(self) -> bool:
        return self.note is None

    @property
    def e_min(self) -> float | None:
        """The fewest samples to the target (batch -> 0): ``s_min * b_crit``."""
        return self.s_min * self.b_crit if self.fitted else None

    @property
    def b_crit_interval(self) -> tuple[float, float] | None:
        """The interval claims on ``b_crit`` are judged by (``interval_method`` names it): the
        profile-likelihood interval (``profile_interval``) when there is one; for a fit recorded
        before it, the hull of the seed bootstrap's interval and the leave-one-seed-out range
        (each end the wider of the two: with 3 seeds a batch a percentile bootstrap alone is too
        narrow, ``lbtrain.reports.statistics``: about 78% coverage for a mean at n = 3)."""
        if self.b_crit_profile is not None:
            return self.b_crit_profile
        return _hull(self.b_crit_bootstrap, self.b_crit_leave_one_out)

    @property
    def interval_method(self) -> str | None:
        """``profile`` or ``bootstrap hull``: how ``b_crit_interval`` was made (None without one)."""
        if self.b_crit_profile is not None:
            return "profile"
        return "bootstrap hull" if self.b_crit_interval is not None else None

    @property
    def estimate_method(self) -> str | None:
        """How ``b_crit`` and ``s_min`` were estimated (None without a fit): ``profile likelihood``
        when the profile interval was made, its maximiser (``critical_batch``: each batch's mean
        weighted by its seeds), else ``least squares on relative residuals`` (equal weights; a fit
        recorded before the profile interval, or without per-seed steps)."""
        if not self.fitted:
            return None
        return "profile likelihood" if self.b_crit_profile is not None else "least squares on relative residuals"

    @property
    def s_min_interval(self) -> tuple[float, float] | None:
        """``s_min``'s interval, the hull as for ``b_crit_interval``."""
        return _hull(self.s_min_bootstrap, self.s_min_leave_one_out)

    @property
    def noise_scale_ratio(self) -> float | None:
        """``B_simple / B_crit`` (McCandlish et al. predict about 1), when both are known."""
        if not self.fitted or self.noise_scale is None or not self.b_crit > 0:
            return None
        return self.noise_scale / self.b_crit

    @property
    def noise_scale_ratio_interval(self) -> tuple[float, float] | None:
        """``B_simple / B_crit`` over ``b_crit_interval`` and, when the report gives it,
        B_simple's spread: the hull of ``noise_scale_range`` (its range over the batch sizes at the
        target) and ``noise_scale_training_range`` (over the second half of each run's way to the
        target, ``lbtrain.reports.report.noise_scale_at_target``), whichever the report gives:
        ``[B_simple low / B_crit high, B_simple high / B_crit low]``, B_simple held at its median
        without a range; ``inf`` above when B_crit's interval reaches 0. A hull of two ranges,
        not an interval with a confidence level."""
        interval = self.b_crit_interval
        if self.noise_scale_ratio is None or interval is None:
            return None
        low, high = interval
        smallest, largest = noise_scale_spread(self.noise_scale_range, self.noise_scale_training_range) or (
            self.noise_scale, self.noise_scale)
        return smallest / high, (largest / low if low > 0 else math.inf)

    def steps(self, global_batch: float) -> float:
        if not self.fitted:
            raise ValueError(f"no critical-batch fit: {self.note}")
        return self.s_min * (1 + self.b_crit / global_batch)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CriticalBatchFit":
        """The fit ``to_dict`` wrote (an unbounded end read back as ``inf``); a ``report.json``
        written before the interval fields reads as a fit without an interval."""
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {name: value for name, value in data.items() if name in fields}
        for name in ("b_crit_bootstrap", "b_crit_leave_one_out", "s_min_bootstrap", "s_min_leave_one_out", "noise_scale_range",
                     "b_crit_profile", "noise_scale_training_range"):
            if values.get(name) is not None:
                values[name] = tuple(math.inf if end is None else float(end) for end in values[name])
        for name in ("residuals", "excluded", "excluded_batches"):
            values[name] = tuple(values.get(name) or ())
        if "b_crit_bootstrap" not in data:
            values["interval_note"] = "fitted before intervals over seeds were recorded"
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the fields (an interval as ``[low, high]``, an unbounded end as None), the
        rule, ``e_min``, ``noise_scale_ratio`` and the judged intervals ``b_crit_interval``,
        ``s_min_interval`` and ``noise_scale_ratio_interval``."""
        data = dataclasses.asdict(self)
        for name in ("b_crit_bootstrap", "b_crit_leave_one_out", "s_min_bootstrap", "s_min_leave_one_out", "noise_scale_range",
                     "b_crit_profile", "noise_scale_training_range"):
            data[name] = _pair(getattr(self, name))
        return {**data, "residuals": [dict(point) for point in self.residuals], "excluded": [dict(row) for row in self.excluded],
                "excluded_batches": list(self.excluded_batches), "rule": SEED_RULE, "e_min": self.e_min,
                "noise_scale_ratio": self.noise_scale_ratio, "b_crit_interval": _pair(self.b_crit_interval),
                "interval_method": self.interval_method, "estimate_method": self.estimate_method,
                "s_min_interval": _pair(self.s_min_interval), "noise_scale_ratio_interval": _pair(self.noise_scale_ratio_interval)}

    def interval_text(self) -> str:
        """``95% seed bootstrap [190, 400], leave-one-seed-out [242, 340]; 3 seeds per batch or
        more`` for ``b_crit``, or why there is no interval."""
        if self.b_crit_bootstrap is None and self.b_crit_profile is None:
            return f"no interval ({self.interval_note})"
        parts = []
        if self.b_crit_profile is not None:
            parts.append(f"{100 * self.level:.0f}% profile-likelihood interval {_range_text(self.b_crit_profile, 0)}"
                         + (", widened for lack of fit" if self.profile_lack_of_fit else ""))
        if self.b_crit_bootstrap is not None:
            parts.append(f"seed bootstrap {_range_text(self.b_crit_bootstrap, 0)}, leave-one-seed-out "
                         f"{_range_text(self.b_crit_leave_one_out, 0)}")
        if self.b_crit_profile is None:
            parts[0] = f"{100 * self.level:.0f}% " + parts[0]
        return "; ".join(parts) + f"; {self.seeds} seeds per batch or more"

    def describe(self) -> str:
        """One sentence: the fit's numbers, how B_crit was estimated, its interval and error, or ``not fitted —
        <note>``; then the measured noise scale when there is one."""
        if self.fitted:
            method = "the profile likelihood's maximum; " if self.estimate_method == "profile likelihood" else ""
            text = (f"critical batch B_crit = {self.b_crit:.0f} ({method}{self.interval_text()}), fewest steps S_min = {self.s_min:.1f}, "
                    f"fewest samples E_min = {self.e_min:.0f}; relative rms error {100 * self.relative_rms:.1f}% over "
                    f"{self.batches} batch sizes")
        else:
            text = f"not fitted — {self.note}"
        if self.noise_scale is not None:
            ratio = self.noise_scale_ratio
            notes = ([] if self.noise_scale_range is None else
                     [f"from {self.noise_scale_range[0]:.0f} to {self.noise_scale_range[1]:.0f} over the batch sizes"])
            notes += ([] if self.noise_scale_training_range is None else
                      [f"from {self.noise_scale_training_range[0]:.0f} to {self.noise_scale_training_range[1]:.0f} over the "
                       "second half of training to the target"])
            notes += [] if ratio is None else [f"{ratio:.2f} x B_crit"]
            text += f"; measured noise scale B_simple {self.noise_scale:.0f}" + (f" ({'; '.join(notes)})" if notes else "")
        return text

    def excluded_text(self) -> str:
        """What ``SEED_RULE`` left out: ``sqrt x2 at 1024 (1 of 3 seeds reached)``, ...; the
        batches that lost every recipe; or ``nothing``."""
        parts = [f"{row['recipe']} at {row['global_batch']} (" +
                 ("an upper bound" if row.get("upper_bound") else f"{row['reached']} of {row['runs']} seeds reached") + ")"
                 for row in self.excluded]
        if self.excluded_batches:
            parts.append("so batch " + ", ".join(str(batch) for batch in self.excluded_batches) + " has no point")
        return "; ".join(parts) if parts else "nothing"


@dataclasses.dataclass(frozen=True)
class _Arm:
    """A row in the fit: its batch, recipe, mean steps and per-seed steps (empty if unrecorded)."""

    batch: int
    recipe: str | None
    mean: float
    seeds: tuple[float, ...]


def _choose(arms: Sequence[_Arm], batches: Sequence[int], means: np.ndarray) -> np.ndarray:
    """Per batch (columns, in ``batches`` order), the fewest of its arms' ``means`` (``[..., arms]``)."""
    return np.stack([means[..., [i for i, arm in enumerate(arms) if arm.batch == batch]].min(axis=-1) for batch in batches], axis=-1)


def _quantiles(values: np.ndarray, level: float) -> tuple[float, float]:
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return float(low), float(high)


def _seed_uncertainty(arms: Sequence[_Arm], batches: Sequence[int], resamples: int, seed: int,
                      level: float) -> dict[str, Any]:
    """The seed bootstrap and leave-one-seed-out refits (``critical_batch``) as fit fields."""
    x = np.array(batches, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = np.stack([np.asarray(arm.seeds)[rng.integers(0, len(arm.seeds), (resamples, len(arm.seeds)))].mean(axis=1)
                      for arm in arms], axis=-1)
    boot = np.array([_fit(x, steps) for steps in _choose(arms, batches, draws)])
    held = []
    for index, arm in enumerate(arms):
        for left_out in range(len(arm.seeds) if len(arm.seeds) > 1 else 0):
            means = np.array([a.mean for a in arms])
            means[index] = np.mean(np.delete(np.asarray(arm.seeds), left_out))
            held.append(_fit(x, _choose(arms, batches, means)))
    held = np.array(held)
    return {"s_min_bootstrap": _quantiles(boot[:, 0], level), "b_crit_bootstrap": _quantiles(boot[:, 1], level),
            "s_min_leave_one_out": (float(held[:, 0].min()), float(held[:, 0].max())),
            "b_crit_leave_one_out": (float(held[:, 1].min()), float(held[:, 1].max())), "resamples": resamples}


def critical_batch(summary: Iterable[Mapping[str, Any]], noise_scale: float | None = None, *,
                   noise_scale_range: tuple[float, float] | None = None,
                   noise_scale_training_range: tuple[float, float] | None = None, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                   level: float = DEFAULT_LEVEL) -> CriticalBatchFit:
    """Fits ``S = S_min (1 + B_crit / B)`` (McCandlish et al. 2018, eq. 2.11) to steps to target,
    with the fit's uncertainty over seeds.

    ``summary`` holds one row per (recipe, global batch) — ``global_batch``, ``steps_to_target``
    (mean over seeds), and as ``lbtrain.reports.report.steps_rows`` writes them ``recipe``,
    ``seed_steps`` (each seed's steps), ``reached``, ``runs`` and ``upper_bound``. The points:
    rows that pass ``counts_in_fit`` (``SEED_RULE``: every seed reached the target; the others
    are listed in ``excluded``), and per global batch the fewest mean steps among them — the
    recipe tuned for that batch, chosen on the target's metric (validation accuracy), as
    Shallue et al. tune per batch size.

    The estimate: ``S`` is linear in ``1/B`` (``S = a + b / B``, ``a = S_min``, ``b = S_min B_crit``),
    non-negative least squares on relative residuals (the steps span orders of magnitude), each
    point weighted by its recipe's seeds: the maximiser of the likelihood ``profile_interval``
    profiles (its standard errors ``cv y_i / sqrt(n_i)``), so ``b_crit`` and its interval
    ``b_crit_profile`` come from one method, profile likelihood (``PROFILE_METHOD``). Without
    per-seed steps every point weighs the same (and there is no interval).
    With fewer than ``MIN_FIT_BATCHES`` batch sizes the result is "not enough points" (two
    parameters through two or three points fit whatever they are); when the steps keep halving
    with the batch (``a`` -> 0) it is "no critical batch within the measured range".

    The uncertainty, from the seeds (each row's ``seed_steps``; none without them):

    - *seed bootstrap*: ``resamples`` times, resample each row's seeds with replacement, take
      their mean, choose each batch's fewest again and refit; the percentile interval at
      ``level`` of ``B_crit`` and ``S_min`` (a resample whose steps keep halving counts as
      ``B_crit = inf``, ``S_min = 0``).
    - *leave one seed out*: refit once per seed of every row with two seeds or more, that seed's
      steps left out of its row's mean (each batch's fewest chosen again); the range of the refits.

    - *profile likelihood* (``profile_interval``, ``PROFILE_METHOD``): on each batch's chosen
      recipe's seeds, an F-profile of the weighted residual sum of squares over ``B_crit``, valid
      at 3 to 5 seeds a batch; claims use it (``CriticalBatchFit.b_crit_interval``).

    The bootstrap and the leave-one-out range (refits with equal weights) are recorded beside it: with 3 seeds a batch the
    bootstrap is too narrow on its own (their hull is what fits recorded before the profile use).
    There is no interval when a point's recipe has a single seed (nothing to resample).
    ``noise_scale_training_range``, its range over the second half of training to the target, is
    carried too. ``noise_scale``, the measured ``B_simple``, and ``noise_scale_range``, its range over the
    batch sizes, are carried along for comparison."""
    rows = list(summary)
    arms = [_Arm(int(row["global_batch"]), row.get("recipe"), float(row["steps_to_target"]),
                 tuple(float(value) for value in row.get("seed_steps") or ())) for row in rows if counts_in_fit(row)]
    excluded = tuple({"recipe": row.get("recipe"), "global_batch": int(row["global_batch"]), "reached": row.get("reached"),
                      "runs": row.get("runs"), "upper_bound": bool(row.get("upper_bound", False))}
                     for row in rows if row.get("steps_to_target") is not None and not counts_in_fit(row))
    batches = sorted({arm.batch for arm in arms})
    lost = tuple(sorted({row["global_batch"] for row in excluded} - set(batches)))
    common = {"noise_scale": noise_scale, "noise_scale_range": noise_scale_range,
              "noise_scale_training_range": noise_scale_training_range, "excluded": excluded, "excluded_batches": lost,
              "level": level}
    if len(batches) < MIN_FIT_BATCHES:
        return CriticalBatchFit(len(batches), note=f"not enough points (n = {_batch_sizes(len(batches))} < {MIN_FIT_BATCHES})",
                                **common)
    x = np.array(batches, dtype=np.float64)
    steps = _choose(arms, batches, np.array([arm.mean for arm in arms]))
    chosen = [min((arm for arm in arms if arm.batch == batch), key=lambda arm: arm.mean) for batch in batches]
    # The estimate of the profile likelihood (its maximiser: each mean weighted by its seeds), so that
    # B_crit and its profile interval come from one method; without per-seed steps, equal weights.
    s_min, b_crit = _fit(x, steps, [len(arm.seeds) for arm in chosen] if all(arm.seeds for arm in chosen) else None)
    if math.isinf(b_crit):
        return CriticalBatchFit(len(batches), note="steps keep halving with the batch: no critical batch within the measured range",
                                **common)
    fitted = s_min * (1 + b_crit / x)
    relative = (fitted - steps) / steps
    residuals = tuple({"global_batch": arm.batch, "steps": float(s), "fitted_steps": float(f), "relative_residual": float(r),
                       **({} if arm.recipe is None else {"recipe": arm.recipe}), **({"seeds": len(arm.seeds)} if arm.seeds else {})}
                      for arm, s, f, r in zip(chosen, steps, fitted, relative))
    fewest = min(len(arm.seeds) for arm in chosen)
    if not all(arm.seeds for arm in arms):
        uncertainty = {"interval_note": "per-seed steps not recorded"}
    elif fewest == 1:
        uncertainty = {"interval_note": "a point rests on a single seed: nothing to resample", "seeds": 1}
    else:
        uncertainty = {**_seed_uncertainty(arms, batches, resamples, seed, level), "seeds": fewest}
        try:
            profile = profile_interval(batches, [arm.seeds for arm in chosen], level)
        except ValueError as error:  # seeds that do not vary
            uncertainty["interval_note"] = f"no profile interval: {error}"
        else:
            # profile.b_crit is b_crit: _fit with the same weights, on the seeds' means (the rows' means up to round-off).
            uncertainty.update(b_crit_profile=profile.interval, profile_lack_of_fit=profile.lack_of_fit)
    return CriticalBatchFit(len(batches), s_min, b_crit, float(np.sqrt(np.mean(relative ** 2))), residuals, note=None,
                            **common, **uncertainty)


@dataclasses.dataclass(frozen=True)
class LrExponentFit:
    """``log lr = intercept + alpha * log B`` through the top-k trials of each global batch,
    with a 95% bootstrap interval ``[low, high]`` for ``alpha``; ``note`` says why an interval
    (or the fit) is missing.

    ``batches`` holds one record per global batch: ``global_batch``, ``ok_trials``,
    ``learning_rates`` (the top-k ok trials' learning rates, best first), ``learning_rate``
    (their geometric mean, the point fitted; None without ok trials), ``fitted_learning_rate``
    and ``relative_residual = fitted / measured - 1``."""

    alpha: float | None
    low: float | None
    high: float | None
    intercept: float | None
    top_k: int
    batches: tuple[dict[str, Any], ...]
    note: str | None = None

    @property
    def points(self) -> int:
        """Global batches with at least one ok trial: the points of the fit."""
        return sum(batch["learning_rate"] is not None for batch in self.batches)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, keyed as ``sweep_fit.json`` (``alpha``, ``alpha_95_low``, ``alpha_95_high``,
        ``points``) plus ``intercept``, ``top_k``, ``batches`` and ``note``."""
        return {"alpha": self.alpha, "alpha_95_low": self.low, "alpha_95_high": self.high, "points": self.points,
                "intercept": self.intercept, "top_k": self.top_k, "batches": [dict(batch) for batch in self.batches],
                "note": self.note}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LrExponentFit":
        """The fit ``to_dict`` wrote."""
        return cls(data["alpha"], data["alpha_95_low"], data["alpha_95_high"], data["intercept"], data["top_k"],
                   tuple(data["batches"]), data["note"])

    def describe(self) -> str:
        """``tuned lr ~ global_batch^0.25 (95% CI 0.02 to 0.51; top 3 ok trials at each of 3 batch sizes)``."""
        basis = f"top {self.top_k} ok trial{'s' if self.top_k > 1 else ''} at each of {self.points} batch sizes"
        if self.alpha is None:
            return f"tuned lr vs global batch: {self.note}"
        interval = f"95% CI {self.low:.2f} to {self.high:.2f}" if self.low is not None else self.note
        return f"tuned lr ~ global_batch^{self.alpha:.2f} ({interval}; {basis})"


def _top_k_batch(global_batch: int, trials: Sequence[Mapping[str, Any]], top_k: int) -> tuple[dict[str, Any], np.ndarray]:
    """The batch's record and the log learning rates of its ok trials, best validation accuracy
    first (the earlier trial first among equals)."""
    ok = [trial for trial in trials if is_ok(trial.get("status", OK))
          and math.isfinite(float(trial["validation_accuracy"])) and float(trial["learning_rate"]) > 0]
    ranked = sorted(ok, key=lambda trial: -float(trial["validation_accuracy"]))
    log_rates = np.log([float(trial["learning_rate"]) for trial in ranked])
    top = [float(trial["learning_rate"]) for trial in ranked[:top_k]]
    record = {"global_batch": int(global_batch), "ok_trials": len(ranked), "learning_rates": top,
              "learning_rate": float(np.exp(np.mean(np.log(top)))) if top else None}
    return record, log_rates


def _slopes(log_batches: np.ndarray, log_rates: np.ndarray) -> np.ndarray:
    """Least-squares slopes of each column of ``log_rates`` (points x fits) on ``log_batches``."""
    centred = log_batches - log_batches.mean()
    return centred @ (log_rates - log_rates.mean(axis=0)) / (centred @ centred)


def lr_exponent(trials_by_batch: Mapping[int, Sequence[Mapping[str, Any]]], top_k: int = 3, *,
                resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> LrExponentFit:
    """The exponent ``alpha`` of the tuned learning rate in the global batch (``lr ~ B^alpha``:
    1 is the linear rule of Goyal et al. 2017, 0.5 the sqrt rule of Krizhevsky 2014 / Hoffer et
    al. 2017), from the best region of a sweep rather than its single best trial.

    Per global batch ``B``, the ``top_k`` ok trials by validation accuracy give the point
    ``y_B = mean(log lr)`` (the geometric mean of their learning rates); ``alpha`` is the
    least-squares slope of ``y_B`` on ``log B``. The 95% interval is a percentile bootstrap over
    trials within each batch (Efron & Tibshirani 1993): resample a batch's ok trials with
    replacement, take the resample's top-k, refit; it shows how far ``alpha`` moves with which
    trials happen to score best. Fewer than ``MIN_FIT_BATCHES`` batch sizes give "not enough
    points" and no number: through two or three points a line always fits, and says nothing.

    Args:
      trials_by_batch: per global batch, its finished trials as mappings with
        ``learning_rate``, ``validation_accuracy`` and optionally ``status`` (only ``"ok"`` trials
        count; a missing status is ok). Pass complete trials: a pruned trial's accuracy is from
        the epoch it stopped at.
      top_k: trials per batch averaged into its point (fewer when a batch has fewer ok trials).
      resamples, seed: of the bootstrap.

    >>> trials = {b: [{"learning_rate": 0.1 * (b / 128) ** 0.5 * f, "validation_accuracy": a}
    ...               for f, a in ((1, 0.9), (2, 0.89), (0.5, 0.88), (30, 0.2))] for b in (128, 512, 2048, 8192)}
    >>> round(lr_exponent(trials).alpha, 6)
    0.5
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    ranked = [_top_k_batch(batch, trials, top_k) for batch, trials in sorted(trials_by_batch.items())]
    used = [(record, log_rates) for record, log_rates in ranked if record["learning_rate"] is not None]
    if len(used) < MIN_FIT_BATCHES:
        return LrExponentFit(None, None, None, None, top_k, tuple(record for record, _ in ranked),
                             note=f"not enough points (n = {_batch_sizes(len(used))} < {MIN_FIT_BATCHES})")
    log_batches = np.log([record["global_batch"] for record, _ in used])
    points = np.log([record["learning_rate"] for record, _ in used])
    alpha = float(_slopes(log_batches, points[:, None])[0])
    intercept = float(points.mean() - alpha * log_batches.mean())
    for record, _ in used:
        record["fitted_learning_rate"] = math.exp(intercept + alpha * math.log(record["global_batch"]))
        record["relative_residual"] = record["fitted_learning_rate"] / record["learning_rate"] - 1
    low = high = note = None
    if all(record["ok_trials"] == 1 for record, _ in used):
        note = "no interval (one ok trial per batch: nothing to resample)"
    else:
        rng = np.random.default_rng(seed)
        samples = np.stack([log_rates[np.sort(rng.integers(0, len(log_rates), (resamples, len(log_rates))), axis=1)[:, :top_k]]
                            .mean(axis=1) for _, log_rates in used])
        low, high = (float(q) for q in np.quantile(_slopes(log_batches, samples), [(1 - DEFAULT_LEVEL) / 2, (1 + DEFAULT_LEVEL) / 2]))
    return LrExponentFit(alpha, low, high, intercept, top_k, tuple(record for record, _ in ranked), note)
