"""LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017, "Large Batch Training
of Convolutional Networks", arXiv:1708.03888, Algorithm 1)."""

from __future__ import annotations

from typing import Iterable

from lbtrain._keras import ops
from lbtrain._registration import keras_serializable
from lbtrain.optimizers._arguments import check_number
from lbtrain.optimizers._layerwise import DEFAULT_EXCLUDE, LayerwiseAdaptiveOptimizer, norm, trust_ratio

# What the classic-momentum trust ratio divides ``eta * ||w||`` by (plus epsilon): "paper",
# ||g|| + wd * ||w|| (You et al. 2017, Algorithm 1; timm's Lars), or "decayed_gradient",
# ||g + wd * w|| (TF Model Garden's LARS, optax.lars).
TRUST_RATIO_DENOMINATORS = ("paper", "decayed_gradient")


@keras_serializable()
class LARS(LayerwiseAdaptiveOptimizer):
    """Momentum SGD whose step is scaled per variable by a trust ratio.

    Per variable ``w`` with gradient ``g``, weight decay ``wd`` (0 where the variable's name
    matches ``exclude_from_weight_decay``) and learning rate ``lr``::

        g'    = g + wd * w
        trust = eta * ||w|| / (||g|| + wd * ||w|| + epsilon)     (Algorithm 1, eq. 6)

    with ``trust = 1`` where a norm is 0 or the name matches ``exclude_from_layer_adaptation``.
    That denominator is the paper's (``trust_ratio_denominator="paper"``, the default).
    TF Model Garden's LARS and ``optax.lars`` divide by the norm of the decayed gradient
    instead (``trust_ratio_denominator="decayed_gradient"``)::

        trust = eta * ||w|| / (||g + wd * w|| + epsilon)

    The two agree without weight decay. With it the paper's denominator is never the smaller
    (triangle inequality), so its trust ratio is at most the other: equal when ``g`` points
    along ``w``, far smaller when the gradient cancels the decay (``g`` near ``-wd * w``, where
    ``||g + wd * w||`` nears 0 and the decayed-gradient ratio grows without bound).

    Classic momentum (``classic_momentum=True``, as the paper)::

        v = m * v + lr * trust * g'
        w = w - v                                  (nesterov: w = w - (m * v + lr * trust * g'))

    Non-classic momentum (the LR and trust ratio applied after the momentum, as in TF's
    Model Garden)::

        v = m * v + g'
        u = v                                      (nesterov: u = m * v + g')
        trust' = eta * ||w|| / (||u|| + epsilon)   (1 where a norm is 0 or excluded)
        w = w - lr * trust' * u

    Args:
      learning_rate: a float or any ``LearningRateSchedule`` (the global LR of the paper).
      momentum: ``m`` in [0, 1).
      weight_decay: ``wd`` >= 0, coupled into the gradient as in the paper.
      eta: the trust coefficient (> 0).
      epsilon: added to the trust ratio's denominator (>= 0).
      nesterov: Nesterov momentum.
      classic_momentum: see above.
      trust_ratio_denominator: ``"paper"`` or ``"decayed_gradient"`` (see above); classic
        momentum only, since non-classic momentum divides by ``||u||``.
      exclude_from_weight_decay: regexes on variable names that get no weight decay;
        by default biases and batch-norm parameters.
      exclude_from_layer_adaptation: regexes on variable names whose trust ratio is 1;
        None means the same list as ``exclude_from_weight_decay``.
      **kwargs: the base optimizer's arguments (``clipnorm``, ``global_clipnorm``, ...).

    Example::

        model.compile(optimizer=LARS(build_schedule(...), momentum=0.9, weight_decay=5e-4), ...)
    """

    def __init__(
        self,
        learning_rate=0.1,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        eta: float = 1e-3,
        epsilon: float = 0.0,
        nesterov: bool = False,
        classic_momentum: bool = True,
        trust_ratio_denominator: str = "paper",
        exclude_from_weight_decay: Iterable[str] | None = DEFAULT_EXCLUDE,
        exclude_from_layer_adaptation: Iterable[str] | None = None,
        name: str = "LARS",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, exclude_from_weight_decay=exclude_from_weight_decay,
                         exclude_from_layer_adaptation=exclude_from_layer_adaptation, name=name, **kwargs)
        self.momentum = check_number("LARS", "momentum", momentum, low=0, low_inclusive=True, high=1)
        self.eta = check_number("LARS", "eta", eta, low=0, low_inclusive=False)
        self.epsilon = check_number("LARS", "epsilon", epsilon, low=0, low_inclusive=True)
        self.nesterov = bool(nesterov)
        self.classic_momentum = bool(classic_momentum)
        if trust_ratio_denominator not in TRUST_RATIO_DENOMINATORS:
            allowed = " or ".join(repr(value) for value in TRUST_RATIO_DENOMINATORS)
            raise ValueError(f"LARS: trust_ratio_denominator must be {allowed}, got {trust_ratio_denominator!r}")
        if not self.classic_momentum and trust_ratio_denominator != "paper":
            raise ValueError("LARS: trust_ratio_denominator applies to classic momentum; with classic_momentum=False "
                             "the trust ratio divides by the norm of the momentum update")
        self.trust_ratio_denominator = trust_ratio_denominator

    def build_slots(self, var_list) -> None:
        super().build_slots(var_list)
        self.momentums = [self.add_variable_from_reference(variable, "m") for variable in var_list]

    def apply_update(self, gradient, variable, learning_rate) -> None:
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        momentum = ops.convert_to_tensor(self.momentum, dtype)
        velocity = self.momentums[self.slot_index(variable)]
        gradient = ops.cast(ops.dense(gradient), dtype)
        weight_decay = self.weight_decay if self.decays(variable) else 0.0
        decayed = gradient + weight_decay * variable if weight_decay else gradient
        adapts = self.adapts(variable)

        if self.classic_momentum:
            step_size = lr
            if adapts:
                weight_norm = norm(variable)
                if self.trust_ratio_denominator == "paper":
                    gradient_norm = norm(gradient) + weight_decay * weight_norm
                else:
                    gradient_norm = norm(decayed)
                step_size = lr * trust_ratio(weight_norm, gradient_norm + self.epsilon, self.eta)
            self.assign(velocity, momentum * velocity + step_size * decayed)
            update = momentum * velocity + step_size * decayed if self.nesterov else velocity
            self.assign_sub(variable, update)
        else:
            self.assign(velocity, momentum * velocity + decayed)
            update = momentum * velocity + decayed if self.nesterov else velocity
            step_size = lr
            if adapts:
                step_size = lr * trust_ratio(norm(variable), norm(update) + self.epsilon, self.eta)
            self.assign_sub(variable, step_size * update)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "eta": self.eta,
                "epsilon": self.epsilon,
                "nesterov": self.nesterov,
                "classic_momentum": self.classic_momentum,
                "trust_ratio_denominator": self.trust_ratio_denominator,
            }
        )
        return config
