"""lbtrain's own models: the small networks large-batch studies use, all returning logits.

- ``mlp``: Keskar et al. 2017's F1, a fully connected network (default 512-512).
- ``cnn``: a small convolutional network in the spirit of Keskar's C1 (conv-pool x2, dense).
- ``resnet``: a small residual network (He et al. 2016) with batch normalization; its
  ``virtual_batch_size`` gives ghost batch norm (Hoffer et al. 2017), which is how a
  simulated world of W workers normalizes each worker's share of the global batch apart.
- ``vit``: a small Vision Transformer (Dosovitskiy et al. 2021) on non-overlapping patches,
  pre-norm blocks and global average pooling; layer norm only, so no sample's output depends
  on the others' and a simulated world has nothing to split.

Inputs of rank 1 (signals such as MNIST-1D) use 1-D convolutions (1-D patches for ``vit``),
rank 2 or 3 (images) 2-D.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Callable, Sequence

import tensorflow as tf

from lbtrain.config.limits import memory_problem, quote
from lbtrain.layers import GhostBatchNormalization
from lbtrain.models.errors import ModelError
from lbtrain.spelling import did_you_mean


def _batch_norm(name: str, virtual_batch_size: int | None) -> tf.keras.layers.Layer:
    if virtual_batch_size is None:
        return tf.keras.layers.BatchNormalization(name=name)
    return GhostBatchNormalization(virtual_batch_size, name=name)


def _spatial_input(inputs: tf.Tensor, input_shape: tuple[int, ...]) -> tuple[tf.Tensor, int]:
    """Adds a channel axis where the input has none; returns the tensor and its conv rank."""
    if len(input_shape) == 1:
        return tf.keras.layers.Reshape((*input_shape, 1))(inputs), 1
    if len(input_shape) == 2:
        return tf.keras.layers.Reshape((*input_shape, 1))(inputs), 2
    if len(input_shape) == 3:
        return inputs, 2
    raise ModelError(f"convolutional models take inputs of rank 1 to 3, got shape {input_shape}")


def _conv_input(input_shape: Sequence[int]) -> tuple[int, int, list[int]]:
    """The conv rank, channels and spatial sizes ``_spatial_input`` gives an input."""
    rank = 1 if len(input_shape) == 1 else 2
    channels = int(input_shape[-1]) if len(input_shape) == 3 else 1
    return rank, channels, [int(d) for d in (input_shape[:2] if len(input_shape) == 3 else input_shape)]


def _conv(rank: int, filters: int, kernel: int, name: str, **kwargs) -> tf.keras.layers.Layer:
    layer = tf.keras.layers.Conv1D if rank == 1 else tf.keras.layers.Conv2D
    return layer(filters, kernel, padding="same", name=name, **kwargs)


def _max_pool(rank: int, name: str) -> tf.keras.layers.Layer:
    layer = tf.keras.layers.MaxPooling1D if rank == 1 else tf.keras.layers.MaxPooling2D
    return layer(2, padding="same", name=name)


def _global_pool(rank: int) -> tf.keras.layers.Layer:
    return tf.keras.layers.GlobalAveragePooling1D() if rank == 1 else tf.keras.layers.GlobalAveragePooling2D()


def build_mlp(
    inputs: tf.Tensor,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    widths: Sequence[int] = (512, 512),
    batch_norm: bool = False,
    dropout: float = 0.0,
    virtual_batch_size: int | None = None,
) -> tf.Tensor:
    """Keskar et al. 2017 F1: Flatten, then Dense(w) [+ BN] + ReLU [+ dropout] per width."""
    x = tf.keras.layers.Flatten(name="flatten")(inputs)
    for i, width in enumerate(widths):
        x = tf.keras.layers.Dense(width, use_bias=not batch_norm, name=f"dense_{i}")(x)
        if batch_norm:
            x = _batch_norm(f"batch_norm_{i}", virtual_batch_size)(x)
        x = tf.keras.layers.ReLU(name=f"relu_{i}")(x)
        if dropout:
            x = tf.keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
    return x


def build_cnn(
    inputs: tf.Tensor,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    filters: Sequence[int] = (32, 64),
    kernel_size: int = 5,
    dense: Sequence[int] = (256,),
    batch_norm: bool = False,
    dropout: float = 0.0,
    virtual_batch_size: int | None = None,
) -> tf.Tensor:
    """A small C1-like network: per entry of ``filters`` a conv [+ BN] + ReLU + 2x max-pool,
    then Flatten and one Dense + ReLU per entry of ``dense``."""
    x, rank = _spatial_input(inputs, input_shape)
    for i, width in enumerate(filters):
        x = _conv(rank, width, kernel_size, f"conv_{i}", use_bias=not batch_norm)(x)
        if batch_norm:
            x = _batch_norm(f"batch_norm_{i}", virtual_batch_size)(x)
        x = tf.keras.layers.ReLU(name=f"relu_{i}")(x)
        x = _max_pool(rank, f"pool_{i}")(x)
    x = tf.keras.layers.Flatten(name="flatten")(x)
    for i, width in enumerate(dense):
        x = tf.keras.layers.Dense(width, activation="relu", name=f"dense_{i}")(x)
        if dropout:
            x = tf.keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
    return x


def build_resnet(
    inputs: tf.Tensor,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    widths: Sequence[int] = (16, 32, 64),
    blocks_per_stage: int = 1,
    virtual_batch_size: int | None = None,
) -> tf.Tensor:
    """A small pre-pooling ResNet: a 3x3 stem, then per stage ``blocks_per_stage`` basic
    blocks (conv-BN-ReLU-conv-BN + shortcut, ReLU); stages after the first halve the
    resolution; global average pooling at the end. Every BN uses ``virtual_batch_size``."""
    x, rank = _spatial_input(inputs, input_shape)
    x = _conv(rank, widths[0], 3, "stem_conv", use_bias=False)(x)
    x = _batch_norm("stem_batch_norm", virtual_batch_size)(x)
    x = tf.keras.layers.ReLU(name="stem_relu")(x)
    for stage, width in enumerate(widths):
        for block in range(blocks_per_stage):
            strides = 2 if stage > 0 and block == 0 else 1
            prefix = f"stage{stage}_block{block}"
            shortcut = x
            y = _conv(rank, width, 3, f"{prefix}_conv_a", strides=strides, use_bias=False)(x)
            y = _batch_norm(f"{prefix}_batch_norm_a", virtual_batch_size)(y)
            y = tf.keras.layers.ReLU(name=f"{prefix}_relu_a")(y)
            y = _conv(rank, width, 3, f"{prefix}_conv_b", use_bias=False)(y)
            y = _batch_norm(f"{prefix}_batch_norm_b", virtual_batch_size)(y)
            if strides != 1 or shortcut.shape[-1] != width:
                shortcut = _conv(rank, width, 1, f"{prefix}_projection", strides=strides, use_bias=False)(shortcut)
                shortcut = _batch_norm(f"{prefix}_projection_batch_norm", virtual_batch_size)(shortcut)
            x = tf.keras.layers.ReLU(name=f"{prefix}_relu_out")(tf.keras.layers.Add(name=f"{prefix}_add")([y, shortcut]))
    return _global_pool(rank)(x)


# Patches ``vit`` cuts an input into at least, unless its option ``patch_size`` says otherwise:
# 16, as the 7x7 patches of a 28x28 image.
MIN_PATCHES = 16


def _patch_grid(input_shape: Sequence[int]) -> tuple[list[int], int]:
    """The spatial sizes of an input (one for a signal, two for an image) and its channels."""
    if not 1 <= len(input_shape) <= 3:
        raise ModelError(f"model 'vit' takes inputs of rank 1 to 3, got shape {tuple(input_shape)}")
    _, channels, spatial = _conv_input(input_shape)
    return spatial, channels


def vit_patch_size(input_shape: Sequence[int], patch_size: int | None = None) -> int:
    """The side of ``vit``'s patches on inputs of ``input_shape``: ``patch_size`` when it divides
    every spatial size, else ``ModelError`` naming the sizes that do; ``None`` picks the largest
    that leaves at least ``MIN_PATCHES`` patches (1 when none does).

    >>> vit_patch_size((28, 28, 1)), vit_patch_size((40,)), vit_patch_size((28, 28), 4)
    (7, 2, 4)
    >>> vit_patch_size((28, 28, 1), 5)
    Traceback (most recent call last):
      ...
    lbtrain.models.ModelError: patch_size must divide the input's size 28x28 for model 'vit', got 5 (allowed: 1, 2, 4, 7, 14, 28)
    """
    spatial, _ = _patch_grid(input_shape)
    allowed = [p for p in range(1, min(spatial) + 1) if all(d % p == 0 for d in spatial)]
    if patch_size is None:
        return max(p for p in allowed if p == 1 or math.prod(d // p for d in spatial) >= MIN_PATCHES)
    if patch_size not in allowed:
        raise ModelError(f"patch_size must divide the input's size {'x'.join(map(str, spatial))} for model 'vit', "
                         f"got {patch_size} (allowed: {', '.join(map(str, allowed))})")
    return patch_size


def build_vit(
    inputs: tf.Tensor,
    input_shape: tuple[int, ...],
    num_classes: int,
    *,
    patch_size: int | None = None,
    dim: int = 64,
    depth: int = 2,
    heads: int = 4,
    mlp_ratio: int = 4,
    dropout: float = 0.0,
) -> tf.Tensor:
    """A small Vision Transformer (Dosovitskiy et al. 2021): the input cut into non-overlapping
    patches of ``patch_size`` (``vit_patch_size``: 7x7 on 28x28 images, 16 patches; 2 on a
    length-40 signal), each mapped linearly to ``dim`` plus a learned position embedding, then
    ``depth`` pre-norm blocks (LayerNorm, ``heads``-head self-attention, residual; LayerNorm, an
    MLP of ``mlp_ratio * dim`` GELU units and ``dim``, residual), a final LayerNorm and the mean
    over patches (global average pooling, as Beyer et al. 2022's plain ViT, rather than a class
    token). ``dropout`` drops each residual branch's output. The position embedding is the
    patch embedding's bias, one vector per patch (an ``EinsumDense`` bias over patches and
    width), so the model holds only layers both Keras lines ship and reloads without lbtrain."""
    size = vit_patch_size(input_shape, patch_size)
    spatial, channels = _patch_grid(input_shape)
    patches, patch_values = math.prod(d // size for d in spatial), size ** len(spatial) * channels
    if len(spatial) == 1:
        x = tf.keras.layers.Reshape((patches, patch_values), name="patches")(inputs)
    else:
        (height, width) = spatial
        x = tf.keras.layers.Reshape((height // size, size, width // size, size, channels), name="patch_grid")(inputs)
        x = tf.keras.layers.Permute((1, 3, 2, 4, 5), name="patch_order")(x)
        x = tf.keras.layers.Reshape((patches, patch_values), name="patches")(x)
    x = tf.keras.layers.EinsumDense("bnp,pd->bnd", output_shape=(patches, dim), bias_axes="nd", name="patch_embedding",
                                    bias_initializer=tf.keras.initializers.RandomNormal(stddev=0.02))(x)
    for block in range(depth):
        prefix = f"block{block}"
        y = tf.keras.layers.LayerNormalization(epsilon=1e-6, name=f"{prefix}_layer_norm_a")(x)
        y = tf.keras.layers.MultiHeadAttention(heads, dim // heads, name=f"{prefix}_attention")(y, y)
        if dropout:
            y = tf.keras.layers.Dropout(dropout, name=f"{prefix}_dropout_a")(y)
        x = tf.keras.layers.Add(name=f"{prefix}_add_a")([x, y])
        y = tf.keras.layers.LayerNormalization(epsilon=1e-6, name=f"{prefix}_layer_norm_b")(x)
        y = tf.keras.layers.Dense(mlp_ratio * dim, activation="gelu", name=f"{prefix}_mlp_hidden")(y)
        y = tf.keras.layers.Dense(dim, name=f"{prefix}_mlp_out")(y)
        if dropout:
            y = tf.keras.layers.Dropout(dropout, name=f"{prefix}_dropout_b")(y)
        x = tf.keras.layers.Add(name=f"{prefix}_add_b")([x, y])
    x = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="layer_norm")(x)
    return tf.keras.layers.GlobalAveragePooling1D(name="pool")(x)


def _count_mlp(input_shape: Sequence[int], settings: dict[str, Any]) -> tuple[int, int]:
    width, count = math.prod(int(d) for d in input_shape), 0
    for layer in settings["widths"]:
        width, count = layer, count + width * layer + layer
    return count, width


def _count_cnn(input_shape: Sequence[int], settings: dict[str, Any]) -> tuple[int, int]:
    rank, channels, spatial = _conv_input(input_shape)
    count = 0
    for layer in settings["filters"]:
        count += settings["kernel_size"] ** rank * channels * layer + layer
        channels, spatial = layer, [-(-d // 2) for d in spatial]
    width = math.prod(spatial) * channels
    for layer in settings["dense"]:
        width, count = layer, count + width * layer + layer
    return count, width


def _count_resnet(input_shape: Sequence[int], settings: dict[str, Any]) -> tuple[int, int]:
    """Convolutions only: batch norms left out."""
    rank, channels, _ = _conv_input(input_shape)
    widths, kernel = settings["widths"], 3 ** rank
    count, previous = kernel * channels * widths[0], widths[0]
    for stage, width in enumerate(widths):
        for block in range(settings["blocks_per_stage"]):
            entering = previous if block == 0 else width
            count += kernel * entering * width + kernel * width * width
            if block == 0 and (stage > 0 or entering != width):
                count += entering * width
        previous = width
    return count, widths[-1]


def _count_vit(input_shape: Sequence[int], settings: dict[str, Any]) -> tuple[int, int]:
    """Every weight, layer norms included (``count_params`` of the built model)."""
    size = vit_patch_size(input_shape, settings["patch_size"])
    spatial, channels = _patch_grid(input_shape)
    dim, hidden = settings["dim"], settings["mlp_ratio"] * settings["dim"]
    patches = math.prod(d // size for d in spatial)
    embedding = size ** len(spatial) * channels * dim + patches * dim
    # Two layer norms; query, key, value and output projections (heads x dim/heads = dim wide); the MLP.
    block = 2 * 2 * dim + 4 * (dim * dim + dim) + dim * hidden + hidden + hidden * dim + dim
    return embedding + settings["depth"] * block + 2 * dim, dim


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """One registry entry: the body builder, what it is, and ``count_body(input_shape, settings)``:
    the body's weights and output width for its options (``settings``, defaults filled in)."""

    name: str
    description: str
    build_body: Callable[..., tf.Tensor]
    count_body: Callable[[Sequence[int], dict[str, Any]], tuple[int, int]]


