"""The design of a scaling study: what ``lbtrain scale`` runs for a user's experiment.

A team moving its own model from 1 to N workers asks which LR recipe to use at N, what it costs
and where scaling stops. A study answers that only if it avoids three traps, each of which the
design closes by construction (and states in its output):

- **Too few updates.** At equal epochs a world of W takes 1/W of the reference's updates; at 64
  workers a small data set leaves a handful, and every recipe "fails" for lack of steps, not for
  its batch (Hoffer et al. 2017). Each run trains the experiment's epochs *with a floor of
  updates* (``training.min_steps``, default ``MIN_UPDATES`` = 300 as in
  ``lbtrain.reports.regime``): a world size whose epochs give fewer trains for the floor, and
  the design says which.
- **Untuned or edge-tuned arms.** A recipe compared at one LR compares how lucky that LR was
  (Shallue et al. 2018; Nado et al. 2021). The LR is tuned at every world size on a log2 grid of
  ``GRID_POINTS`` = 5 base LRs centred on the experiment's rule's value (``base_lr x 2^k``,
  k = -2..2, each scaled by the experiment's ``lr.rule`` when it is linear or sqrt, else by the
  linear rule: ``(B / base_batch)^e``, e = 1 or 0.5; sqrt for Adam, Malladi et al. 2022), extended past an edge while the best sits on it
  (``lbtrain.studies.search``), scored on validation, never test.
- **One seed.** A trial is scored on the mean validation accuracy of ``TUNING_SEEDS`` (2; one
  seed's pick may not survive more seeds: in lbtrain's own resnet study the LR picked on one
  seed lost to its neighbour on five), and the best of every arm is re-run with
  ``FINAL_SEEDS`` fresh seeds (5; 3 when the budget trims them), none of them a tuning seed.

The arms (``lbtrain.studies.protocol``): the user's optimizer with gradual warmup (Goyal et al.
2017) tuned at every world size, and its reference tuning carried to every world size by the
linear rule, the sqrt rule and no scaling (``protocol.rules``); beside it the layer-wise optimizer
that applies (LARS for SGD/momentum, You et al. 2017; LAMB for Adam, You et al. 2020), tuned at
every world size. Convergence controls (``protocol.train_longer``): the best arm at the
reference world size and the linear rule's arm at the largest one (the arm the linear rule's
claim is about) re-run for ``CONTROL_FACTOR`` x its updates: is a loss at the large batch the
budget's? The runs measure the gradient noise scale
(``analysis.noise_scale``, McCandlish et al. 2018) for the answer's critical-batch prediction.

Pure: plain data in, an ``ExperimentConfig`` out; no TensorFlow, no user code.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from lbtrain.config import ConfigError, ExperimentConfig, run_config_from_dict, with_overrides
from lbtrain.config.experiment import MIN_PROTOCOL_SEEDS
from lbtrain.reports.regime import MAX_BATCH_FRACTION, MIN_UPDATES

__all__ = ["CONTROL_FACTOR", "FINAL_SEEDS", "GRID_POINTS", "TUNING_SEEDS", "ScaleDesign", "WorldPlan", "default_world_sizes", "design_study",
           "parse_world_sizes"]

GRID_POINTS = 5  # base_lr x 2^k for k = -2..2
FINAL_SEEDS = 5
TUNING_SEEDS = (0, 100)
CONTROL_FACTOR = 3
# Gradual warmup when the experiment has none: about 6% of the epochs (Goyal et al. 2017: 5 of
# 90), at least a tenth of an epoch.
WARMUP_SHARE = 0.06
MIN_WARMUP_EPOCHS = 0.1
RULES = ("linear", "sqrt", "none")
# The layer-wise optimizer that applies to each optimizer family, with its LR at the base batch
# (LARS's trust ratio eta x |w| / |g| makes its LR an order above SGD's: You et al. 2017) and rule.
LAYERWISE = {
    "sgd": ("lars", {"momentum": 0.9, "weight_decay": 0.0001, "eta": 0.001}, 2.0, "linear"),
    "momentum": ("lars", {"momentum": 0.9, "weight_decay": 0.0001, "eta": 0.001}, 2.0, "linear"),
    "adam": ("lamb", {"weight_decay": 0.01}, None, "sqrt"),
}


@dataclasses.dataclass(frozen=True)
class WorldPlan:
    """One world size of the design: its global batch, the batch's share of the training set,
    steps per epoch, and the updates each run takes (the experiment's epochs, or the floor)."""

    world_size: int
    global_batch: int
    share: float
    steps_per_epoch: int
    epoch_updates: int
    updates: int

    @property
    def floored(self) -> bool:
        """Whether the update floor, not the epochs, sets this world size's budget."""
        return self.updates > self.epoch_updates

    @property
    def in_regime(self) -> bool:
        """Whether the batch is at most ``MAX_BATCH_FRACTION`` of the training set."""
        return self.share <= MAX_BATCH_FRACTION


@dataclasses.dataclass(frozen=True)
class ScaleDesign:
    """A scaling study for one experiment (module doc); ``trimmed`` lists what a ``--budget``
    gave up, in order, each with what it costs."""

    experiment: ExperimentConfig
    train_size: int
    worlds: tuple[WorldPlan, ...]
    epochs: int
    min_updates: int
    warmup_epochs: float
    recipe: str
    layerwise: str | None
    seeds: tuple[int, ...]
    tuning_seeds: tuple[int, ...]
    grid_extensions: int
    controls: tuple[int, ...]
    trimmed: tuple[str, ...] = ()

    @property
    def world_sizes(self) -> list[int]:
        return [world.world_size for world in self.worlds]

    @property
    def reference(self) -> int:
        return self.worlds[0].world_size

    def protocol_experiment(self) -> ExperimentConfig:
        """The design as an experiment with a ``protocol`` section (``lbtrain.studies.protocol``),
        built and validated once per design (the command, the price and the answer all read it)."""
        return self._protocol

    @functools.cached_property
    def _protocol(self) -> ExperimentConfig:
        return protocol_experiment(self)

    @property
    def centre_rule(self) -> str:
        """The rule the tuned arms' LR grids are centred on: the experiment's ``lr.rule`` when it
        is ``linear`` or ``sqrt``, else ``linear``."""
        rule = self.experiment.lr.get("rule", "linear")
        return rule if rule in ("linear", "sqrt") else "linear"

    def replace(self, **changes: Any) -> "ScaleDesign":
        return dataclasses.replace(self, **changes)

    def record(self) -> dict[str, Any]:
        """What a budget may trim, as plain data (``SCALE_DESIGN_FILE``): a rerun keeps it."""
        return {"world_sizes": self.world_sizes, "seeds": list(self.seeds), "tuning_seeds": list(self.tuning_seeds),
                "controls": list(self.controls), "layerwise": self.layerwise, "trimmed": list(self.trimmed)}

    def with_record(self, record: dict[str, Any]) -> "ScaleDesign":
        """This design as the first run of its study left it (``record``): its world sizes, seeds,
        tuning seeds, controls, layer-wise arm and trims, so a rerun resumes the same study
        whatever a new probe of a busier or quieter machine would trim. ``ConfigError`` when the
        record names a world size this design does not have."""
        sizes = list(record["world_sizes"])
        missing = [size for size in sizes if size not in self.world_sizes]
        if missing:
            raise ConfigError(f"the results folder holds a scaling study of world sizes {', '.join(map(str, sizes))}; "
                              f"this design has no world size {missing[0]}: rerun with --world-sizes {','.join(map(str, sizes))}, "
                              "or give the experiment another name")
        return self.replace(worlds=tuple(world for world in self.worlds if world.world_size in sizes),
                            seeds=tuple(record["seeds"]), tuning_seeds=tuple(record["tuning_seeds"]),
                            controls=tuple(record["controls"]), layerwise=record["layerwise"], trimmed=tuple(record["trimmed"]))


def parse_world_sizes(text: str) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``; a ``ConfigError`` unless positive integers, strictly increasing, at least two.

    >>> parse_world_sizes("1, 4,16")
    [1, 4, 16]
    """
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--world-sizes {text[:60]!r}: give comma-separated positive integers, e.g. 1,4,16,64") from None
    if len(sizes) < 2 or any(size <= 0 for size in sizes) or any(b <= a for a, b in zip(sizes, sizes[1:])):
        raise ConfigError(f"--world-sizes {text[:60]!r}: give at least two positive world sizes in increasing order, e.g. 1,4,16,64")
    return sizes


def default_world_sizes(update_batch: int, train_size: int) -> list[int]:
    """Powers of 4 from 1 while the global batch stays within ``MAX_BATCH_FRACTION`` of the
    training set (the largest batch the data allows in the papers' regime); at least ``[1, 4]``.

    >>> default_world_sizes(32, 54_000)
    [1, 4, 16, 64]
    """
    sizes = [1]
    while sizes[-1] * 4 * update_batch <= MAX_BATCH_FRACTION * train_size:
        sizes.append(sizes[-1] * 4)
    return sizes if len(sizes) > 1 else [1, 4]


def _budget_epochs(training, reference_batch: int, train_size: int) -> int:
    """The experiment's budget in epochs: its ``epochs``, else its ``steps`` at the reference
    batch or its ``samples`` rounded up to whole epochs (every world size then trains as many)."""
    if training.epochs is not None:
        return training.epochs
    samples = training.samples if training.samples is not None else training.steps * reference_batch
    return max(1, math.ceil(samples / train_size))


def _world_plan(world_size: int, update_batch: int, train_size: int, epochs: int, min_updates: int) -> WorldPlan:
    batch = world_size * update_batch
    per_epoch = train_size // batch
    return WorldPlan(world_size, batch, batch / train_size, per_epoch, epochs * per_epoch, max(epochs * per_epoch, min_updates))


def _check_sizes(sizes: list[int], update_batch: int, train_size: int) -> None:
    too_large = [size for size in sizes if size * update_batch > train_size]
    if too_large:
        raise ConfigError(f"--world-sizes: world size {too_large[0]} needs a global batch of {too_large[0] * update_batch}, "
                          f"more than the {train_size} training samples: the data cannot fill it (at most "
                          f"{train_size // update_batch} workers of {update_batch})")


def design_study(experiment: ExperimentConfig, train_size: int, world_sizes: list[int] | None = None, *,
                 min_updates: int = MIN_UPDATES, seeds: int | None = None, tuning_seeds: int | None = None) -> ScaleDesign:
    """The full design (module doc) for ``experiment`` on a training set of ``train_size``
    samples at ``world_sizes`` (default ``default_world_sizes``), every run at least
    ``min_updates`` updates, ``seeds`` final seeds (default ``FINAL_SEEDS``), each trial scored
    on ``tuning_seeds`` seeds (default ``len(TUNING_SEEDS)``: 0, 100, 200, ...). ``ConfigError`` for
    a world size the data cannot fill, or an experiment the design cannot take (a grid, a protocol)."""
    if experiment.protocol is not None or set(experiment.grid) - {"world_sizes"}:
        raise ConfigError("lbtrain scale designs the grid and the protocol itself: give an experiment with a base run only "
                          "(grid.world_sizes may stay; remove grid.variants, grid.seeds, other grid axes and protocol)")
    base = run_config_from_dict(experiment.base_run())
    update_batch = base.training.update_batch
    sizes = list(world_sizes or default_world_sizes(update_batch, train_size))
    _check_sizes(sizes, update_batch, train_size)
    epochs = _budget_epochs(base.training, update_batch * sizes[0], train_size)
    worlds = tuple(_world_plan(size, update_batch, train_size, epochs, min_updates) for size in sizes)
    warmup = base.lr.warmup_epochs or max(MIN_WARMUP_EPOCHS, round(WARMUP_SHARE * epochs, 2))
    optimizer = base.optimizer.name
    layerwise = LAYERWISE.get(optimizer, (None,))[0]
    recipe = f"{optimizer}+warmup"
    return ScaleDesign(experiment, train_size, worlds, epochs, min_updates, warmup, recipe, layerwise,
                       tuple(range(1, (seeds or FINAL_SEEDS) + 1)), _tuning_seeds(tuning_seeds), 3, (sizes[0], sizes[-1]))


def _tuning_seeds(count: int | None) -> tuple[int, ...]:
    """``TUNING_SEEDS``, or ``count`` seeds 0, 100, 200, ... (never a final seed 1..N while N < 100)."""
    return TUNING_SEEDS if count is None else tuple(100 * index for index in range(count))


def lr_grid(base_lr: float) -> dict[str, Any]:
    """The search of ``lr.base_lr``: ``GRID_POINTS`` values ``base_lr x 2^k``, k = -2..2 (a log2 grid).

    >>> from lbtrain.config import SearchParam
    >>> from lbtrain.studies.search import grid_values
    >>> grid_values(SearchParam(**lr_grid(0.1)))
    [0.025, 0.05, 0.1, 0.2, 0.4]
    """
    return {"type": "float", "low": float(f"{base_lr / 4:.12g}"), "high": float(f"{base_lr * 4:.12g}"), "log": True}


def protocol_experiment(design: ScaleDesign) -> ExperimentConfig:
    """The design as an experiment the tuning protocol runs: the user's base run with the
    budget (epochs, ``min_steps``), the tuning seed and the noise scale; one recipe with warmup
    carried by every rule of ``RULES`` and tuned everywhere, the layer-wise optimizer tuned
    everywhere; finals with ``design.seeds``; convergence controls at ``design.controls``."""
    user = design.experiment
    base = run_config_from_dict(user.base_run())
    training = {**user.training, "epochs": design.epochs, "steps": None, "samples": None, "min_steps": design.min_updates,
                "seed": design.tuning_seeds[0], "world_size": design.reference}
    recipe = {"label": design.recipe, "lr.warmup_epochs": design.warmup_epochs, "lr.rule": design.centre_rule}
    variants = [recipe]
    search_by_recipe = {}
    if design.layerwise is not None:
        name, params, lars_lr, rule = LAYERWISE[base.optimizer.name]
        layerwise_lr = lars_lr if lars_lr is not None else base.lr.base_lr
        label = f"{design.layerwise}+warmup"
        variants.append({"label": label, "optimizer.name": name, "optimizer.params": params, "lr.base_lr": layerwise_lr,
                         "lr.rule": rule, "lr.warmup_epochs": design.warmup_epochs})
        search_by_recipe[label] = {"lr.base_lr": lr_grid(layerwise_lr)}
    data = {
        **user.model_dump(mode="json", exclude={"grid", "search", "protocol", "training", "analysis"}),
        "training": training,
        "analysis": {**user.analysis, "noise_scale": True},
        "grid": {"world_sizes": design.world_sizes, "variants": variants},
        "search": {"lr.base_lr": lr_grid(base.lr.base_lr)},
        # The storage as given: a dump masks its password (lbtrain.config.SweepConfig), which would not open it.
        "sweep": {**user.sweep.model_dump(mode="json"), "storage": user.sweep.storage, "pruner": "none"},
        "protocol": {
            "seeds": list(design.seeds), "exploratory": len(design.seeds) < MIN_PROTOCOL_SEEDS,
            "tuning_seeds": list(design.tuning_seeds), "grid_extensions": design.grid_extensions, "rules": {design.recipe: list(RULES)},
            "tuned_only": [label for label in search_by_recipe], "search": search_by_recipe,
            "train_longer": [_control(design, size) for size in design.controls],
        },
    }
    try:
        return ExperimentConfig.model_validate(data)
    except Exception as error:  # a pydantic error names the field; one line for the CLI
        raise ConfigError(f"the scaling study's design does not validate: {' '.join(str(error).split())[:240]}") from None


def _control(design: ScaleDesign, world_size: int) -> dict[str, Any]:
    """A convergence control: the best arm at the reference world size; at the largest, the linear
    rule's arm whatever rule the grid is centred on, as the answer's headline is where the linear
    rule stops (is its loss there the budget's?)."""
    control = {"world_size": world_size, "factor": CONTROL_FACTOR}
    return control if world_size == design.reference else {**control, "arm": f"{design.recipe} linear rule"}


def grid_trials(design: ScaleDesign) -> int:
    """The tuning trials the design expects: ``GRID_POINTS`` per tuned study plus one edge
    extension each (more when the best keeps sitting on an edge)."""
    recipes = 1 + (design.layerwise is not None)
    return recipes * len(design.worlds) * (GRID_POINTS + 1)


def final_arms(design: ScaleDesign) -> dict[int, int]:
    """Arms with final runs per world size: at the reference the tuned recipe (and the
    layer-wise one); elsewhere its tuned arm, one rule arm per rule (and the layer-wise one)."""
    layerwise = design.layerwise is not None
    return {world.world_size: (1 + layerwise if world.world_size == design.reference else 1 + len(RULES) + layerwise)
            for world in design.worlds}


def describe_design(design: ScaleDesign) -> list[str]:
    """The design as lines of text: what each world size trains, the arms, the grid, seeds,
    controls, and what a budget trimmed."""
    lines = [f"{design.experiment.name}: scaling study on {design.train_size:,} training samples, world sizes "
             f"{', '.join(map(str, design.world_sizes))} (reference {design.reference})"]
    lines.append(f"budget per run: {design.epochs} epochs with a floor of {design.min_updates} updates (equal epochs; a world size "
                 "whose epochs give fewer updates trains for the floor)")
    for world in design.worlds:
        note = (f"floor: {design.epochs} epochs would give {world.epoch_updates}" if world.floored else f"{design.epochs} epochs")
        regime = "" if world.in_regime else f"; OUT OF REGIME: batch above {MAX_BATCH_FRACTION:.0%} of the training set"
        lines.append(f"  world {world.world_size:>4}: global batch {world.global_batch:>6} ({100 * world.share:.2f}% of the data), "
                     f"{world.updates} updates ({note}){regime}")
    rules = ", ".join(RULES)
    lines.append(f"arms: {design.recipe} (gradual warmup {design.warmup_epochs:g} epochs) tuned at every world size and carried "
                 f"from world {design.reference} by the {rules} rules"
                 + (f"; {design.layerwise}+warmup tuned at every world size" if design.layerwise else ""))
    lines.append(f"LR grid: {GRID_POINTS} base LRs x 2^k (k = -2..2) around the {design.centre_rule} rule's value, extended past an edge up to "
                 f"{design.grid_extensions} times while the best sits on it; each trial scored on validation, on the mean of "
                 f"seed{'s' if len(design.tuning_seeds) > 1 else ''} {', '.join(map(str, design.tuning_seeds))}")
    lines.append(f"finals: each arm's best re-run with seeds {', '.join(map(str, design.seeds))} (never a tuning seed)"
                 + (f"; EXPLORATORY: fewer than {MIN_PROTOCOL_SEEDS} seeds, no claim rests on them"
                    if len(design.seeds) < MIN_PROTOCOL_SEEDS else ""))
    lines.append("convergence controls: " + " and ".join(
        ("the best arm" if size == design.reference else f"{design.recipe} linear rule") + f" at world {size}"
        for size in design.controls) + f" re-run for {CONTROL_FACTOR}x its updates" if design.controls else "convergence controls: none")
    arms = final_arms(design)
    finals = sum(arms.values()) * len(design.seeds)
    lines.append(f"runs: about {grid_trials(design)} tuning trials ({grid_trials(design) * len(design.tuning_seeds)} runs), {finals} final runs, "
                 f"{len(design.controls) * len(design.seeds)} control runs")
    lines += [f"trimmed by the budget: {entry}" for entry in design.trimmed]
    return lines


def seed_interval_widening(before: int, after: int) -> float:
    """How much wider a 95% Student-t interval of a mean gets with ``after`` seeds instead of
    ``before`` (same spread): ``t(0.975, after-1) / sqrt(after)`` over the same at ``before``.

    >>> round(seed_interval_widening(5, 3), 2)
    2.0
    """
    from scipy.stats import t

    return float((t.ppf(0.975, after - 1) / math.sqrt(after)) / (t.ppf(0.975, before - 1) / math.sqrt(before)))


def with_overrides_at(design: ScaleDesign, world_size: int) -> dict[str, Any]:
    """The base run of ``design`` at ``world_size`` (the probe prices it)."""
    return with_overrides(design.protocol_experiment().base_run(), {"training.world_size": world_size})
