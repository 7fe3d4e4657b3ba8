"""lbtrain scale: design, price, run and answer a scaling study of the experiment's own model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lbtrain.cli import arguments


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``scale`` command's arguments."""
    parser = commands.add_parser(
        "scale", help="which LR recipe at N workers, at what cost, and where scaling stops: a designed, priced study of your model")
    parser.add_argument("experiment", help="an experiment YAML naming the model, the data and the base recipe at its base batch")
    parser.add_argument("--world-sizes", metavar="W1,W2,...",
                        help="increasing world sizes (default: grid.world_sizes, else powers of 4 while the global batch stays "
                             "within 5%% of the training set)")
    parser.add_argument("--budget", type=arguments.positive_float, metavar="HOURS",
                        help="machine hours the study may take: the design is trimmed in a stated order to fit")
    parser.add_argument("--min-updates", type=arguments.positive_int, metavar="N",
                        help="the floor of updates every run trains (default 300)")
    parser.add_argument("--seeds", type=arguments.positive_int, metavar="N",
                        help="fresh final seeds per arm (default 5; fewer than 3 make an exploratory study whose answer "
                             "flags every claim)")
    parser.add_argument("--tuning-seeds", type=arguments.positive_int, metavar="N",
                        help="seeds each tuning trial trains and is scored on (their mean validation accuracy; default 2)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the design and its price where the study uses only lbtrain's models and datasets (a probe "
                             "trains a few steps at each global batch), run nothing; no model or loader of yours runs")
    parser.add_argument("--price", action="store_true",
                        help="print the design and its price, training nothing: the design reads your data's size and the probe "
                             "trains a few steps of your model at each global batch, here")
    parser.add_argument("--storage", help="an SQLAlchemy URL for the tuning studies (default: $LBTRAIN_STORAGE, else sweep.storage, "
                                          "else sqlite:///results/<name>/optuna.db); a password is better kept in $LBTRAIN_STORAGE")
    parser.add_argument("--workers", type=arguments.workers, default=None, metavar="auto|N",
                        help="tuning trials and runs trained at once (default auto: as many as the cores allow with a core per "
                             "process, or one per GPU); each process gets its share of the cores as TensorFlow threads")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="override a field")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from lbtrain.config import load_experiment, run_config_from_dict
    from lbtrain.reports.regime import MIN_UPDATES
    from lbtrain.results import ANSWER_FILE, ANSWER_REPORT, SCALE_DESIGN_FILE
    from lbtrain.storage_urls import environment_storage
    from lbtrain.studies.price import code_of_yours, probe_costs
    from lbtrain.studies.scale import (
        describe_design,
        design_study,
        parse_world_sizes,
        price_design,
        run_scale,
        training_size,
        trim_to_budget,
    )
    from lbtrain.studies.scale.study import design_configs
    from lbtrain.studies.sweep import storage_url

    sizes = parse_world_sizes(args.world_sizes) if args.world_sizes else None
    experiment = load_experiment(args.experiment, args.set)
    if sizes is None and len(experiment.grid.get("world_sizes", [])) > 1:
        sizes = parse_world_sizes(",".join(map(str, experiment.grid["world_sizes"])))
    yours = code_of_yours(experiment, [run_config_from_dict(experiment.base_run())], getattr(args, "imports", []))
    if args.dry_run and not args.price and yours is not None:
        print(f"design and price: need your model or data to run ({yours}), which --dry-run never does: --price designs "
              "the study from your data's size and prices it from a probe of a few steps at each global batch, here")
        return 0
    design = design_study(experiment, training_size(experiment), sizes, min_updates=args.min_updates or MIN_UPDATES,
                          seeds=args.seeds, tuning_seeds=args.tuning_seeds)
    probe = probe_costs(design_configs(design).values())
    folder = design.protocol_experiment().results_dir
    recorded = folder / SCALE_DESIGN_FILE
    if args.budget is not None and recorded.is_file():
        # A budget trims from this machine's timings now: a rerun keeps what the first run kept.
        design = design.with_record(json.loads(recorded.read_text()))
        price = price_design(design, probe)
        print(f"resuming the design the budget gave the first run ({recorded}; delete it to design again)")
    elif args.budget is not None:
        design, price = trim_to_budget(design, args.budget, probe)
    else:
        price = price_design(design, probe)
    print("\n".join(describe_design(design)))
    print(price.describe())
    if args.dry_run or args.price:
        return 0
    storage = args.storage or environment_storage() or storage_url(design.protocol_experiment())
    run_scale(design, storage=storage, config_file=str(Path(args.experiment).resolve()), price=price,
              record=args.budget is not None, workers=args.workers)
    print((folder / ANSWER_REPORT).read_text(), end="")
    print(f"wrote {folder / ANSWER_REPORT} and {folder / ANSWER_FILE}")
    return 0
