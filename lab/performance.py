"""The performance table of docs/benchmarks.md, rendered from the committed benchmark JSON files
(``results/benchmarks/``), without TensorFlow.

Every row is a ratio of two things measured side by side in one run of a benchmark (the
scripts in benchmarks/ and ``lbtrain bench``), its target where the benchmark has one, and
what limits it. One function per JSON file turns it into rows; a file that is absent gives
none. ``tests/lab/test_performance.py`` checks that the page's table is the one this renders;
``scripts/render_benchmarks.py`` prints it, or with ``--write`` puts it into the page.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Callable, NamedTuple

PAGE = Path("docs") / "benchmarks.md"  # relative to the checkout's root
BEGIN = "<!-- performance table: python scripts/render_benchmarks.py --write -->"
END = "<!-- end of performance table -->"


class Row(NamedTuple):
    """One line of the table: what is compared, the ratio (text), the target and whether it is
    met (None: no target), what limits it, and the JSON it comes from."""

    comparison: str
    ratio: str
    target: str
    met: bool | None
    limit: str
    source: str


def _at_most(value: float, target: float) -> tuple[str, bool]:
    return f"<= {target:g}", value <= target


def _at_least(value: float, target: float) -> tuple[str, bool]:
    return f">= {target:g}", value >= target


def jit_rows(data: dict) -> list[Row]:
    """benchmarks/bench_jit.py, per model: lbtrain's trainer over a plain ``model.fit`` of the same
    model, data and optimizer, uncompiled and XLA-compiled (target ``targets.trainer_over_fit``),
    and what compiling gives each, with the side ``training.jit_compile: auto`` takes here."""
    target, source = data["targets"]["trainer_over_fit"], "jit.json"
    batch, auto = data["settings"]["batch"], data["auto"]
    choice = "compiles" if auto["compiled"] else "does not compile"
    reason = auto["why"].removeprefix("training.jit_compile is auto and ")
    rows = []
    for name, result in data["results"].items():
        model = name.replace("_batch_norm", " with batch norm")
        for compiled in ("uncompiled", "compiled"):
            ratio, seconds = result[f"trainer_over_fit_{compiled}"], result["epoch_seconds"]
            extra = statistics.median(a - b for a, b in zip(seconds[f"trainer_{compiled}"], seconds[f"fit_{compiled}"]))
            rows.append(Row(f"`lbtrain.trainer.train` / plain `model.fit`, epoch time ({model}, batch {batch}, {compiled})",
                            f"{ratio:.3f}", *_at_most(ratio, target),
                            f"the trainer's callbacks (per step: the divergence check reads the loss, the LR log and "
                            f"the budget count the step; history and verdict at each epoch's end), "
                            f"{1000 * extra:+.0f} ms an epoch of {statistics.median(seconds[f'fit_{compiled}']):.2f} s (medians "
                            "over rounds), and the machine's noise", source))
        side = "faster" if result["auto_is_faster_side"] else "slower"
        rows.append(Row(f"XLA-compiled / uncompiled step, epoch time ({model}, batch {batch})",
                        f"trainer {result['trainer_compiled_over_uncompiled']:.3f}, "
                        f"plain fit {result['fit_compiled_over_uncompiled']:.3f}", "", None,
                        f"`jit_compile: auto` {choice} here, the {side} side: {reason}", source))
    return rows


def trainer_rows(data: dict) -> list[Row]:
    """benchmarks/bench_trainer.py's part (c): a simulated world of 64 x 8 against one worker of
    512, where ghost batch norm does the extra work. Its parts (a) and (b) are left out: the
    trainer against plain fit is jit.json's, Horovod's is horovod.json's (against the machine's
    own limit, the independent pair)."""
    target, source = data["targets"]["simulated_w64_vs_w1"], "trainer.json"
    return [Row(f"simulated 64 x 8 / one worker x 512, epoch time ({name.replace('_batch_norm', ' with batch norm')})",
                f"{result['ratio']:.3f}", *_at_most(result["ratio"], target),
                "ghost batch norm: the statistics of 64 groups of 8 against those of one batch of 512", source)
            for name, result in data["results"].get("simulated_w64_vs_w1", {}).items()]


def horovod_limit(result: dict) -> str:
    """What limits one np=2 variant of horovod.json, with its allreduce share."""
    share = f"an allreduce in progress {result['allreduce_share']:.1%} of the time (timeline)"
    if not result.get("idle_horovod_threads"):
        return (f"Horovod's own threads (a cross-rank exchange every cycle, Gloo's I/O) preempt the compute threads: "
                f"no core is spare; {share}")
    if not result.get("pin_cores"):
        return f"the compute threads move between the cores when they wait; {share}"
    return f"the allreduce itself, after the backward pass: {share}"


def horovod_rows(data: dict) -> list[Row]:
    """benchmarks/bench_horovod.py: np=2 against two independent processes, per np=2 variant; the
    target is for the defaults (what ``lbtrain train`` does unasked), the variants are measured
    beside them to say what each remedy gives."""
    setup, source = data["setup"], "horovod.json"
    return [Row(f"`horovodrun -np 2` / two independent processes at once, 1 thread each ({setup['model']}, "
                f"{setup['per_worker_batch']} per worker, "
                f"{'as `lbtrain train`' if name == 'defaults' else f'`{name}`'})", f"{result['ratio']:.3f}",
                *(_at_least(result["ratio"], data["target"]) if name == "defaults" else ("", None)), horovod_limit(result), source)
            for name, result in data["results"].items()]


BENCH_LIMITS = {
    "simulated": "one process computes W workers' batch: larger products gain, ghost batch norm costs (resnet)",
    "mirrored": "the replicas share one process's threads; one cross-replica gradient sum per step",
    "independent": "the two processes share the cores' caches and memory bandwidth",
    "horovod": "Horovod's threads and the allreduce (the horovod.json rows); the mlp's steps are short beside its allreduce",
}


def bench_rows(data: dict) -> list[Row]:
    """``lbtrain bench``: each world's scaling efficiency and the single worker's share of the
    matmul peak, one figure per model."""
    rows, source = [], "bench/bench.json"
    ok = [row for row in data["rows"] if row["status"] == "ok"]
    batches = sorted({row["per_worker_batch"] for row in ok})
    for world in dict.fromkeys(row["world"] for row in ok if row["world"] != "single"):
        kind, size = world.split(":")
        figures = ", ".join(f"{row['model']} {row['scaling_efficiency']:.3f}" for row in ok
                            if row["world"] == world and row.get("scaling_efficiency") is not None)
        processes = next(row["processes"] for row in ok if row["world"] == world)
        anchor = f"{size} x one worker" if int(processes) > 1 else "one worker"
        rows.append(Row(f"`lbtrain bench` {world} / {anchor}, images/s ({_per_worker(batches)})", figures, "", None,
                        BENCH_LIMITS[kind], source))
    rows.extend(bench_bound_rows(ok, batches, data.get("input_bound_margin"), source))
    if data.get("peak_gflops"):
        # A subclassed model's FLOPs cannot be counted: its share of the peak is left out.
        figures = ", ".join(f"{row['model']} {row['peak_fraction']:.3f}" for row in ok
                            if row["world"] == "single" and row.get("peak_fraction") is not None)
        cpus = data["machine"]["cpus"]
        rows.append(Row(f"one worker's training FLOP/s / the machine's float32 matmul peak ({data['peak_gflops']:.0f} GFLOP/s, "
                        f"{cpus} cores)", figures, "", None,
                        f"one thread uses 1 of {cpus} cores; convolutions, pooling and batch norm run below matmul speed",
                        source))
    return rows


def bench_bound_rows(ok: list[dict], batches: list[int], margin: float | None, source: str) -> list[Row]:
    """``lbtrain bench``'s single worker: the trainer's input pipeline alone, and the step fed by
    it, each over the training step alone (images/s), one figure per model with what bounds it.
    None from a bench.json written before the pipeline was measured."""
    singles = [row for row in ok if row["world"] == "single" and row.get("pipeline_images_per_second") is not None]
    if not singles:
        return []
    pipeline = ", ".join(f"{row['model']} {row['pipeline_images_per_second'] / row['images_per_second']:.1f} ({row['bound']})"
                         for row in singles)
    fed = ", ".join(f"{row['model']} {row['fed_images_per_second'] / row['images_per_second']:.3f}" for row in singles)
    return [Row(f"`lbtrain bench` single: the trainer's input pipeline alone / the training step alone, images/s "
                f"({_per_worker(batches)})", pipeline, "", None,
                f"input-bound below {margin:g}: the pipeline gathers each batch from arrays in memory on tf.data's threads",
                source),
            Row(f"`lbtrain bench` single: the step fed by that pipeline / the step alone, images/s ({_per_worker(batches)})",
                fed, "", None, "the pipeline's threads share the cores with the step; prefetch overlaps the two", source)]


def _per_worker(batches: list[int]) -> str:
    return f"{', '.join(str(batch) for batch in batches)} per worker"


def optimizer_rows(data: dict) -> list[Row]:
    """benchmarks/bench_optimizers.py: the slowest case of each pair of optimizers, on the clock
    the benchmark judges (``settings.judged_clock``: ``cpu``, the process's CPU time; files written
    before it had one timed the wall clock)."""
    cases = ", ".join(f"{case['model']} {case['batch']}" for case in data["cases"])
    clock = data.get("settings", {}).get("judged_clock", "wall")
    return [Row(f"{pair} step time ({clock} clock, median of rounds), slowest of {len(data['cases'])} cases ({cases})", f"{ratio:.3f}",
                *_at_most(ratio, data["target_ratio"]),
                "the per-layer norms and trust ratios (a few reductions per variable per step)", "optimizers.json")
            for pair, ratio in data["worst_ratios"].items()]


def analysis_rows(data: dict) -> list[Row]:
    """benchmarks/bench_analysis.py: what measuring the noise scale and sharpness costs."""
    ratios = data["noise_scale_epoch_time_ratio"]
    ratios = ratios if isinstance(ratios, dict) else {data["setup"]["model"]: ratios}
    target = data.get("target_noise_scale_epoch_time_ratio")
    rows = [Row(f"epoch time with the gradient noise scale / without ({setup})", f"{ratio:.3f}",
                *(_at_most(ratio, target) if target else ("", None)),
                "the extra gradient norms the estimate needs", "analysis.json")
            for setup, ratio in ratios.items()]
    rows.append(Row("sharpness (10 L-BFGS-B iterations, training set) / one training epoch, time",
                    f"{data['sharpness_seconds_in_epochs']:.1f}", "", None,
                    "each iteration is a forward and backward pass over the training set", "analysis.json"))
    return rows


def import_rows(data: dict) -> list[Row]:
    """benchmarks/bench_import.py: the slowest lbtrain import against ``import tensorflow``."""
    worst = data["worst"]
    extra, target = worst["extra_seconds"], data["target_extra_seconds"]
    return [Row(f"`{worst['statement']}` / `import tensorflow`, fresh processes (slowest lbtrain import)",
                f"{worst['ratio_to_tensorflow']:.3f} ({extra:+.2f} s)", f"<= +{target:g} s", extra <= target,
                "TensorFlow's own import; the extra is lbtrain's modules and the machine's noise (about 0.05 s)",
                "import.json")]


def pipeline_rows(data: dict) -> list[Row]:
    """benchmarks/bench_pipeline.py: lbtrain's input pipeline without tf.data's autotuning model
    over the same pipeline with it, per batch, with what deleting an iterator waited on each side."""
    target, waits = data["targets"]["without_over_with"], data["deletion"]
    waited = (f"deleting an iterator waited at most {waits['without']['max_seconds']:.2f} s without the model, "
              f"{waits['with']['max_seconds']:.2f} s with it")
    return [Row(f"lbtrain's input pipeline without / with tf.data's autotuning model, samples/s at batch {batch}",
                f"{result['without_over_with']:.3f}", *_at_least(result["without_over_with"], target),
                f"gathering in-memory arrays; {waited}", "pipeline.json") for batch, result in data["batches"].items()]


SWEEP_LIMITS = {
    "median": "TPE samples near the best trials, which the median rarely prunes",
    "successive_halving": "it prunes by rank at fixed rungs and once cut the trial that would have been the best",
}


def sweep_rows(data: dict) -> list[Row]:
    """benchmarks/bench_sweep.py: epochs of a pruned sweep against the same sweep unpruned."""
    targets, rows = data["targets"], []
    for pruner, saving in data["against_no_pruning"].items():
        ratio, lost = 1 - saving["epochs_saved"], saving["best_value_points_lost"]
        target, met = _at_most(ratio, round(1 - targets["epochs_saved"], 6))
        met = met and lost <= targets["points_lost"]
        rows.append(Row(f"epochs of a 20-trial sweep with the {pruner.replace('_', ' ')} pruner / without pruning",
                        f"{ratio:.3f}", f"{target}, best value within {targets['points_lost']:g} points", met,
                        f"best value {lost:.2f} points lower; {SWEEP_LIMITS.get(pruner, 'its pruning rule')}", "sweep.json"))
    return rows


def parallel_rows(data: dict) -> list[Row]:
    """benchmarks/bench_parallel.py: a grid trained one run at a time against side by side
    (``lbtrain run --workers auto``), the machine's busy share meanwhile, and the price against
    the measured time."""
    targets, setup, load = data["targets"], data["setup"], data["machine"]["load_average_before"][0]
    side = f"{data['workers']} at once x {data['threads']} thread{'s' * (data['threads'] != 1)}"
    noise = f"the machine's other load (load average {load:g} on {data['machine']['cpus']} cores at the start)"
    rows = [Row(f"`lbtrain run` of a {setup['runs']}-run grid one run at a time / side by side ({side}), wall time "
                f"({setup['grid']}, {setup['epochs']} epochs)", f"{data['speedup']:.2f}", *_at_least(data["speedup"], targets["speedup"]),
                f"each run process imports TensorFlow once; {noise}; equal results: {'yes' if data['equal_results'] else 'NO'}",
                "parallel.json"),
            Row("CPU time of the runs side by side / (wall time x cores)", f"{data['busy_share']:.3f}",
                *_at_least(data["busy_share"], targets["busy_share"]), f"the parent's checks and each run's start; {noise}",
                "parallel.json")]
    if data.get("price_error") is not None:
        error = data["price_error"]
        rows.append(Row("the price of that grid (a probe of a few steps at each global batch) / its measured time one run at a time",
                        f"{1 + error:.3f}", f"within +-{targets['price_error']:.0%}", abs(error) <= targets["price_error"],
                        "the parent's checks before the runs (not priced) and the machine's load between the probe "
                        "and the runs",
                        "parallel.json"))
    return rows


SOURCES: dict[str, Callable[[dict], list[Row]]] = {
    "jit.json": jit_rows,
    "trainer.json": trainer_rows,
    "horovod.json": horovod_rows,
    "bench/bench.json": bench_rows,
    "optimizers.json": optimizer_rows,
    "analysis.json": analysis_rows,
    "import.json": import_rows,
    "sweep.json": sweep_rows,
    "pipeline.json": pipeline_rows,
    "parallel.json": parallel_rows,
}


def load_results(folder: str | Path) -> dict[str, dict]:
    """The JSON of each file of ``SOURCES`` present in ``folder`` (results/benchmarks)."""
    return {name: json.loads((Path(folder) / name).read_text()) for name in SOURCES if (Path(folder) / name).is_file()}


def render_table(results: dict[str, dict]) -> str:
    """The markdown table of every row of every loaded file."""
    lines = ["| measured side by side | ratio | target | what limits it | source |", "| --- | ---: | ---: | --- | --- |"]
    for name, data in results.items():
        for row in SOURCES[name](data):
            target = row.target + (" **missed**" if row.met is False else "")
            lines.append(f"| {row.comparison} | {row.ratio} | {target} | {row.limit} | `{row.source}` |")
    return "\n".join(lines) + "\n"


def table_in(page: str) -> str:
    """The table between the page's markers ('' when they are missing)."""
    if BEGIN not in page or END not in page:
        return ""
    return page.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def replace_table(page: str, table: str) -> str:
    """``page`` with ``table`` between its markers."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"{PAGE} has no performance table markers ({BEGIN} ... {END})")
    head, rest = page.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{table}{END}{rest.split(END, 1)[1]}"
