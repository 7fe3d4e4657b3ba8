"""What LARS and LAMB share: per-variable masks for weight decay and for layer adaptation
(regexes on variable names, as Keras's ``exclude_from_weight_decay``), the trust ratio, and
a config that keeps both masks (Model Garden's LARS loses them when rebuilt from config)."""

from __future__ import annotations

import math
import re
from typing import Iterable

import tensorflow as tf

DEFAULT_EXCLUDE = (r"bias", r"batch_norm", r"gamma", r"beta")

# Arguments of tf.keras.optimizers.Optimizer.__init__ a subclass passes through, plus the
# flag Keras writes into every config.
_BASE_ARGUMENTS = {
    "name", "clipnorm", "clipvalue", "global_clipnorm", "use_ema", "ema_momentum",
    "ema_overwrite_frequency", "jit_compile", "is_legacy_optimizer",
}


def trust_ratio(weight_norm: tf.Tensor, denominator: tf.Tensor, eta: float = 1.0) -> tf.Tensor:
    """``eta * ||w|| / denominator``, and 1 where ``||w||`` or the denominator is 0
    (a freshly zeroed layer or a layer with no gradient keeps the global learning rate)."""
    usable = tf.logical_and(weight_norm > 0, denominator > 0)
    safe_denominator = tf.where(usable, denominator, tf.ones_like(denominator))
    return tf.where(usable, eta * weight_norm / safe_denominator, tf.ones_like(weight_norm))


def _check_number(owner: str, name: str, value, *, low: float, low_inclusive: bool, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a number, got {value!r}")
    too_low = value < low if low_inclusive else value <= low
    if too_low or (high is not None and value >= high):
        bound = f"{'>=' if low_inclusive else '>'} {low}" + (f" and < {high}" if high is not None else "")
        raise ValueError(f"{owner}: {name} must be {bound}, got {value!r}")
    return float(value)


def _patterns(owner: str, name: str, value: Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{owner}: {name} must be a list of regular expressions, got {value!r}")
    return list(value)


class LayerwiseAdaptiveOptimizer(tf.keras.optimizers.Optimizer):
    """Base of LARS and LAMB: validated hyper-parameters and the two variable masks.

    Weight decay is part of the layer-wise update (it enters the trust ratio), so the base
    class's decoupled decay (``variable -= lr * wd * variable`` before the update) is off.
    """

    def __init__(
        self,
        *,
        learning_rate,
        weight_decay: float,
        exclude_from_weight_decay: Iterable[str] | None,
        exclude_from_layer_adaptation: Iterable[str] | None,
        name: str,
        **kwargs,
    ):
        owner = type(self).__name__
        unknown = sorted(set(kwargs) - _BASE_ARGUMENTS)
        if unknown:
            raise TypeError(f"{owner} got an unknown argument {unknown[0]!r} (allowed: {', '.join(sorted(_BASE_ARGUMENTS - {'is_legacy_optimizer'}))})")
        super().__init__(name=name, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.weight_decay = _check_number(owner, "weight_decay", weight_decay, low=0, low_inclusive=True)
        decay_patterns = _patterns(owner, "exclude_from_weight_decay", exclude_from_weight_decay)
        self.exclude_from_weight_decay(var_names=decay_patterns)
        self.exclude_from_layer_adaptation_names = (
            decay_patterns
            if exclude_from_layer_adaptation is None
            else _patterns(owner, "exclude_from_layer_adaptation", exclude_from_layer_adaptation)
        )

    def _apply_weight_decay(self, variables):
        """Disabled: the subclasses fold weight decay into their layer-wise update."""

    def _decays(self, variable: tf.Variable) -> bool:
        return self.weight_decay > 0 and self._use_weight_decay(variable)

    def _adapts(self, variable: tf.Variable) -> bool:
        return not any(re.search(pattern, variable.name) for pattern in self.exclude_from_layer_adaptation_names)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "learning_rate": self._serialize_hyperparameter(self._learning_rate),
                "weight_decay": self.weight_decay,
                "exclude_from_weight_decay": list(self._exclude_from_weight_decay_names),
                "exclude_from_layer_adaptation": list(self.exclude_from_layer_adaptation_names),
            }
        )
        return config
