"""LAMB: layer-wise adaptive moments (You et al. 2019, "Large Batch Optimization for Deep
Learning: Training BERT in 76 minutes", arXiv:1904.00962, Algorithm 2)."""

from __future__ import annotations

from typing import Iterable

from lbtrain._keras import ops
from lbtrain._registration import keras_serializable
from lbtrain.optimizers._arguments import check_number
from lbtrain.optimizers._layerwise import DEFAULT_EXCLUDE, LayerwiseAdaptiveOptimizer, norm, trust_ratio


@keras_serializable()
class LAMB(LayerwiseAdaptiveOptimizer):
    """Adam moments, decoupled weight decay and a per-variable trust ratio.

    Per variable ``w`` with gradient ``g`` at step ``t`` (1-based)::

        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g**2
        r = (m / (1 - beta_1**t)) / (sqrt(v / (1 - beta_2**t)) + epsilon)
        u = r + wd * w                      (wd = 0 where excluded from weight decay)
        trust = ||w|| / ||u||               (1 where a norm is 0 or excluded from adaptation)
        w = w - lr * trust * u

    Args:
      learning_rate: a float or any ``LearningRateSchedule``.
      beta_1, beta_2: moment decay rates in [0, 1).
      epsilon: added to the denominator of ``r`` (> 0).
      weight_decay: ``wd`` >= 0. The default 0.01 is timm's and BERT's (the model LAMB was
        made for); TFA's and Model Garden's LAMB and ``optax.lamb`` default to 0 (no decay).
      exclude_from_weight_decay: regexes on variable names with no weight decay; by default
        biases and normalization parameters.
      exclude_from_layer_adaptation: regexes on variable names whose trust ratio is 1 (their
        update is plain Adam with decay); None means the same list as weight decay.
      **kwargs: the base optimizer's arguments.
    """

    def __init__(
        self,
        learning_rate=1e-3,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        weight_decay: float = 0.01,
        exclude_from_weight_decay: Iterable[str] | None = DEFAULT_EXCLUDE,
        exclude_from_layer_adaptation: Iterable[str] | None = None,
        name: str = "LAMB",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, exclude_from_weight_decay=exclude_from_weight_decay,
                         exclude_from_layer_adaptation=exclude_from_layer_adaptation, name=name, **kwargs)
        self.beta_1 = check_number("LAMB", "beta_1", beta_1, low=0, low_inclusive=True, high=1)
        self.beta_2 = check_number("LAMB", "beta_2", beta_2, low=0, low_inclusive=True, high=1)
        self.epsilon = check_number("LAMB", "epsilon", epsilon, low=0, low_inclusive=False)

    def build_slots(self, var_list) -> None:
        super().build_slots(var_list)
        self._first_moments = [self.add_variable_from_reference(variable, "m") for variable in var_list]
        self._second_moments = [self.add_variable_from_reference(variable, "v") for variable in var_list]

    def apply_update(self, gradient, variable, learning_rate) -> None:
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        step = ops.cast(self.updates_applied + 1, dtype)
        index = self.slot_index(variable)
        first, second = self._first_moments[index], self._second_moments[index]
        gradient = ops.cast(ops.dense(gradient), dtype)

        # m = beta_1 * m + (1 - beta_1) * g as m += (1 - beta_1) * (g - m), and v alike: updated in
        # place, one temporary fewer per moment.
        self.assign_add(first, (gradient - first) * (1 - self.beta_1))
        self.assign_add(second, (ops.square(gradient) - second) * (1 - self.beta_2))
        # r = m_hat / (sqrt(v_hat) + epsilon) with the bias corrections folded into two scalars, as
        # Keras's Adam does, so r is m * alpha / (sqrt(v) + epsilon'): with c1 = 1 - beta_1**t and
        # c2 = sqrt(1 - beta_2**t), m_hat = m / c1, sqrt(v_hat) = sqrt(v) / c2, hence
        # r = m * (c2 / c1) / (sqrt(v) + epsilon * c2).
        first_correction = 1 - ops.power(ops.convert_to_tensor(self.beta_1, dtype), step)
        second_correction = ops.sqrt(1 - ops.power(ops.convert_to_tensor(self.beta_2, dtype), step))
        update = first * (second_correction / first_correction) / (ops.sqrt(second) + self.epsilon * second_correction)
        if self.decays(variable):
            update += self.weight_decay * variable
        step_size = lr
        if self.adapts(variable):
            step_size = lr * trust_ratio(norm(variable), norm(update))
        self.assign_sub(variable, step_size * update)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon})
        return config
