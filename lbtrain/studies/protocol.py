"""The tuning protocol: what does a scaling rule cost, against tuning at the large batch?

Shallue et al. 2018 ("Measuring the Effects of Data Parallelism on Neural Network Training")
and Nado et al. 2021 ("A Large Batch Optimizer Reality Check") compare recipes only after
tuning each one with the same budget; an untuned base LR makes any comparison a comparison of
how lucky the base LR was. ``lbtrain sweep`` on an experiment with a ``protocol`` section runs:

1. **Arms.** Each recipe (a ``grid.variants`` entry) at each world size W of
   ``grid.world_sizes`` gives two arms:

   - *tuned*: the recipe's searched fields (``search``) tuned at W, scored on validation;
   - *rule*: the recipe's fields tuned at the reference world size (``protocol.
     reference_world_size``, default the smallest), then carried to W unchanged, so the
     recipe's ``lr.rule`` alone scales the LR. At the reference world size the two are one arm.
     With ``protocol.rules[recipe]`` (several rules) the one reference tuning is carried by each
     of them, one rule arm per rule (``"<recipe> <rule> rule"``): no scaling, sqrt and linear
     compared on the same base-batch tuning.

   A recipe in ``protocol.rule_only`` has no tuned arm but at the reference world size (it is
   there to test its rules); one in ``protocol.tuned_only`` has no rule arm.

   Every tuned study searches the same way (``lbtrain.studies.search``): by default the grid of
   the search space's values, every combination once, extended past an edge while the best ok
   trial sits on it; or TPE with ``sweep.trials`` trials of which at least 10 are random. Each
   study has its own sampler seed, and no trial is pruned but by divergence. A rule arm's
   budget is its reference study's. A recipe without warmup does not search
   ``lr.warmup_epochs``/``lr.warmup_start`` (nothing to tune there). Trials train side by side
   as the runner trains runs (``run_tuning``: worker processes sharing the storage, a grid
   point's value the same in any of them).
2. **Finals.** The best ok trial of each arm's study (by validation accuracy; never test) is
   re-run with each seed of ``protocol.seeds`` (>= 3, none of them a seed the tuning trials
   trained with: the final estimate must not contain the noise the arm was selected on) as
   ordinary runs of the experiment (``results/<name>/runs``, ``summary.csv``, resumable),
   labelled ``"<recipe> tuned"`` and ``"<recipe> rule"``.
3. **Comparison.** ``protocol.json`` and ``protocol.md``: per recipe and world size, the test
   accuracy of each arm (mean over its ok seeds with a 95% Student-t interval, n and df), the
   cost of the rule, tuned − rule, and each arm against the recipe's tuned arm at the
   reference world size (arm − reference: what moving from the base batch costs), each with
   its own Welch interval and df (``lbtrain.reports.statistics``); the trials each study had.
4. **Equal steps** (``protocol.equal_steps``, optional). The finals compare world sizes at
   equal epochs, so a world of W takes 1/W of the reference's updates. At each listed world
   size the best arm (the highest mean validation accuracy among arms whose every seed was ok)
   is re-run with its tuned parameters for the reference world size's number of updates
   (Hoffer et al. 2017, "Train longer, generalize better": the regime adaptation), labelled
   ``"<arm> equal steps"``; its decay follows the longer budget, its warmup stays in epochs.
   The comparison gives its test accuracy against the same arm at equal epochs (what the
   extra updates buy) and against the recipe's tuned reference.
5. **Convergence controls** (``protocol.train_longer``, optional). At a listed world size one
   arm (named, or the best as above) is re-run with the same seeds for ``factor`` times its
   own updates, labelled ``"<arm> <factor>x longer"``, and compared the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import optuna
from optuna.trial import TrialState

from lbtrain.config import ConfigError, ExperimentConfig, SearchParam, run_config_from_dict, with_overrides
from lbtrain.files import write_atomic, write_json_atomic
from lbtrain.results import PROTOCOL_FILE, PROTOCOL_REPORT, RUNS_FOLDER, ResultsError, claim_folder, file_lock
from lbtrain.rounding import is_close
from lbtrain.studies.plan import PlannedRun, grid_axes, label_slug, run_id
from lbtrain.studies.runner import log_progress, note_runs_left_out, run_planned
from lbtrain.studies.search import below_every_trial, check_tpe_budget, describe_search, edge_extensions, grid_points
from lbtrain.studies.storages import claim_trial
from lbtrain.studies.sweep import (
    FINISHED,
    StudySpec,
    best_ok_trial,
    check_sweepable,
    finished_trials,
    lr_points,
    objective,
    open_study,
    open_sweep_storage,
    run_workers,
    train_trial,
    world_sizes,
)
from lbtrain.verdict import is_ok

logger = logging.getLogger(__name__)

ARM_KINDS = ("tuned", "rule")
WARMUP_FIELDS = ("lr.warmup_epochs", "lr.warmup_start")
# How often a tuning process whose studies all wait for other processes' trials looks again.
WAIT_SECONDS = 1.0
# In the results folder: held while a tuning process queues a study's points and takes a trial (``_queue_lock``).
QUEUE_LOCK = ".tuning-queue.lock"


@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm: ``recipe`` at ``world_size``, its fields tuned in ``study`` (at this world size
    for a tuned arm, at the reference one for a rule arm) and applied to ``base``."""

    recipe: str
    kind: str
    world_size: int
    base: dict[str, Any]
    study: StudySpec
    rule: str | float | None = None

    @property
    def label(self) -> str:
        """The label of its final runs: ``"<recipe> <kind>"``, or ``"<recipe> <rule> rule"`` for
        a rule arm of a recipe carried by several rules (``protocol.rules``)."""
        return f"{self.recipe} {self.kind}" if self.rule is None else f"{self.recipe} {self.rule} {self.kind}"


