"""Where a model comes from, and ``build_model``, the one way to build one.

``model.name`` is one of:

- a model of lbtrain's zoo (``mlp``, ``cnn``, ``resnet``, ``vit``: ``lbtrain.models.zoo``);
- a reference ``"package.module:build"`` or a registered name (``lbtrain.references``): the
  factory ``build(input_shape, num_classes, **options) -> keras.Model``, called with the shape
  of one sample (a tuple, no batch axis), the width the output must have (the number of classes;
  for regression, the number of targets) and the config's ``model.options``;
- a Keras Applications model, ``keras.applications.MobileNetV2`` (or ``tf.keras.applications.``):
  built with ``weights=None`` (lbtrain trains from scratch), ``classes`` from the data,
  ``classifier_activation=None`` (logits) and ``options`` as its keyword arguments.

The model should return logits. A model whose output layer applies softmax (or sigmoid, for one
output) is trained with the matching probability loss instead (``lbtrain.objectives``). Before
calling the factory ``build_model`` seeds Keras (``keras.utils.set_random_seed``), so every
process builds the same initial weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import tensorflow as tf

from lbtrain.models.errors import ModelError
from lbtrain.models.zoo import MODELS, build_zoo_model
from lbtrain.models.zoo import check_model_options as check_zoo_options
from lbtrain.references import MODEL_REGISTRY, ReferenceError_, check_options, import_reference, is_reference, process_local
from lbtrain.spelling import did_you_mean

__all__ = ["APPLICATION_PREFIXES", "ModelSource", "build_model", "check_model_options", "model_source"]

APPLICATION_PREFIXES = ("keras.applications.", "tf.keras.applications.")


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A resolved ``model.name``: what kind of name it is and the factory it names."""

    name: str
    kind: str  # "zoo", "registered", "reference" or "application"
    factory: Callable[..., Any]

    @property
    def process_local(self) -> bool:
        """Whether only this process can build it (see ``lbtrain.references``)."""
        return process_local(self.name) or (self.kind == "registered" and MODEL_REGISTRY.is_local(self.name))


def _application(name: str) -> Callable[..., Any]:
    attribute = name.split(".")[-1]
    applications = [item for item in dir(tf.keras.applications) if item[:1].isupper()]
    if attribute not in applications:
        raise ModelError(f"unknown Keras application {name!r} ({did_you_mean(attribute, applications)}"
                         f"see keras.applications, e.g. MobileNetV2, ResNet50, EfficientNetB0)")
    return getattr(tf.keras.applications, attribute)


def model_source(name: str) -> ModelSource:
    """Resolves ``name`` (see the module doc); a name that resolves to nothing is a one-line
    ``ModelError`` that lists lbtrain's and the registered names."""
    if name in MODELS:
        return ModelSource(name, "zoo", build_zoo_model)
    if name.startswith(APPLICATION_PREFIXES):
        return ModelSource(name, "application", _application(name))
    try:
        if is_reference(name) or process_local(name):
            return ModelSource(name, "reference", import_reference(name, "model"))
        registered = MODEL_REGISTRY.get(name)
    except ReferenceError_ as error:
        raise ModelError(str(error)) from None
    if registered is not None:
        return ModelSource(name, "registered", registered)
    known = [*MODELS, *MODEL_REGISTRY.names()]
    raise ModelError(f"unknown model {name!r} ({did_you_mean(name, known)}allowed: {', '.join(known)}, "
                     "a reference package.module:function, or keras.applications.<Name>)")


def check_model_options(name: str, options: dict[str, Any]) -> None:
    """``ModelError`` for an option model ``name`` does not take (a factory with ``**options``
    takes any), or for a Keras application asked for pretrained ``weights``."""
    source = model_source(name)
    if source.kind == "zoo":
        check_zoo_options(name, options)
        return
    if source.kind == "application":
        if options.get("weights") is not None:
            raise ModelError(f"model {name!r}: weights must be null (lbtrain trains from scratch), got {options['weights']!r}")
        for fixed in ("input_shape", "classes", "classifier_activation"):
            if fixed in options:
                raise ModelError(f"model {name!r}: option {fixed!r} is set by lbtrain from the data; remove it")
        return
    try:
        check_options(source.factory, 2, options, f"model {name!r}")
    except ReferenceError_ as error:
        raise ModelError(str(error)) from None


def _call_factory(source: ModelSource, input_shape: tuple[int, ...], num_classes: int, options: dict[str, Any]) -> Any:
    if source.kind == "zoo":
        return source.factory(source.name, input_shape, num_classes, **options)
    if source.kind == "application":
        arguments = {"include_top": True, **options, "weights": None, "classifier_activation": None}
        return source.factory(input_shape=input_shape, classes=num_classes, **arguments)
    return source.factory(input_shape, num_classes, **options)


def build_model(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    seed: int | None = None,
    **options,
) -> tf.keras.Model:
    """Builds model ``name`` (see the module doc) for samples of ``input_shape`` and an output of
    width ``num_classes``.

    Args:
      name: a zoo name, a registered name, ``package.module:function`` or
        ``keras.applications.<Name>``.
      input_shape: shape of one sample, without the batch axis.
      num_classes: width of the output (classes, or regression targets).
      seed: when given, ``tf.keras.utils.set_random_seed(seed)`` runs first, so the same
        seed gives the same initial weights in every process.
      **options: the model's own options (zoo models with batch norm also take ``virtual_batch_size``).

    Raises:
      ModelError: an unknown name or option, a factory that raises or returns no ``keras.Model``.
    """
    source = model_source(name)
    check_model_options(name, options)
    if seed is not None:
        tf.keras.utils.set_random_seed(seed)
    input_shape = tuple(int(d) for d in input_shape)
    if source.kind == "zoo":
        return _call_factory(source, input_shape, num_classes, options)
    try:
        model = _call_factory(source, input_shape, num_classes, options)
    except Exception as error:  # the user's factory raises what it raises
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ModelError(f"model {name!r} raised {type(error).__name__} building for input shape {input_shape} and "
                         f"{num_classes} outputs: {first_line}") from None
    if not isinstance(model, tf.keras.Model):
        raise ModelError(f"model {name!r} returned a {type(model).__name__}, not a keras.Model")
    return model
