"""Time per training step of LARS vs momentum SGD and LAMB vs Adam, side by side in one process.

For the mlp and the cnn on Fashion-MNIST-sized inputs (28x28x1, 10 classes) at global batches
512 and 4096, every optimizer trains its own copy of the same model, from the same weights, on
the same batch (``model.compile`` with Keras's defaults, ``train_on_batch``). After warm-up steps
that trace the train functions, steps are timed in rounds: a round is ``--steps`` passes, and
each pass runs one step of every optimizer in a new random order (seeded), so machine noise and
drift hit the optimizers alike and none always runs first or after the same one. Each step is
timed on two clocks:

- ``wall``: elapsed time, what a user waits for; on a shared machine it also measures the other
  processes (on 2 cores, a neighbour's job splits step times into two groups ~1.4x apart);
- ``cpu``: this process's CPU time (all its threads), the work the step did, which another
  process's load hardly changes.

The ratios LARS/SGD and LAMB/Adam are taken within each round (its mean step time per
optimizer); printed and written are their median over rounds with the interquartile range and
the range (min-max). The target, a median ratio <= 1.10 in every case, is judged on the CPU
clock (``JUDGED_CLOCK``); the wall clock's ratios are printed beside it. Then the update alone,
``optimizer.apply_gradients`` on a copy of the model's variables with fixed gradients (compiled as
the train step is), is timed the same way: what each optimizer's own work costs, and how much of
the baseline's step the difference is. Writes results/benchmarks/optimizers.json, with the
machine's load average at the start and the end.

    python benchmarks/bench_optimizers.py [--rounds 9] [--steps 3] [--case cnn:4096 ...] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # one train function per optimizer: retracing warnings are expected

from lbtrain._keras import KERAS_VERSION  # noqa: E402
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
CASES = (("mlp", 512), ("mlp", 4096), ("cnn", 512), ("cnn", 4096))
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
JUDGED_CLOCK = "cpu"
TARGET = 1.10
UPDATES_PER_ROUND = 20  # calls of apply_gradients per optimizer per round: an update takes milliseconds


@dataclass
class Contender:
    """One optimizer's train step (a compiled model and a fixed batch) and its update alone."""

    step: Callable[[], object]
    update: Callable[[], object]
    jit_compile: bool


