"""Figures. Data first, drawing second: the values drawn come from functions the tests check
(``lbtrain.schedules.schedule_values``), the functions here only draw them."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from lbtrain.files import write_atomic  # noqa: E402
from lbtrain.schedules import LearningRateSchedule, schedule_values  # noqa: E402


def plot_schedules(
    schedules: Mapping[str, LearningRateSchedule | float],
    steps: int,
    path: str | os.PathLike,
    *,
    title: str = "Learning-rate schedules",
    log_scale: bool = False,
) -> Path:
    """Draws ``lr(step)`` for steps 0..steps-1, one line per label, into one PNG at ``path``.

    Returns the path written (its folder is created; the file is replaced atomically)."""

    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not schedules:
        raise ValueError("schedules must name at least one schedule")
    path = Path(path)
    figure, axes = plt.subplots(figsize=(7, 4))
    try:
        for label, schedule in schedules.items():
            axes.plot(range(steps), schedule_values(schedule, steps), label=label)
        axes.set_xlabel("step")
        axes.set_ylabel("learning rate")
        axes.set_title(title)
        if log_scale:
            axes.set_yscale("log")
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        image = io.BytesIO()
        figure.savefig(image, format="png", dpi=100)
        write_atomic(path, image.getvalue())
    finally:
        plt.close(figure)
    return path
