"""Horovod's overhead against this machine's own limit, measured side by side in one run.

The honest anchor for ``horovodrun -np 2`` on two cores is two independent single-worker
processes running the same per-rank step at the same time with no communication
(``lbtrain bench``'s ``independent:2``): they share the cores, caches and memory bandwidth as the
two ranks do. Every process runs one intra-op and one inter-op TensorFlow thread; both sides run
the same number of steps (the single worker's count for ``--seconds``), started together.

- ratio = images/s of ``horovod:2`` / images/s of ``independent:2``; the target (>= 0.93) is
  for ``defaults``: what a user gets without a setting, ``HorovodWorld``'s ``auto`` for
  ``pin_cores`` and ``idle_threads`` (``lbtrain.worlds.horovod.place_threads``: here 2 ranks x 1
  thread on 2 cores, so both on);
- allreduce share = the time Horovod's timeline shows an allreduce in progress / the measured
  time, from one more np=2 run per variant that records it over its measured steps (the
  ratios come from runs without it: rank 0 writing the timeline slows the whole job);
- variants, each with lbtrain's two remedies off unless it names them: ``off`` (Horovod alone,
  the defaults before ``auto``), np=2 under other Horovod knobs (``--variant
  'HOROVOD_CYCLE_TIME=5'``), with the gradients allreduced in groups (``groups=1``: one
  allreduce once the backward pass is done), each rank bound to its own core (``pin``),
  Horovod's threads at ``SCHED_IDLE`` (``idle``: they run only while their rank's compute
  waits), or several at once (``'pin idle'``: what ``auto`` should match), each against the
  pair of its own round (``lbtrain.bench.Settings``).

Rounds run the pair, then the defaults and each np=2 variant; the median over rounds is
reported, then the timeline runs. Writes results/benchmarks/horovod.json.

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

TARGET = 0.93  # for the defaults (issue #36)
# Horovod 0.28.1's own values when the variables are unset (since 0.21: cycle 1 ms, fusion 128 MB).
HOROVOD_DEFAULTS = {"HOROVOD_CYCLE_TIME": "1 (ms)", "HOROVOD_FUSION_THRESHOLD": "134217728 (bytes, 128 MB)"}
DEFAULT_VARIANTS = ("off", "HOROVOD_CYCLE_TIME=5", "groups=1", "pin", "idle", "pin idle")
# Variant flags -> the ``Settings`` field they switch on (off, False, unless named).
FLAGS = {"pin": "pin_cores", "idle": "idle_horovod_threads"}
# lbtrain's defaults: ``HorovodWorld`` decides both (``auto``).
DEFAULTS = {"pin_cores": None, "idle_horovod_threads": None}


def parse_variant(text: str) -> dict:
    """``'WORD ...'`` -> the ``Settings`` fields the np=2 run changes: ``HOROVOD_NAME=VALUE``
    (Horovod's environment), ``groups=N`` (``allreduce_groups``), ``pin`` (``pin_cores``),
    ``idle`` (``idle_horovod_threads``), ``off`` (nothing: both stay off).

    >>> parse_variant("pin HOROVOD_CYCLE_TIME=5")
    {'horovod_env': {'HOROVOD_CYCLE_TIME': '5'}, 'pin_cores': True, 'idle_horovod_threads': False}
    """
    changes: dict = {"horovod_env": {}, **dict.fromkeys(FLAGS.values(), False)}
    for word in text.split():
        name, equals, value = word.partition("=")
        if equals and name.startswith("HOROVOD_"):
            changes["horovod_env"][name] = value
        elif equals and name == "groups" and value.isdigit() and int(value) >= 1:
            changes["allreduce_groups"] = int(value)
        elif word in FLAGS:
            changes[FLAGS[word]] = True
        elif word != "off":
            raise argparse.ArgumentTypeError(f"expected HOROVOD_NAME=VALUE, groups=N, pin, idle or off, got {word!r}")
    return changes


def auto_choice(threads: int) -> dict:
    """What ``auto`` resolves to in the np=2 ranks on this machine (``place_threads``, as each
    rank calls it), as the ``Settings`` fields of a variant, with why."""
    from lbtrain.worlds.horovod import place_threads, usable_cores

    placement = place_threads(None, None, local_ranks=2, threads_per_rank=threads, cores=len(usable_cores()))
    return {"pin_cores": placement.pin_cores, "idle_horovod_threads": placement.idle_threads, "auto": placement.why}


def images_per_second(result: dict) -> float:
    return result["images"] / result["seconds"]


def np2(model: str, batch: int, settings: Settings, steps: int, changes: dict, timeline: bool = False) -> dict:
    """One ``horovodrun -np 2`` run under ``changes`` to ``settings``."""
    return measure_case(Case(model, batch, WorldSpec("horovod", 2)), dataclasses.replace(settings, **changes, timeline=timeline), steps)


def measure_round(model: str, batch: int, settings: Settings, steps: int, variants: dict[str, dict]) -> dict:
    """The pair, then np=2 under each variant (no timeline: rank 0 writing it slows the job)."""
    pair = measure_case(Case(model, batch, WorldSpec("independent", 2)), settings, steps)
    return {"pair": images_per_second(pair), "pair_process_seconds": pair["process_seconds"],
            "np2": {name: images_per_second(np2(model, batch, settings, steps, changes)) for name, changes in variants.items()}}


def summarize(rounds: list[dict], shares: dict[str, float], variants: dict[str, dict]) -> dict:
    """Per variant: the ratio to the same round's pair (each round, median) and the allreduce share."""
    results = {}
    for name, changes in variants.items():
        ratios = [row["np2"][name] / row["pair"] for row in rounds]
        results[name] = {**changes, "ratio": statistics.median(ratios), "ratios": ratios, "allreduce_share": shares[name],
                         "np2_images_per_second": [row["np2"][name] for row in rounds]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--batch", type=int, default=128, help="per-worker batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per configuration")
    parser.add_argument("--variant", action="append", default=None,
                        help=f"np=2 settings to compare with the defaults (default: {'; '.join(DEFAULT_VARIANTS)})")
    parser.add_argument("--output", default="results/benchmarks/horovod.json")
    args = parser.parse_args()
    problem = horovod_problem()
    if problem is not None:
        sys.exit(f"bench_horovod: {problem}")
    try:
        variants = {"defaults": DEFAULTS, **{text: parse_variant(text) for text in args.variant or DEFAULT_VARIANTS}}
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    settings = Settings(threads=1, seconds=args.seconds, input_pipeline=False)  # the step alone: what the ratios compare
    steps = measure_case(Case(args.model, args.batch, WorldSpec("single")), settings)["steps"]
    rounds = []
    for index in range(args.rounds):
        rounds.append(measure_round(args.model, args.batch, settings, steps, variants))
        shown = ", ".join(f"{name} {value / rounds[-1]['pair']:.3f}" for name, value in rounds[-1]["np2"].items())
        print(f"round {index + 1}: np=2 / pair: {shown}", flush=True)
    shares = {name: np2(args.model, args.batch, settings, steps, changes, timeline=True)["allreduce_share"]
              for name, changes in variants.items()}
    results = summarize(rounds, shares, variants)
    results["defaults"].update(auto_choice(settings.threads))
    print(f"defaults (auto): {results['defaults']['auto']}: pin_cores {results['defaults']['pin_cores']}, "
          f"idle_threads {results['defaults']['idle_horovod_threads']}")
    for name, result in results.items():
        target = f" (target >= {TARGET})" if name == "defaults" else ""
        print(f"np=2 ({name}) / independent pair: {result['ratio']:.3f}{target}, "
              f"allreduce {result['allreduce_share']:.1%} of the time")
    report = {"benchmark": "horovod np=2 against two independent processes", "target": TARGET,
              "setup": {"model": args.model, "per_worker_batch": args.batch, "threads_per_process": 1, "steps": steps,
                        "rounds": args.rounds, "controller": "gloo"},
              "horovod_defaults": HOROVOD_DEFAULTS, "results": results, "rounds": rounds, "machine": machine()}
    write_json_atomic(Path(args.output), report)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
