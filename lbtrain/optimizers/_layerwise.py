"""What LARS and LAMB share: per-variable masks for weight decay and for layer adaptation
(regexes on variable names, as Keras's ``exclude_from_weight_decay``), the per-layer norm and
the trust ratio, and a config that keeps both masks (Model Garden's LARS loses them when rebuilt
from config)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from lbtrain._keras import (
    BACKEND,
    KERAS_3,
    OTHER_LINE_CONFIG,
    Optimizer,
    learning_rate_config_for_this_line,
    ops,
    tf,
    variable_name,
)
from lbtrain.optimizers._arguments import accepted_arguments, check_arguments, check_learning_rate, check_number

DEFAULT_EXCLUDE = (r"bias", r"batch_norm", r"gamma", r"beta")

logger = logging.getLogger(__name__)


def norm(tensor: Any) -> Any:
    """``||x||``, the Euclidean norm of all of ``tensor``'s elements, in its dtype.

    On TensorFlow (tf.keras 2, or Keras 3's TensorFlow backend) it is ``sqrt(2 * l2_loss(x))``:
    ``tf.nn.l2_loss`` (``sum(x**2) / 2``) is one reduction that reads the tensor once, and XLA
    compiles it (``tf.math.reduce_euclidean_norm`` reads once too, but XLA has no kernel for it).
    ``sqrt(sum(square(x)))`` (``tf.norm``) first writes the squares to a temporary as large as
    the variable, which an uncompiled step allocates and fills anew at every step: on the cnn's
    3136x256 dense kernel (2 CPU cores) that took 2.4 times as long, and LARS's two norms cost
    two thirds of Keras's whole momentum-SGD update. On another Keras 3 backend ``ops.norm``,
    which JAX's compiler fuses into one pass itself."""
    if BACKEND == "tensorflow":
        return tf.sqrt(2 * tf.nn.l2_loss(ops.convert_to_tensor(tensor)))
    return ops.norm(tensor)


def trust_ratio(weight_norm: Any, denominator: Any, eta: float = 1.0) -> Any:
    """``eta * ||w|| / denominator``, and 1 where ``||w||`` or the denominator is 0
    (a freshly zeroed layer or a layer with no gradient keeps the global learning rate).
    Tensors of any Keras 3 backend (``lbtrain._keras.ops``), or TensorFlow's on tf.keras 2."""
    usable = ops.logical_and(weight_norm > 0, denominator > 0)
    safe_denominator = ops.where(usable, denominator, ops.ones_like(denominator))
    return ops.where(usable, eta * weight_norm / safe_denominator, ops.ones_like(weight_norm))


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

    The masks are regexes (``re.search``) on ``lbtrain._keras.variable_name``: the innermost
    layer and the weight, ``dense_0/kernel``, the same on Keras 2 and Keras 3, with no model's
    or enclosing layer's name (Keras 3's ``path`` starts with a Sequential's name, so a model
    named ``beta_vae`` would match ``beta`` on every variable) and no ``:0``. A layer's own name
    is seen: ``batch_norm`` matches ``batch_normalization/gamma``, and a layer named
    ``debias`` matches ``bias``. Each variable's mask is decided once, when the optimizer is
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

    @classmethod
    def from_config(cls, config: dict, custom_objects=None):
        """The optimizer ``config`` describes, from either Keras line: a config written by
        ``get_config`` (or saved in a model) on tf.keras 2 loads on Keras 3 and the reverse.
        The keys only the other line's base optimizer takes (``lbtrain._keras.OTHER_LINE_CONFIG``:
        Keras 2's ``is_legacy_optimizer``, ``jit_compile``, ``decay``; Keras 3's
        ``loss_scale_factor``, ``gradient_accumulation_steps``) are dropped, and logged: at INFO
        when dropping them changes no update (Keras 2's marker and ``jit_compile``, or a value
        that is the default), at WARNING when it does (a ``decay`` or a gradient accumulation
        the loaded optimizer will not apply). Any other unknown key is still a ValueError. A
        Keras schedule tf.keras 2 wrote with ``"name": None`` gets its default name on Keras 3
        (``lbtrain._keras.learning_rate_config_for_this_line``), where it cannot run unnamed."""
        config = dict(config)
        dropped = {key: config.pop(key) for key in OTHER_LINE_CONFIG if key in config}
        if "learning_rate" in config:
            config["learning_rate"] = learning_rate_config_for_this_line(config["learning_rate"])
        if dropped:
            _log_dropped(cls.__name__, dropped)
        return super().from_config(config, custom_objects=custom_objects)

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


def _log_dropped(owner: str, dropped: dict) -> None:
    """Logs the other Keras line's config keys ``owner.from_config`` dropped, each with its value
    and why; WARNING if one of them would have changed the updates, else INFO.

    Every tf.keras 2 config carries ``is_legacy_optimizer`` and ``jit_compile``, so a file saved
    there logs on every load on Keras 3: INFO keeps that record for who asks for it (the lbtrain
    CLI at its normal verbosity, ``logging.basicConfig(level=logging.INFO)``) without a warning
    on every correct load. A dropped setting that did something (``decay=1e-4``,
    ``gradient_accumulation_steps=4``) changes the training the file describes, which the user
    must act on: WARNING, shown also at logging's default level and the CLI's ``quiet``."""
    this_line, other_line = ("Keras 3", "tf.keras 2") if KERAS_3 else ("tf.keras 2", "Keras 3")
    consequential = [f"{key}={value!r}" for key, value in dropped.items()
                     if OTHER_LINE_CONFIG[key][0] is not None and value not in OTHER_LINE_CONFIG[key][0]]
    described = "; ".join(f"{key}={value!r} ({OTHER_LINE_CONFIG[key][1]})" for key, value in dropped.items())
    logger.log(logging.WARNING if consequential else logging.INFO,
               "%s.from_config: dropped what %s's optimizers do not take from a %s config: %s%s", owner, this_line,
               other_line, described,
               f". The loaded optimizer does not apply {', '.join(consequential)}" if consequential else "")