def reference_world_size(experiment: ExperimentConfig) -> int:
    """Where rule arms are tuned: ``protocol.reference_world_size``, default the smallest world size."""
    sizes = world_sizes(experiment)
    reference = experiment.protocol.reference_world_size or min(sizes)
    if reference not in sizes:
        raise ConfigError(f"protocol.reference_world_size {reference} is not one of grid.world_sizes {sizes}")
    return reference


def _recipe_search(search: dict[str, SearchParam], base: dict[str, Any]) -> dict[str, SearchParam]:
    """The search space of a recipe: the warmup fields only where the recipe warms up."""
    warms_up = (base.get("lr") or {}).get("warmup_epochs", 0) > 0
    return {path: param for path, param in search.items() if warms_up or path not in WARMUP_FIELDS}


def protocol_arms(experiment: ExperimentConfig) -> list[Arm]:
    """Every arm, recipe by recipe, world size by world size (see the module doc)."""
    axes, variants = grid_axes(experiment.grid)
    crossed = [path for path, _ in axes if path != "training.world_size"]
    if crossed:
        raise ConfigError(f"grid: the protocol crosses grid.world_sizes with grid.variants only, not {', '.join(crossed)} "
                          "(seeds come from protocol.seeds)")
    sizes, reference = world_sizes(experiment), reference_world_size(experiment)
    settings = experiment.protocol
    recipes = [str(variant.get("label") or "base") for variant in variants]
    repeated = sorted({recipe for recipe in recipes if recipes.count(recipe) > 1})
    if repeated:
        raise ConfigError(f"grid.variants: the protocol takes each recipe once (it is tuned at every world size), "
                          f"but {', '.join(map(repr, repeated))} names several variants")
    unknown_sizes = [size for size in experiment.protocol.equal_steps if size not in sizes or size == reference]
    if unknown_sizes:
        raise ConfigError(f"protocol.equal_steps: {unknown_sizes} must be world sizes of grid.world_sizes {sizes} "
                          f"other than the reference world size {reference}")
    both = sorted(set(settings.rule_only) & set(settings.tuned_only))
    if both:
        raise ConfigError(f"protocol: {', '.join(map(repr, both))} is in both rule_only and tuned_only (it would have no arm "
                          "but at the reference world size)")
    ignored = sorted(set(settings.rules) & set(settings.tuned_only))
    if ignored:
        raise ConfigError(f"protocol.rules: {', '.join(map(repr, ignored))} is tuned_only, so it has no rule arm to carry by them")
    for section in ("rules", "search", "rule_only", "tuned_only"):
        unknown = sorted(set(getattr(experiment.protocol, section)) - set(recipes))
        if unknown:
            raise ConfigError(f"protocol.{section}: {', '.join(map(repr, unknown))} is not a recipe "
                              f"(labels of grid.variants: {', '.join(recipes)})")
    arms = []
    for recipe, variant in zip(recipes, variants):
        base = with_overrides(experiment.base_run(), {path: value for path, value in variant.items() if path != "label"})
        search = _recipe_search({**experiment.search, **experiment.protocol.search.get(recipe, {})}, base)
        studies = {size: StudySpec(f"{experiment.name}-{label_slug(recipe)}-w{size}", size, base, search,
                                   method=settings.search_method, startup_trials=settings.tpe_startup_trials, pruner="none",
                                   seeds=tuple(settings.tuning_seeds))
                   for size in sizes}
        rules = experiment.protocol.rules.get(recipe)
        tuned_everywhere, carried = recipe not in settings.rule_only, recipe not in settings.tuned_only
        for size in sizes:
            if tuned_everywhere or size == reference:
                arms.append(Arm(recipe, "tuned", size, base, studies[size]))
            if not carried:
                continue
            if size != reference and rules is None:
                arms.append(Arm(recipe, "rule", size, base, studies[reference]))
            elif size != reference:
                arms += [Arm(recipe, "rule", size, with_overrides(base, {"lr.rule": rule}), studies[reference], rule) for rule in rules]
    _check_train_longer(experiment, arms)
    return arms


def _check_train_longer(experiment: ExperimentConfig, arms: list[Arm]) -> None:
    """``ConfigError`` when a ``protocol.train_longer`` control names a world size or an arm
    the protocol does not have."""
    sizes = world_sizes(experiment)
    for control in experiment.protocol.train_longer:
        if control.world_size not in sizes:
            raise ConfigError(f"protocol.train_longer: world size {control.world_size} is not one of grid.world_sizes {sizes}")
        labels = [arm.label for arm in arms if arm.world_size == control.world_size]
        if control.arm is not None and control.arm not in labels:
            raise ConfigError(f"protocol.train_longer: {control.arm!r} is not an arm at world size {control.world_size} "
                              f"(arms there: {', '.join(labels)})")


def tuning_seeds(experiment: ExperimentConfig, arms: list[Arm]) -> list[int]:
    """The seeds the tuning trials train with: ``protocol.tuning_seeds``, else each arm's ``training.seed``."""
    if experiment.protocol.tuning_seeds:
        return sorted(experiment.protocol.tuning_seeds)
    return sorted({run_config_from_dict(with_overrides(arm.base, {"training.world_size": arm.world_size})).training.seed
                   for arm in arms})


