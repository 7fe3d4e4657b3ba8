"""What LARS and LAMB share: per-variable masks for weight decay and for layer adaptation
(regexes on variable names, as Keras's ``exclude_from_weight_decay``), the trust ratio, and
a config that keeps both masks (Model Garden's LARS loses them when rebuilt from config)."""

from __future__ import annotations

import re
from collections.abc import Iterable

import tensorflow as tf

from lbtrain._keras import Optimizer, variable_name
from lbtrain.optimizers._arguments import accepted_arguments, check_arguments, check_learning_rate, check_number

DEFAULT_EXCLUDE = (r"bias", r"batch_norm", r"gamma", r"beta")


def trust_ratio(weight_norm: tf.Tensor, denominator: tf.Tensor, eta: float = 1.0) -> tf.Tensor:
    """``eta * ||w|| / denominator``, and 1 where ``||w||`` or the denominator is 0
    (a freshly zeroed layer or a layer with no gradient keeps the global learning rate)."""
    usable = tf.logical_and(weight_norm > 0, denominator > 0)
    safe_denominator = tf.where(usable, denominator, tf.ones_like(denominator))
    return tf.where(usable, eta * weight_norm / safe_denominator, tf.ones_like(weight_norm))


def _matches(name: str, patterns: list[str]) -> bool:
    return any(re.search(pattern, name) for pattern in patterns)


def _patterns(owner: str, name: str, value: Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{owner}: {name} must be a list of regular expressions, got {value!r}")
    return list(value)


class LayerwiseAdaptiveOptimizer(Optimizer):
    """Base of LARS and LAMB: validated hyper-parameters and the two variable masks.

    Every numeric argument takes a Python or NumPy number; the learning rate a positive
    number, a ``LearningRateSchedule`` or a callable. A bad value or an unknown keyword is a
    ValueError naming the argument (for an unknown keyword: "did you mean", and the accepted
    names).

    The masks are regexes on ``lbtrain._keras.variable_name``: the layer and the weight
    (``dense_0/kernel`` on Keras 3, ``dense_0/kernel:0`` on Keras 2), so ``batch_norm`` or a
    layer's name match on both. Each variable's mask is decided once, when the optimizer is
    built; variables passed to the base class's ``exclude_from_weight_decay(var_list=...)``
    before that get no decay either.

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
        # The optimizer itself (LARS, LAMB), also under a subclass such as the one
        # hvd.DistributedOptimizer makes, whose __init__ takes only **kwargs.
        optimizer_class = next(cls for cls in type(self).__mro__ if LayerwiseAdaptiveOptimizer in cls.__bases__)
        owner = optimizer_class.__name__
        check_arguments(owner, kwargs, accepted_arguments(optimizer_class))
        learning_rate = check_learning_rate(owner, learning_rate)
        super().__init__(learning_rate, name=name, **kwargs)
        self.weight_decay = check_number(owner, "weight_decay", weight_decay, low=0, low_inclusive=True)
        self.exclude_from_weight_decay_names = _patterns(owner, "exclude_from_weight_decay", exclude_from_weight_decay)
        self.exclude_from_layer_adaptation_names = (
            list(self.exclude_from_weight_decay_names)
            if exclude_from_layer_adaptation is None
            else _patterns(owner, "exclude_from_layer_adaptation", exclude_from_layer_adaptation)
        )

    def _apply_weight_decay(self, variables):
        """Disabled: the subclasses fold weight decay into their layer-wise update."""

    def build_slots(self, var_list) -> None:
        names = [variable_name(variable) for variable in var_list]
        self._decays = [
            self.weight_decay > 0 and self._use_weight_decay(variable) and not _matches(name, self.exclude_from_weight_decay_names)
            for variable, name in zip(var_list, names)
        ]
        self._adapts = [not _matches(name, self.exclude_from_layer_adaptation_names) for name in names]

    def decays(self, variable) -> bool:
        """Whether ``variable`` (one the optimizer was built with) gets weight decay."""
        return self._decays[self.slot_index(variable)]

    def adapts(self, variable) -> bool:
        """Whether ``variable``'s step is scaled by its trust ratio."""
        return self._adapts[self.slot_index(variable)]

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "weight_decay": self.weight_decay,
                "exclude_from_weight_decay": list(self.exclude_from_weight_decay_names),
                "exclude_from_layer_adaptation": list(self.exclude_from_layer_adaptation_names),
            }
        )
        return config
