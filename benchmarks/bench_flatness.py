"""What the two flatness measures beyond sharpness cost, in training epochs, measured side by side.

(a) ``hessian_top_eigenvalue`` with its defaults (a fixed subset of 500 training images, power
    iteration to a relative change below 1e-3, at most 100 Hessian-vector products);
(b) ``pac_bayes_flatness`` with its defaults (a fixed subset of 500 training images, Jiang et
    al.'s accuracy deviation 0.1 within 0.01, at most 15 bisection steps of 10 Monte-Carlo
    perturbations each);

each timed on the weights a run just trained, divided by a steady-state training epoch of that
run. The target is at most 2 epochs each (the median over rounds; the JSON also keeps the slowest). Fashion-MNIST mlp 512-512 on 20000 images, 8
simulated workers x 128, 3 epochs (the setup of bench_analysis.py). Each round trains a fresh
run; the median ratio is reported. Writes results/benchmarks/flatness.json.

    python benchmarks/bench_flatness.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from lbtrain.config import run_config_from_dict  # noqa: E402
from lbtrain.data import load_dataset  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.measures.flatness import hessian_top_eigenvalue, pac_bayes_flatness  # noqa: E402
from lbtrain.trainer import train  # noqa: E402
from lbtrain.worlds.simulated import SimulatedWorld  # noqa: E402

tf.get_logger().setLevel("ERROR")
SUBSET, WORLD, BATCH, EPOCHS = 20000, 8, 128, 3
TARGET_EPOCHS = 2.0


def run_spec(seed: int) -> dict:
    return {
        "data": {"dataset": "fashion_mnist", "train_subset": SUBSET},
        "model": {"name": "mlp", "options": {"widths": [512, 512]}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 128, "rule": "sqrt"},
        "training": {"world_size": WORLD, "per_worker_batch": BATCH, "epochs": EPOCHS, "checkpoint": False, "seed": seed},
    }


def trained(seed: int) -> tuple[float, tf.keras.Model]:
    """A freshly trained model and the mean time of its epochs after the first (seconds)."""
    result = train(run_config_from_dict(run_spec(seed)), SimulatedWorld(WORLD))
    epoch_samples = result.steps_per_epoch * result.global_batch
    return statistics.mean(epoch_samples / row["samples_per_second"] for row in result.history[1:]), result.model


def timed(measure) -> tuple[float, object]:
    started = time.perf_counter()
    found = measure()
    return time.perf_counter() - started, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = load_dataset("fashion_mnist", train_subset=SUBSET)
    hessian_epochs, pac_bayes_epochs, found = [], [], []
    for round_index in range(args.rounds):
        epoch, model = trained(round_index)
        hessian_seconds, eigenvalue = timed(lambda: hessian_top_eigenvalue(model, data))
        pac_bayes_seconds, flatness = timed(lambda: pac_bayes_flatness(model, data))
        hessian_epochs.append(hessian_seconds / epoch)
        pac_bayes_epochs.append(pac_bayes_seconds / epoch)
        found.append({"epoch_seconds": epoch, "hessian": dataclasses.asdict(eigenvalue), "pac_bayes": dataclasses.asdict(flatness)})
        print(f"round {round_index + 1}: epoch {epoch:.2f} s; top eigenvalue {eigenvalue.value:.3g} after "
              f"{eigenvalue.iterations} products, {hessian_seconds:.2f} s = {hessian_epochs[-1]:.2f} epochs; PAC-Bayes "
              f"flatness {flatness.value:.3g} (sigma {flatness.sigma:.4f}, {flatness.iterations} steps), "
              f"{pac_bayes_seconds:.2f} s = {pac_bayes_epochs[-1]:.2f} epochs", flush=True)
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "tensorflow": tf.__version__},
        "setup": {"dataset": "fashion_mnist", "train_subset": SUBSET, "world_size": WORLD, "per_worker_batch": BATCH,
                  "model": "mlp 512-512", "epochs": EPOCHS, "rounds": args.rounds, "defaults": "function defaults"},
        "target_epochs": TARGET_EPOCHS,
        "hessian_seconds_in_epochs": statistics.median(hessian_epochs),
        "pac_bayes_seconds_in_epochs": statistics.median(pac_bayes_epochs),
        "hessian_seconds_in_epochs_max": max(hessian_epochs),
        "pac_bayes_seconds_in_epochs_max": max(pac_bayes_epochs),
        "rounds": found,
    }
    path = write_json_atomic(Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "flatness.json", report)
    print(f"median (max) in training epochs: hessian_top_eigenvalue {report['hessian_seconds_in_epochs']:.2f} "
          f"({report['hessian_seconds_in_epochs_max']:.2f}), pac_bayes_flatness {report['pac_bayes_seconds_in_epochs']:.2f} "
          f"({report['pac_bayes_seconds_in_epochs_max']:.2f}); target <= {TARGET_EPOCHS:g}; wrote {path}")


if __name__ == "__main__":
    main()
