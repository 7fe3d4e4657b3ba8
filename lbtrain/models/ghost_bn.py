"""Ghost batch norm on any functional or sequential model (Hoffer et al. 2017).

A simulated world of W workers feeds one global batch of ``W * b`` samples; each worker of a
real world would normalize its own ``b``. ``set_virtual_batch_size(model, b)`` copies a model
with every ``BatchNormalization`` replaced by lbtrain's ``GhostBatchNormalization(b)`` (same
name, momentum, epsilon, weights), which normalizes each worker's share apart. Keras rebuilds
only models whose graph of layers it knows (Functional, Sequential, and the models nested in
them); a subclassed model's ``call`` is Python it cannot rewrite, so a subclassed model with
batch norm is refused with the two ways out, unless its batch norms are already ghost batch
norms of the right size.
"""

from __future__ import annotations

import tensorflow as tf

from lbtrain.layers import GhostBatchNormalization, is_batch_norm
from lbtrain.models.errors import ModelError

__all__ = ["batch_norm_layers", "set_virtual_batch_size"]


def _is_graph_model(model: tf.keras.Model) -> bool:
    """Functional and Sequential models (a Sequential is a Functional model in both Keras lines
    once built) expose their layer graph; subclassed models do not."""
    return isinstance(model, tf.keras.Sequential) or any(cls.__name__ == "Functional" for cls in type(model).__mro__)


def batch_norm_layers(model: tf.keras.Model) -> list[tf.keras.layers.Layer]:
    """Every batch-norm layer ``model`` holds, however deeply nested."""
    # ``_flatten_layers`` is how both Keras lines walk nested layers themselves (no public walk exists).
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True) if is_batch_norm(layer)]


def _refuse_subclassed(model: tf.keras.Model, virtual_batch_size: int) -> None:
    wrong = [layer.name for layer in batch_norm_layers(model)
             if not (isinstance(layer, GhostBatchNormalization) and layer.virtual_batch_size == virtual_batch_size)]
    if wrong:
        raise ModelError(
            f"model {model.name!r} is a subclassed {type(model).__name__} with batch norm ({', '.join(wrong[:3])}), not "
            f"convertible to ghost batch norm: build it with keras.Sequential or the functional API, or use "
            f"lbtrain.layers.GhostBatchNormalization(virtual_batch_size={virtual_batch_size})")


def set_virtual_batch_size(model: tf.keras.Model, virtual_batch_size: int) -> tf.keras.Model:
    """A copy of ``model`` (same weights) whose batch-norm layers normalize groups of
    ``virtual_batch_size`` samples (ghost BN): every ``BatchNormalization`` over the last axis
    becomes a ``GhostBatchNormalization`` with the same name, momentum, epsilon and weights,
    in nested functional and sequential models too. A subclassed model is returned as it is when
    its batch norms are already ghost ones of this size, and refused (``ModelError``) otherwise."""
    if not _is_graph_model(model):
        _refuse_subclassed(model, virtual_batch_size)
        return model

    def clone(layer: tf.keras.layers.Layer) -> tf.keras.layers.Layer:
        if isinstance(layer, tf.keras.Model):
            return set_virtual_batch_size(layer, virtual_batch_size)
        config = layer.get_config()
        if is_batch_norm(layer):
            axis = config.get("axis", -1)
            last = len(layer.input.shape) - 1
            if axis not in (-1, [-1], last, [last]):
                raise ModelError(f"layer {layer.name}: ghost batch norm needs channels on the last axis, got axis {axis}")
            return GhostBatchNormalization(
                virtual_batch_size, momentum=config["momentum"], epsilon=config["epsilon"],
                center=config["center"], scale=config["scale"], name=layer.name,
            )
        return layer.__class__.from_config(config)

    copy = tf.keras.models.clone_model(model, clone_function=clone)
    copy.set_weights(model.get_weights())
    return copy