def check_final_seeds(experiment: ExperimentConfig, arms: list[Arm]) -> None:
    """``ConfigError`` when a final seed is one a tuning trial used: the finals would then include
    the very run the arm was selected on (the winner's curse), with its initial weights, its
    validation split and its data order."""
    shared = sorted(set(experiment.protocol.seeds) & set(tuning_seeds(experiment, arms)))
    if shared:
        raise ConfigError(f"protocol.seeds {experiment.protocol.seeds} include the tuning trials' seed "
                          f"{', '.join(map(str, shared))} ({'protocol.tuning_seeds' if experiment.protocol.tuning_seeds else 'training.seed'}"
                          "): the finals need seeds no trial used")


def untaken_points(study: optuna.Study, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``points`` no trial has finished, is running or waits for. A point whose only trials
    failed (a Ctrl-C, a killed worker past its retries) is tried again; Optuna's
    ``skip_if_exists`` would count the failure as tried and leave a hole in the grid."""
    taken = [{**trial.system_attrs.get("fixed_params", {}), **trial.params}
             for trial in study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.WAITING, TrialState.RUNNING))]
    return [point for point in points if not any(_same_point(point, other) for other in taken)]


def _same_point(point: dict[str, Any], other: dict[str, Any]) -> bool:
    return point.keys() == other.keys() and all(
        is_close(value, other[path]) if isinstance(value, (int, float)) and isinstance(other[path], (int, float))
        else value == other[path] for path, value in point.items())


def _due_points(experiment: ExperimentConfig, spec: StudySpec, study: optuna.Study) -> list[dict[str, Any]]:
    """The points a grid study should queue now: its grid points no trial has taken
    (``untaken_points``); once every trial of the study has finished (none waits or runs, here
    or in another process), the edge extensions its best ok trial asks for
    (``lbtrain.studies.search.edge_extensions``), or with no ok trial, where every trial diverged
    or spiked, the LR below the lowest tried (``below_every_trial``). Empty: nothing to queue now."""
    points = untaken_points(study, grid_points(spec.search))
    if points or study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)):
        return points
    best = best_ok_trial(study)
    finished = study.get_trials(deepcopy=False, states=FINISHED)
    if best is None:
        return below_every_trial(spec.search, [(trial.params, trial.user_attrs.get("status")) for trial in finished],
                                 experiment.protocol.grid_extensions)
    return edge_extensions(spec.search, [trial.params for trial in finished], best.params, experiment.protocol.grid_extensions)


@contextlib.contextmanager
def _queue_lock(folder: Path) -> Iterator[None]:
    """Held while a process queues a study's next points and takes a trial (``file_lock`` on
    ``QUEUE_LOCK`` in the results folder), so two tuning processes of this machine never queue
    one point twice, nor top up a TPE study twice (``claim_trial`` queues a trial when none
    waits); that two never take one queued trial is ``claim_trial``'s own lock."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ResultsError(f"{folder}: cannot create the results folder ({error.strerror})") from None
    with file_lock(folder / QUEUE_LOCK, "the tuning queue's lock file"):
        yield


def _claim_next(experiment: ExperimentConfig, spec: StudySpec, study: optuna.Study) -> optuna.Trial | None:
    """The next trial of ``study`` this process trains, or None when it has none to give now:
    TPE's next draw while the study has fewer than ``sweep.trials`` finished plus running trials;
    a grid's next queued point, after queueing the points due (``_due_points``). Under the
    results folder's ``_queue_lock``."""
    with _queue_lock(experiment.results_dir):
        if spec.method != "grid":
            return claim_trial(study, experiment.sweep.trials)
        for point in _due_points(experiment, spec, study):
            study.enqueue_trial(point)
        return claim_trial(study, None)


def tune(experiment: ExperimentConfig, studies: list[StudySpec], storage: str, worker: int = 0) -> None:
    """Tunes ``studies`` to the end in this process (``lbtrain.studies.search``): TPE to
    ``sweep.trials`` trials, or the grid, then its edge extensions while the best ok trial sits
    on an edge. Other processes may run the same call on the same storage (``run_tuning``'s
    workers, ``worker`` their index, which seeds TPE's sampler): they share the trials.

    Each turn trains a trial of the first study that has one to give, so one process alone
    tunes the studies in order, as the protocol always has. A study whose trials all run in
    other processes is passed over (a grid's extensions wait until its every point has
    finished); when no study has a trial to give, the process looks again every
    ``WAIT_SECONDS``; it ends when no study has a trial waiting or running. Resumable: points
    already tried are not queued again, and a point whose trial failed is; a trial a dead
    process left RUNNING is failed once its heartbeat is stale and retried
    (``lbtrain.studies.storages.claim_trial``)."""
    shared = open_sweep_storage(experiment, storage)
    pending = [(spec, open_study(experiment, spec, shared, worker), objective(experiment, spec)) for spec in studies]
    while pending:
        for index, (spec, study, run_trial) in enumerate(pending):
            trial = _claim_next(experiment, spec, study)
            if trial is not None:
                train_trial(study, trial, run_trial)
                break
            if not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                del pending[index]  # nothing waits or runs, nothing is due: tuned
                break
        else:
            # Every study left waits for trials of other processes (or of a dead one, until its heartbeat is stale).
            time.sleep(WAIT_SECONDS)


def _tuning_ahead(experiment: ExperimentConfig, spec: StudySpec, study: optuna.Study) -> int:
    """The trials of a study known to be ahead: a grid's due points (``_due_points``) and its
    trials waiting or running (a dead process's are retried); TPE's trials left to
    ``sweep.trials``. A grid's later extensions are not known yet."""
    if spec.method != "grid":
        return max(0, experiment.sweep.trials - finished_trials(study))
    return len(_due_points(experiment, spec, study)) + len(study.get_trials(
        deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)))


