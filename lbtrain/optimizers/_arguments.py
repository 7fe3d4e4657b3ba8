"""Argument checks shared by LARS, LAMB and ``build_optimizer``: numbers (Python or NumPy
scalars) in range, the learning rate, and keyword names, where a name another implementation
uses for the same argument (Model Garden's ``eeta``, optax's ``b1``, ...) gets a "did you
mean" with lbtrain's name, and any other unknown name the list of accepted ones."""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from typing import Any, Callable, Iterable

from lbtrain._keras import BASE_OPTIMIZER_ARGUMENTS, CONFIG_ONLY_ARGUMENTS, ops

# The names other implementations give an argument of lbtrain's optimizers:
# their name -> (lbtrain's name, a note on where theirs comes from).
FOREIGN_NAMES: dict[str, tuple[str, str]] = {
    "eeta": ("eta", "Model Garden's LARS calls it eeta"),
    "trust_coefficient": ("eta", "optax.lars calls it trust_coefficient"),
    "trust_coeff": ("eta", "timm's Lars calls it trust_coeff"),
    "weight_decay_rate": ("weight_decay", "Model Garden's LARS and LAMB, and TFA's LAMB before 0.16, call it weight_decay_rate"),
    "b1": ("beta_1", "optax calls it b1"),
    "b2": ("beta_2", "optax calls it b2"),
    "eps": ("epsilon", "optax and timm call it eps"),
    "lr": ("learning_rate", "PyTorch optimizers call it lr"),
    "weight_decay_mask": ("exclude_from_weight_decay", "optax's weight_decay_mask marks the variables that decay; "
                          "lbtrain takes regexes of the names that do not"),
    "trust_ratio_mask": ("exclude_from_layer_adaptation", "optax's trust_ratio_mask marks the variables that adapt; "
                         "lbtrain takes regexes of the names that do not"),
}

# Names with no counterpart in lbtrain's optimizers, and what to use instead.
RETIRED_NAMES: dict[str, str] = {
    "decay": ("Keras's legacy optimizers decayed the rate as lr / (1 + decay * step); tf.keras 2.11+ and Keras 3 "
              "dropped it: pass a schedule as learning_rate, e.g. tf.keras.optimizers.schedules.InverseTimeDecay, "
              "or lbtrain.schedules.build_schedule"),
}

# What an optimizer passes on to Keras's base ``Optimizer.__init__`` (per Keras line), and
# what Keras writes into configs without being an argument (Keras 2's ``is_legacy_optimizer``).
BASE_ARGUMENTS = BASE_OPTIMIZER_ARGUMENTS
_CONFIG_ONLY = CONFIG_ONLY_ARGUMENTS


def accepted_arguments(factory: Callable[..., Any]) -> list[str]:
    """The keyword arguments ``factory`` (an optimizer class or a function building one)
    takes besides ``learning_rate``: its named parameters, plus ``BASE_ARGUMENTS`` when it
    passes ``**kwargs`` on to Keras's base optimizer."""
    parameters = inspect.signature(factory).parameters.values()
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        named |= set(BASE_ARGUMENTS)
    return sorted(named - {"self", "learning_rate"})


def _hint(name: str, accepted: list[str]) -> str:
    """`` (did you mean ...?)`` for another implementation's name of an argument (the learning
    rate, which every optimizer takes first, included) or a close spelling; for a retired Keras
    argument, what replaces it."""
    if name in RETIRED_NAMES:
        return f" ({RETIRED_NAMES[name]})"
    if name in FOREIGN_NAMES and FOREIGN_NAMES[name][0] in (*accepted, "learning_rate"):
        ours, note = FOREIGN_NAMES[name]
        return f" (did you mean {ours!r}? {note})"
    close = difflib.get_close_matches(name, accepted, n=2)
    return f" (did you mean {' or '.join(repr(match) for match in close)}?)" if close else ""


def check_arguments(owner: str, given: Iterable[str], accepted: Iterable[str]) -> None:
    """Raises ValueError naming every name of ``given`` not in ``accepted``, each with a "did
    you mean" when it is another implementation's name for an accepted argument
    (``FOREIGN_NAMES``) or close to one, and listing the accepted names."""
    accepted = sorted(accepted)
    unknown = sorted(set(given) - set(accepted) - set(_CONFIG_ONLY))
    if unknown:
        described = ", ".join(f"{name!r}{_hint(name, accepted)}" for name in unknown)
        plural = "s" if len(unknown) > 1 else ""
        raise ValueError(f"{owner}: unknown argument{plural} {described}; accepted: {', '.join(accepted)}")


def is_number(value: Any) -> bool:
    """A Python or NumPy real number (``np.float32(0.1)``, ``np.int64(3)``), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_number(owner: str, name: str, value: Any, *, low: float, low_inclusive: bool, high: float | None = None) -> float:
    """``float(value)`` if it is a finite number in ``[low, high)`` (``(low, high)`` unless
    ``low_inclusive``; no upper bound when ``high`` is None), else ValueError naming it."""
    if not is_number(value) or not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a number, got {value!r}")
    too_low = value < low if low_inclusive else value <= low
    if too_low or (high is not None and value >= high):
        bound = f"{'>=' if low_inclusive else '>'} {low}" + (f" and < {high}" if high is not None else "")
        raise ValueError(f"{owner}: {name} must be {bound}, got {value!r}")
    return float(value)


def check_learning_rate(owner: str, value: Any) -> Any:
    """A learning rate as Keras takes it: a positive finite number (returned as a float), or a
    ``LearningRateSchedule``, a callable or a tensor/variable (returned unchanged); anything
    else, or a number that is not > 0 (NaN included), is a ValueError naming the argument."""
    if callable(value) or ops.is_tensor(value):
        return value
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{owner}: learning_rate must be a positive number, a LearningRateSchedule or a callable, got {value!r}")
    return float(value)