MODELS: dict[str, ModelInfo] = {
    info.name: info
    for info in (
        ModelInfo("mlp", "Keskar F1 fully connected net; options widths, batch_norm, dropout", build_mlp, _count_mlp),
        ModelInfo("cnn", "small C1-like conv net; options filters, kernel_size, dense, batch_norm, dropout", build_cnn, _count_cnn),
        ModelInfo("resnet", "small residual net with BN; options widths, blocks_per_stage", build_resnet, _count_resnet),
        ModelInfo("vit", "small Vision Transformer; options patch_size, dim, depth, heads, mlp_ratio, dropout", build_vit, _count_vit),
    )
}


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# Layers no small model of the zoo needs more of: a model of thousands of layers takes hours to build
# before its first step, however few weights it has (those are checked against memory).
MAX_ZOO_LAYERS = 64


def _is_counts(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and len(value) <= MAX_ZOO_LAYERS and all(_is_count(item) for item in value)


# The widest ``vit`` (ViT-22B is 6144 wide): the divisors of its width, which ``heads`` must be, are listed in its error.
MAX_VIT_DIM = 2**16

# What each option of the zoo must be: checked before a model is built, because an impossible
# layer (a Dense of width 0) is not a Python error but an abort inside oneDNN that ends the process.
OPTION_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "widths": (f"a list of at most {MAX_ZOO_LAYERS} positive integers", _is_counts),
    "filters": (f"a list of at most {MAX_ZOO_LAYERS} positive integers", _is_counts),
    "dense": (f"a list of at most {MAX_ZOO_LAYERS} positive integers", _is_counts),
    "kernel_size": ("a positive integer", _is_count),
    "blocks_per_stage": (f"an integer from 1 to {MAX_ZOO_LAYERS}", lambda value: _is_count(value) and value <= MAX_ZOO_LAYERS),
    "depth": (f"an integer from 1 to {MAX_ZOO_LAYERS}", lambda value: _is_count(value) and value <= MAX_ZOO_LAYERS),
    "patch_size": ("a positive integer or null", lambda value: value is None or _is_count(value)),
    "dim": (f"an integer from 1 to {MAX_VIT_DIM}", lambda value: _is_count(value) and value <= MAX_VIT_DIM),
    "heads": ("a positive integer", _is_count),
    "mlp_ratio": ("a positive integer", _is_count),
    "virtual_batch_size": ("a positive integer", _is_count),
    "batch_norm": ("true or false", lambda value: isinstance(value, bool)),
    "dropout": ("a number in [0, 1)", lambda value: isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1),
}