def run_tuning(experiment: ExperimentConfig, studies: list[StudySpec], storage: str, workers: int | None = None) -> None:
    """Tunes ``studies`` to the end (``tune``), ``workers`` trials at once (None:
    ``$LBTRAIN_WORKERS``, else ``lbtrain.studies.runner.trial_placement``'s choice: a core per
    process, or one per GPU, never more than the trials known to be ahead). One at a time, in
    this process, as always. Several: that many ``lbtrain sweep --worker INDEX`` processes of
    the resolved experiment (written first to the results folder's ``experiment.yaml``) run
    ``tune`` side by side on the storage, each with its share of the cores as TensorFlow threads
    (``lbtrain.studies.sweep.run_workers``: Ctrl-C ends them, a failed one is a one-line
    ``WorkersFailed``). A grid point is a seeded run: its value does not depend on which process
    trains it, or beside what."""
    from lbtrain.studies.runner import default_workers, trial_placement, write_experiment

    workers = default_workers() if workers is None else workers
    # Created here, before the workers start, so they do not race to create them (or Optuna's tables).
    shared = open_sweep_storage(experiment, storage)
    ahead = sum(_tuning_ahead(experiment, spec, open_study(experiment, spec, shared)) for spec in studies)
    placed = trial_placement(experiment, ahead, workers)
    if placed.workers == 1:
        tune(experiment, studies, storage)
        return
    logger.info("tuning %d stud%s, %d trials known to be ahead: %d processes at once, %d TensorFlow thread%s each (%d cores)",
                len(studies), "y" if len(studies) == 1 else "ies", ahead, placed.workers, placed.threads, "s" * (placed.threads != 1),
                placed.cores)
    run_workers(str(write_experiment(experiment)), [], storage, placed)


def search_summary(experiment: ExperimentConfig, studies: list[StudySpec], storage: str) -> dict[str, dict[str, Any]]:
    """Per tuned study: how it searched, the values each field took, the best ok trial's and
    whether it is interior (``lbtrain.studies.search.describe_search``), and its trial count."""
    summary = {}
    for spec in studies:
        study = open_study(experiment, spec, storage)
        trials = study.get_trials(deepcopy=False, states=FINISHED)
        best = best_ok_trial(study)
        summary[spec.name] = {"method": spec.method, "trials": len(trials),
                              **describe_search(spec.search, [trial.params for trial in trials], None if best is None else best.params)}
    return summary


def tuned_studies(arms: list[Arm]) -> list[StudySpec]:
    """The distinct studies the arms are tuned in, in order."""
    return list({arm.study.name: arm.study for arm in arms}.values())


def final_runs(experiment: ExperimentConfig, arm: Arm, params: dict[str, Any], label: str | None = None) -> list[PlannedRun]:
    """The arm's best parameters re-run with every seed of ``protocol.seeds``, labelled
    ``label`` (default the arm's)."""
    label = label or arm.label
    planned = []
    for seed in experiment.protocol.seeds:
        data = with_overrides(arm.base, {"training.world_size": arm.world_size, **params, "training.seed": seed})
        try:
            config = run_config_from_dict(data)
        except ConfigError as error:
            raise ConfigError(f"{error} (final run of arm {label}, world size {arm.world_size})") from None
        planned.append(PlannedRun(run_id(config, label), label, config))
    return planned


def equal_steps_label(arm: Arm) -> str:
    """The label of an arm's equal-steps re-runs."""
    return f"{arm.label} equal steps"


def best_arm(arms: list[Arm], summary: list[dict[str, Any]], world_size: int) -> Arm | None:
    """The arm at ``world_size`` with the highest mean validation accuracy over its final runs,
    among arms whose every final run was ok (never scored on test); None when none qualifies."""
    scores = {}
    for arm in (arm for arm in arms if arm.world_size == world_size):
        runs = [row for row in summary if row["label"] == arm.label and row["world_size"] == world_size]
        if runs and all(is_ok(row["status"]) for row in runs):
            scores[arm.label] = (statistics.fmean(row["validation_accuracy"] for row in runs), arm)
    return max(scores.values(), key=lambda score: score[0])[1] if scores else None


def reference_steps(summary: list[dict[str, Any]], recipe: str, reference: int) -> int | None:
    """The updates the recipe's tuned runs took at the reference world size (the equal-steps
    budget), or None when it has no ok run there."""
    return _ok_steps(summary, f"{recipe} tuned", reference)


def _ok_steps(summary: list[dict[str, Any]], label: str, world_size: int) -> int | None:
    """The most updates an ok final run labelled ``label`` took at ``world_size``, or None."""
    steps = [row["total_steps"] for row in summary if row["label"] == label and row["world_size"] == world_size and is_ok(row["status"])]
    return max(steps) if steps else None


def equal_steps_runs(experiment: ExperimentConfig, arms: list[Arm], best_params: dict[str, dict[str, Any]],
                     summary: list[dict[str, Any]]) -> list[PlannedRun]:
    """At each world size of ``protocol.equal_steps``, the best arm's parameters re-run with
    every seed for the reference world size's number of updates (see the module doc)."""
    reference = reference_world_size(experiment)
    planned = []
    for size in experiment.protocol.equal_steps:
        arm = best_arm(arms, summary, size)
        steps = None if arm is None else reference_steps(summary, arm.recipe, reference)
        if arm is not None and steps is not None:
            budget = {"training.epochs": None, "training.samples": None, "training.steps": steps}
            planned += final_runs(experiment, arm, {**best_params[arm.study.name], **budget}, equal_steps_label(arm))
    return planned


