"""lbtrain's input pipeline without tf.data's autotuning model against the same pipeline with it.

``lbtrain.data.make_input_pipeline`` turns the autotuning model off (``Options.autotune.enabled
= False``): destroying an autotuned iterator sometimes waits out the rest of the model's
optimization interval, which doubles from 10 ms up to 60 s while the iterator lives. Two
measurements, side by side in one run, on Fashion-MNIST-shaped arrays (60,000 x 28 x 28 x 1):

- samples per second of one rank's training stream at each batch of ``BATCHES``, lbtrain's
  pipeline ("without") and the same with the model turned back on ("with"); rounds run the
  sides in a random order each round, and the median over rounds is printed with the range
  (the JSON keeps every round's figure);
- the seconds ``del iterator`` takes after the iterator has fed batches for ``--alive`` seconds,
  ``--deletions`` times a side, interleaved.

Prints both, the ratio without / with (target: at least 0.9 at every batch: the pipeline must not
become slower) and writes results/benchmarks/pipeline.json.

    python benchmarks/bench_pipeline.py [--rounds 5] [--deletions 8] [--alive 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from lbtrain.data import make_input_pipeline  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402

BATCHES = (32, 256, 4096)
SECONDS_PER_MEASUREMENT = 1.0
WITHOUT_OVER_WITH_TARGET = 0.9
SIDES = ("without", "with")


def pipeline(x: np.ndarray, y: np.ndarray, batch: int, side: str) -> tf.data.Dataset:
    """lbtrain's training pipeline of rank 0 of 1; ``with``: the autotuning model turned back on."""
    data = make_input_pipeline(x, y, per_worker_batch=batch, rank=0, world_size=1, seed=0, training=True)
    if side == "with":
        options = tf.data.Options()
        options.autotune.enabled = True
        data = data.with_options(options)
    assert data.options().autotune.enabled is (side == "with"), side
    return data


def samples_per_second(data: tf.data.Dataset, batch: int) -> float:
    """Samples per second of ``data``'s batches over ``SECONDS_PER_MEASUREMENT`` (whole batches),
    after 20 warm-up batches."""
    iterator = iter(data)
    for _ in range(20):
        next(iterator)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < SECONDS_PER_MEASUREMENT:
        next(iterator)
        steps += 1
    return steps * batch / (time.perf_counter() - start)


def deletion_seconds(data: tf.data.Dataset, alive: float) -> float:
    """Seconds ``del iterator`` takes after the iterator fed a batch every 10 ms for ``alive`` s."""
    iterator = iter(data)
    end = time.perf_counter() + alive
    while time.perf_counter() < end:
        next(iterator)
        time.sleep(0.01)
    start = time.perf_counter()
    del iterator
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--deletions", type=int, default=8)
    parser.add_argument("--alive", type=float, default=2.0, help="seconds each deleted iterator feeds batches first")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((60_000, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 60_000)
    order = random.Random(0)

    throughput: dict[int, dict[str, list[float]]] = {batch: {side: [] for side in SIDES} for batch in BATCHES}
    for _ in range(args.rounds):
        for batch, side in order.sample([(batch, side) for batch in BATCHES for side in SIDES], 2 * len(BATCHES)):
            throughput[batch][side].append(samples_per_second(pipeline(x, y, batch, side), batch))
    deletions: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(args.deletions):
        for side in order.sample(SIDES, 2):
            deletions[side].append(deletion_seconds(pipeline(x, y, 256, side), args.alive))

    batches = {}
    for batch in BATCHES:
        medians = {side: statistics.median(throughput[batch][side]) for side in SIDES}
        ratio = medians["without"] / medians["with"]
        batches[str(batch)] = {"samples_per_second": {side: {"median": medians[side], "samples": throughput[batch][side]}
                                                      for side in SIDES},
                               "without_over_with": ratio}
        spread = {side: f"{min(throughput[batch][side]):.0f}-{max(throughput[batch][side]):.0f}" for side in SIDES}
        print(f"batch {batch:5d}: without the model {medians['without']:10.0f} samples/s ({spread['without']}), with it "
              f"{medians['with']:10.0f} ({spread['with']}): ratio {ratio:.3f} (target >= {WITHOUT_OVER_WITH_TARGET:g})")
    waits = {side: {"max_seconds": max(deletions[side]), "median_seconds": statistics.median(deletions[side]),
                    "over_50_ms": sum(seconds > 0.05 for seconds in deletions[side]), "samples": deletions[side]}
             for side in SIDES}
    for side in SIDES:
        print(f"del iterator after {args.alive:g} s, {side} the model: max {waits[side]['max_seconds']:.3f} s, "
              f"{waits[side]['over_50_ms']} of {args.deletions} over 50 ms")
    write_json_atomic(Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "pipeline.json", {
        "setup": {"arrays": "60000 x 28 x 28 x 1 float32", "rounds": args.rounds,
                  "seconds_per_measurement": SECONDS_PER_MEASUREMENT, "deletions": args.deletions,
                  "alive_seconds": args.alive, "tensorflow": tf.__version__, "machine": platform.machine(),
                  "cpus": os.cpu_count()},
        "targets": {"without_over_with": WITHOUT_OVER_WITH_TARGET},
        "batches": batches, "deletion": waits,
    })


if __name__ == "__main__":
    main()
