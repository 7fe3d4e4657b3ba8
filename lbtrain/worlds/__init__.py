"""The worlds a run trains in, one module per mode (``lbtrain.worlds.modes`` is their registry):
``simulated`` (W workers in one process), ``horovod`` (horovodrun's ranks), ``mirrored`` and
``multiworker`` (tf.distribute's synchronous strategies, over ``strategy``) and
``parameter_server`` (asynchronous SGD). ``base.World`` is what the trainer sees of each.

Names load lazily: a world's module loads TensorFlow (and Horovod) when it is used.
"""

from lbtrain._lazy import lazy_exports

_LOCATIONS = {
    **dict.fromkeys(("World", "configure_threads"), ".base"),
    **dict.fromkeys(("current_world", "prepare_run"), ".build"),
    "SimulatedWorld": ".simulated",
    "HorovodWorld": ".horovod",
    "MirroredWorld": ".mirrored",
    "MultiWorkerWorld": ".multiworker",
    **dict.fromkeys(("ParameterServerWorld", "UpdateClock"), ".parameter_server"),
}
__getattr__, __dir__ = lazy_exports(__name__, _LOCATIONS)
__all__ = sorted(_LOCATIONS)
