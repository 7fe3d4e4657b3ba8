"""Reports of large-batch runs, without TensorFlow: gap tables and statistics, the critical batch
(McCandlish et al. 2018) and the learning rate's exponent in the batch, figures, the comparison
of two modes, and the report that puts them together; and the tuning time a sweep's storage
records (``tuning``). What they read was measured during training
(``lbtrain.measures``) and written under ``results/`` (``lbtrain.results``).

Names load lazily: the tables read results without matplotlib.
"""

from lbtrain._lazy import lazy_exports

_LOCATIONS = {
    **dict.fromkeys(("Line", "Mark", "draw_panels", "plot_panels", "plot_schedules", "recipe_colors"), ".plots"),
    **dict.fromkeys(("unsupported_numbers",), ".prose"),
    **dict.fromkeys(("write_comparison",), ".comparison"),
    **dict.fromkeys(("ReportError", "machine_minutes", "write_report"), ".report"),
    **dict.fromkeys(("results_storage", "trial_seconds"), ".tuning"),
    **dict.fromkeys(("CriticalBatchFit", "LrExponentFit", "critical_batch", "lr_exponent", "reachable_target"), ".scaling_laws"),
    **dict.fromkeys(("Aggregate", "RunRecord", "aggregate", "differences_from_reference", "load_records", "markdown_table"), ".tables"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
