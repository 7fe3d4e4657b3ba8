"""``lbtrain bench``'s results: one row per configuration (images/s of the step alone, of the
input pipeline alone and of the step fed by it, what bounds it), the ratios against the single
worker and the machine's peak, and ``bench.csv``, ``bench.json``, ``bench.png`` and the text
table. Scaling efficiency = images/s / (processes x the single worker's images/s at the same
model, batch and threads); on CPU the fraction of the machine's float32 matmul peak that the
training FLOPs reach (3 x the forward FLOPs counted from the Dense and Conv layers' shapes)."""

from __future__ import annotations

import logging
import os
import platform
import sys
from pathlib import Path
from typing import Sequence, TextIO

from lbtrain.bench.cases import Case, bench_input
from lbtrain.bench.settings import Settings
from lbtrain.files import csv_text, write_atomic, write_json_atomic
from lbtrain.results import BENCH_CSV, BENCH_FIGURE, BENCH_JSON

logger = logging.getLogger(__name__)

COLUMNS = ("model", "input_shape", "classes", "per_worker_batch", "world", "workers", "processes", "threads", "device", "global_batch", "steps",
           "seconds", "images_per_second", "pipeline_images_per_second", "fed_images_per_second", "bound", "scaling_efficiency",
           "train_mflops_per_sample", "achieved_gflops", "peak_fraction", "allreduce_share", "status")
# The input pipeline must deliver at least this many times the step's images/s to keep it fed
# (``bound_by``): it runs beside the step on the same cores, and its prefetch hides only slack.
INPUT_BOUND_MARGIN = 1.2


def bound_by(pipeline_images_per_second: float, step_images_per_second: float, margin: float = INPUT_BOUND_MARGIN) -> str:
    """What limits a run: ``input-bound`` where the input pipeline alone delivers fewer than
    ``margin`` x the images/s the training step alone takes, else ``compute-bound``.

    >>> bound_by(1100.0, 1000.0), bound_by(1200.0, 1000.0), bound_by(50000.0, 1000.0)
    ('input-bound', 'compute-bound', 'compute-bound')
    """
    return "input-bound" if pipeline_images_per_second < margin * step_images_per_second else "compute-bound"


def make_row(case: Case, settings: Settings, result: dict | None, status: str) -> dict:
    """One CSV row (ratios are filled in by ``add_ratios``): images/s of the step alone
    (``images_per_second``), of the input pipeline alone and of the step fed by it, and which of
    the two bounds the run (``bound_by``)."""
    input_shape, classes = bench_input(case.model, settings)
    row = {"model": case.model, "input_shape": "x".join(str(d) for d in input_shape), "classes": classes,
           "per_worker_batch": case.per_worker_batch, "world": case.world.label,
           "workers": case.world.size, "processes": case.world.processes, "threads": settings.threads,
           "device": settings.device, "global_batch": case.world.size * case.per_worker_batch, "status": status}
    if result is not None:
        step = result["images"] / result["seconds"]
        if "pipeline_seconds" in result:
            pipeline = result["images"] / result["pipeline_seconds"]
            row.update(pipeline_images_per_second=pipeline, fed_images_per_second=result["images"] / result["fed_seconds"],
                       bound=bound_by(pipeline, step))
        row.update(steps=result["steps"], seconds=result["seconds"], images_per_second=step,
                   train_mflops_per_sample=None if result["train_flops_per_sample"] is None else result["train_flops_per_sample"] / 1e6,
                   allreduce_share=result.get("allreduce_share"))
    return row


def add_ratios(rows: list[dict], peak_flops: float | None) -> list[dict]:
    """Adds scaling efficiency (against the ok single-worker row of the same model, batch,
    threads and device) and, given the peak, achieved GFLOP/s and the peak fraction.

    >>> rows = add_ratios([{"model": "m", "per_worker_batch": 8, "world": "single", "processes": 1, "threads": 1,
    ...                     "device": "cpu", "status": "ok", "images_per_second": 100.0, "train_mflops_per_sample": 5.0},
    ...                    {"model": "m", "per_worker_batch": 8, "world": "horovod:2", "processes": 2, "threads": 1,
    ...                     "device": "cpu", "status": "ok", "images_per_second": 180.0, "train_mflops_per_sample": 5.0}],
    ...                   peak_flops=2e9)
    >>> [(row["scaling_efficiency"], row["achieved_gflops"], row["peak_fraction"]) for row in rows]
    [(1.0, 0.5, 0.25), (0.9, 0.9, 0.45)]
    """
    def group(row: dict) -> tuple:
        return row["model"], row.get("input_shape"), row.get("classes"), row["per_worker_batch"], row["threads"], row["device"]

    singles = {group(row): row["images_per_second"] for row in rows if row["world"] == "single" and row["status"] == "ok"}
    for row in rows:
        if row["status"] != "ok":
            continue
        single = singles.get(group(row))
        row["scaling_efficiency"] = None if single is None else row["images_per_second"] / (row["processes"] * single)
        if row.get("train_mflops_per_sample") is None:  # FLOPs not countable (a subclassed model)
            row["achieved_gflops"] = row["peak_fraction"] = None
            continue
        achieved = row["images_per_second"] * row["train_mflops_per_sample"] * 1e6
        row["achieved_gflops"] = achieved / 1e9
        row["peak_fraction"] = achieved / peak_flops if peak_flops else None
    return rows


