"""Runs side by side: a 12-run grid trained one run at a time (``--workers 1``, each run on
every core, as ``lbtrain run`` trained before) and as ``lbtrain run`` trains it by default
(``--workers auto``: on 2 cores, two runs at once with one TensorFlow thread each).

The grid: MNIST-1D (4,000 training samples), an mlp of 256-256, momentum SGD at 32 per worker,
simulated world sizes 1, 2 and 4 under four LR recipes, a few epochs each: small models of the
kind whose steps cannot fill the machine's cores from one process. Both sides train the same
runs through ``lbtrain.studies.runner.run_planned`` into fresh folders, in alternating order
over the rounds. Reported, per side: the wall time, the CPU time of this process and its run
processes (``lbtrain.studies.runner.cpu_seconds``), and the machine's busy share, CPU time /
(wall x cores); the speedup serial / parallel wall time (target >= 1.7 on 2 cores, the median over rounds), the busy share
of the parallel side (target >= 0.85), whether the summaries are equal (timings aside), and
the price (``lbtrain run --price``, which ``--dry-run`` prints too for this grid of lbtrain's model
and data: a probe of a few steps at each global batch, in this process, timing what a run pays
once, a step, an epoch's end and an evaluated sample, and a process's start) against the measured
serial time (target within +-25%), and how long the probe took.

On a machine other processes share, the busy share counts only this benchmark's CPU time, and
the wall times carry their load: the JSON records the load average before and after.

    python benchmarks/bench_parallel.py [--rounds 2] [--epochs 12]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from lbtrain.config import ExperimentConfig  # noqa: E402
from lbtrain.files import write_json_atomic  # noqa: E402
from lbtrain.studies.plan import expand  # noqa: E402
from lbtrain.studies.runner import cpu_seconds, placement, price_runs, run_planned  # noqa: E402

TARGETS = {"speedup": 1.7, "busy_share": 0.85, "price_error": 0.25}
TIMINGS = ("samples_per_second", "wall_time_seconds")


def experiment(output_dir: str, epochs: int) -> ExperimentConfig:
    """The benchmark's 12-run grid (module doc)."""
    return ExperimentConfig.model_validate({
        "name": "bench-parallel",
        "output_dir": output_dir,
        "data": {"dataset": "mnist1d", "train_subset": 4000, "options": {"num_samples": 5000}},
        "model": {"name": "mlp", "options": {"widths": [256, 256]}},
        "optimizer": {"name": "momentum"},
        "lr": {"base_lr": 0.05, "base_batch": 32},
        "training": {"per_worker_batch": 32, "epochs": epochs},
        "grid": {"world_sizes": [1, 2, 4], "variants": [
            {"label": "none", "lr.rule": "none"}, {"label": "sqrt", "lr.rule": "sqrt"},
            {"label": "linear", "lr.rule": "linear"}, {"label": "linear+warmup", "lr.rule": "linear", "lr.warmup_epochs": 1}]},
    })


def measure(workers: int | None, epochs: int, cores: int) -> dict:
    """Trains the grid with ``workers`` runs at once (None: automatic) in a fresh folder; its
    wall and CPU time, busy share and summary rows without timings."""
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as folder:
        exp = experiment(folder, epochs)
        planned = expand(exp)
        placed = placement(exp, planned, workers)
        cpu, started = cpu_seconds(), time.perf_counter()
        rows = run_planned(exp, planned, progress=lambda line: None, workers=workers)
        wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    return {"workers": placed.workers, "threads": placed.threads, "wall_seconds": wall, "cpu_seconds": cpu,
            "busy_share": cpu / (wall * cores), "statuses": [row["status"] for row in rows],
            "rows": [{key: value for key, value in row.items() if key not in TIMINGS} for row in rows]}


def price_seconds(epochs: int) -> float:
    """The grid's price, one run after another, as ``lbtrain run --price`` gives it."""
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as folder:
        exp = experiment(folder, epochs)
        return price_runs(exp, expand(exp)).seconds


def _load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="serial and parallel measurements each, in alternating order")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--output", default="results/benchmarks/parallel.json")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load_before = _load()
    sides: dict[str, list[dict]] = {"serial": [], "parallel": []}
    for round_index in range(args.rounds):
        order = ("serial", "parallel") if round_index % 2 == 0 else ("parallel", "serial")
        for side in order:
            sides[side].append(measure(1 if side == "serial" else None, args.epochs, cores))
            print(f"round {round_index + 1} {side:<8}: {sides[side][-1]['wall_seconds']:.1f} s wall, "
                  f"{sides[side][-1]['cpu_seconds']:.1f} CPU-s, busy share {sides[side][-1]['busy_share']:.3f} "
                  f"({sides[side][-1]['workers']} at once, {sides[side][-1]['threads']} threads each)", flush=True)
    started = time.perf_counter()
    price = price_seconds(args.epochs)
    probe_seconds = time.perf_counter() - started
    load_after = _load()
    serial = statistics.median(result["wall_seconds"] for result in sides["serial"])
    parallel = statistics.median(result["wall_seconds"] for result in sides["parallel"])
    speedup = serial / parallel
    busy = statistics.median(result["busy_share"] for result in sides["parallel"])
    equal = all(result["rows"] == sides["serial"][0]["rows"] for results in sides.values() for result in results)
    price_error = price / serial - 1
    print(f"serial / parallel wall time: {speedup:.2f}x (target >= {TARGETS['speedup']} on 2 cores), "
          f"busy share {busy:.3f} (target >= {TARGETS['busy_share']}), equal results: {equal}")
    print(f"price {price:.1f} s against {serial:.1f} s measured one run at a time: {price_error:+.1%} "
          f"(target within +-{TARGETS['price_error']:.0%}; the probe took {probe_seconds:.1f} s)")
    print(f"load average before {load_before}, after {load_after} ({cores} cores)")
    write_json_atomic(Path(args.output), {
        "benchmark": "runs side by side", "targets": TARGETS,
        "setup": {"runs": len(sides["serial"][0]["rows"]), "epochs": args.epochs, "rounds": args.rounds,
                  "grid": "mnist1d 4000, mlp 256-256, momentum, 32 per worker, world sizes 1/2/4 x 4 LR recipes"},
        "serial": {key: [result[key] for result in sides["serial"]] for key in ("wall_seconds", "cpu_seconds", "busy_share")},
        "parallel": {key: [result[key] for result in sides["parallel"]] for key in ("wall_seconds", "cpu_seconds", "busy_share")},
        "workers": sides["parallel"][0]["workers"], "threads": sides["parallel"][0]["threads"],
        "speedup": speedup, "busy_share": busy, "equal_results": equal, "statuses": sides["serial"][0]["statuses"],
        "price_seconds": price, "price_error": price_error, "probe_seconds": probe_seconds,
        "machine": {"cpus": cores, "platform": platform.platform(), "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": load_after},
    })
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
