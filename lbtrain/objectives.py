"""What a run minimizes and reports, by task: its loss, its ``accuracy`` and the chance level.

- **classification**, one output per class: sparse categorical cross-entropy; ``accuracy`` is
  the share of samples whose largest output is the label.
- **binary classification** with one output: binary cross-entropy; ``accuracy`` thresholds the
  output at 0 (a logit) or 0.5 (a sigmoid).
- **regression**: mean squared error; ``accuracy`` is ``R^2 = 1 - MSE / Var(y_train)``, the share
  of the training targets' variance explained (averaged over targets: ``Var`` is the mean of the
  per-target variances). It is linear in the MSE, so shards average exactly, and it is 0 for the
  model that predicts the training mean: the regression counterpart of chance.

The model returns logits; if its last layer applies softmax (or sigmoid, with one output), the
loss takes probabilities instead (``from_logits=False``). ``chance`` is what a model that learned
nothing scores: the majority-class share of the training labels, or 0 (R^2 of the mean) for
regression. The verdict (``lbtrain.verdict``) calls a run that ends within a margin of it
*collapsed*.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from lbtrain.data import Dataset
from lbtrain.models import ModelError

__all__ = ["chance", "check_output", "compile_arguments", "output_activation", "output_width"]


def output_activation(model: tf.keras.Model) -> str | None:
    """``"softmax"`` or ``"sigmoid"`` when the model's last layer applies it, else None (logits)."""
    if not model.layers:
        return None
    last = model.layers[-1]
    name = type(last).__name__.lower()
    if name in ("softmax", "sigmoid"):
        return name
    activation = getattr(last, "activation", None)
    activation_name = getattr(activation, "__name__", None) if activation is not None else None
    return activation_name if activation_name in ("softmax", "sigmoid") else None


def output_width(model: tf.keras.Model, sample: np.ndarray) -> int:
    """The width of the model's output: read from a functional model's graph, else from a call
    on ``sample`` (a batch of one or two samples, inference mode)."""
    outputs = getattr(model, "outputs", None)
    shape = outputs[0].shape if outputs else model(sample, training=False).shape
    if len(shape) != 2:
        raise ModelError(f"model {model.name!r} outputs shape {tuple(shape)}; lbtrain needs one vector per sample "
                         "(batch, outputs): add a Flatten or pooling before the last Dense")
    return int(shape[-1])


def check_output(model: tf.keras.Model, data: Dataset) -> None:
    """``ModelError`` unless the model's output fits the labels: one output per class (or one
    for two classes), one per regression target."""
    width = output_width(model, data.x_train[:2])
    if data.task == "regression":
        if width != data.num_classes:
            raise ModelError(f"model {model.name!r} has {width} outputs but the data has {data.num_classes} regression "
                             f"target(s); make its last layer Dense({data.num_classes})")
        return
    if width == data.num_classes or (width == 1 and data.num_classes == 2):
        return
    raise ModelError(f"model {model.name!r} has {width} outputs but the labels are {data.num_classes} classes (0 to "
                     f"{data.num_classes - 1}); make its last layer Dense({data.num_classes}) of logits")


def _r_squared(variance: float):
    def r_squared(y_true, y_pred):
        error = tf.reduce_mean(tf.square(tf.cast(y_true, y_pred.dtype) - y_pred), axis=-1)
        return 1.0 - error / variance

    return r_squared


def compile_arguments(model: tf.keras.Model, data: Dataset) -> tuple[tf.keras.losses.Loss, list[tf.keras.metrics.Metric]]:
    """``(loss, [accuracy])`` for ``model.compile`` on ``data`` (see the module doc), once
    ``check_output`` found that the model fits the labels."""
    check_output(model, data)
    activation = output_activation(model)
    if data.task == "regression":
        variance = float(np.mean(np.var(data.y_train, axis=0)))
        return tf.keras.losses.MeanSquaredError(), [tf.keras.metrics.MeanMetricWrapper(_r_squared(variance), name="accuracy")]
    if output_width(model, data.x_train[:2]) == 1:
        from_logits = activation != "sigmoid"
        return (tf.keras.losses.BinaryCrossentropy(from_logits=from_logits),
                [tf.keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0 if from_logits else 0.5)])
    return (tf.keras.losses.SparseCategoricalCrossentropy(from_logits=activation != "softmax"),
            [tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")])


def chance(data: Dataset) -> float:
    """The ``accuracy`` of a model that learned nothing: the majority class's share of the
    training labels, or 0 for regression (R^2 of the training mean).

    Binary labels predicted by one output count the same way as two classes."""
    if data.task == "regression":
        return 0.0
    counts = np.bincount(np.asarray(data.y_train, dtype=np.int64).reshape(-1))
    return float(counts.max() / counts.sum())
