"""What a run measures besides its metrics, one estimator each: the gradient noise scale
(``noise_scale``, McCandlish et al. 2018), steps to a target (``steps_to_target``, Shallue et al.
2018) and the flatness of the final weights (``flatness``: Keskar et al. 2017's sharpness, the
Hessian's top eigenvalue, Jiang et al. 2020's PAC-Bayes flatness).

Names load lazily: ``noise_scale`` and ``steps_to_target`` need no TensorFlow, ``flatness`` does.
"""

from lbtrain._lazy import lazy_exports

_LOCATIONS = {
    **dict.fromkeys(("NoiseScaleSettings", "measurement_pieces", "simple_noise_scale", "two_batch_estimates"), ".noise_scale"),
    "steps_to_target": ".steps_to_target",
    **dict.fromkeys(("PacBayesFlatness", "TopEigenvalue", "hessian_top_eigenvalue", "pac_bayes_flatness", "random_subspace",
                     "sharpness"), ".flatness"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
