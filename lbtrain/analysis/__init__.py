"""Analyses of large-batch runs: gap tables, sharpness (Keskar et al. 2017), steps to target
(Shallue et al. 2018) and the critical batch (McCandlish et al. 2018), figures, and the
report that puts them together. The gradient noise scale is measured during training by
``lbtrain.callbacks.GradientNoiseScale``."""

from lbtrain.analysis.plots import Line, plot_lines, plot_schedules
from lbtrain.analysis.report import ReportError, write_report
from lbtrain.analysis.scaling_laws import CriticalBatchFit, critical_batch, reachable_target, steps_to_target
from lbtrain.analysis.sharpness import random_subspace, sharpness
from lbtrain.analysis.tables import Aggregate, RunRecord, aggregate, large_batch_gap, load_records, markdown_table

__all__ = [
    "Aggregate",
    "CriticalBatchFit",
    "Line",
    "ReportError",
    "RunRecord",
    "aggregate",
    "critical_batch",
    "large_batch_gap",
    "load_records",
    "markdown_table",
    "plot_lines",
    "plot_schedules",
    "random_subspace",
    "reachable_target",
    "sharpness",
    "steps_to_target",
    "write_report",
]
