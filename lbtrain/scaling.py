"""Learning-rate scaling rules for large batches.

When the global batch grows from ``base_batch`` to ``global_batch`` the learning rate is
scaled by ``(global_batch / base_batch) ** alpha``:

- ``linear`` (alpha = 1): Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet
  in 1 Hour" — keeps the expected update per epoch the same for SGD.
- ``sqrt`` (alpha = 0.5): Krizhevsky 2014, "One weird trick..."; Hoffer et al. 2017 — keeps the
  variance of the update per sample the same.
- ``none`` (alpha = 0): the unscaled baseline.
- any float alpha, e.g. a tuned exponent.
"""

from __future__ import annotations

import math
import reprlib

RULE_EXPONENTS: dict[str, float] = {"linear": 1.0, "sqrt": 0.5, "none": 0.0}


def _require_positive(name: str, value, *, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0 or not math.isfinite(value):
        what = "a positive integer" if integer else "a positive number"
        raise ValueError(f"{name} must be {what}, got {value!r}")


# Linear is 1; an exponent above 2 has no use, and (B / b) ** alpha must stay a float.
MAX_EXPONENT = 2.0


def scaling_exponent(rule: str | float) -> float:
    """The exponent alpha of ``rule``: a name of ``RULE_EXPONENTS`` or a float in [0, 2].

    >>> scaling_exponent("sqrt"), scaling_exponent(0.75)
    (0.5, 0.75)
    >>> scaling_exponent("cubic")
    Traceback (most recent call last):
      ...
    ValueError: rule must be one of 'linear', 'sqrt', 'none' or a float exponent, got 'cubic'
    """
    if isinstance(rule, str):
        if rule in RULE_EXPONENTS:
            return RULE_EXPONENTS[rule]
    elif isinstance(rule, (int, float)) and not isinstance(rule, bool) and math.isfinite(rule):
        if not 0 <= rule <= MAX_EXPONENT:
            raise ValueError(f"rule as a float exponent must be in [0, {MAX_EXPONENT:g}], got {rule:.6g}")
        return float(rule)
    allowed = ", ".join(repr(name) for name in RULE_EXPONENTS)
    raise ValueError(f"rule must be one of {allowed} or a float exponent, got {reprlib.repr(rule)}")


def scaling_factor(base_batch: int, global_batch: int, rule: str | float) -> float:
    """``k = (global_batch / base_batch) ** alpha``: how much the learning rate grows.

    >>> scaling_factor(256, 8192, "linear"), scaling_factor(256, 1024, "sqrt"), scaling_factor(256, 8192, "none")
    (32.0, 2.0, 1.0)
    """
    _require_positive("base_batch", base_batch, integer=True)
    _require_positive("global_batch", global_batch, integer=True)
    return (global_batch / base_batch) ** scaling_exponent(rule)


def scale_learning_rate(base_lr: float, base_batch: int, global_batch: int, rule: str | float) -> float:
    """``lr = base_lr * (global_batch / base_batch) ** alpha``.

    >>> scale_learning_rate(0.1, 256, 8192, "linear")
    3.2
    >>> round(scale_learning_rate(0.1, 256, 8192, "sqrt"), 4)
    0.5657
    """
    _require_positive("base_lr", base_lr)
    return base_lr * scaling_factor(base_batch, global_batch, rule)


def global_batch_size(world_size: int, per_worker_batch: int) -> int:
    """Samples per synchronous step: ``world_size * per_worker_batch``.

    >>> global_batch_size(world_size=8, per_worker_batch=32)
    256
    >>> global_batch_size(world_size=8, per_worker_batch=0)
    Traceback (most recent call last):
      ...
    ValueError: per_worker_batch must be a positive integer, got 0
    """
    _require_positive("world_size", world_size, integer=True)
    _require_positive("per_worker_batch", per_worker_batch, integer=True)
    return world_size * per_worker_batch
