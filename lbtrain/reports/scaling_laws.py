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
and reports every point's residual; ``lr_exponent`` takes the best *region* of a sweep (top-k
trials per batch) and bootstraps over trials for its interval, so one lucky trial cannot move it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.optimize

from lbtrain.reports.statistics import DEFAULT_LEVEL, DEFAULT_RESAMPLES


def reachable_target(best_by_batch: Iterable[float], step: float = 0.005) -> float:
    """The highest target every batch size reaches: the smallest of the per-batch best values,
    rounded down to a multiple of ``step``."""
    values = [float(value) for value in best_by_batch]
    if not values:
        raise ValueError("no runs to choose a target from")
    return math.floor(min(values) / step + 1e-9) * step


MIN_FIT_BATCHES = 4


def _batch_sizes(count: int) -> str:
    return f"{count} batch size{'' if count == 1 else 's'}"


@dataclasses.dataclass(frozen=True)
class CriticalBatchFit:
    """``S(B) = s_min * (1 + b_crit / B)`` fitted to steps to target at ``batches`` global batch
    sizes, or, when ``note`` says why there is none, no fitted number at all (``s_min``,
    ``b_crit`` and ``relative_rms`` None, no residuals).

    ``residuals`` holds one record per measured point: ``global_batch``, ``steps`` (measured),
    ``fitted_steps`` and ``relative_residual = (fitted - measured) / measured``."""

    batches: int
    s_min: float | None = None
    b_crit: float | None = None
    relative_rms: float | None = None
    residuals: tuple[dict[str, float], ...] = ()
    noise_scale: float | None = None
    note: str | None = None
    min_batches: int = MIN_FIT_BATCHES

    @property
    def fitted(self) -> bool:
        return self.note is None

    @property
    def e_min(self) -> float | None:
        """The fewest samples to the target (batch -> 0): ``s_min * b_crit``."""
        return self.s_min * self.b_crit if self.fitted else None

    @property
    def noise_scale_ratio(self) -> float | None:
        """``B_simple / B_crit`` (McCandlish et al. predict about 1), when both are known."""
        if not self.fitted or self.noise_scale is None or not self.b_crit > 0:
            return None
        return self.noise_scale / self.b_crit

    def steps(self, global_batch: float) -> float:
        if not self.fitted:
            raise ValueError(f"no critical-batch fit: {self.note}")
        return self.s_min * (1 + self.b_crit / global_batch)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "residuals": [dict(point) for point in self.residuals], "e_min": self.e_min,
                "noise_scale_ratio": self.noise_scale_ratio}

    def describe(self) -> str:
        """One sentence: the fit's numbers and error, or ``not fitted — <note>``; then the
        measured noise scale when there is one."""
        if self.fitted:
            text = (f"critical batch B_crit = {self.b_crit:.0f}, fewest steps S_min = {self.s_min:.1f}, fewest samples "
                    f"E_min = {self.e_min:.0f}; relative rms error {100 * self.relative_rms:.1f}% over {self.batches} batch sizes")
        else:
            text = f"not fitted — {self.note}"
        if self.noise_scale is not None:
            ratio = self.noise_scale_ratio
            text += f"; measured noise scale B_simple {self.noise_scale:.0f}" + ("" if ratio is None else f" ({ratio:.2f} x B_crit)")
        return text


def critical_batch(summary: Iterable[Mapping[str, Any]], noise_scale: float | None = None) -> CriticalBatchFit:
    """Fits ``S = S_min (1 + B_crit / B)`` (McCandlish et al. 2018, eq. 2.11) to rows with
    ``global_batch`` and ``steps_to_target``; rows whose run never reached the target
    (``steps_to_target`` None) are left out.

    ``S`` is linear in ``1/B`` (``S = a + b / B`` with ``a = S_min``, ``b = S_min * B_crit``);
    the fit is non-negative least squares on relative residuals, as the steps span orders of
    magnitude. With fewer than ``MIN_FIT_BATCHES`` batch sizes the result is "not enough
    points" (two parameters through two or three points fit whatever they are); when the steps
    keep halving with the batch (``a`` -> 0) it is "no critical batch within the measured
    range". ``noise_scale``, the measured ``B_simple``, is carried along for comparison."""
    points = [(float(row["global_batch"]), float(row["steps_to_target"])) for row in summary
              if row.get("steps_to_target") is not None]
    distinct = len({batch for batch, _ in points})
    if distinct < MIN_FIT_BATCHES:
        return CriticalBatchFit(distinct, noise_scale=noise_scale,
                                note=f"not enough points (n = {_batch_sizes(distinct)} < {MIN_FIT_BATCHES})")
    batches, steps = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    design = np.stack([np.ones_like(batches), 1.0 / batches], axis=1) / steps[:, None]
    (s_min, slope), _ = scipy.optimize.nnls(design, np.ones_like(steps))
    if s_min <= 1e-6 * steps.min():
        return CriticalBatchFit(distinct, noise_scale=noise_scale,
                                note="steps keep halving with the batch: no critical batch within the measured range")
    b_crit = float(slope / s_min)
    if b_crit < 1e-6 * batches.min():
        b_crit = 0.0  # round-off of flat steps; a ratio B_simple / B_crit to it would be meaningless
    fitted = s_min * (1 + b_crit / batches)
    relative = (fitted - steps) / steps
    residuals = tuple({"global_batch": int(b), "steps": float(s), "fitted_steps": float(f), "relative_residual": float(r)}
                      for b, s, f, r in zip(batches, steps, fitted, relative))
    return CriticalBatchFit(distinct, float(s_min), b_crit, float(np.sqrt(np.mean(relative ** 2))), residuals, noise_scale)


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
    ok = [trial for trial in trials if trial.get("status", "ok") == "ok"
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
