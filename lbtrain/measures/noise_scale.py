"""The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training",
app. A.1): one estimator, used by the train step (``lbtrain.train_step.NoiseScaleTracker``, in
the graph) and the callback (``lbtrain.callbacks.GradientNoiseScale``, on fresh batches) alike.

``B_simple = tr(Sigma) / |G|^2`` comes from gradients at two batch sizes. Since
``E|g_B|^2 = |G|^2 + tr(Sigma) / B``, squared norms at ``B_small`` and ``B_big`` give::

    |G|^2 ~ (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
    S     ~ (|g_small|^2 - |g_big|^2) / (1 / B_small - 1 / B_big)

both unbiased (``two_batch_estimates``); each is averaged over steps and ``B_simple`` is the
ratio of the averages (``simple_noise_scale``). No TensorFlow here: the formulas take floats or
tensors alike.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def two_batch_estimates(small_sq: Any, big_sq: Any, small_batch: float, big_batch: float) -> tuple[Any, Any]:
    """``(S, |G|^2)``: the unbiased estimates of ``tr(Sigma)`` and ``|G|^2`` from the squared
    gradient norms ``small_sq`` at ``small_batch`` samples and ``big_sq`` at ``big_batch``
    (floats, NumPy values or tensors).

    >>> two_batch_estimates(3.0, 1.5, 2, 4)
    (6.0, 0.0)
    """
    b_small, b_big = float(small_batch), float(big_batch)
    norm_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return trace, norm_sq


UNDETERMINED_NORM = "|G|^2 estimate <= 0"
UNDETERMINED_TRACE = "tr(Sigma) estimate < 0"


def simple_noise_scale(trace: float, norm_sq: float) -> tuple[float, str | None]:
    """``(B_simple, None)`` with ``B_simple = tr(Sigma) / |G|^2`` (McCandlish et al. 2018,
    eq. 2.9), or ``(nan, reason)`` when the estimates cannot give one.

    The unbiased estimate of ``|G|^2`` (app. A.1) is a difference of two squared norms: where
    the true gradient is small against its noise it is near 0 or negative, and the ratio is
    meaningless (huge, infinite or negative), not large. A negative ``tr(Sigma)`` estimate is
    no noise scale either. Both are *undetermined*, never a number in a table.

    >>> simple_noise_scale(120.0, 2.0)
    (60.0, None)
    >>> simple_noise_scale(120.0, -0.5)
    (nan, '|G|^2 estimate <= 0')
    """
    if not norm_sq > 0:
        return math.nan, UNDETERMINED_NORM
    if trace < 0:
        return math.nan, UNDETERMINED_TRACE
    return trace / norm_sq, None


DEFAULT_DECAY = 0.99
DEFAULT_PIECES = 2


@dataclasses.dataclass(frozen=True)
class NoiseScaleSettings:
    """How a train step measures the noise scale: the moving averages' ``decay`` per step and,
    in a simulated world, how many ``pieces`` the global batch is split into (None: 2, or the
    smallest number of whole workers' pieces above 1)."""

    decay: float = DEFAULT_DECAY
    pieces: int | None = None

    def __post_init__(self):
        if not 0 <= self.decay < 1:
            raise ValueError(f"noise scale decay must be in [0, 1), got {self.decay!r}")
        if self.pieces is not None and (isinstance(self.pieces, bool) or not isinstance(self.pieces, int) or self.pieces < 2):
            raise ValueError(f"noise scale pieces must be an integer >= 2, got {self.pieces!r}")


def measurement_pieces(world_size: int, per_worker_batch: int, requested: int | None) -> int | None:
    """How many pieces a simulated world computes its step in to measure the noise scale: the
    requested number (it must divide the world size, or with one worker the batch), else 2 if
    that divides, else the smallest divisor above 1; None when no split exists (one worker
    with a batch of one)."""
    total = world_size if world_size > 1 else per_worker_batch
    if requested is not None:
        if total % requested:
            unit = "world size" if world_size > 1 else "per-worker batch"
            raise ValueError(f"analysis.noise_scale_pieces ({requested}) must divide the {unit} ({total})")
        return requested
    return next((pieces for pieces in (DEFAULT_PIECES, *range(3, total + 1)) if total % pieces == 0), None)