def model_options(name: str) -> tuple[str, ...]:
    """The options model ``name`` takes: the keyword-only arguments of its body builder."""
    parameters = inspect.signature(model_info(name).build_body).parameters.values()
    return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


def check_model_options(name: str, options: dict[str, Any]) -> None:
    """Raises ``ModelError`` naming the first option ``name`` does not take (with the allowed
    ones and the closest match) or whose value it cannot build (see ``OPTION_RULES``).

    >>> check_model_options("mlp", {"widths": [64, 0]})
    Traceback (most recent call last):
      ...
    lbtrain.models.ModelError: widths must be a list of at most 64 positive integers, got [64, 0]
    >>> check_model_options("mlp", {"widht": [64]})
    Traceback (most recent call last):
      ...
    lbtrain.models.ModelError: unknown option 'widht' for model 'mlp' (did you mean 'widths'? allowed: widths, batch_norm, dropout, virtual_batch_size)
    """
    allowed = model_options(name)
    for key, value in options.items():
        if key not in allowed:
            raise ModelError(f"unknown option {key!r} for model {name!r} ({did_you_mean(key, allowed)}allowed: {', '.join(allowed)})")
        what, valid = OPTION_RULES[key]
        if not valid(value):
            raise ModelError(f"{key} must be {what}, got {quote(value)}")
    if name == "resnet" and not options.get("widths", (16,)):
        raise ModelError("widths must name at least one stage for model 'resnet', got []")
    if name == "vit":
        dim, heads = options.get("dim", 64), options.get("heads", 4)
        if dim % heads:
            divisors = [str(d) for d in range(1, dim + 1) if dim % d == 0]
            raise ModelError(f"heads must divide dim ({dim}) for model 'vit', got {heads} (allowed: {', '.join(divisors)})")


