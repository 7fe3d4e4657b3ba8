"""What lbtrain's measurements cost a run, as ratios measured side by side.

(a) gradient noise scale: the same run with ``analysis.noise_scale`` (every 10 steps) and
    without; ratio of steady-state epoch times (each measurement is one extra global batch of
    forward and backward passes, so about 1 + 1/10 is expected).
(b) sharpness: the time of ``lbtrain.analysis.flatness.sharpness`` (full space, 10 L-BFGS-B iterations)
    on the training set, in training epochs of the same run.

Fashion-MNIST mlp 512-512 on 20000 images, 8 simulated workers x 128. Rounds alternate the two
sides; the median ratio is reported. Writes results/benchmarks/analysis.json.

    python benchmarks/bench_analysis.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from lbtrain.analysis.flatness import sharpness  # noqa: E402
from lbtrain.config import run_config_from_dict  # noqa: E402
from lbtrain.data import load_dataset  # noqa: E402
from lbtrain.distributed import SimulatedWorld  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.trainer import train  # noqa: E402

tf.get_logger().setLevel("ERROR")
SUBSET, WORLD, BATCH, EPOCHS = 20000, 8, 128, 3


def run_spec(noise_scale: bool) -> dict:
    return {
        "data": {"dataset": "fashion_mnist", "train_subset": SUBSET},
        "model": {"name": "mlp", "options": {"widths": [512, 512]}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 128, "rule": "sqrt"},
        "training": {"world_size": WORLD, "per_worker_batch": BATCH, "epochs": EPOCHS, "checkpoint": False},
        "analysis": {"noise_scale": noise_scale, "noise_scale_every": 10},
    }


def steady_epoch_seconds(noise_scale: bool) -> tuple[float, tf.keras.Model]:
    result = train(run_config_from_dict(run_spec(noise_scale)), SimulatedWorld(WORLD))
    epoch_samples = result.steps_per_epoch * result.global_batch
    return statistics.mean(epoch_samples / row["samples_per_second"] for row in result.history[1:]), result.model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = load_dataset("fashion_mnist", train_subset=SUBSET)
    noise_ratios, sharpness_epochs = [], []
    for round_index in range(args.rounds):
        plain, model = steady_epoch_seconds(False)
        measured, _ = steady_epoch_seconds(True)
        noise_ratios.append(measured / plain)
        started = time.perf_counter()
        sharpness(model, data)
        sharpness_epochs.append((time.perf_counter() - started) / plain)
        print(f"round {round_index + 1}: noise scale epoch {measured:.2f} s vs {plain:.2f} s (x{noise_ratios[-1]:.3f}); "
              f"sharpness = {sharpness_epochs[-1]:.1f} epochs", flush=True)
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "setup": {"dataset": "fashion_mnist", "train_subset": SUBSET, "world_size": WORLD, "per_worker_batch": BATCH,
                  "model": "mlp 512-512", "noise_scale_every": 10, "rounds": args.rounds},
        "noise_scale_epoch_time_ratio": statistics.median(noise_ratios),
        "sharpness_seconds_in_epochs": statistics.median(sharpness_epochs),
    }
    path = write_json_atomic(Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "analysis.json", report)
    print(f"noise scale every 10 steps: epoch time x{report['noise_scale_epoch_time_ratio']:.3f}; "
          f"sharpness: {report['sharpness_seconds_in_epochs']:.1f} training epochs; wrote {path}")


if __name__ == "__main__":
    main()
