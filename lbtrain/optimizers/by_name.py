"""The optimizers a run config can name, each a factory ``(learning_rate, **params)``."""

from __future__ import annotations

import functools
from typing import Any, Callable

from lbtrain._keras import keras
from lbtrain.optimizers._arguments import accepted_arguments, check_arguments, check_learning_rate, check_number
from lbtrain.optimizers.lamb import LAMB
from lbtrain.optimizers.lars import LARS

OPTIMIZERS: dict[str, Callable[..., keras.optimizers.Optimizer]] = {
    "sgd": keras.optimizers.SGD,
    "momentum": functools.partial(keras.optimizers.SGD, momentum=0.9),
    "adam": keras.optimizers.Adam,
    "lars": LARS,
    "lamb": LAMB,
}


# What Keras's own optimizers take silently but cannot train with: (low, low inclusive, high) of
# each number (high exclusive; None: unbounded), and the switches that must be true or false.
SHARED_NUMBERS = {"weight_decay": (0, True, None), "beta_1": (0, True, 1), "beta_2": (0, True, 1), "epsilon": (0, True, None),
                  "clipnorm": (0, False, None), "clipvalue": (0, False, None), "global_clipnorm": (0, False, None)}
SHARED_SWITCHES = ("nesterov", "amsgrad", "use_ema")


def _check_shared_parameters(owner: str, params: dict[str, Any]) -> None:
    """ValueError naming a parameter of ``SHARED_NUMBERS`` out of its range (a negative weight
    decay, a beta of 2, a clipnorm of -1) or a switch of ``SHARED_SWITCHES`` that is no boolean."""
    for key, (low, inclusive, high) in SHARED_NUMBERS.items():
        if params.get(key) is not None:
            check_number(owner, key, params[key], low=low, low_inclusive=inclusive, high=high)
    for key in SHARED_SWITCHES:
        if key in params and not isinstance(params[key], bool):
            raise ValueError(f"{owner}: {key} must be true or false, got {params[key]!r}")


def build_optimizer(name: str, learning_rate: Any, /, **params) -> keras.optimizers.Optimizer:
    """``OPTIMIZERS[name](learning_rate, **params)``: ``sgd`` is plain SGD, ``momentum`` SGD with
    momentum 0.9 unless ``params`` say otherwise, ``adam``, ``lars``, ``lamb`` (lbtrain's own).
    ``name`` and ``learning_rate`` are positional-only, so ``params`` may hold the optimizer's
    own ``name``.

    Raises ValueError naming the optimizer for an unknown name, a learning rate that is not a
    positive number, a schedule or a callable, or a bad parameter; an unknown
    parameter's message lists the accepted ones, with a "did you mean" for near misses and
    for other libraries' names (``eeta``, ``weight_decay_rate``, ``b1``, ...)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r} (allowed: {', '.join(OPTIMIZERS)})")
    owner = f"optimizer {name!r}"
    if "learning_rate" in params:
        raise ValueError(f"{owner}: learning_rate is build_optimizer's second argument, not a parameter "
                         "(a run's comes from its lr section)")
    check_arguments(owner, params, accepted_arguments(OPTIMIZERS[name]))
    learning_rate = check_learning_rate(owner, learning_rate)
    _check_shared_parameters(owner, params)
    try:
        return OPTIMIZERS[name](learning_rate, **params)
    except TypeError as error:
        raise ValueError(f"{owner}: bad parameter ({error})") from None