def parameter_count(name: str, input_shape: Sequence[int], num_classes: int, options: dict[str, Any]) -> int:
    """The number of weights zoo model ``name`` would have, counted from its options without
    building it (convolutions and dense layers with their biases; the resnet's batch norms left
    out, the vit's layer norms counted: its count is ``count_params()`` of the built model).

    >>> parameter_count("mlp", (40,), 10, {"widths": [16]}), parameter_count("cnn", (28, 28, 1), 10, {})
    (826, 857738)
    >>> parameter_count("vit", (28, 28, 1), 10, {})
    104906
    """
    info = model_info(name)
    defaults = {key: parameter.default for key, parameter in inspect.signature(info.build_body).parameters.items()}
    count, width = info.count_body(input_shape, {**defaults, **options})
    return count + width * num_classes + num_classes


# Bytes a weight takes while training: float32 weights, their gradients and two optimizer slots (Adam's, LAMB's).
TRAINING_BYTES_PER_WEIGHT = 16


def check_model_fits(name: str, input_shape: Sequence[int], num_classes: int, options: dict[str, Any]) -> None:
    """``ModelError`` when zoo model ``name`` could not be trained in this machine's memory
    (``parameter_count`` weights of ``TRAINING_BYTES_PER_WEIGHT`` bytes), before it is built."""
    count = parameter_count(name, input_shape, num_classes, options)
    problem = memory_problem(count * TRAINING_BYTES_PER_WEIGHT, f"model {name!r}: its {count:.3g} weights (with gradients and optimizer state)")
    if problem is not None:
        raise ModelError(f"{problem}; make it smaller (model.options) or check the number of classes ({num_classes})")


def model_info(name: str) -> ModelInfo:
    """The registry entry for ``name``; an unknown name lists the valid ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r} (allowed: {', '.join(MODELS)})") from None


def build_zoo_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    **options,
) -> tf.keras.Model:
    """Zoo model ``name`` (a key of ``MODELS``) ending in a Dense layer of ``num_classes`` logits;
    ``virtual_batch_size`` in ``options`` makes every batch norm a ghost batch norm."""
    check_model_options(name, options)
    check_model_fits(name, input_shape, num_classes, options)
    inputs = tf.keras.Input(shape=input_shape, name="inputs")
    body = model_info(name).build_body(inputs, input_shape, num_classes, **options)
    logits = tf.keras.layers.Dense(num_classes, name="logits")(body)
    return tf.keras.Model(inputs, logits, name=name)
