"""The optimizers a run config can name, each a factory ``(learning_rate, **params)``."""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from lbtrain.optimizers.lamb import LAMB
from lbtrain.optimizers.lars import LARS


def _sgd(learning_rate, **params) -> tf.keras.optimizers.Optimizer:
    return tf.keras.optimizers.SGD(learning_rate, **params)


def _momentum(learning_rate, momentum: float = 0.9, **params) -> tf.keras.optimizers.Optimizer:
    return tf.keras.optimizers.SGD(learning_rate, momentum=momentum, **params)


def _adam(learning_rate, **params) -> tf.keras.optimizers.Optimizer:
    return tf.keras.optimizers.Adam(learning_rate, **params)


OPTIMIZERS: dict[str, Callable[..., tf.keras.optimizers.Optimizer]] = {
    "sgd": _sgd,
    "momentum": _momentum,
    "adam": _adam,
    "lars": LARS,
    "lamb": LAMB,
}


def build_optimizer(name: str, learning_rate: Any, **params) -> tf.keras.optimizers.Optimizer:
    """``OPTIMIZERS[name](learning_rate, **params)``: ``sgd`` is plain SGD, ``momentum`` SGD with
    momentum 0.9 unless ``params`` say otherwise, ``adam``, ``lars``, ``lamb`` (lbtrain's own).

    Raises ValueError naming the optimizer for an unknown name or a bad parameter."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r} (allowed: {', '.join(OPTIMIZERS)})")
    try:
        return OPTIMIZERS[name](learning_rate, **params)
    except TypeError as error:
        raise ValueError(f"optimizer {name!r}: bad parameter ({error})") from None
