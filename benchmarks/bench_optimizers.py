"""Time per training step of LARS vs momentum SGD and LAMB vs Adam, side by side.

For the mlp and the cnn on Fashion-MNIST-sized inputs (28x28x1, 10 classes) at global batches
512 and 4096, every optimizer trains the same model from the same weights. Steps are timed in
rounds that interleave the optimizers (so machine noise hits them alike), after warm-up steps
that trace and compile; the figure is the median over rounds of the mean step time in a
round. Prints the ratios LARS/SGD and LAMB/Adam (target: <= 1.15) and writes
results/benchmarks/optimizers.json.

    python benchmarks/bench_optimizers.py [--rounds 7] [--steps 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # one train function per optimizer: retracing warnings are expected

from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.models import build_model  # noqa: E402
from lbtrain.optimizers import LAMB, LARS  # noqa: E402

OPTIMIZERS = {
    "sgd_momentum": lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
    "lars": lambda: LARS(0.1, momentum=0.9, weight_decay=1e-4),
    "adam": lambda: tf.keras.optimizers.Adam(1e-3),
    "lamb": lambda: LAMB(1e-3, weight_decay=0.01),
}
RATIOS = {"LARS/SGD": ("lars", "sgd_momentum"), "LAMB/Adam": ("lamb", "adam")}
TARGET = 1.15


def train_function(model_name: str, optimizer_name: str, batch: int):
    """A compiled model and one fixed batch; returns a callable running one train step."""
    model = build_model(model_name, (28, 28, 1), 10, seed=0)
    model.compile(optimizer=OPTIMIZERS[optimizer_name](), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = tf.constant(rng.random((batch, 28, 28, 1), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, batch))
    return lambda: model.train_on_batch(x, y)


def step_times(model_name: str, batch: int, rounds: int, steps: int, warmup: int) -> dict[str, float]:
    """Median seconds per step for every optimizer, timed in interleaved rounds."""
    steps_of = {name: train_function(model_name, name, batch) for name in OPTIMIZERS}
    for step in steps_of.values():
        for _ in range(warmup):
            step()
    samples: dict[str, list[float]] = {name: [] for name in OPTIMIZERS}
    for _ in range(rounds):
        for name, step in steps_of.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            samples[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="batch 512 only, 3 rounds")
    parser.add_argument("--output", default="results/benchmarks/optimizers.json")
    args = parser.parse_args()
    batches = [512] if args.quick else [512, 4096]
    rounds = 3 if args.quick else args.rounds

    cases = []
    print(f"{'model':<5} {'batch':>5}  " + "  ".join(f"{name:>12}" for name in OPTIMIZERS) + "  " + "  ".join(f"{r:>9}" for r in RATIOS))
    for model_name in ("mlp", "cnn"):
        for batch in batches:
            seconds = step_times(model_name, batch, rounds, args.steps, args.warmup)
            ratios = {label: seconds[a] / seconds[b] for label, (a, b) in RATIOS.items()}
            cases.append({"model": model_name, "batch": batch, "seconds_per_step": seconds, "ratios": ratios})
            print(f"{model_name:<5} {batch:>5}  " + "  ".join(f"{seconds[n] * 1e3:>10.1f}ms" for n in OPTIMIZERS)
                  + "  " + "  ".join(f"{ratios[r]:>9.3f}" for r in RATIOS))

    worst = {label: max(case["ratios"][label] for case in cases) for label in RATIOS}
    for label, value in worst.items():
        verdict = "meets" if value <= TARGET else "MISSES"
        print(f"worst {label} = {value:.3f} ({verdict} the target <= {TARGET})")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "optimizer step time",
        "target_ratio": TARGET,
        "worst_ratios": worst,
        "cases": cases,
        "settings": {"rounds": rounds, "steps_per_round": args.steps, "warmup_steps": args.warmup},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "tensorflow": tf.__version__},
    }
    write_json_atomic(output, report)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
