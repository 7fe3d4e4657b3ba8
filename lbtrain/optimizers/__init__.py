"""Large-batch optimizers as ordinary Keras 2.15 optimizers: ``from lbtrain.optimizers import LARS``."""

from lbtrain.optimizers._layerwise import DEFAULT_EXCLUDE, trust_ratio
from lbtrain.optimizers.lamb import LAMB
from lbtrain.optimizers.lars import LARS

__all__ = ["DEFAULT_EXCLUDE", "LAMB", "LARS", "trust_ratio"]
