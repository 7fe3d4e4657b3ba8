"""The ``lbtrain`` command line.

Bad input never yields a traceback: a user error prints one line ``lbtrain: error: ...``
and exits with code 2 (argparse's convention for usage errors).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence


USAGE_ERROR = 2


def _positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _comma_list(text: str) -> list[str]:
    """argparse type: comma-separated names, none empty."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return items


def _positive_ints(text: str) -> list[int]:
    """argparse type: comma-separated whole numbers >= 1."""
    return [_positive_int(item) for item in _comma_list(text)]


def _worlds(text: str) -> list:
    """argparse type: comma-separated worlds of ``lbtrain bench`` (``single``, ``simulated:4``, ...)."""
    from lbtrain.bench import BenchError, WorldSpec

    try:
        return [WorldSpec.parse(item) for item in _comma_list(text)]
    except BenchError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _datasets_command(args: argparse.Namespace) -> int:
    from lbtrain.data import DATASETS

    header = f"{'name':<14} {'train':>7} {'test':>6} {'input':<12} {'classes':>7}  source on this machine"
    print(header)
    for info in DATASETS.values():
        shape = "x".join(str(d) for d in info.input_shape)
        print(f"{info.name:<14} {info.train_size:>7} {info.test_size:>6} {shape:<12} {info.num_classes:>7}  {info.locate()}")
    return 0


def _train_command(args: argparse.Namespace) -> int:
    from lbtrain.config import read_yaml_mapping, run_config_from_dict
    from lbtrain.distributed import configure_threads, current_world
    from lbtrain.results import write_run

    configure_threads(args.threads, args.threads)
    data = read_yaml_mapping(args.config)
    world = None
    if args.mode in ("mirrored", "multiworker"):
        from lbtrain.tf_distribute import world_before_tensorflow

        world = world_before_tensorflow(data, args.mode)
    if args.mode == "parameter_server":
        from lbtrain.parameter_server import world_before_tensorflow as parameter_server_world

        world = parameter_server_world(data)
        if world is None:  # a worker or parameter server whose server stopped
            return 1
    config = run_config_from_dict(data)
    if world is None:
        world = current_world(config.training.world_size, config.training.micro_batches, args.mode)
    from lbtrain.trainer import train  # after the world: importing it starts TensorFlow's runtime

    verbose = 1 if world.is_root and sys.stdout.isatty() else 0
    result = train(config, world, run_dir=args.run_dir, resume=args.resume, verbose=verbose)
    if world.is_root:
        if args.run_dir:
            write_run(args.run_dir, result)
        metrics = result.metrics
        print(
            f"{result.status}: {config.training.world_text} = batch {result.global_batch}, "
            f"lr {result.learning_rate:.4g}, train acc {metrics.get('train_accuracy', float('nan')):.4f}, "
            f"test acc {metrics.get('test_accuracy', float('nan')):.4f}, {result.samples_per_second:.0f} samples/s"
            + (f" ({result.reason})" if result.reason else "")
        )
    return 0


def _run_command(args: argparse.Namespace) -> int:
    from lbtrain.config import load_experiment
    from lbtrain.runner import expand, run_experiment, summary_table

    experiment = load_experiment(args.experiment, args.set)
    planned = expand(experiment)
    if args.dry_run:
        print(f"{experiment.name}: {len(planned)} runs ({experiment.mode}) -> {experiment.results_dir}")
        for run in planned:
            settings = run.config.training
            print(f"  {run.run_id}  {run.label}  {settings.world_text}  "
                  f"{run.config.optimizer.name}  rule {run.config.lr.rule}  seed {settings.seed}")
        return 0
    print(f"{experiment.name}: {len(planned)} runs ({experiment.mode}) -> {experiment.results_dir}", flush=True)
    rows = run_experiment(experiment, config_file=str(Path(args.experiment).resolve()), fresh=args.fresh,
                          progress=lambda line: print(line, flush=True))
    print(summary_table(rows))
    print(f"wrote {experiment.results_dir / 'summary.csv'}")
    failed = sum(row["status"] == "failed" for row in rows)
    if failed:
        print(f"lbtrain: {failed} of {len(rows)} runs failed (reasons in {experiment.results_dir / 'summary.csv'}); "
              "a rerun retries them", file=sys.stderr)
        return 1
    return 0


