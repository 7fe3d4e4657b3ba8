"""lbtrain advise: probe the gradient noise scale; the world size and LR recipe worth paying for."""

from __future__ import annotations

import argparse
from pathlib import Path

from lbtrain.cli import arguments


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``advise`` command's arguments."""
    parser = commands.add_parser(
        "advise", help="probe the gradient noise scale and advise the world size and LR recipe worth paying for")
    parser.add_argument("experiment", help="an experiment YAML; the probe trains its base run at lr.base_batch")
    parser.add_argument("--steps", type=arguments.positive_int, help="probe steps (default: one epoch)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    parser.add_argument("--output", help="folder of advice.json and advice.png (default results/<name>/advice)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.config import load_experiment
    from lbtrain.files import write_json_atomic
    from lbtrain.results import ADVICE_FIGURE, ADVICE_FILE, ADVICE_FOLDER, check_output_folder
    from lbtrain.studies.advisor import advise, describe, plot_advice, print_progress

    experiment = load_experiment(args.experiment, args.set)
    output = Path(args.output) if args.output else experiment.results_dir / ADVICE_FOLDER
    check_output_folder(output, "--output")  # before the probe trains
    advice = advise(experiment, args.steps, progress=print_progress)
    print(describe(advice))
    write_json_atomic(output / ADVICE_FILE, advice.to_dict())
    plot_advice(advice, output / ADVICE_FIGURE)
    print(f"wrote {output / ADVICE_FILE} and {output / ADVICE_FIGURE}")
    return 0
