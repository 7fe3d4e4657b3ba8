"""What ``lbtrain bench`` measures: a configuration (``Case``: a model, a per-worker batch, a
world), how every one is measured (``Settings``), the synthetic data a model is fed
(``bench_input``), the checks of the models and the device before anything runs, and the
measuring of one configuration in its own processes (``measure_case``).

Models: the zoo (``mlp``, ``cnn``, ``resnet``), Keras's ResNet-50 (``resnet50``) and any name
``lbtrain.models.model_source`` resolves (a reference ``package.module:function``, a registered
name, ``keras.applications.<Name>``), each child resolving it again (it inherits the current
folder and the environment). They are built for ``Settings.input_shape`` and ``classes`` (default:
Fashion-MNIST's shape, ImageNet's for ``resnet50``); a model that does not resolve, does not
build, or whose output does not fit is a one-line error before anything runs (``check_models``,
``check_models_fit``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Sequence

from lbtrain.bench.processes import CaseFailed, child_command, run_child
from lbtrain.bench.settings import Settings
from lbtrain.bench.worlds import BenchError, WorldSpec

DEVICES = ("cpu", "gpu")
DEFAULT_MODELS = ("mlp", "cnn", "resnet")
# Keras's ResNet-50 (tf_cnn_benchmarks' reference model), benchmarked by default only on a GPU.
GPU_MODELS = ("resnet50",)
DEFAULT_BATCHES = (64,)
# The models see Fashion-MNIST's shape (unless told otherwise); ResNet-50 ImageNet's.
ZOO_INPUT = ((28, 28, 1), 10)
RESNET50_INPUT = ((224, 224, 3), 1000)
MIN_STEPS = 5


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration: a model, a per-worker batch and a world."""

    model: str
    per_worker_batch: int
    world: WorldSpec



def bench_input(model: str, settings: Settings = Settings()) -> tuple[tuple[int, ...], int]:
    """``(input_shape, classes)`` of the synthetic data ``model`` is built for and fed.

    >>> bench_input("my_pkg.models:build", Settings(classes=3))
    ((28, 28, 1), 3)
    >>> bench_input("resnet50", Settings(input_shape=(64, 64, 3)))
    ((64, 64, 3), 1000)
    """
    default_shape, default_classes = RESNET50_INPUT if model == "resnet50" else ZOO_INPUT
    shape = default_shape if settings.input_shape is None else tuple(int(d) for d in settings.input_shape)
    return shape, default_classes if settings.classes is None else int(settings.classes)


def default_models(device: str) -> list[str]:
    """The zoo models, and ResNet-50 too on a GPU."""
    return [*DEFAULT_MODELS, *(GPU_MODELS if device == "gpu" else ())]


def model_names(models: Sequence[str | Callable[..., Any]]) -> list[str]:
    """The models by name: a factory given as a Python function becomes its reference
    (``lbtrain.references.reference_of``), which ``check_models`` refuses if no other process can
    import it."""
    from lbtrain.references import reference_of

    return [model if isinstance(model, str) else reference_of(model) for model in models]


def check_models(models: Sequence[str]) -> None:
    """Resolves every name as the children will (``lbtrain.models.model_source``; ``resnet50``
    is Keras's ResNet-50). Raises ``ModelError`` for a reference that does not import (or names
    nothing callable), ``BenchError`` for an unknown name or a model only this process can build
    (every configuration runs in a fresh process)."""
    from lbtrain.models import MODELS, ModelError, model_source
    from lbtrain.references import MODEL_REGISTRY, is_reference
    from lbtrain.spelling import did_you_mean

    for name in models:
        if name in GPU_MODELS:
            continue
        try:
            source = model_source(name)
        except ModelError:
            if is_reference(name) or name.startswith(("keras.", "tf.keras.")):
                raise
            known = [*MODELS, *GPU_MODELS, *MODEL_REGISTRY.names()]
            raise BenchError(f"unknown model {name!r} ({did_you_mean(name, known)}allowed: {', '.join(known)}, "
                             "a reference package.module:function, or keras.applications.<Name>)") from None
        if source.process_local:
            raise BenchError(f"model {name!r} can be built only in this process (a lambda, a closure, a function of "
                             "__main__ or registered from one), and the bench builds it in fresh processes: "
                             "define it in a module that can be imported")


