"""Horovod's overhead against this machine's own limit, measured side by side in one run.

The honest anchor for ``horovodrun -np 2`` on two cores is two independent single-worker
processes running the same per-rank step at the same time with no communication
(``lbtrain bench``'s ``independent:2``): they share the cores, caches and memory bandwidth as the
two ranks do. Every process runs one intra-op and one inter-op TensorFlow thread; both sides run
the same number of steps (the single worker's count for ``--seconds``), started together.

- ratio = images/s of ``horovod:2`` / images/s of ``independent:2`` (target >= 0.90);
- allreduce share = the time Horovod's timeline (recorded over the measured steps of the same
  np=2 run) shows an allreduce in progress / the measured time;
- variants: np=2 again under other Horovod knobs (``--variant 'HOROVOD_CYCLE_TIME=5'``) or with
  the gradients allreduced in groups (``--variant groups=1``: one allreduce once the backward
  pass is done, ``Settings.allreduce_groups``), each against the pair of its own round.

Rounds run the pair, then each np=2 variant; the median over rounds is reported. Writes
results/benchmarks/horovod.json.

    python benchmarks/bench_horovod.py [--model cnn] [--batch 128] [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

from lbtrain._keras import horovod_problem
from lbtrain.bench import Case, Settings, WorldSpec, machine, measure_case
from lbtrain.files import write_json_atomic

TARGET = 0.90
# Horovod 0.28.1's own values when the variables are unset (since 0.21: cycle 1 ms, fusion 128 MB).
HOROVOD_DEFAULTS = {"HOROVOD_CYCLE_TIME": "1 (ms)", "HOROVOD_FUSION_THRESHOLD": "134217728 (bytes, 128 MB)"}
DEFAULT_VARIANTS = ("groups=1", "HOROVOD_CYCLE_TIME=5")


def parse_variant(text: str) -> dict:
    """``'NAME=VALUE ...'`` -> the ``Settings`` fields it changes: Horovod's environment
    variables (``HOROVOD_*``) in ``horovod_env``, ``groups=N`` as ``allreduce_groups``.

    >>> parse_variant("groups=1 HOROVOD_CYCLE_TIME=5")
    {'horovod_env': {'HOROVOD_CYCLE_TIME': '5'}, 'allreduce_groups': 1}
    """
    changes: dict = {"horovod_env": {}}
    for assignment in text.split():
        name, equals, value = assignment.partition("=")
        if equals and name.startswith("HOROVOD_"):
            changes["horovod_env"][name] = value
        elif equals and name == "groups" and value.isdigit() and int(value) >= 1:
            changes["allreduce_groups"] = int(value)
        else:
            raise argparse.ArgumentTypeError(f"expected HOROVOD_NAME=VALUE or groups=N, got {assignment!r}")
    return changes


def images_per_second(result: dict) -> float:
    return result["images"] / result["seconds"]


def measure_round(model: str, batch: int, settings: Settings, steps: int, variants: dict[str, dict]) -> dict:
    """The pair, then np=2 under each variant's settings (timeline on), all with ``steps``."""
    pair = measure_case(Case(model, batch, WorldSpec("independent", 2)), settings, steps)
    row = {"pair": images_per_second(pair), "pair_process_seconds": pair["process_seconds"], "np2": {}}
    for name, changes in variants.items():
        np2 = measure_case(Case(model, batch, WorldSpec("horovod", 2)),
                           dataclasses.replace(settings, **changes, timeline=True), steps)
        row["np2"][name] = {"images_per_second": images_per_second(np2), "allreduce_share": np2["allreduce_share"]}
    return row


def summarize(rounds: list[dict], variants: dict[str, dict]) -> dict:
    """Per variant: the ratio to the same round's pair and the allreduce share, each round and median."""
    results = {}
    for name, changes in variants.items():
        ratios = [row["np2"][name]["images_per_second"] / row["pair"] for row in rounds]
        shares = [row["np2"][name]["allreduce_share"] for row in rounds]
        results[name] = {**changes, "ratio": statistics.median(ratios), "ratios": ratios,
                         "allreduce_share": statistics.median(shares), "allreduce_shares": shares,
                         "np2_images_per_second": [row["np2"][name]["images_per_second"] for row in rounds]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--batch", type=int, default=128, help="per-worker batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per configuration")
    parser.add_argument("--variant", action="append", default=None,
                        help=f"np=2 settings to compare with the defaults (default: {', '.join(DEFAULT_VARIANTS)})")
    parser.add_argument("--output", default="results/benchmarks/horovod.json")
    args = parser.parse_args()
    problem = horovod_problem()
    if problem is not None:
        sys.exit(f"bench_horovod: {problem}")
    try:
        variants = {"defaults": {}, **{text: parse_variant(text) for text in args.variant or DEFAULT_VARIANTS}}
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    settings = Settings(threads=1, seconds=args.seconds)
    steps = measure_case(Case(args.model, args.batch, WorldSpec("single")), settings)["steps"]
    rounds = []
    for index in range(args.rounds):
        rounds.append(measure_round(args.model, args.batch, settings, steps, variants))
        shown = ", ".join(f"{name} {row['images_per_second'] / rounds[-1]['pair']:.3f}" for name, row in rounds[-1]["np2"].items())
        print(f"round {index + 1}: np=2 / pair: {shown}", flush=True)
    results = summarize(rounds, variants)
    for name, result in results.items():
        print(f"np=2 ({name}) / independent pair: {result['ratio']:.3f} (target >= {TARGET}), "
              f"allreduce {result['allreduce_share']:.1%} of the time")
    report = {"benchmark": "horovod np=2 against two independent processes", "target": TARGET,
              "setup": {"model": args.model, "per_worker_batch": args.batch, "threads_per_process": 1, "steps": steps,
                        "rounds": args.rounds, "controller": "gloo"},
              "horovod_defaults": HOROVOD_DEFAULTS, "results": results, "rounds": rounds, "machine": machine()}
    write_json_atomic(Path(args.output), report)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
