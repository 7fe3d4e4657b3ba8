"""Models: lbtrain's zoo, the user's own by reference or registered name, and ghost batch norm.

- ``sources``: ``build_model`` and ``model_source``, the one way from ``model.name`` to a model
  (zoo, ``package.module:function``, a registered name, ``keras.applications.<Name>``);
- ``zoo``: lbtrain's own small networks (``MODELS``);
- ``ghost_bn``: ``set_virtual_batch_size``, which gives any functional model per-worker batch norm;
- ``errors``: ``ModelError``, raised by all three.

Every public name is importable from ``lbtrain.models`` itself.
"""

from lbtrain.models.errors import ModelError
from lbtrain.models.ghost_bn import batch_norm_layers, set_virtual_batch_size
from lbtrain.models.sources import APPLICATION_PREFIXES, ModelSource, build_model, check_model_options, model_source
from lbtrain.models.zoo import MODELS, ModelInfo, build_cnn, build_mlp, build_resnet, build_vit, model_info, model_options

__all__ = [
    "APPLICATION_PREFIXES",
    "MODELS",
    "ModelError",
    "ModelInfo",
    "ModelSource",
    "batch_norm_layers",
    "build_cnn",
    "build_mlp",
    "build_model",
    "build_resnet",
    "build_vit",
    "check_model_options",
    "model_info",
    "model_options",
    "model_source",
    "set_virtual_batch_size",
]