def _sweep_command(args: argparse.Namespace) -> int:
    from lbtrain.config import load_experiment
    from lbtrain.sweep import run_sweep, storage_url

    experiment = load_experiment(args.experiment, args.set)
    if experiment.protocol is not None:
        return _protocol_command(args, experiment)
    try:
        outputs = run_sweep(experiment, experiment_path=args.experiment, overrides=args.set, trials=args.trials,
                            storage=args.storage, workers=args.workers, worker=args.worker)
    except RuntimeError as error:
        print(f"lbtrain: error: {error}", file=sys.stderr)
        return 1
    if outputs is None:
        return 0
    rows, fit = outputs
    for row in rows:
        best = row.get("best_validation_accuracy")
        print(f"world {row['world_size']:>3}: {row['complete']} complete, {row['pruned']} pruned, "
              f"{row['diverged']} diverged, {row['collapsed']} collapsed"
              + (f", best ok validation {best:.4f} (test {row['best_test_accuracy']:.4f}) at lr {row['best_learning_rate']:.4g}"
                 if best is not None else ", no ok trial"))
    print(fit.describe())
    print(f"wrote {experiment.results_dir / 'sweep_summary.csv'} (studies in {args.storage or storage_url(experiment)})")
    return 0


def _protocol_command(args: argparse.Namespace, experiment) -> int:
    """``lbtrain sweep`` on an experiment with a ``protocol`` section (``lbtrain.protocol``)."""
    from lbtrain.config import ConfigError
    from lbtrain.protocol import PROTOCOL_REPORT, run_protocol
    from lbtrain.sweep import storage_url

    if args.workers > 1 or args.worker is not None or args.trials is not None:
        raise ConfigError("the tuning protocol runs in one process with sweep.trials trials per arm "
                          "(--workers and --trials are for plain sweeps)")
    run_protocol(experiment, storage=args.storage or storage_url(experiment), config_file=str(Path(args.experiment).resolve()),
                 progress=lambda line: print(line, flush=True))
    report = experiment.results_dir / PROTOCOL_REPORT
    print(report.read_text(), end="")
    print(f"wrote {report}")
    return 0


def _bench_command(args: argparse.Namespace) -> int:
    from lbtrain import bench

    bench.check_device(args.device)
    models = args.models or bench.default_models(args.device)
    bench.check_models(models)
    worlds, notes = bench.check_worlds(args.worlds or [bench.WorldSpec.parse(world) for world in bench.DEFAULT_WORLDS],
                                       explicit=args.worlds is not None)
    for note in notes:
        print(f"lbtrain: note: {note}", file=sys.stderr)
    threads = args.threads or (1 if args.device == "cpu" else None)
    settings = bench.Settings(device=args.device, threads=threads, seconds=args.seconds, steps=args.steps,
                              warmup_steps=args.warmup, timeline=args.timeline, pin_cores=args.pin_cores,
                              idle_horovod_threads=args.idle_horovod_threads)
    batches = args.batches or list(bench.DEFAULT_BATCHES)
    report = bench.run_benchmark(models, batches, worlds, settings, args.output, progress=bench.ProgressBar())
    print(bench.format_table(report))
    print(f"wrote {Path(args.output) / 'bench.csv'}, bench.json and bench.png")
    failed = sum(row["status"] != "ok" for row in report["rows"])
    if failed:
        print(f"lbtrain: {failed} of {len(report['rows'])} configurations failed (reasons in the status column)", file=sys.stderr)
        return 1
    return 0


def _advise_command(args: argparse.Namespace) -> int:
    from lbtrain.advisor import advise, describe, plot_advice, print_progress
    from lbtrain.config import load_experiment
    from lbtrain.files import write_json_atomic

    experiment = load_experiment(args.experiment, args.set)
    output = Path(args.output) if args.output else experiment.results_dir / "advice"
    advice = advise(experiment, args.steps, progress=print_progress)
    print(describe(advice))
    write_json_atomic(output / "advice.json", advice.to_dict())
    plot_advice(advice, output / "advice.png")
    print(f"wrote {output / 'advice.json'} and {output / 'advice.png'}")
    return 0