def contender(model_name: str, optimizer_name: str, batch: int) -> Contender:
    """A compiled model and one fixed batch for the step; for the update, a second copy of the
    model whose variables the optimizer updates with fixed gradients (the first copy keeps
    training on real gradients)."""
    model = build_model(model_name, (28, 28, 1), 10, seed=0)
    model.compile(optimizer=OPTIMIZERS[optimizer_name](), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = tf.constant(rng.random((batch, 28, 28, 1), dtype=np.float32))
    y = tf.constant(rng.integers(0, 10, batch))
    model.train_on_batch(x, y)  # builds the model and resolves Keras's jit_compile "auto"
    jit_compile = bool(getattr(model, "jit_compile", False))

    copy = build_model(model_name, (28, 28, 1), 10, seed=0)
    optimizer = OPTIMIZERS[optimizer_name]()
    gradients = [tf.constant(rng.standard_normal(variable.shape).astype(np.float32) * 1e-3) for variable in copy.trainable_variables]

    @tf.function(jit_compile=jit_compile)
    def update():
        optimizer.apply_gradients(zip(gradients, copy.trainable_variables))

    return Contender(step=lambda: model.train_on_batch(x, y), update=update, jit_compile=jit_compile)


def round_times(runs: dict[str, Callable[[], object]], rounds: int, calls: int, seed: int) -> dict[str, dict[str, list[float]]]:
    """Seconds per call of every run on every clock, one mean per round: a round is ``calls``
    passes, each calling every run once in a new random order (``random.Random(seed)``)."""
    order = random.Random(seed)
    samples = {clock: {name: [] for name in runs} for clock in CLOCKS}
    for _ in range(rounds):
        spent = {clock: dict.fromkeys(runs, 0.0) for clock in CLOCKS}
        for _ in range(calls):
            for name in order.sample(list(runs), len(runs)):
                start = {clock: read() for clock, read in CLOCKS.items()}
                runs[name]()
                for clock, read in CLOCKS.items():
                    spent[clock][name] += read() - start[clock]
        for clock in CLOCKS:
            for name in runs:
                samples[clock][name].append(spent[clock][name] / calls)
    return samples


def spread(values: list[float]) -> dict[str, float]:
    """The median, quartiles (inclusive method: within the range) and range of ``values``."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"median": median, "q1": q1, "q3": q3, "min": min(values), "max": max(values)}


def ratio_spreads(samples: dict[str, dict[str, list[float]]]) -> tuple[dict, dict]:
    """Per clock and pair: the ratio within each round, and its spread over rounds."""
    per_round = {clock: {label: [a / b for a, b in zip(times[top], times[bottom])] for label, (top, bottom) in RATIOS.items()}
                 for clock, times in samples.items()}
    return per_round, {clock: {label: spread(values) for label, values in ratios.items()} for clock, ratios in per_round.items()}


def measure_case(model_name: str, batch: int, rounds: int, steps: int, warmup: int, seed: int) -> dict:
    """One case: step times and ratios per round on both clocks, with their medians and spread,
    then the update alone."""
    contenders = {name: contender(model_name, name, batch) for name in OPTIMIZERS}
    for entry in contenders.values():
        for _ in range(warmup):
            entry.step()
        entry.update()
    steps_taken = round_times({name: entry.step for name, entry in contenders.items()}, rounds, steps, seed)
    round_ratios, spreads = ratio_spreads(steps_taken)
    updates = round_times({name: entry.update for name, entry in contenders.items()}, rounds, UPDATES_PER_ROUND, seed)
    update_seconds = {name: statistics.median(values) for name, values in updates[JUDGED_CLOCK].items()}
    step_seconds = {clock: {name: statistics.median(values) for name, values in times.items()} for clock, times in steps_taken.items()}
    return {
        "model": model_name,
        "batch": batch,
        "jit_compile": next(iter(contenders.values())).jit_compile,
        "seconds_per_step": step_seconds["wall"],
        "cpu_seconds_per_step": step_seconds["cpu"],
        "ratios": {label: values["median"] for label, values in spreads[JUDGED_CLOCK].items()},
        "ratio_spread": spreads,
        "round_ratios": round_ratios,
        "round_seconds_per_step": steps_taken,
        "cpu_seconds_per_update": update_seconds,
        # What the update's extra costs, as a share of the baseline's step (CPU clock both).
        "update_extra_share_of_step": {label: (update_seconds[top] - update_seconds[bottom]) / step_seconds["cpu"][bottom]
                                       for label, (top, bottom) in RATIOS.items()},
    }


def parse_case(text: str) -> tuple[str, int]:
    model_name, _, batch = text.partition(":")
    if model_name not in ("mlp", "cnn") or not batch.isdigit() or int(batch) < 1:
        raise argparse.ArgumentTypeError(f"a case is MODEL:BATCH with MODEL mlp or cnn, e.g. cnn:4096, got {text!r}")
    return model_name, int(batch)


def print_case(case: dict) -> None:
    print(f"{case['model']} batch {case['batch']} (train step jit_compile={case['jit_compile']})")
    print(f"  {'':<13} {'step wall':>11} {'step cpu':>11} {'update cpu':>11}")
    for name in OPTIMIZERS:
        print(f"  {name:<13} {case['seconds_per_step'][name] * 1e3:>9.1f}ms {case['cpu_seconds_per_step'][name] * 1e3:>9.1f}ms"
              f" {case['cpu_seconds_per_update'][name] * 1e3:>9.2f}ms")
    for label in RATIOS:
        spreads = case["ratio_spread"]
        print(f"  {label:<10} cpu {_described(spreads['cpu'][label])}   wall {_described(spreads['wall'][label])}"
              f"   update extra = {case['update_extra_share_of_step'][label]:+.2%} of the step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=3, help="steps per optimizer per round, interleaved one by one")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the optimizers in each pass")
    parser.add_argument("--case", type=parse_case, action="append", dest="cases", metavar="MODEL:BATCH",
                        help="a case to run (repeatable; default: mlp and cnn at 512 and 4096)")
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--output", default="results/benchmarks/optimizers.json")
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds
    if rounds < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--rounds and --steps must be at least 1, --warmup at least 0")

    load_at_start = list(os.getloadavg())
    print(f"TensorFlow {tf.__version__}, Keras {KERAS_VERSION}; {rounds} rounds of {args.steps} interleaved steps; "
          f"ratios: median over rounds [interquartile range] (min-max); judged on the {JUDGED_CLOCK} clock")
    cases = []
    for index, (model_name, batch) in enumerate(args.cases or CASES):
        case = measure_case(model_name, batch, rounds, args.steps, args.warmup, seed=args.seed + index)
        cases.append(case)
        print_case(case)

    worst = {label: max(case["ratios"][label] for case in cases) for label in RATIOS}
    for label, value in worst.items():
        verdict = "meets" if value <= TARGET else "MISSES"
        print(f"worst median {label} ({JUDGED_CLOCK}) = {value:.3f} ({verdict} the target <= {TARGET:.2f})")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "optimizer step time",
        "target_ratio": TARGET,
        "worst_ratios": worst,
        "cases": cases,
        "settings": {"rounds": rounds, "steps_per_round": args.steps, "warmup_steps": args.warmup, "seed": args.seed,
                     "updates_per_round": UPDATES_PER_ROUND, "judged_clock": JUDGED_CLOCK,
                     "order": "each pass of a round runs one step of every optimizer, in a new random order",
                     "ratios": "median over rounds of the ratio within each round; ratio_spread: per clock, its quartiles "
                               "(inclusive) and range"},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "tensorflow": tf.__version__,
                    "keras": KERAS_VERSION,
                    "load_average": {"start": load_at_start, "end": list(os.getloadavg())}},
    }
    write_json_atomic(output, report)
    print(f"wrote {output}")


def _described(values: dict[str, float]) -> str:
    return f"{values['median']:.3f} [{values['q1']:.3f}-{values['q3']:.3f}] ({values['min']:.2f}-{values['max']:.2f})"


if __name__ == "__main__":
    main()
