"""What compiling the train step with XLA gives, as ratios measured side by side in one run.

For each model (a cnn with batch norm and an mlp, Fashion-MNIST, batch 256, momentum SGD), four
ways to train the same epochs: lbtrain's trainer with ``training.jit_compile`` true and false,
and a plain ``model.fit`` of the same model, data pipeline and optimizer with Keras's
``jit_compile`` True and False. Each side's time is its steady-state epoch (the mean of the epochs
after the first, which traces and compiles); rounds run the four sides in turn, in a new order
each round, so machine noise hits all of them, and the median ratio over rounds is reported.
Each model trains enough epochs for seconds of steady state a side (``MODELS``: the mlp's
epoch is 0.2 s, so it trains 16):

- compiled / uncompiled, for the trainer and for plain fit (below 1: XLA is faster);
- trainer / plain fit, uncompiled and compiled (lbtrain's overhead, target <= 1.03);
- what ``training.jit_compile: auto`` chooses on this machine, and whether that is the faster side.

Writes results/benchmarks/jit.json.

    python benchmarks/bench_jit.py [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from epoch_timer import mean_fit_epoch_seconds  # noqa: E402  (benchmarks/, beside this script)

from lbtrain.config import run_config_from_dict  # noqa: E402
from lbtrain.data import load_dataset, make_input_pipeline, steps_per_epoch  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.models import build_model  # noqa: E402
from lbtrain.objectives import compile_arguments  # noqa: E402
from lbtrain.optimizers import build_optimizer  # noqa: E402
from lbtrain.trainer import resolve_jit_compile, train  # noqa: E402
from lbtrain.worlds.simulated import SimulatedWorld  # noqa: E402

tf.get_logger().setLevel("ERROR")
TRAINER_OVER_FIT_TARGET = 1.03
# Each model with its epochs per side (the first traces and compiles, the rest are timed).
MODELS = {"cnn_batch_norm": ({"name": "cnn", "options": {"batch_norm": True}}, 4), "mlp": ({"name": "mlp"}, 16)}
SIDES = ("trainer_compiled", "trainer_uncompiled", "fit_compiled", "fit_uncompiled")


def run_spec(model: dict, jit_compile: bool, epochs: int, subset: int) -> dict:
    return {
        "data": {"dataset": "fashion_mnist", "train_subset": subset},
        "model": model,
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 256},
        "training": {"per_worker_batch": 256, "epochs": epochs, "checkpoint": False, "jit_compile": jit_compile},
    }


def trainer_epoch_seconds(spec: dict) -> float:
    result = train(run_config_from_dict(spec), SimulatedWorld(1))
    return statistics.mean(result.steps_per_epoch * result.global_batch / row["samples_per_second"] for row in result.history[1:])


def fit_epoch_seconds(spec: dict) -> float:
    """The same model, pipeline, optimizer and schedule through a bare ``model.fit(jit_compile=...)``."""
    config = run_config_from_dict(spec)
    settings = config.training
    tf.keras.utils.set_random_seed(settings.seed)
    data = load_dataset(config.data.dataset, train_subset=config.data.train_subset, seed=settings.seed)
    steps = steps_per_epoch(len(data.x_train), settings.per_worker_batch, 1)
    model = build_model(config.model.name, data.input_shape, data.num_classes, seed=settings.seed, **config.model.options)
    loss, metrics = compile_arguments(model, data)
    model.compile(optimizer=build_optimizer(config.optimizer.name, config.schedule(steps)), loss=loss, metrics=metrics,
                  jit_compile=settings.jit_compile)
    pipeline = make_input_pipeline(data.x_train, data.y_train, per_worker_batch=settings.per_worker_batch, rank=0,
                                   world_size=1, seed=settings.seed, training=True)
    return mean_fit_epoch_seconds(model, pipeline, settings.epochs, steps, shuffle=False)


def measure(model: dict, rounds: int, epochs: int, subset: int, seed: int) -> dict:
    """Every side's steady epoch seconds per round (sides in a new random order each round) and
    the median ratios."""
    measures = {
        "trainer_compiled": lambda: trainer_epoch_seconds(run_spec(model, True, epochs, subset)),
        "trainer_uncompiled": lambda: trainer_epoch_seconds(run_spec(model, False, epochs, subset)),
        "fit_compiled": lambda: fit_epoch_seconds(run_spec(model, True, epochs, subset)),
        "fit_uncompiled": lambda: fit_epoch_seconds(run_spec(model, False, epochs, subset)),
    }
    order, seconds = random.Random(seed), {side: [] for side in SIDES}
    for _ in range(rounds):
        for side in order.sample(SIDES, len(SIDES)):
            seconds[side].append(measures[side]())

    def ratio(top: str, bottom: str) -> float:
        return statistics.median(a / b for a, b in zip(seconds[top], seconds[bottom]))

    return {
        "epoch_seconds": seconds,
        "trainer_compiled_over_uncompiled": ratio("trainer_compiled", "trainer_uncompiled"),
        "fit_compiled_over_uncompiled": ratio("fit_compiled", "fit_uncompiled"),
        "trainer_over_fit_uncompiled": ratio("trainer_uncompiled", "fit_uncompiled"),
        "trainer_over_fit_compiled": ratio("trainer_compiled", "fit_compiled"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smaller subset, one round")
    parser.add_argument("--output", default="results/benchmarks/jit.json")
    args = parser.parse_args()
    rounds, subset = (1, 4096) if args.quick else (args.rounds, 8192)
    epochs_of = {name: 3 if args.quick else epochs for name, (_, epochs) in MODELS.items()}
    auto, why = resolve_jit_compile("auto", SimulatedWorld(1))
    print(f"auto on this machine: {'compiled' if auto else 'not compiled'} ({why})")
    results = {}
    for index, (name, (model, _)) in enumerate(MODELS.items()):
        result = results[name] = measure(model, rounds, epochs_of[name], subset, seed=index)
        faster = result["trainer_compiled_over_uncompiled"] < 1
        result["auto_is_faster_side"] = auto == faster
        print(f"{name}: trainer compiled / uncompiled {result['trainer_compiled_over_uncompiled']:.3f}, "
              f"plain fit compiled / uncompiled {result['fit_compiled_over_uncompiled']:.3f}")
        print(f"{name}: trainer / plain fit, uncompiled {result['trainer_over_fit_uncompiled']:.3f}, compiled "
              f"{result['trainer_over_fit_compiled']:.3f} (target <= {TRAINER_OVER_FIT_TARGET})")
        print(f"{name}: auto ({'compiled' if auto else 'not compiled'}) is the {'faster' if auto == faster else 'slower'} side")
    report = {"benchmark": "jit", "targets": {"trainer_over_fit": TRAINER_OVER_FIT_TARGET}, "auto": {"compiled": auto, "why": why},
              "results": results, "settings": {"rounds": rounds, "train_subset": subset, "batch": 256, "epochs": epochs_of},
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "tensorflow": tf.__version__}}
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(output, report)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
