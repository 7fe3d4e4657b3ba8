"""``lbtrain scale``: design -> price -> run -> answer, for the user's own experiment.

1. **Design** (``lbtrain.studies.scale.design``): world sizes, arms, LR grids, seeds, an update
   floor and convergence controls, from the experiment and its training set's size.
2. **Price** (``lbtrain.studies.price``): a short measured probe at each global batch prices
   every tuning trial, final run and control; ``budget_hours`` trims the design in a stated order
   (``TRIM_ORDER``) until it fits, saying what each step gave up and what it costs, and refuses a
   budget below the smallest design.
3. **Run**: the design is an experiment with a ``protocol`` section, run by the tuning protocol
   (``lbtrain.studies.protocol.run_protocol``: every run through the runner, resumable, in the
   experiment's mode and storage).
4. **Answer** (``lbtrain.reports.answer``): ``answer.json``, ``answer.md`` and two figures in the
   experiment's results folder, from the runs only.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable

from lbtrain.config import ConfigError, ExperimentConfig, RunConfig, run_config_from_dict, with_overrides
from lbtrain.config.experiment import MIN_PROTOCOL_SEEDS
from lbtrain.files import write_atomic, write_json_atomic
from lbtrain.reports.answer import ArmSpec, StudyFacts, answer_data, answer_markdown, write_answer_figures
from lbtrain.results import ANSWER_FILE, ANSWER_REPORT, FIGURES_FOLDER, SCALE_DESIGN_FILE, claim_folder
from lbtrain.studies.price import Probe, estimate_seconds, stopping_early, stopping_text
from lbtrain.studies.scale.design import (
    CONTROL_FACTOR,
    GRID_POINTS,
    ScaleDesign,
    describe_design,
    final_arms,
    grid_trials,
    seed_interval_widening,
)

__all__ = ["TRIM_ORDER", "Price", "answer_from_results", "design_configs", "price_design", "scale_arms",
           "run_scale", "training_size", "trim_to_budget"]

logger = logging.getLogger(__name__)

# What a budget gives up, in this order (``trim_to_budget``; each step is one of ``_trim_steps``).
TRIM_ORDER = ("final seeds", "tuning seeds", "reference control", "layerwise", "middle world", "last control")


@dataclasses.dataclass(frozen=True)
class Price:
    """A design's priced seconds, by part, run one after another on this machine; an upper bound
    where its runs stop at a target (``stopping``: how many designed runs do)."""

    trials: float
    finals: float
    controls: float
    stopping: int = 0

    @property
    def total(self) -> float:
        return self.trials + self.finals + self.controls

    def describe(self) -> str:
        bound = f"at most {self.total / 3600:.2f} h ({stopping_text(self.stopping)})" if self.stopping else f"{self.total / 3600:.2f} h"
        return (f"estimated machine time {bound} (tuning {self.trials / 3600:.2f} h, finals "
                f"{self.finals / 3600:.2f} h, controls {self.controls / 3600:.2f} h; runs one after another on this machine, "
                "from a measured probe)")


def training_size(experiment: ExperimentConfig) -> int:
    """The number of training samples of the experiment's base run (its data loaded once: a
    dataset reference is called, as a run would)."""
    from lbtrain.data import DatasetError

    config = run_config_from_dict(experiment.base_run())
    try:
        data = config.data.load()
    except DatasetError as error:
        raise ConfigError(str(error)) from None
    return len(data.x_train)


def design_configs(design: ScaleDesign) -> dict[int, RunConfig]:
    """The base run of the design at each world size (what the probe measures and prices)."""
    base = design.protocol_experiment().base_run()
    return {size: run_config_from_dict(with_overrides(base, {"training.world_size": size})) for size in design.world_sizes}


def price_design(design: ScaleDesign, probe: Probe) -> Price:
    """The design's priced seconds (``lbtrain.studies.price``): ``GRID_POINTS`` + 1 trials per
    tuned study of one run per tuning seed each (in this process or the tuning's workers,
    started once: no process start per trial), every arm's final seeds, and each control's seeds
    at ``CONTROL_FACTOR`` x the updates. The finals and controls start a process
    each, or one for them all where the mode's launcher keeps a child between runs (a simulated
    world), as ``lbtrain.studies.runner.price_runs`` counts them."""
    from lbtrain.worlds.modes import get_mode

    configs = design_configs(design)
    without_start = dataclasses.replace(probe, launch_seconds=0.0)
    recipes = 1 + (design.layerwise is not None)
    trials = sum(recipes * (GRID_POINTS + 1) * len(design.tuning_seeds) * estimate_seconds([config], without_start) for config in configs.values())
    arms = final_arms(design)
    final_runs = {size: arms[size] * len(design.seeds) for size in configs}
    finals = sum(final_runs[size] * estimate_seconds([config], without_start) for size, config in configs.items())
    controls = 0.0
    for size in design.controls:
        world = next(world for world in design.worlds if world.world_size == size)
        longer = run_config_from_dict(with_overrides(configs[size].to_dict(), {
            "training.epochs": None, "training.min_steps": None, "training.steps": CONTROL_FACTOR * world.updates}))
        controls += len(design.seeds) * estimate_seconds([longer], without_start)
    launched = sum(final_runs.values()) + len(design.controls) * len(design.seeds)
    kept_child = get_mode(design.experiment.mode).launcher().child(1, {}) is not None
    finals += (1 if kept_child else launched) * probe.launch_seconds
    runs = grid_trials(design) * len(design.tuning_seeds) + launched
    return Price(trials, finals, controls, stopping=runs if stopping_early(configs.values()) else 0)


def _trim_steps(design: ScaleDesign) -> list[tuple[str, Callable[[ScaleDesign], ScaleDesign | None]]]:
    widening = seed_interval_widening(len(design.seeds), MIN_PROTOCOL_SEEDS)

    def fewer_seeds(d: ScaleDesign) -> ScaleDesign | None:
        return None if len(d.seeds) <= MIN_PROTOCOL_SEEDS else d.replace(
            seeds=d.seeds[:MIN_PROTOCOL_SEEDS],
            trimmed=d.trimmed + (f"final seeds {len(d.seeds)} -> {MIN_PROTOCOL_SEEDS}: every interval about {widening:.1f}x wider",))

    def fewer_tuning_seeds(d: ScaleDesign) -> ScaleDesign | None:
        return None if len(d.tuning_seeds) <= 1 else d.replace(
            tuning_seeds=d.tuning_seeds[:1],
            trimmed=d.trimmed + (f"tuning seeds {len(d.tuning_seeds)} -> 1: each LR is picked on one seed's validation "
                                 "accuracy, which another seed may reverse",))

    def reference_control(d: ScaleDesign) -> ScaleDesign | None:
        if d.reference not in d.controls or len(d.controls) < 2:
            return None
        return d.replace(controls=tuple(size for size in d.controls if size != d.reference),
                         trimmed=d.trimmed + (f"the convergence control at world {d.reference}: whether the reference's budget "
                                              "has converged is not measured",))

    def layerwise(d: ScaleDesign) -> ScaleDesign | None:
        return None if d.layerwise is None else d.replace(
            layerwise=None, trimmed=d.trimmed + (f"the {d.layerwise} arm: the layer-wise optimizer is not compared",))

    def middle_world(d: ScaleDesign) -> ScaleDesign | None:
        if len(d.worlds) <= 2:
            return None
        dropped = d.worlds[-2]
        return d.replace(worlds=d.worlds[:-2] + d.worlds[-1:],
                         trimmed=d.trimmed + (f"world size {dropped.world_size}: where scaling stops is bracketed more coarsely",))

    def last_control(d: ScaleDesign) -> ScaleDesign | None:
        return None if not d.controls else d.replace(
            controls=(), trimmed=d.trimmed + ("the convergence control at the largest world size: whether its budget has "
                                              "converged is not measured",))

    steps = {"final seeds": fewer_seeds, "tuning seeds": fewer_tuning_seeds, "reference control": reference_control,
             "layerwise": layerwise, "middle world": middle_world, "last control": last_control}
    return [(name, steps[name]) for name in TRIM_ORDER]



def trim_to_budget(design: ScaleDesign, hours: float, probe: Probe) -> tuple[ScaleDesign, Price]:
    """The design trimmed in ``TRIM_ORDER`` until its price fits ``hours`` (each step once;
    world sizes one at a time); a ``ConfigError`` when even the smallest design does not fit."""
    price = price_design(design, probe)
    for _, step in _trim_steps(design):
        while price.total > hours * 3600:
            smaller = step(design)
            if smaller is None:
                break
            design, price = smaller, price_design(smaller, probe)
    if price.total > hours * 3600:
        raise ConfigError(f"--budget {hours:g} h is too small for one run per arm: the smallest design (world sizes "
                          f"{', '.join(map(str, design.world_sizes))}, {len(design.seeds)} seeds, no controls) needs about "
                          f"{price.total / 3600:.2f} h on this machine")
    return design, price


def scale_arms(experiment: ExperimentConfig, summary: list[dict[str, Any]]) -> list[ArmSpec]:
    """The protocol's arms and convergence controls as the answer reads them."""
    from lbtrain.studies.protocol import protocol_arms, train_longer_arms, train_longer_label

    arms = protocol_arms(experiment)
    specs = [ArmSpec(arm.label, arm.world_size, arm.kind, arm.recipe, None if arm.kind == "tuned" else str(arm.rule))
             for arm in arms]
    specs += [ArmSpec(train_longer_label(arm, factor), arm.world_size, "control", arm.recipe, control_of=arm.label, factor=factor)
              for arm, factor in train_longer_arms(experiment, arms, summary)]
    return specs