def machine() -> dict:
    """What the numbers were measured on, and how busy it was (load averages over the last
    1, 5 and 15 minutes: other work on the machine slows some configurations more than others)."""
    import tensorflow as tf

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "load_average": [round(load, 2) for load in os.getloadavg()]}


def write_report(report: dict, folder: Path) -> list[Path]:
    """``bench.csv`` (the rows), ``bench.json`` (the whole report) and ``bench.png``."""
    return [write_atomic(folder / BENCH_CSV, csv_text(report["rows"], COLUMNS)),
            write_json_atomic(folder / BENCH_JSON, report),
            plot_throughput(report["rows"], folder / BENCH_FIGURE)]


def plot_throughput(rows: Sequence[dict], path: Path) -> Path:
    """One panel per model: images/s per world (bars, one colour per batch), each bar labelled
    with its scaling efficiency. matplotlib is imported here (Agg canvas, no pyplot)."""
    import io

    from matplotlib.figure import Figure

    from lbtrain.reports.plots import OKABE_ITO

    ok = [row for row in rows if row["status"] == "ok"]
    models = list(dict.fromkeys(row["model"] for row in ok)) or ["(no configuration finished)"]
    batches = list(dict.fromkeys(row["per_worker_batch"] for row in ok))
    figure = Figure(figsize=(4.4 * len(models), 3.6), layout="constrained")
    for axes, model in zip(figure.subplots(1, len(models), squeeze=False).flat, models):
        mine = [row for row in ok if row["model"] == model]
        worlds = list(dict.fromkeys(row["world"] for row in mine))
        width = 0.8 / max(1, len(batches))
        for index, batch in enumerate(batches):
            bars = [row for row in mine if row["per_worker_batch"] == batch]
            xs = [worlds.index(row["world"]) + (index - (len(batches) - 1) / 2) * width for row in bars]
            axes.bar(xs, [row["images_per_second"] for row in bars], width, color=OKABE_ITO[index % len(OKABE_ITO)],
                     label=f"{batch} per worker")
            for x, row in zip(xs, bars):
                if row.get("scaling_efficiency") is not None:
                    axes.annotate(f"{row['scaling_efficiency']:.2f}", (x, row["images_per_second"]), ha="center",
                                  va="bottom", fontsize=7)
        axes.set_xticks(range(len(worlds)), worlds, rotation=30, ha="right", fontsize=8)
        shape = f"\n{mine[0]['input_shape']} in, {mine[0]['classes']} classes" if mine and mine[0].get("input_shape") else ""
        axes.set_title(f"{model}{shape}", fontsize=9)
        axes.set_ylabel("images/s (labels: scaling efficiency)")
        if mine:
            axes.legend(fontsize=7, frameon=False)
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=100)
    return write_atomic(path, image.getvalue())


def format_table(report: dict) -> str:
    """The rows as a fixed-width text table, what its images/s columns are and the rule of
    ``bound``, then the peak."""
    width = max([9, *(len(row["model"]) for row in report["rows"])])
    lines = [f"{'model':<{width}} {'batch':>5} {'world':<14} {'images/s':>10} {'pipeline/s':>10} {'fed/s':>10} {'bound':<13} "
             f"{'efficiency':>10} {'of peak':>8}  status"]
    for row in report["rows"]:
        def number(key: str, spec: str) -> str:
            return "" if row.get(key) is None else format(row[key], spec)

        lines.append(f"{row['model']:<{width}} {row['per_worker_batch']:>5} {row['world']:<14} {number('images_per_second', '.1f'):>10} "
                     f"{number('pipeline_images_per_second', '.1f'):>10} {number('fed_images_per_second', '.1f'):>10} "
                     f"{row.get('bound') or '':<13} {number('scaling_efficiency', '.3f'):>10} {number('peak_fraction', '.3f'):>8}  "
                     f"{row['status']}")
    lines.append(f"images/s: the training step alone (one batch in memory); pipeline/s: the trainer's input pipeline alone; "
                 f"fed/s: the step fed by that pipeline; input-bound where pipeline/s < {INPUT_BOUND_MARGIN:g} x images/s")
    if report["peak_gflops"]:
        lines.append(f"float32 matmul peak of this machine: {report['peak_gflops']:.1f} GFLOP/s ({report['machine']['cpus']} CPUs); "
                     f"a configuration using k of them reaches at most k/{report['machine']['cpus']} of it")
    return "\n".join(lines)


class ProgressBar:
    """Progress while the ``lbtrain`` logger takes INFO records (not under ``--quiet``): a
    one-line bar redrawn in place on a terminal ``stream`` (stderr), otherwise an INFO record
    per step."""

    def __init__(self, stream: TextIO | None = None, width: int = 24):
        self.stream, self.width = stream or sys.stderr, width
        self.tty = self.stream.isatty()

    def __call__(self, done: int, total: int, label: str) -> None:
        if not logger.isEnabledFor(logging.INFO):
            return
        filled = self.width * done // max(1, total)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {label}"
        if not self.tty:
            logger.info(line)
            return
        self.stream.write(f"\r{line:<80}" + ("\n" if done == total else ""))
        self.stream.flush()
