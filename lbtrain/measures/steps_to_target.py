"""Steps to a target (Shallue et al. 2018, "Measuring the Effects of Data Parallelism on Neural
Network Training"): the training steps a run needed to reach a target validation metric, from
its per-epoch history.

The metric is validation accuracy (``val_accuracy``, the held-out split of the training set) by
default, and the reports count to it: the recipe chosen per batch from these steps
(``lbtrain.reports.scaling_laws.critical_batch``) is chosen on validation, never on test
accuracy. A run that never reaches the target has no count (None); what a fit does with such a
seed is ``lbtrain.reports.scaling_laws.SEED_RULE``."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


def steps_to_target(history: Sequence[Mapping[str, Any]], steps_per_epoch: int, target: float,
                    metric: str = "val_accuracy") -> float | None:
    """The first step at which ``metric`` reaches ``target``, or None if it never does.

    The metric is known at the end of each epoch (step ``epoch * steps_per_epoch``, or the row's
    own ``step`` where it has one: an elastic world's epochs have as many steps as the world size
    of the moment gives); between two epoch ends it is interpolated linearly, and before the first
    one it is taken to cross at the first epoch's end (the measurement cannot say earlier)."""
    previous_step, previous_value = None, None
    for row in history:
        value = row.get(metric)
        if value is None or not math.isfinite(float(value)):
            continue
        step = float(row["step"]) if row.get("step") is not None else float(row["epoch"]) * steps_per_epoch
        if value >= target:
            if previous_value is None:
                return step
            fraction = (target - previous_value) / (value - previous_value)
            return previous_step + fraction * (step - previous_step)
        previous_step, previous_value = step, float(value)
    return None