def train_longer_label(arm: Arm, factor: float) -> str:
    """The label of an arm's convergence-control re-runs (``protocol.train_longer``)."""
    return f"{arm.label} {factor:g}x longer"


def own_steps(summary: list[dict[str, Any]], arm: Arm) -> int | None:
    """The updates the arm's ok final runs took, or None when it has none."""
    return _ok_steps(summary, arm.label, arm.world_size)


def _resolved_controls(experiment: ExperimentConfig, arms: list[Arm],
                       summary: list[dict[str, Any]]) -> list[tuple[Any, Arm | None, str | None]]:
    """Each ``protocol.train_longer`` control with its arm (the named one, else the best on
    validation at its world size) and why it cannot run (None: it can)."""
    resolved = []
    for control in experiment.protocol.train_longer:
        if control.arm is None:
            arm = best_arm(arms, summary, control.world_size)
        else:
            arm = next(arm for arm in arms if arm.label == control.arm and arm.world_size == control.world_size)
        if arm is None:
            reason = "no arm has every seed ok"
        elif own_steps(summary, arm) is None:
            reason = f"{arm.label} has no ok final run"
        else:
            reason = None
        resolved.append((control, arm, reason))
    return resolved


def train_longer_arms(experiment: ExperimentConfig, arms: list[Arm], summary: list[dict[str, Any]]) -> list[tuple[Arm, float]]:
    """Each ``protocol.train_longer`` control's arm (the named one, else the best on validation
    at its world size) with its factor, once per arm and factor; a control whose arm has no ok
    final run is left out with a warning (``controls_not_run`` says which)."""
    chosen: dict[tuple[str, int, float], tuple[Arm, float]] = {}
    for control, arm, reason in _resolved_controls(experiment, arms, summary):
        if reason is not None:
            logger.warning("protocol.train_longer at world size %d: %s, so this control is not run", control.world_size, reason)
            continue
        chosen.setdefault((arm.label, arm.world_size, float(control.factor)), (arm, control.factor))
    return list(chosen.values())


def controls_not_run(experiment: ExperimentConfig, arms: list[Arm], summary: list[dict[str, Any]]) -> list[str]:
    """The ``protocol.train_longer`` controls that could not run, each in words with why:
    ``'world 64: momentum+warmup linear rule 3x longer not run: momentum+warmup linear rule has no
    ok final run'``."""
    return [f"world {control.world_size}: {control.arm or 'the best arm'} {control.factor:g}x longer not run: {reason}"
            for control, _, reason in _resolved_controls(experiment, arms, summary) if reason is not None]


def train_longer_runs(experiment: ExperimentConfig, controls: list[tuple[Arm, float]], best_params: dict[str, dict[str, Any]],
                      summary: list[dict[str, Any]]) -> list[PlannedRun]:
    """Each convergence control's arm (``train_longer_arms``) re-run with every seed for
    ``factor`` times its own updates: the decay follows the longer budget, the warmup stays in
    epochs."""
    planned = []
    for arm, factor in controls:
        budget = {"training.epochs": None, "training.samples": None, "training.steps": round(factor * own_steps(summary, arm))}
        planned += final_runs(experiment, arm, {**best_params[arm.study.name], **budget}, train_longer_label(arm, factor))
    return planned


