"""lbtrain bench: training throughput per model, batch and world, and whether the input pipeline
or the training step bounds it."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from lbtrain.cli import arguments

logger = logging.getLogger(__name__)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``bench`` command's arguments."""
    parser = commands.add_parser(
        "bench", help="training images/s on synthetic data per model, batch and world: the step alone, the input "
                      "pipeline alone, the step fed by it and which bounds the run; scaling efficiency, share of the "
                      "matmul peak; CSV, JSON and plot")
    parser.add_argument("--models", type=arguments.comma_list, help="comma-separated: mlp, cnn, resnet, resnet50, a factory "
                       "package.module:function (the current folder is searched too), a registered name, or "
                       "keras.applications.<Name> (default mlp,cnn,resnet; with --device gpu also resnet50)")
    parser.add_argument("--input-shape", type=arguments.positive_ints, metavar="D,D,...",
                        help="one sample's shape the models are built for and fed, e.g. 32,32,3 (default 28,28,1; "
                             "resnet50 224,224,3)")
    parser.add_argument("--classes", type=arguments.positive_int, metavar="N",
                        help="classes of the synthetic labels: the width of the models' output (default 10; resnet50 1000)")
    parser.add_argument("--batches", type=arguments.positive_ints, help="per-worker batch sizes, comma-separated (default 64)")
    parser.add_argument("--worlds", type=arguments.worlds, help="comma-separated: single, simulated:W, horovod:N, independent:N, mirrored:N "
                       "(default single,simulated:4,mirrored:2,independent:2,horovod:2; horovod skipped where not installed)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or gpu (needs a GPU TensorFlow sees)")
    parser.add_argument("--threads", type=arguments.positive_int, help="TensorFlow intra- and inter-op threads per process "
                       "(default 1 on cpu, TensorFlow's own on gpu)")
    parser.add_argument("--seconds", type=arguments.positive_float, default=2.0, help="measured time of the step per configuration (default 2; the "
                        "step fed by the pipeline takes as many steps again)")
    parser.add_argument("--steps", type=arguments.positive_int, help="measured steps per configuration instead of --seconds")
    parser.add_argument("--warmup", type=arguments.positive_int, default=5, help="steps before measuring (default 5)")
    parser.add_argument("--timeline", action="store_true", help="record a Horovod timeline: the share of time in allreduce")
    parser.add_argument("--pin-cores", action="store_true", help="bind the i-th process of a world (rank) to core i")
    parser.add_argument("--idle-horovod-threads", action="store_true",
                       help="run Horovod's own threads at SCHED_IDLE: only while their rank's compute waits")
    parser.add_argument("--output", default="results/benchmarks/bench", help="folder of bench.csv, bench.json, bench.png")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain import bench

    bench.check_device(args.device)
    models = args.models or bench.default_models(args.device)
    bench.check_models(models)
    worlds, notes = bench.check_worlds(args.worlds or [bench.WorldSpec.parse(world) for world in bench.DEFAULT_WORLDS],
                                       explicit=args.worlds is not None)
    threads = args.threads or (1 if args.device == "cpu" else None)
    settings = bench.Settings(device=args.device, threads=threads, seconds=args.seconds, steps=args.steps,
                              warmup_steps=args.warmup, timeline=args.timeline, pin_cores=args.pin_cores,
                              idle_horovod_threads=args.idle_horovod_threads,
                              input_shape=None if args.input_shape is None else tuple(args.input_shape), classes=args.classes)
    batches = args.batches or list(bench.DEFAULT_BATCHES)
    bench.check_models_fit(models, batches, worlds, settings)  # a model that cannot run: one line, before any note
    for note in notes:
        logger.info("note: %s", note)
    report = bench.run_benchmark(models, batches, worlds, settings, args.output, progress=bench.ProgressBar(), check=False)
    print(bench.format_table(report))
    print(f"wrote {Path(args.output) / 'bench.csv'}, bench.json and bench.png")
    failed = sum(row["status"] != "ok" for row in report["rows"])
    if failed:
        logger.warning("%d of %d configurations failed (reasons in the status column)", failed, len(report["rows"]))
        return 1
    return 0
