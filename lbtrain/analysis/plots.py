"""Figures. Data first, drawing second: the values drawn come from functions the tests check
(``lbtrain.schedules.schedule_values``, ``lbtrain.analysis.tables``, ``scaling_laws``), the
functions here only draw them."""

from __future__ import annotations

import dataclasses
import io
import os
from pathlib import Path
from typing import Mapping, Sequence

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
    lines = [Line(label, list(range(steps)), list(schedule_values(schedule, steps))) for label, schedule in schedules.items()]
    return plot_lines({title: lines}, path, xlabel="step", ylabel="learning rate", log_y=log_scale)


REFERENCE_STYLES = ("--", ":", "-.")


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a panel: points ``(x[i], y[i])``, optional error bars, dashed for references."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    error: Sequence[float] | None = None
    dashed: bool = False


def plot_lines(
    panels: Mapping[str, Sequence[Line]],
    path: str | os.PathLike,
    *,
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
    log_y: bool = False,
    share_y: bool = True,
) -> Path:
    """Draws one panel per title (side by side, at most 3 a row), its lines (markers on short
    ones, error bars where given, reference lines grey and dashed), into one PNG at ``path``
    (replaced atomically)."""
    if not panels or not any(panels.values()):
        raise ValueError("nothing to draw: every panel is empty")
    path = Path(path)
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(4.6 * columns + 1.4, 3.6 * rows), squeeze=False, sharey=share_y)
    try:
        for axes, (title, lines) in zip(grid.flat, panels.items()):
            references = iter(REFERENCE_STYLES)
            for line in lines:
                if line.dashed:
                    style = {"linestyle": next(references, "--"), "color": "grey"}
                else:
                    style = {"marker": "o", "markersize": 3} if len(line.x) <= 40 else {}
                if line.error is not None:
                    axes.errorbar(line.x, line.y, yerr=line.error, label=line.label, capsize=3, **style)
                else:
                    axes.plot(line.x, line.y, label=line.label, **style)
            axes.set_title(title, fontsize=10)
            axes.set_xlabel(xlabel)
            if log_x:
                axes.set_xscale("log", base=2)
            if log_y:
                axes.set_yscale("log")
            axes.grid(alpha=0.3)
        for axes in grid.flat[len(panels):]:
            axes.set_visible(False)
        for axes in grid[:, 0] if share_y else grid.flat:
            axes.set_ylabel(ylabel)
        handles = {}
        for axes in grid.flat:
            for handle, label in zip(*axes.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        labels = list(handles)
        figure.legend([handles[label] for label in labels], labels, loc="center right", fontsize=8)
        figure.tight_layout(rect=(0, 0, 1 - 1.3 / (4.6 * columns + 1.4), 1))
        image = io.BytesIO()
        figure.savefig(image, format="png", dpi=100)
        write_atomic(path, image.getvalue())
    finally:
        plt.close(figure)
    return path