def run_protocol(
    experiment: ExperimentConfig,
    *,
    storage: str,
    config_file: str | None = None,
    progress: Callable[[str], None] = log_progress,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Tunes every study of the protocol (``run_tuning``), re-runs each arm's best with every
    seed (``lbtrain.studies.runner.run_planned``), and writes ``protocol.json`` and
    ``protocol.md``; returns the comparison rows (``comparison_rows``). ``workers`` trials or
    runs train at once in both stages (None: ``$LBTRAIN_WORKERS``, else as many as the cores or
    GPUs allow), each in a process of its own, so the model and data must be importable there
    (checked first). Resumable: finished trials and runs are kept."""
    arms = protocol_arms(experiment)
    studies = tuned_studies(arms)
    if experiment.protocol.search_method == "tpe":
        check_tpe_budget(experiment.sweep.trials, experiment.protocol.tpe_startup_trials)
    check_final_seeds(experiment, arms)
    check_sweepable(experiment, studies, in_process=False)  # the finals train in processes of their own, whatever the tuning
    claim_folder(experiment.results_dir, experiment.name, config_file, experiment.model_dump(mode="json"))
    run_tuning(experiment, studies, storage, workers)
    best = {study.name: best_ok_trial(open_study(experiment, study, storage)) for study in studies}
    params = {name: trial.params for name, trial in best.items() if trial is not None}
    planned = [run for arm in arms if arm.study.name in params for run in final_runs(experiment, arm, params[arm.study.name])]
    # With longer runs to come, the finals' stage does not warn about them (a rerun finds them on disk).
    more_stages = bool(experiment.protocol.equal_steps or experiment.protocol.train_longer)
    summary = run_planned(experiment, planned, config_file=config_file, progress=progress, workers=workers,
                          note_left_out=not more_stages)
    longer = equal_steps_runs(experiment, arms, params, summary)
    controls = train_longer_arms(experiment, arms, summary)
    longer += train_longer_runs(experiment, controls, params, summary)
    if longer:
        summary = run_planned(experiment, planned + longer, config_file=config_file, progress=progress, workers=workers)
    elif more_stages:  # no arm gave a control to run: the note the finals' stage held back
        note_runs_left_out(experiment.results_dir / RUNS_FOLDER, planned)
    trials = {study.name: len(open_study(experiment, study, storage).get_trials(deepcopy=False, states=FINISHED))
              for study in studies}
    reference = reference_world_size(experiment)
    rows = comparison_rows(arms, summary, trials, reference)
    chosen = {size: arm.label for size in world_sizes(experiment) if (arm := best_arm(arms, summary, size)) is not None}
    write_protocol(experiment, rows, trials, recipe_lr_fits(experiment, arms, storage), equal_steps_rows(arms, summary, reference), chosen,
                   search_summary(experiment, studies, storage), tuning_seeds(experiment, arms),
                   train_longer_rows(controls, summary, reference))
    return rows


def recipe_lr_fits(experiment: ExperimentConfig, arms: list[Arm], storage: str) -> dict[str, dict[str, Any]]:
    """Per recipe, the exponent of its tuned LR in the global batch over its tuned studies
    (``lbtrain.reports.scaling_laws.lr_exponent``: the top 3 ok trials of each world size,
    with a bootstrap interval over trials; "not enough points" below 4 batch sizes), as plain
    data: how the LR that tuning finds grows with the batch, beside the rules' 0.5 and 1."""
    from lbtrain.reports.scaling_laws import lr_exponent

    fits = {}
    for recipe in dict.fromkeys(arm.recipe for arm in arms):
        tuned = [arm for arm in arms if arm.recipe == recipe and arm.kind == "tuned"]
        trials_by_batch = {
            run_config_from_dict(with_overrides(arm.base, {"training.world_size": arm.world_size})).global_batch:
                lr_points(open_study(experiment, arm.study, storage))
            for arm in tuned
        }
        fits[recipe] = lr_exponent(trials_by_batch).to_dict()
    return fits


def _test_accuracies(summary: list[dict[str, Any]], label: str, world_size: int) -> tuple[list[float], int]:
    """The test accuracies of the ok final runs of one arm, and how many final runs it had."""
    runs = [row for row in summary if row["label"] == label and row["world_size"] == world_size]
    return [row["test_accuracy"] for row in runs if is_ok(row["status"])], len(runs)


def comparison_rows(arms: list[Arm], summary: list[dict[str, Any]], trials: dict[str, int], reference: int) -> list[dict[str, Any]]:
    """Per recipe, world size and rule: each arm's test accuracy (``Estimate`` as plain data),
    the cost of the rule (tuned − rule), and each arm against the recipe's tuned arm at the
    reference world size (arm − reference), with the trials behind each arm. At the reference
    world size the rule arm is the tuned arm: one row, no differences. A ``rule_only`` recipe
    has no tuned arm elsewhere: its tuned fields there are empty (n = 0, no trials); a
    ``tuned_only`` recipe has no rule arm: its rule fields are empty and its rule is ``-``."""
    from lbtrain.reports.statistics import difference_interval, mean_interval

    def difference(a: list[float], b: list[float], at_reference: bool) -> dict[str, Any] | None:
        return None if at_reference else dataclasses.asdict(difference_interval(a, b))

    rows = []
    for recipe, size in dict.fromkeys((arm.recipe, arm.world_size) for arm in arms):
        group = [arm for arm in arms if (arm.recipe, arm.world_size) == (recipe, size)]
        tuned_arm = next((arm for arm in group if arm.kind == "tuned"), None)
        reference_arm = next(arm for arm in arms if arm.recipe == recipe and arm.world_size == reference)
        config = run_config_from_dict(with_overrides(group[0].base, {"training.world_size": size}))
        at_reference = size == reference
        tuned, tuned_runs = _test_accuracies(summary, tuned_arm.label, size) if tuned_arm else ([], 0)
        base, _ = _test_accuracies(summary, reference_arm.label, reference)
        for rule_arm in [arm for arm in group if arm.kind == "rule"] or [tuned_arm if at_reference else None]:
            rule, rule_runs = _test_accuracies(summary, rule_arm.label, size) if rule_arm else ([], 0)
            rows.append({
                "recipe": recipe,
                "rule_name": ("reference" if at_reference else "-" if rule_arm is None
                              else str(config.lr.rule if rule_arm.rule is None else rule_arm.rule)),
                "world_size": size,
                "global_batch": config.global_batch,
                "tuned": dataclasses.asdict(mean_interval(tuned)),
                "tuned_runs": tuned_runs,
                "tuned_trials": trials[tuned_arm.study.name] if tuned_arm else 0,
                "rule": dataclasses.asdict(mean_interval(rule)),
                "rule_runs": rule_runs,
                "rule_trials": trials[reference_arm.study.name] if rule_arm else 0,
                "cost_of_rule": difference(tuned, rule, at_reference),
                "rule_minus_reference": difference(rule, base, at_reference),
                "tuned_minus_reference": difference(tuned, base, at_reference),
            })
    return rows


def _longer_row(arm: Arm, label: str, summary: list[dict[str, Any]], reference: int) -> dict[str, Any] | None:
    """An arm re-run for more updates under ``label``: its test accuracy (``Estimate`` as plain
    data) beside the arm's own, the gain of the extra updates (longer − the arm) and longer −
    the recipe's tuned arm at the reference world size; None when it has no such runs."""
    from lbtrain.reports.statistics import difference_interval, mean_interval

    longer, longer_runs = _test_accuracies(summary, label, arm.world_size)
    if not longer_runs:
        return None
    shorter, _ = _test_accuracies(summary, arm.label, arm.world_size)
    base, _ = _test_accuracies(summary, f"{arm.recipe} tuned", reference)
    return {
        "arm": arm.label,
        "recipe": arm.recipe,
        "world_size": arm.world_size,
        "global_batch": run_config_from_dict(with_overrides(arm.base, {"training.world_size": arm.world_size})).global_batch,
        "shorter": dataclasses.asdict(mean_interval(shorter)),
        "longer": dataclasses.asdict(mean_interval(longer)),
        "longer_runs": longer_runs,
        "gain": dataclasses.asdict(difference_interval(longer, shorter)),
        "longer_minus_reference": dataclasses.asdict(difference_interval(longer, base)),
    }


def equal_steps_rows(arms: list[Arm], summary: list[dict[str, Any]], reference: int) -> list[dict[str, Any]]:
    """Per arm re-run at equal steps: its test accuracy at equal steps and at equal epochs
    (``Estimate`` as plain data), the gain from the extra updates (equal steps − equal epochs)
    and equal steps against the recipe's tuned arm at the reference world size."""
    rows = []
    for arm in arms:
        row = _longer_row(arm, equal_steps_label(arm), summary, reference)
        if row is not None:
            rows.append({
                **{key: row[key] for key in ("arm", "recipe", "world_size", "global_batch")},
                "steps": reference_steps(summary, arm.recipe, reference),
                "equal_epochs": row["shorter"],
                "equal_steps": row["longer"],
                "equal_steps_runs": row["longer_runs"],
                "gain_of_steps": row["gain"],
                "equal_steps_minus_reference": row["longer_minus_reference"],
            })
    return rows


def train_longer_rows(controls: list[tuple[Arm, float]], summary: list[dict[str, Any]], reference: int) -> list[dict[str, Any]]:
    """Per convergence control (``train_longer_arms``): the arm's test accuracy at its budget and
    at ``factor`` times it, the gain of the longer budget and longer − the recipe's tuned arm at
    the reference world size, with the updates of each budget."""
    rows = []
    for arm, factor in controls:
        row = _longer_row(arm, train_longer_label(arm, factor), summary, reference)
        if row is not None:
            steps = own_steps(summary, arm)
            rows.append({**row, "factor": factor, "steps": steps, "longer_steps": round(factor * steps)})
    return rows


def _describe(record: dict[str, Any] | None, signed: bool = False) -> str:
    from lbtrain.reports.statistics import Estimate

    if record is None:
        return "reference"
    return Estimate(**record).describe(signed=signed)


def protocol_markdown(experiment: ExperimentConfig, rows: list[dict[str, Any]], trials: dict[str, int],
                      lr_fits: dict[str, dict[str, Any]] | None = None, steps_rows: list[dict[str, Any]] | None = None,
                      search: dict[str, dict[str, Any]] | None = None, tuning_seeds: list[int] | None = None,
                      longer_rows: list[dict[str, Any]] | None = None) -> str:
    """``protocol.md``: the comparison table, the budgets, how each study searched, the tuned
    LR's exponent in the batch per recipe, the equal-steps re-runs and the convergence
    controls, every number from ``rows``, ``lr_fits``, ``steps_rows``, ``search`` and
    ``longer_rows``."""
    from lbtrain.reports.scaling_laws import LrExponentFit
    from lbtrain.reports.tables import markdown_table

    budgets = sorted(set(trials.values()))
    budget_text = (f"{budgets[0]} finished trials per tuned study (equal for every arm)" if len(budgets) == 1
                   else f"unequal tuning budgets: {', '.join(f'{name} {count}' for name, count in trials.items())}")
    table = markdown_table(
        ["recipe", "rule", "world", "global batch", "rule: test acc [95% CI]", "rule − reference", "tuned: test acc [95% CI]",
         "tuned − reference", "cost of the rule (tuned − rule)"],
        [[row["recipe"], row["rule_name"], row["world_size"], row["global_batch"], _describe(row["rule"]),
          _describe(row["rule_minus_reference"], signed=True), _describe(row["tuned"]), _describe(row["tuned_minus_reference"], signed=True),
          _describe(row["cost_of_rule"], signed=True)] for row in rows],
    )
    return "\n\n".join([
        f"# {experiment.name}: scaling rule vs tuning at the batch",
        f"Tuning budget: {budget_text}, scored on validation accuracy; each arm's best configuration re-run with seeds "
        f"{', '.join(str(seed) for seed in experiment.protocol.seeds)} and tested"
        + ("" if tuning_seeds is None else _tuning_seeds_text(experiment, tuning_seeds))
        + f". *rule*: the recipe's search tuned at world size "
        f"{reference_world_size(experiment)} and carried by its LR rule; *tuned*: tuned at this world size; *reference*: the "
        "recipe's tuned arm at that world size, so *− reference* is what the larger batch costs. "
        "Means over the seeds whose run was judged ok, "
        "95% Student-t intervals (df = n − 1), differences with Welch's interval and df, n = ok seeds (of each arm).",
        table,
        *([] if not search else [_search_markdown(search)]),
        *([] if not lr_fits else [
            "Tuned LR against the global batch, per recipe (its tuned studies' top 3 ok trials per world size; "
            "alpha = 0.5 is the sqrt rule, 1 the linear rule):\n\n"
            + "\n".join(f"- {recipe}: {LrExponentFit.from_dict(fit).describe()}" for recipe, fit in lr_fits.items())]),
        *([] if not steps_rows else [_equal_steps_markdown(steps_rows, reference_world_size(experiment))]),
        *([] if not longer_rows else [_train_longer_markdown(longer_rows, reference_world_size(experiment))]),
    ]) + "\n"


def _tuning_seeds_text(experiment: ExperimentConfig, tuning_seeds: list[int]) -> str:
    seeds = ", ".join(map(str, tuning_seeds))
    scored = (f"each trial scored on the mean validation accuracy of seeds {seeds}" if experiment.protocol.tuning_seeds
              else f"the tuning trials trained with seed {seeds}")
    return f" ({scored}: no final run repeats a trial's initial weights, validation split or data order)"


def _search_markdown(search: dict[str, dict[str, Any]]) -> str:
    """How each tuned study searched: its method, trials, and per field the values tried and the
    best's, marked *edge* when the best sits on the edge of what was tried."""
    from lbtrain.reports.tables import markdown_table

    def field_text(path: str, field: dict[str, Any]) -> str:
        values = ", ".join(f"{value:g}" if isinstance(value, float) else str(value) for value in field["values"])
        best = field["best"] if not isinstance(field["best"], float) else f"{field['best']:g}"
        return f"{path} {{{values}}}: best {best}{'' if field['interior'] else ' (edge)'}"

    table = markdown_table(
        ["study", "method", "trials", "values tried and best", "best interior"],
        [[name, entry["method"], entry["trials"], "; ".join(field_text(path, field) for path, field in entry["fields"].items()),
          "yes" if entry["interior"] else "no"] for name, entry in search.items()],
    )
    return ("How each study searched (`grid`: every combination of the fields' values, then the next value past an edge "
            "while the best ok trial sat on it; no trial pruned but by divergence):\n\n" + table)


def _equal_steps_markdown(steps_rows: list[dict[str, Any]], reference: int) -> str:
    from lbtrain.reports.tables import markdown_table

    table = markdown_table(
        ["arm", "world", "global batch", "steps", "equal epochs: test acc [95% CI]", "equal steps: test acc [95% CI]",
         "equal steps − equal epochs", "equal steps − reference"],
        [[row["arm"], row["world_size"], row["global_batch"], row["steps"], _describe(row["equal_epochs"]),
          _describe(row["equal_steps"]), _describe(row["gain_of_steps"], signed=True),
          _describe(row["equal_steps_minus_reference"], signed=True)] for row in steps_rows],
    )
    return (f"Equal steps (Hoffer et al. 2017): the arm with the highest mean validation accuracy at each listed world size (among arms whose every seed was ok; not necessarily separable from the others) "
            f"re-run with the same seeds for as many updates as world size {reference} took; *reference* is its recipe's tuned "
            f"arm at world size {reference}.\n\n{table}")


def _train_longer_markdown(longer_rows: list[dict[str, Any]], reference: int) -> str:
    from lbtrain.reports.tables import markdown_table

    table = markdown_table(
        ["arm", "world", "global batch", "steps", "longer: steps", "test acc [95% CI]", "longer: test acc [95% CI]",
         "longer − arm", "longer − reference"],
        [[row["arm"], row["world_size"], row["global_batch"], row["steps"], row["longer_steps"], _describe(row["shorter"]),
          _describe(row["longer"]), _describe(row["gain"], signed=True), _describe(row["longer_minus_reference"], signed=True)]
         for row in longer_rows],
    )
    return ("Convergence controls (`protocol.train_longer`): the arm re-run with the same seeds for a multiple of its own "
            "updates, its decay stretched to the longer budget; *longer − arm* is what the extra updates buy, *reference* is "
            f"its recipe's tuned arm at world size {reference}.\n\n{table}")


def write_protocol(experiment: ExperimentConfig, rows: list[dict[str, Any]], trials: dict[str, int],
                   lr_fits: dict[str, dict[str, Any]] | None = None, steps_rows: list[dict[str, Any]] | None = None,
                   best: dict[int, str] | None = None, search: dict[str, dict[str, Any]] | None = None,
                   tuning_seeds: list[int] | None = None, longer_rows: list[dict[str, Any]] | None = None) -> Path:
    """Writes ``protocol.json`` (rows, trial counts, the tuned LR's exponent per recipe, the
    equal-steps rows, the convergence controls as ``train_longer``, the best arm per world size
    on validation as ``best_arms``, how each study searched as ``search``, the seeds of the
    tuning trials and of the finals) and ``protocol.md``; returns the latter."""
    folder = experiment.results_dir
    write_json_atomic(folder / PROTOCOL_FILE, {"rows": rows, "trials": trials, "lr_fits": lr_fits or {}, "equal_steps": steps_rows or [],
                                               "train_longer": longer_rows or [],
                                               "best_arms": {str(size): label for size, label in (best or {}).items()},
                                               "search": search or {}, "seeds": {"tuning": tuning_seeds or [],
                                                                                 "finals": list(experiment.protocol.seeds)}})
    return write_atomic(folder / PROTOCOL_REPORT,
                        protocol_markdown(experiment, rows, trials, lr_fits, steps_rows, search, tuning_seeds, longer_rows))


__all__ = ["ARM_KINDS", "Arm", "best_arm", "check_final_seeds", "comparison_rows", "controls_not_run", "equal_steps_rows",
           "equal_steps_runs", "final_runs", "own_steps", "protocol_arms", "protocol_markdown", "reference_world_size", "run_protocol", "run_tuning",
           "search_summary", "train_longer_arms", "train_longer_label", "train_longer_rows", "train_longer_runs", "tune", "tuned_studies",
           "tuning_seeds", "untaken_points", "write_protocol"]