def _tuning_seconds(experiment: ExperimentConfig, storage: str) -> tuple[float, dict[str, bool | None]]:
    """Seconds the tuning trials took, and per tuned study whether its best is interior (None:
    no trial of it ended ok, so it has no best)."""
    from lbtrain.studies.protocol import protocol_arms, search_summary, tuned_studies
    from lbtrain.studies.sweep import FINISHED, open_study

    studies = tuned_studies(protocol_arms(experiment))
    seconds = 0.0
    for spec in studies:
        for trial in open_study(experiment, spec, storage).get_trials(deepcopy=False, states=FINISHED):
            if trial.datetime_start and trial.datetime_complete:
                seconds += (trial.datetime_complete - trial.datetime_start).total_seconds()
    interior = {name: None if all(field["best"] is None for field in entry["fields"].values()) else bool(entry["interior"])
                for name, entry in search_summary(experiment, studies, storage).items()}
    return seconds, interior


def answer_from_results(design: ScaleDesign, storage: str) -> dict[str, Any]:
    """Reads the study's runs and writes ``answer.json``, ``answer.md`` and its figures; returns the answer."""
    from lbtrain.reports.tables import load_records
    from lbtrain.studies.protocol import controls_not_run, protocol_arms, recipe_lr_fits

    experiment = design.protocol_experiment()
    folder = experiment.results_dir
    records = load_records(folder, on_damaged=logger.warning)
    summary = [record.row for record in records]
    histories = {str(record.row["run_id"]): [row.get("noise_scale") for row in record.result.history] for record in records}
    arms = scale_arms(experiment, summary)
    seconds, interior = _tuning_seconds(experiment, storage)
    base = run_config_from_dict(experiment.base_run())
    facts = StudyFacts(experiment.name, str(base.model.name), str(base.data.dataset), design.train_size, design.reference,
                       {world.world_size: world.updates for world in design.worlds},
                       {world.world_size: world.global_batch for world in design.worlds}, describe_design(design), interior, seconds,
                       recipe_lr_fits(experiment, protocol_arms(experiment), storage),
                       controls_not_run(experiment, protocol_arms(experiment), summary))
    answer = answer_data(summary, arms, facts, histories=histories)
    write_json_atomic(folder / ANSWER_FILE, answer)
    write_answer_figures(answer, summary, arms, folder / FIGURES_FOLDER)
    write_atomic(folder / ANSWER_REPORT, answer_markdown(answer))
    return answer


