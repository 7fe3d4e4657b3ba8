"""What lbtrain's measurements cost a run, as ratios measured side by side.

(a) gradient noise scale: the same run with ``analysis.noise_scale`` (measured inside every
    train step, ``lbtrain.train_step``) and without; ratio of steady-state epoch times (the
    first epoch, which compiles, is left out). Target <= 1.05 (issue 17). Three setups: a
    simulated world of 8 x 128 and one worker of 1024 (both split in 2 pieces) on the mlp, and
    8 x 32 on the cnn with (ghost) batch norm.
(b) sharpness: the time of ``lbtrain.measures.flatness.sharpness`` (full space, 10 L-BFGS-B iterations)
    on the training set, in training epochs of the same run (the mlp, 8 x 128).

Fashion-MNIST, all 60000 training images for the mlp 512-512 (about a second an epoch: shorter
epochs are mostly noise), 5000 for the cnn. Within a round the side that runs first alternates
from round to round; the median ratio over rounds is reported. Writes results/benchmarks/analysis.json.

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

from lbtrain.config import run_config_from_dict  # noqa: E402
from lbtrain.data import load_dataset  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.measures.flatness import sharpness  # noqa: E402
from lbtrain.trainer import train  # noqa: E402
from lbtrain.worlds.simulated import SimulatedWorld  # noqa: E402

tf.get_logger().setLevel("ERROR")
EPOCHS = 4
MLP = {"name": "mlp", "options": {"widths": [512, 512]}}
CNN = {"name": "cnn", "options": {"batch_norm": True}}
# name: (model, train subset, world size, per-worker batch)
SETUPS = {
    "mlp_w8x128": (MLP, 60000, 8, 128),
    "mlp_w1x1024": (MLP, 60000, 1, 1024),
    "cnn_batch_norm_w8x32": (CNN, 5000, 8, 32),
}
SUBSET = SETUPS["mlp_w8x128"][1]


def run_spec(setup: str, noise_scale: bool) -> dict:
    model, subset, world, batch = SETUPS[setup]
    return {
        "data": {"dataset": "fashion_mnist", "train_subset": subset},
        "model": model,
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 128, "rule": "sqrt"},
        "training": {"world_size": world, "per_worker_batch": batch, "epochs": EPOCHS, "checkpoint": False},
        "analysis": {"noise_scale": noise_scale},
    }


def steady_epoch_seconds(setup: str, noise_scale: bool) -> tuple[float, tf.keras.Model]:
    config = run_config_from_dict(run_spec(setup, noise_scale))
    result = train(config, SimulatedWorld(config.training.world_size))
    epoch_samples = result.steps_per_epoch * result.global_batch
    return statistics.mean(epoch_samples / row["samples_per_second"] for row in result.history[1:]), result.model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = load_dataset("fashion_mnist", train_subset=SUBSET)
    noise_ratios: dict[str, list[float]] = {setup: [] for setup in SETUPS}
    sharpness_epochs = []
    for round_index in range(args.rounds):
        for setup in SETUPS:
            sides = (False, True) if round_index % 2 == 0 else (True, False)
            timed = {noise_scale: steady_epoch_seconds(setup, noise_scale) for noise_scale in sides}
            (plain, model), (measured, _) = timed[False], timed[True]
            noise_ratios[setup].append(measured / plain)
            print(f"round {round_index + 1}, {setup}: noise scale in every step {measured:.2f} s vs {plain:.2f} s "
                  f"an epoch (x{noise_ratios[setup][-1]:.3f})", flush=True)
            if setup == "mlp_w8x128":
                started = time.perf_counter()
                sharpness(model, data)
                sharpness_epochs.append((time.perf_counter() - started) / plain)
                print(f"round {round_index + 1}: sharpness = {sharpness_epochs[-1]:.1f} epochs", flush=True)
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "setup": {"dataset": "fashion_mnist", "rounds": args.rounds, "noise_scale": "every step, 2 pieces",
                  "setups": {name: {"model": model["name"], **model["options"], "train_subset": subset, "world_size": world,
                                    "per_worker_batch": batch} for name, (model, subset, world, batch) in SETUPS.items()}},
        "noise_scale_epoch_time_ratio": {setup: statistics.median(ratios) for setup, ratios in noise_ratios.items()},
        "target_noise_scale_epoch_time_ratio": 1.05,
        "sharpness_seconds_in_epochs": statistics.median(sharpness_epochs),
    }
    path = write_json_atomic(Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "analysis.json", report)
    ratios = ", ".join(f"{setup} x{ratio:.3f}" for setup, ratio in report["noise_scale_epoch_time_ratio"].items())
    print(f"noise scale in every step, epoch time: {ratios} (target <= 1.05); "
          f"sharpness: {report['sharpness_seconds_in_epochs']:.1f} training epochs; wrote {path}")


if __name__ == "__main__":
    main()
