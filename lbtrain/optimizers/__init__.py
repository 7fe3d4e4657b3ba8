"""Large-batch optimizers as ordinary Keras optimizers (tf.keras 2.15, and Keras 3 on any backend): ``from lbtrain.optimizers import LARS``."""

from lbtrain.optimizers._layerwise import DEFAULT_EXCLUDE, trust_ratio
from lbtrain.optimizers.by_name import OPTIMIZERS, build_optimizer
from lbtrain.optimizers.lamb import LAMB
from lbtrain.optimizers.lars import LARS

__all__ = ["DEFAULT_EXCLUDE", "LAMB", "LARS", "OPTIMIZERS", "build_optimizer", "trust_ratio"]
