"""Analyses of large-batch runs: gap tables, flatness (Keskar et al. 2017's sharpness, the Hessian's
top eigenvalue, Jiang et al. 2020's magnitude-aware PAC-Bayes flatness), steps to target
(Shallue et al. 2018), the critical batch and the gradient noise scale (McCandlish et al. 2018),
the learning rate's exponent in the batch, figures, and the report that puts them together.
The gradient noise scale is measured during training by ``lbtrain.callbacks.GradientNoiseScale``.

Names load lazily: the tables read results without TensorFlow or matplotlib.
"""

from lbtrain._lazy import lazy_exports

_LOCATIONS = {
    **dict.fromkeys(("Line", "Mark", "draw_panels", "plot_panels", "plot_schedules", "recipe_colors"), ".plots"),
    **dict.fromkeys(("unsupported_numbers",), ".prose"),
    **dict.fromkeys(("write_comparison",), ".mode_comparison"),
    **dict.fromkeys(("ReportError", "write_report"), ".report"),
    **dict.fromkeys(("CriticalBatchFit", "LrExponentFit", "critical_batch", "lr_exponent", "reachable_target", "simple_noise_scale",
                     "steps_to_target"), ".scaling_laws"),
    **dict.fromkeys(("PacBayesFlatness", "TopEigenvalue", "hessian_top_eigenvalue", "pac_bayes_flatness", "random_subspace",
                     "sharpness"), ".flatness"),
    **dict.fromkeys(("Aggregate", "RunRecord", "aggregate", "large_batch_gap", "load_records", "markdown_table"), ".tables"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
