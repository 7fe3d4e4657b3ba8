"""Steps to a target (Shallue et al. 2018, "Measuring the Effects of Data Parallelism on Neural
Network Training"): the training steps a run needed to reach a target validation metric, from
its per-epoch history, or from the validation points it measured every N steps
(``training.validation_every_steps``) when it has them.

The metric is validation accuracy (``val_accuracy``, the held-out split of the training set) by
default, and the reports count to it: the recipe chosen per batch from these steps
(``lbtrain.reports.scaling_laws.critical_batch``) is chosen on validation, never on test
accuracy. A run that never reaches the target has no count (None); what a fit does with such a
seed is ``lbtrain.reports.scaling_laws.SEED_RULE``."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


def measured_points(history: Sequence[Mapping[str, Any]], steps_per_epoch: int, metric: str = "val_accuracy",
                    points: Sequence[Mapping[str, Any]] = ()) -> list[tuple[float, float]]:
    """``(step, value)`` of ``metric`` where it was measured, in step order: its epoch ends (step
    ``epoch * steps_per_epoch``, or the row's own ``step`` where it has one: an elastic world's
    epochs have as many steps as the world size of the moment gives) merged with the run's
    validation points (``RunResult.validation_points``, every N steps:
    ``training.validation_every_steps``) where it has them; at a step with both, the point's
    value (the same validation split, measured after the same update). Values that are missing
    or not finite are left out.

    >>> measured_points([{"epoch": 1, "val_accuracy": 0.8}], 150, points=[{"step": 100, "val_accuracy": 0.7},
    ...                                                                    {"step": 200, "val_accuracy": 0.85}])
    [(100.0, 0.7), (150.0, 0.8), (200.0, 0.85)]
    """
    ends = [(float(row["step"]) if row.get("step") is not None else float(row["epoch"]) * steps_per_epoch, row.get(metric))
            for row in history]
    by_step = {step: value for step, value in ends}
    by_step.update((float(point["step"]), point[metric]) for point in points if point.get(metric) is not None)
    return [(step, float(value)) for step, value in sorted(by_step.items()) if value is not None and math.isfinite(float(value))]


def steps_to_target(history: Sequence[Mapping[str, Any]], steps_per_epoch: int, target: float,
                    metric: str = "val_accuracy", points: Sequence[Mapping[str, Any]] = ()) -> float | None:
    """The first step at which ``metric`` reaches ``target``, or None if it never does.

    The metric is known where ``measured_points`` says: every N steps when the run measured
    validation points (``points``), else at the end of each epoch. Between two measurements it is
    interpolated linearly, and before the first one it is taken to cross at the first measurement
    (which cannot say earlier: a count reached there is an upper bound).

    >>> points = [{"step": 100, "val_accuracy": 0.5}, {"step": 200, "val_accuracy": 0.75}, {"step": 300, "val_accuracy": 0.9}]
    >>> steps_to_target([{"epoch": 1, "val_accuracy": 0.9}], 1000, 0.625, points=points)
    150.0
    >>> steps_to_target([{"epoch": 1, "val_accuracy": 0.9}], 1000, 0.625)
    1000.0
    """
    previous_step, previous_value = None, None
    for step, value in measured_points(history, steps_per_epoch, metric, points):
        if value >= target:
            if previous_value is None:
                return step
            fraction = (target - previous_value) / (value - previous_value)
            return previous_step + fraction * (step - previous_step)
        previous_step, previous_value = step, float(value)
    return None