def _report_command(args: argparse.Namespace) -> int:
    import tensorflow as tf

    from lbtrain.analysis.report import write_report

    tf.get_logger().setLevel("ERROR")  # rebuilding many schedules makes TensorFlow warn about retracing
    path = write_report(args.results, target=args.target, metric=args.metric,
                        on_damaged=lambda problem: print(f"lbtrain: warning: {problem}", file=sys.stderr))
    print(f"wrote {path} and its figures in {path.parent / 'figures'}")
    return 0


def _compare_command(args: argparse.Namespace) -> int:
    from lbtrain.analysis.mode_comparison import FIGURES_FOLDER, write_comparison

    path = write_comparison(args.first, args.second, args.output, target=args.target,
                            on_damaged=lambda problem: print(f"lbtrain: warning: {problem}", file=sys.stderr))
    print(f"wrote {path} and its figures in {path.parent / FIGURES_FOLDER}")
    return 0


class _OneLineErrors(argparse.ArgumentParser):
    """Usage errors as one line, ``lbtrain: error: ...``, exit code 2 (argparse prints the usage too)."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"lbtrain: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineErrors(prog="lbtrain", description="Large-batch training studies with Keras and Horovod.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    datasets = commands.add_parser("datasets", help="list datasets, their sizes and where each loads from here")
    datasets.set_defaults(handler=_datasets_command)
    run = commands.add_parser("run", help="run an experiment YAML: every grid point, resumable; results in results/<name>/")
    run.add_argument("experiment", help="an experiment YAML, e.g. experiments/quickstart.yaml")
    run.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field, e.g. --set training.epochs=1")
    run.add_argument("--dry-run", action="store_true", help="list the runs without training")
    run.add_argument("--fresh", action="store_true", help="delete this experiment's previous runs and start over")
    run.set_defaults(handler=_run_command)
    sweep = commands.add_parser("sweep", help="tune the experiment's search space with Optuna, one study per world size")
    sweep.add_argument("experiment", help="an experiment YAML with a search section")
    sweep.add_argument("--trials", type=_positive_int, help="finished trials per world size (default sweep.trials); a rerun tops up")
    sweep.add_argument("--storage", help="an SQLAlchemy URL (default sqlite:///results/<name>/optuna.db)")
    sweep.add_argument("--workers", type=_positive_int, default=1, help="processes sharing the studies")
    sweep.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    sweep.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    sweep.set_defaults(handler=_sweep_command)
    report = commands.add_parser("report", help="write report.md and figures for an experiment's (or sweep's) results folder")
    report.add_argument("results", help="a results folder, e.g. results/quickstart")
    report.add_argument("--target", type=float, help="validation accuracy counted to in steps-to-target (default: the highest every batch reaches)")
    report.add_argument("--metric", help="per-epoch metric of curves and steps to target (default val_accuracy, else accuracy)")
    report.set_defaults(handler=_report_command)

    compare = commands.add_parser("compare", help="compare two results folders of one grid run in two modes (e.g. sync vs async)")
    compare.add_argument("first", help="a results folder, e.g. results/sync_vs_async_sync")
    compare.add_argument("second", help="the same grid in another mode, e.g. results/sync_vs_async_async")
    compare.add_argument("--output", required=True, help="folder of compare.md, compare.json and figures/")
    compare.add_argument("--target", type=float, help="validation accuracy counted to (default: the highest every world reaches in both)")
    compare.set_defaults(handler=_compare_command)

    advise = commands.add_parser(
        "advise", help="probe the gradient noise scale and advise the world size and LR recipe worth paying for")
    advise.add_argument("experiment", help="an experiment YAML; the probe trains its base run at lr.base_batch")
    advise.add_argument("--steps", type=_positive_int, help="probe steps (default: one epoch)")
    advise.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    advise.add_argument("--output", help="folder of advice.json and advice.png (default results/<name>/advice)")
    advise.set_defaults(handler=_advise_command)
    bench = commands.add_parser(
        "bench", help="training images/s on synthetic data per model, batch and world; scaling efficiency, share of the "
                      "matmul peak; CSV, JSON and plot")
    bench.add_argument("--models", type=_comma_list, help="comma-separated: mlp, cnn, resnet, resnet50 "
                       "(default mlp,cnn,resnet; with --device gpu also resnet50)")
    bench.add_argument("--batches", type=_positive_ints, help="per-worker batch sizes, comma-separated (default 64)")
    bench.add_argument("--worlds", type=_worlds, help="comma-separated: single, simulated:W, horovod:N, independent:N, mirrored:N "
                       "(default single,simulated:4,mirrored:2,independent:2,horovod:2; horovod skipped where not installed)")
    bench.add_argument("--device", default="cpu", help="cpu (default) or gpu (needs a GPU TensorFlow sees)")
    bench.add_argument("--threads", type=_positive_int, help="TensorFlow intra- and inter-op threads per process "
                       "(default 1 on cpu, TensorFlow's own on gpu)")
    bench.add_argument("--seconds", type=_positive_float, default=2.0, help="measured time per configuration (default 2)")
    bench.add_argument("--steps", type=_positive_int, help="measured steps per configuration instead of --seconds")
    bench.add_argument("--warmup", type=_positive_int, default=5, help="steps before measuring (default 5)")
    bench.add_argument("--timeline", action="store_true", help="record a Horovod timeline: the share of time in allreduce")
    bench.add_argument("--pin-cores", action="store_true", help="bind the i-th process of a world (rank) to core i")
    bench.add_argument("--idle-horovod-threads", action="store_true",
                       help="run Horovod's own threads at SCHED_IDLE: only while their rank's compute waits")
    bench.add_argument("--output", default="results/benchmarks/bench", help="folder of bench.csv, bench.json, bench.png")
    bench.set_defaults(handler=_bench_command)
    train = commands.add_parser(
        "train", help="train one resolved run config here: in a Horovod world under horovodrun/mpirun, simulated otherwise, "
                      "or in the world --mode names"
    )
    train.add_argument("config", help="a run config YAML (data, model, optimizer, lr, training)")
    train.add_argument("--run-dir", help="where rank 0 writes checkpoints, config.yaml, history.csv, metrics.json")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --run-dir")
    train.add_argument("--threads", type=_positive_int, help="TensorFlow intra- and inter-op threads per process")
    train.add_argument("--mode", choices=("simulated", "horovod", "mirrored", "multiworker", "parameter_server"),
                       help="the world: mirrored (tf.distribute.MirroredStrategy over W devices of this process), "
                            "multiworker (one worker of a MultiWorkerMirroredStrategy job described by $TF_CONFIG), "
                            "parameter_server (the chief, a worker or a parameter server of an asynchronous "
                            "ParameterServerStrategy job described by $TF_CONFIG); "
                            "default: horovod under horovodrun/mpirun, else simulated")
    train.set_defaults(handler=_train_command)
    return parser


def user_errors() -> tuple[type[Exception], ...]:
    """Exception types that mean bad input, reported in one line with exit code 2."""
    from lbtrain.analysis.report import ReportError
    from lbtrain.bench import BenchError
    from lbtrain.config import ConfigError
    from lbtrain.data import DatasetError
    from lbtrain.models import ModelError
    from lbtrain.results import ResultsError
    from lbtrain.schedules import ScheduleError

    return (BenchError, ConfigError, DatasetError, ModelError, ReportError, ResultsError, ScheduleError)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except user_errors() as error:
        print(f"lbtrain: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:
        # The reader went away (`lbtrain run x.yaml --dry-run | head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:
        # A disk that filled up or a folder that became unwritable while working: what was
        # written before stays (every file is written atomically); say which file, no traceback.
        where = f" ({error.filename})" if error.filename else ""
        print(f"lbtrain: error: {error.strerror or error}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
