"""Analyses of large-batch runs: gap tables, sharpness (Keskar et al. 2017), steps to target
(Shallue et al. 2018) and the critical batch (McCandlish et al. 2018), figures, and the
report that puts them together. The gradient noise scale is measured during training by
``lbtrain.callbacks.GradientNoiseScale``.

Names load lazily: the tables read results without TensorFlow or matplotlib.
"""

from lbtrain._lazy import lazy_exports

_LOCATIONS = {
    **dict.fromkeys(("Line", "plot_lines", "plot_schedules"), ".plots"),
    **dict.fromkeys(("ReportError", "write_report"), ".report"),
    **dict.fromkeys(("CriticalBatchFit", "critical_batch", "reachable_target", "steps_to_target"), ".scaling_laws"),
    **dict.fromkeys(("random_subspace", "sharpness"), ".flatness"),
    **dict.fromkeys(("Aggregate", "RunRecord", "aggregate", "large_batch_gap", "load_records", "markdown_table"), ".tables"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
