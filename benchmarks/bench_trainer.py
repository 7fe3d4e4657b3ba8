"""What lbtrain's trainer costs, and how well its worlds scale, as ratios measured side by side.

(a) trainer overhead: ``lbtrain.trainer.train`` vs a plain ``model.fit`` of the same model,
    data pipeline, optimizer and epochs; ratio of steady-state epoch times (target <= 1.05).
(b) Horovod scaling: ``horovodrun -np 2`` with one TensorFlow thread per rank vs one process
    with one thread, same per-worker batch; efficiency = throughput(np=2) / (2 x throughput(np=1))
    (target >= 0.85).
(c) simulation cost: a simulated world of 64 x 8 vs one worker x 512 (same global batch),
    on models with batch norm (mlp, cnn, resnet), where ghost BN does the extra work; time
    ratio (target <= 1.10, issue 18).

Steady state = epochs after the first (which traces). Rounds alternate the two sides of each
comparison so machine noise hits both; the median ratio over rounds is reported. Writes
results/benchmarks/trainer.json; ``--parts`` measures some of (a), (b), (c) and keeps the
stored results of the others.

    python benchmarks/bench_trainer.py [--rounds 3] [--quick] [--parts abc]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import yaml  # noqa: E402
from epoch_timer import mean_fit_epoch_seconds  # noqa: E402  (benchmarks/, beside this script)

from lbtrain.config import run_config_from_dict  # noqa: E402
from lbtrain.data import load_dataset, make_input_pipeline, steps_per_epoch  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.launch.horovodrun import horovodrun_command  # noqa: E402
from lbtrain.models import build_model  # noqa: E402
from lbtrain.optimizers import build_optimizer  # noqa: E402
from lbtrain.schedules import build_schedule  # noqa: E402
from lbtrain.trainer import train  # noqa: E402
from lbtrain.worlds.simulated import SimulatedWorld  # noqa: E402

tf.get_logger().setLevel("ERROR")
TARGETS = {"trainer_overhead": 1.05, "horovod_scaling_efficiency": 0.85, "simulated_w64_vs_w1": 1.10}
PARTS = {"a": "trainer_overhead", "b": "horovod_scaling_efficiency", "c": "simulated_w64_vs_w1"}
BATCH_NORM_MODELS = {
    "mlp_batch_norm": {"name": "mlp", "options": {"batch_norm": True}},
    "cnn_batch_norm": {"name": "cnn", "options": {"batch_norm": True}},
    "resnet_batch_norm": {"name": "resnet"},
}


def run_spec(model: dict, world_size: int, per_worker_batch: int, epochs: int, subset: int, rule: str = "linear") -> dict:
    return {
        "data": {"dataset": "fashion_mnist", "train_subset": subset},
        "model": model,
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 128, "rule": rule},
        "training": {"world_size": world_size, "per_worker_batch": per_worker_batch, "epochs": epochs, "checkpoint": False},
    }


def steady_epoch_seconds(samples_per_second: list[float], steps: int, global_batch: int) -> float:
    return statistics.mean(steps * global_batch / value for value in samples_per_second[1:])


def plain_fit_epoch_seconds(spec: dict) -> float:
    """The same model, pipeline and optimizer through a bare ``model.fit``: the baseline."""
    config = run_config_from_dict(spec)
    settings = config.training
    data = load_dataset(config.data.dataset, train_subset=config.data.train_subset, seed=settings.seed)
    steps = steps_per_epoch(len(data.x_train), settings.per_worker_batch, 1)
    schedule = build_schedule(config.lr.schedule_spec(), steps_per_epoch=steps, base_lr=config.lr.base_lr,
                              base_batch=config.lr.base_batch, global_batch=settings.per_worker_batch, total_epochs=settings.epochs)
    model = build_model(config.model.name, data.input_shape, data.num_classes, seed=settings.seed, **config.model.options)
    model.compile(optimizer=build_optimizer(config.optimizer.name, schedule),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    pipeline = make_input_pipeline(data.x_train, data.y_train, per_worker_batch=settings.per_worker_batch, rank=0,
                                   world_size=1, seed=settings.seed, training=True)
    return mean_fit_epoch_seconds(model, pipeline, settings.epochs, steps)


def trainer_epoch_seconds(spec: dict) -> float:
    config = run_config_from_dict(spec)
    result = train(config, SimulatedWorld(config.training.world_size))
    return steady_epoch_seconds([row["samples_per_second"] for row in result.history], result.steps_per_epoch, result.global_batch)


def cli_samples_per_second(spec: dict, processes: int) -> float:
    """Runs ``lbtrain train`` with one thread per process (under horovodrun when processes > 1)."""
    with tempfile.TemporaryDirectory() as folder:
        config_path, run_dir = Path(folder) / "run.yaml", Path(folder) / "run"
        config_path.write_text(yaml.safe_dump(spec))
        command = [str(Path(sys.executable).parent / "lbtrain"), "train", str(config_path), "--run-dir", str(run_dir), "--threads", "1"]
        if processes > 1:
            command = horovodrun_command(processes, command, args=["--gloo"])
        subprocess.run(command, check=True, capture_output=True, text=True)
        history = json.loads((run_dir / "metrics.json").read_text())["history"]
    return statistics.mean(row["samples_per_second"] for row in history[1:])


def median_ratio(numerator, denominator, rounds: int) -> tuple[float, list[float], list[float]]:
    tops, bottoms = [], []
    for _ in range(rounds):
        tops.append(numerator())
        bottoms.append(denominator())
    return statistics.median(t / b for t, b in zip(tops, bottoms)), tops, bottoms


def measure_trainer_overhead(rounds: int, subset: int) -> dict:
    spec = run_spec({"name": "mlp"}, 1, 128, 4, subset)
    ratio, trainer_times, plain_times = median_ratio(lambda: trainer_epoch_seconds(spec), lambda: plain_fit_epoch_seconds(spec), rounds)
    print(f"(a) trainer / plain fit epoch time: {ratio:.3f} (target <= {TARGETS['trainer_overhead']})")
    return {"ratio": ratio, "trainer_epoch_seconds": trainer_times, "plain_fit_epoch_seconds": plain_times,
            "setup": "mlp 512-512, fashion_mnist, batch 128, momentum SGD"}


def measure_horovod_scaling(rounds: int, subset: int) -> dict:
    cnn = {"name": "cnn"}
    spec_one, spec_two = run_spec(cnn, 1, 128, 3, subset // 2), run_spec(cnn, 2, 128, 3, subset // 2)
    efficiency, two, one = median_ratio(lambda: cli_samples_per_second(spec_two, 2), lambda: 2 * cli_samples_per_second(spec_one, 1), rounds)
    print(f"(b) horovodrun -np 2 scaling efficiency: {efficiency:.3f} (target >= {TARGETS['horovod_scaling_efficiency']})")
    return {"efficiency": efficiency, "np2_samples_per_second": two, "twice_np1_samples_per_second": one,
            "setup": "cnn, fashion_mnist, 128 per worker, 1 thread per process"}


def measure_simulation_cost(rounds: int, subset: int) -> dict:
    results = {}
    for name, model in BATCH_NORM_MODELS.items():
        # The unscaled LR: the linear rule's 0.2 at batch 512 blows the cnn up within 3 steps and
        # the divergence guard ends the run (its speed is measured here, not the recipe).
        spec_64, spec_1 = run_spec(model, 64, 8, 3, subset, "none"), run_spec(model, 1, 512, 3, subset, "none")
        ratio, t64, t1 = median_ratio(lambda: trainer_epoch_seconds(spec_64), lambda: trainer_epoch_seconds(spec_1), rounds)
        results[name] = {"ratio": ratio, "w64_epoch_seconds": t64, "w1_epoch_seconds": t1}
        print(f"(c) simulated W=64 x 8 / W=1 x 512 epoch time, {name}: {ratio:.3f} (target <= {TARGETS['simulated_w64_vs_w1']})")
    return results


MEASURES = {"a": measure_trainer_overhead, "b": measure_horovod_scaling, "c": measure_simulation_cost}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller subsets, one round")
    parser.add_argument("--parts", default="abc", help="which comparisons to measure (a, b, c); the others keep their stored results")
    parser.add_argument("--output", default="results/benchmarks/trainer.json")
    args = parser.parse_args()
    if not args.parts or set(args.parts) - set(PARTS):
        parser.error(f"--parts takes letters among {''.join(PARTS)}, got {args.parts!r}")
    rounds = 1 if args.quick else args.rounds
    subset = 4096 if args.quick else 16384
    output = Path(args.output)
    previous = json.loads(output.read_text()) if output.is_file() else {}
    results, settings = {}, {}
    for part, key in PARTS.items():
        if part in args.parts:
            results[key], settings[key] = MEASURES[part](rounds, subset), {"rounds": rounds, "train_subset": subset}
        elif key in previous.get("results", {}):
            # Kept from an earlier run, with that run's settings (older files stored one set for all).
            results[key] = previous["results"][key]
            settings[key] = previous["settings"].get(key, previous["settings"])
    report = {"benchmark": "trainer", "targets": TARGETS, "results": results, "settings": settings,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "tensorflow": tf.__version__}}
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(output, report)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