def run_scale(design: ScaleDesign, *, storage: str, config_file: str | None, price: Price | None = None,
              progress: Callable[[str], None] | None = None, record: bool = False, workers: int | None = None) -> dict[str, Any]:
    """Runs the design's protocol (resumable; ``workers`` tuning trials and runs at once, None:
    as many as the machine allows, ``lbtrain.studies.protocol.run_protocol``) and writes its
    answer; a progress line per finished run carries the time left against the price (machine
    time, one run after another: several at once finish sooner). ``record``: first write what a
    budget kept (``ScaleDesign.record``) to the results folder's ``SCALE_DESIGN_FILE``, which a
    rerun with a budget resumes instead of trimming again from new timings."""
    from lbtrain.studies.protocol import run_protocol
    from lbtrain.studies.runner import log_progress

    started = time.monotonic()
    report = progress or log_progress

    def with_time_left(line: str) -> None:
        if price is None:
            report(line)
            return
        left = max(price.total - (time.monotonic() - started), 0.0)
        report(f"{line} (study: about {left / 60:.0f} min left of {price.total / 60:.0f} priced)")

    experiment = design.protocol_experiment()
    if record:
        claim_folder(experiment.results_dir, experiment.name, config_file, experiment.model_dump(mode="json"))
        if not (experiment.results_dir / SCALE_DESIGN_FILE).is_file():
            write_json_atomic(experiment.results_dir / SCALE_DESIGN_FILE, design.record())
    run_protocol(experiment, storage=storage, config_file=config_file, progress=with_time_left, workers=workers)
    return answer_from_results(design, storage)
