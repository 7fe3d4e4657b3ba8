"""Steps to a target and the critical batch size.

Shallue et al. 2018 ("Measuring the Effects of Data Parallelism on Neural Network Training")
measure, per batch size B, the training steps S(B) needed to reach a target validation
metric: with perfect scaling S halves when B doubles; past some B it stops falling.
McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", eq. 2.11) model the
trade-off as::

    S(B) = S_min * (1 + B_crit / B)        (E(B) = B * S(B) = E_min * (1 + B / B_crit))

with the critical batch ``B_crit = E_min / S_min``, predicted by the gradient noise scale
``B_simple = tr(Sigma) / |G|^2`` (``lbtrain.callbacks.GradientNoiseScale``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import scipy.optimize


def steps_to_target(history: Sequence[Mapping[str, Any]], steps_per_epoch: int, target: float,
                    metric: str = "val_accuracy") -> float | None:
    """The first step at which ``metric`` reaches ``target``, or None if it never does.

    The metric is known at the end of each epoch (step ``epoch * steps_per_epoch``); between two
    epoch ends it is interpolated linearly, and before the first one it is taken to cross at the
    first epoch's end (the measurement cannot say earlier)."""
    previous_step, previous_value = None, None
    for row in history:
        value = row.get(metric)
        if value is None or not math.isfinite(float(value)):
            continue
        step = float(row["epoch"]) * steps_per_epoch
        if value >= target:
            if previous_value is None:
                return step
            fraction = (target - previous_value) / (value - previous_value)
            return previous_step + fraction * (step - previous_step)
        previous_step, previous_value = step, float(value)
    return None


def reachable_target(best_by_batch: Iterable[float], step: float = 0.005) -> float:
    """The highest target every batch size reaches: the smallest of the per-batch best values,
    rounded down to a multiple of ``step``."""
    values = [float(value) for value in best_by_batch]
    if not values:
        raise ValueError("no runs to choose a target from")
    return math.floor(min(values) / step + 1e-9) * step


@dataclasses.dataclass(frozen=True)
class CriticalBatchFit:
    """``S(B) = s_min * (1 + b_crit / B)`` fitted to measured steps to target."""

    s_min: float
    b_crit: float
    points: int
    relative_rms: float
    noise_scale: float | None = None

    @property
    def e_min(self) -> float:
        """The fewest samples to the target (batch -> 0): ``s_min * b_crit``."""
        return self.s_min * self.b_crit

    def steps(self, global_batch: float) -> float:
        return self.s_min * (1 + self.b_crit / global_batch)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "e_min": self.e_min}

    def describe(self) -> str:
        text = (f"S(B) = {self.s_min:.1f} * (1 + {self.b_crit:.0f} / B): critical batch {self.b_crit:.0f}, "
                f"fewest steps {self.s_min:.1f}, fewest samples {self.e_min:.0f} (rms error {100 * self.relative_rms:.1f}%)")
        if self.noise_scale is not None:
            ratio = f" ({self.noise_scale / self.b_crit:.2f} x B_crit)" if self.b_crit > 0 else ""
            text += f"; measured noise scale B_simple {self.noise_scale:.0f}{ratio}"
        return text


def critical_batch(summary: Iterable[Mapping[str, Any]], noise_scale: float | None = None) -> CriticalBatchFit:
    """Fits ``S = S_min (1 + B_crit / B)`` to rows with ``global_batch`` and ``steps_to_target``.

    ``S`` is linear in ``1/B`` (``S = a + b / B`` with ``a = S_min``, ``b = S_min * B_crit``);
    the fit is non-negative least squares on relative residuals, as the steps span orders of
    magnitude. Rows whose run never reached the target (``steps_to_target`` None) are left out.
    ``noise_scale``, the measured ``B_simple``, is carried along for comparison."""
    points = [(float(row["global_batch"]), float(row["steps_to_target"])) for row in summary
              if row.get("steps_to_target") is not None]
    if len({batch for batch, _ in points}) < 2:
        raise ValueError("critical_batch needs steps to target at two or more global batch sizes")
    batches, steps = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    design = np.stack([np.ones_like(batches), 1.0 / batches], axis=1) / steps[:, None]
    (s_min, slope), _ = scipy.optimize.nnls(design, np.ones_like(steps))
    if s_min <= 1e-6 * steps.min():
        raise ValueError("steps to target keep halving with the batch: no critical batch within the measured range")
    fitted = s_min + slope / batches
    relative_rms = float(np.sqrt(np.mean(((fitted - steps) / steps) ** 2)))
    return CriticalBatchFit(float(s_min), float(slope / s_min), len(points), relative_rms, noise_scale)
