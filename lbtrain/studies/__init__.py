"""Studies: an experiment's plan (``plan``) and its runs (``runner``), Optuna sweeps (``sweep``,
``storages``), the tuning protocol (``protocol``), the advisor (``advisor``) and the findings of
the committed studies it cites (``findings``).

Names load lazily.
"""

from lbtrain._lazy import lazy_exports

_LOCATIONS = {
    **dict.fromkeys(("PlannedRun", "expand"), ".plan"),
    "run_experiment": ".runner",
    "run_sweep": ".sweep",
    "run_protocol": ".protocol",
    **dict.fromkeys(("Advice", "advise"), ".advisor"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