def _needs_check(name: str, settings: Settings) -> bool:
    """Whether ``name`` might not build or fit: anything but lbtrain's own models at their own shapes."""
    from lbtrain.models import MODELS

    return name not in (*MODELS, *GPU_MODELS) or settings.input_shape is not None or settings.classes is not None


def check_models_fit(models: Sequence[str], batches: Sequence[int], worlds: Sequence[WorldSpec],
                     settings: Settings = Settings()) -> None:
    """Builds every model that might not fit (``_needs_check``) in a fresh process, as the
    measuring children will, for its synthetic data (``bench_input``), with ghost batch norm if
    a simulated world of several workers is among ``worlds``; raises ``BenchError`` (the first
    model's one line) for one that does not build, does not take the input, or whose output is
    not one logit per class. Runs nothing when no model needs it."""
    if settings.classes is not None and settings.classes < 2:
        raise BenchError(f"classes={settings.classes}: the synthetic labels need at least 2 classes "
                         "(a model with one output: 2 classes, binary)")
    if settings.input_shape is not None and (not settings.input_shape or min(settings.input_shape) < 1):
        raise BenchError(f"input_shape: expected whole numbers >= 1, got {settings.input_shape}")
    names = [name for name in dict.fromkeys(models) if _needs_check(name, settings)]
    if not names:
        return
    ghost = any(world.setup.feeds_all_workers and not world.setup.mirrored_devices and world.size > 1 for world in worlds)
    specs = [dict(zip(("input_shape", "classes"), bench_input(name, settings)), name=name) for name in names]
    job = {"models": specs, "seed": settings.seed, "ghost_bn_batch": min(batches) if ghost and batches else None}
    try:
        problems = run_child(child_command("--check", json.dumps(job)))["problems"]
    except CaseFailed as error:
        raise BenchError(f"building {', '.join(names)} to check them failed: {error}") from None
    for name in names:
        if name in problems:
            raise BenchError(problems[name])


def check_device(device: str) -> None:
    """Raises ``BenchError`` for ``gpu`` on a machine where TensorFlow sees none."""
    if device not in DEVICES:
        raise BenchError(f"unknown device {device!r} (allowed: {', '.join(DEVICES)})")
    if device == "gpu":
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU"):
            raise BenchError("--device gpu: TensorFlow sees no GPU on this machine (run with --device cpu)")


def job_of(case: Case, settings: Settings, steps: int | None) -> dict:
    """What a child needs to measure ``case`` (JSON-ready; ``run_job`` reads it)."""
    input_shape, classes = bench_input(case.model, settings)
    return {"model": case.model, "input_shape": list(input_shape), "classes": classes,
            "batch": case.per_worker_batch, "kind": case.world.kind, "size": case.world.size,
            "device": settings.device, "threads": settings.threads, "steps": settings.steps if steps is None else steps,
            "seconds": settings.seconds, "warmup": settings.warmup_steps, "seed": settings.seed, "pin": settings.pin_cores,
            "groups": settings.allreduce_groups, "idle": settings.idle_horovod_threads, "pipeline": settings.input_pipeline}


def measure_case(case: Case, settings: Settings, steps: int | None = None) -> dict:
    """Runs one configuration in its own process(es) for ``steps`` measured steps per worker
    (default ``settings.steps``; None: about ``settings.seconds``); returns its result
    (``images``, ``seconds``, ``steps``, ``train_flops_per_sample``, ...). Raises ``CaseFailed``."""
    return case.world.setup.starter.run(job_of(case, settings, steps), settings)


def measure_peak_flops() -> float:
    """The machine's float32 matmul FLOP/s, measured in a fresh process with TensorFlow's
    default threads (all cores)."""
    return run_child(child_command("--peak"))["flops"]
