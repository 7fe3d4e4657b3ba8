"""What importing lbtrain costs on top of importing TensorFlow, in fresh processes.

Each statement below runs in its own fresh Python process, timed inside the process from just
before the statement to just after it (interpreter start-up is the same for all and left out).
Rounds run every statement once, in an order that rotates from round to round (so machine
noise and disk caches hit them alike), after one discarded warm-up round; the figure is the
median over rounds. Prints each statement's time, its ratio to ``import tensorflow`` and the
extra seconds over it (target: at most 0.3 s extra), checks that no statement loads matplotlib,
and writes results/benchmarks/import.json.

``import lbtrain`` alone loads no TensorFlow; ``import lbtrain, tensorflow`` also pays for
registering lbtrain's Keras classes, which happens as soon as TensorFlow is imported.

    python benchmarks/bench_import.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from lbtrain.files import write_json_atomic

STATEMENTS = {
    "import tensorflow": "import tensorflow",
    "import lbtrain": "import lbtrain",
    "import lbtrain, tensorflow": "import lbtrain, tensorflow",
    "from lbtrain.optimizers import LARS, LAMB": "from lbtrain.optimizers import LARS, LAMB",
    "from lbtrain.schedules import Warmup, build_schedule": "from lbtrain.schedules import Warmup, build_schedule",
    "from lbtrain.callbacks import LearningRateWarmup": "from lbtrain.callbacks import LearningRateWarmup",
}
BASELINE = "import tensorflow"
TARGET_EXTRA_SECONDS = 0.3

# Runs one statement and reports its time and what it loaded, as one JSON line.
CHILD = """
import json, sys, time
start = time.perf_counter()
exec(sys.argv[1])
seconds = time.perf_counter() - start
tensorflow = sys.modules.get("tensorflow")
print(json.dumps({"seconds": seconds, "tensorflow": tensorflow is not None,
                  "tensorflow_version": getattr(tensorflow, "__version__", None),
                  "matplotlib": any(name.split(".")[0] == "matplotlib" for name in sys.modules)}))
"""


def run_once(statement: str) -> dict:
    """Runs ``statement`` in a fresh interpreter; returns the child's report."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    completed = subprocess.run([sys.executable, "-c", CHILD, statement], capture_output=True, text=True, env=environment,
                               check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure(rounds: int) -> dict[str, dict]:
    """Median seconds per statement over ``rounds`` rotating rounds (plus one warm-up round),
    and whether each statement loaded TensorFlow or matplotlib."""
    labels = list(STATEMENTS)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    loaded: dict[str, dict] = {}
    for round_index in range(rounds + 1):
        shift = round_index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            report = run_once(STATEMENTS[label])
            loaded[label] = {key: report[key] for key in ("tensorflow", "tensorflow_version", "matplotlib")}
            if round_index > 0:
                samples[label].append(report["seconds"])
    return {label: {"seconds": statistics.median(samples[label]), "samples": samples[label], **loaded[label]}
            for label in labels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", default="results/benchmarks/import.json")
    args = parser.parse_args()

    results = measure(args.rounds)
    baseline = results[BASELINE]["seconds"]
    print(f"{'statement':<54} {'median':>8} {'ratio':>7} {'extra':>8}  loads")
    for label, result in results.items():
        result["ratio_to_tensorflow"] = result["seconds"] / baseline
        result["extra_seconds"] = result["seconds"] - baseline
        loads = ", ".join(name for name in ("tensorflow", "matplotlib") if result[name]) or "-"
        print(f"{label:<54} {result['seconds']:>7.3f}s {result['ratio_to_tensorflow']:>7.3f} "
              f"{result['extra_seconds']:>+7.3f}s  {loads}")
    with_tensorflow = {label: result for label, result in results.items() if label != BASELINE and result["tensorflow"]}
    worst = max(with_tensorflow, key=lambda label: with_tensorflow[label]["extra_seconds"])
    worst_extra = with_tensorflow[worst]["extra_seconds"]
    verdict = "meets" if worst_extra <= TARGET_EXTRA_SECONDS else "MISSES"
    print(f"worst extra over {BASELINE}: {worst_extra:+.3f} s ({worst}; ratio {with_tensorflow[worst]['ratio_to_tensorflow']:.3f}),"
          f" {verdict} the target <= {TARGET_EXTRA_SECONDS} s")
    matplotlib = [label for label, result in results.items() if result["matplotlib"]]
    print(f"statements loading matplotlib: {', '.join(matplotlib) if matplotlib else 'none'}")

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "import time over import tensorflow, fresh processes",
        "target_extra_seconds": TARGET_EXTRA_SECONDS,
        "worst": {"statement": worst, "extra_seconds": worst_extra, "ratio_to_tensorflow": with_tensorflow[worst]["ratio_to_tensorflow"]},
        "statements_loading_matplotlib": matplotlib,
        "results": results,
        "settings": {"rounds": args.rounds, "warmup_rounds": 1},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "tensorflow": results[BASELINE]["tensorflow_version"]},
    }
    write_json_atomic(output, report)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
