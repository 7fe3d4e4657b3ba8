"""``lbtrain advise``: which global batch and world size are worth paying for, and which LR
recipe to use there, from a short probe of the gradient noise scale.

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training") model the steps ``S`` and
samples ``E = B S`` to reach a given loss at batch ``B`` as::

    S(B) = S_min (1 + B_noise / B)        E(B) = E_min (1 + B / B_noise)

with the critical batch ``B_crit = E_min / S_min ~ B_noise`` and ``B_noise ~ B_simple =
tr(Sigma) / |G|^2`` (their eq. 2.8-2.9), which the probe measures inside every train step
(``lbtrain.train_step``). From it, for the user's per-worker batch ``b`` and world sizes ``W``
(``B = W b``), three regions as Shallue et al. 2018 describe them:

- perfect scaling: ``E(B) <= 1.1 E_min`` (``B <= B_noise / 10``): doubling the workers nearly
  halves the steps;
- diminishing returns: between;
- wasteful: ``S(B) <= 1.1 S_min`` (``B >= 10 B_noise``): more workers buy under 10% fewer steps.

The recommended world size puts ``B`` nearest ``B_noise`` (in log2), the trade-off point where
both steps and samples are twice their minimum. ``S_min`` comes from the experiment's own
budget, taken as the steps that reach its target at the base batch: ``S(B_base) = budget``.
The predicted time is ``S(B) x`` the step time of one worker's batch, measured in the probe (the
time of a probe step scaled to ``b`` samples; communication is not modelled, and step times
measured under Horovod can be passed instead). The LR recipe comes from the user's own evidence
first (``own_evidence``): the experiment's ``answer.json`` (``lbtrain scale``) at the world size
nearest the recommended one, else its own runs (``summary.csv``: of the recipes whose every seed
was ok at the global batch nearest the recommended one, the highest mean validation accuracy).
Only without either does it fall back to lbtrain's published studies (``lbtrain.studies.findings``),
and it says that this is another model's evidence, naming that study by its title, model and data: of the recipes whose every seed was ok at the nearest multiple
of the base batch, the one with the highest mean validation accuracy (ranked on validation,
never test; its test accuracy is what is quoted), called *best on validation* only when the
findings' ``standing`` (``lbtrain.reports.decisions.standing`` over the seeds) separates it from
every other recipe held there, else named with the recipes *tied with the best*.

B_simple grows as training proceeds (McCandlish et al. fig. 6): a probe at the start measures
the early, smallest value, a lower bound for the batch worth using later.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from lbtrain.config import ConfigError, ExperimentConfig, RunConfig, run_config_from_dict
from lbtrain.reports.decisions import BEST, TIED_WITH_THE_BEST
from lbtrain.reports.statistics import Estimate, bootstrap_ratio
from lbtrain.results import finite_or_none
from lbtrain.studies.findings import load_findings, recipe_advice
from lbtrain.train_step import NoiseScaleTracker
from lbtrain.verdict import is_ok

logger = logging.getLogger(__name__)

REGION_MARGIN = 0.1  # within 10% of the minimum steps or samples
MAX_WORLD_SIZE = 1024
WASTEFUL_SHOWN = 2  # world sizes listed past the start of the wasteful region
PROBE_SETTLE_STEPS = 3  # first steps (compiling) left out of the step time


@dataclasses.dataclass(frozen=True)
class ProbeStep:
    """One probe step: the raw two-batch estimates of ``tr(Sigma)`` and ``|G|^2``, the averaged
    ``B_simple`` so far (None while undetermined) and the step's seconds."""

    step: int
    trace: float
    norm_sq: float
    noise_scale: float | None
    seconds: float


@dataclasses.dataclass(frozen=True)
class WorldAdvice:
    """What ``W`` workers of ``per_worker_batch`` are predicted to cost."""

    world_size: int
    global_batch: int
    steps: float
    samples: float
    epochs: float
    seconds: float
    region: str


@dataclasses.dataclass
class Advice:
    """The probe's finding and what follows from it (module doc)."""

    experiment: str
    probe: dict[str, Any]
    noise_scale: Estimate
    worlds: list[WorldAdvice]
    recommended_world_size: int | None
    recipe: dict[str, Any] | None
    steps: list[ProbeStep]

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (non-finite numbers as None)."""
        return finite_or_none({"experiment": self.experiment, "probe": self.probe, "noise_scale": dataclasses.asdict(self.noise_scale),
                "recommended_world_size": self.recommended_world_size, "recipe": self.recipe,
                "worlds": [dataclasses.asdict(world) for world in self.worlds],
                "steps": [dataclasses.asdict(step) for step in self.steps]})


def probe_config(experiment: ExperimentConfig, steps: int | None) -> RunConfig:
    """The run the probe trains: the experiment's base run at its base batch (``lr.base_batch``
    as ``W`` workers of the experiment's per-worker batch when that divides it, else one worker
    of the base batch) at the constant base LR (no warmup, no decay), measuring the noise scale
    in every step, for ``steps`` steps (default: one epoch), without checkpoints."""
    base = run_config_from_dict(experiment.base_run())
    per_worker, base_batch = base.training.per_worker_batch, base.lr.base_batch
    world_size = base_batch // per_worker if base_batch % per_worker == 0 else 1
    per_worker = base_batch // world_size
    data = experiment.base_run()
    training = {key: value for key, value in data.get("training", {}).items() if key not in ("epochs", "steps", "samples", "stop_at")}
    training.update(world_size=world_size, per_worker_batch=per_worker, micro_batches=1, checkpoint=False, tensorboard=False)
    training.update({"steps": steps} if steps is not None else {"epochs": 1})
    lr = {**data.get("lr", {}), "warmup_epochs": 0, "decay": None}
    analysis = {**data.get("analysis", {}), "noise_scale": True, "noise_scale_every": 1}
    try:
        return run_config_from_dict({**data, "training": training, "lr": lr, "analysis": analysis})
    except ConfigError as error:
        raise ConfigError(f"the probe run: {error}") from None


class _ProbeRecorder(tf.keras.callbacks.Callback):
    """Records each step's raw estimates and averaged B_simple, its time, and draws a progress
    bar on stderr."""

    def __init__(self, source, total_steps: int, progress: Callable[[int, int, float | None], None] | None):
        super().__init__()
        self.source, self.total_steps, self.progress = source, total_steps, progress
        self.steps: list[ProbeStep] = []
        self._started = None

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        seconds = time.perf_counter() - self._started
        if isinstance(self.source, NoiseScaleTracker):
            trace, norm_sq = float(self.source.step_trace.numpy()), float(self.source.step_norm_sq.numpy())
        else:
            _, trace, norm_sq = self.source.measurements[-1]
        scale = self.source.estimate()["noise_scale"]
        self.steps.append(ProbeStep(len(self.steps) + 1, trace, norm_sq, scale if math.isfinite(scale) else None, seconds))
        if self.progress is not None:
            self.progress(len(self.steps), self.total_steps, self.steps[-1].noise_scale)


def run_probe(config: RunConfig, progress: Callable[[int, int, float | None], None] | None = None) -> tuple[list[ProbeStep], Any]:
    """Trains the probe run in a simulated world; returns its steps and the built run."""
    from lbtrain.trainer import build, fit, make_callbacks
    from lbtrain.worlds.simulated import SimulatedWorld

    world = SimulatedWorld(config.training.world_size)
    built = build(config, world)
    callbacks = make_callbacks(config, built, world, None, False, ())
    recorder = _ProbeRecorder(callbacks.noise_scale, built.total_steps, progress)
    callbacks.all.append(recorder)
    fit(config, built, world, callbacks, verbose=0)
    return recorder.steps, built


def noise_scale_estimate(steps: list[ProbeStep]) -> Estimate:
    """B_simple at the end of the probe: the ratio of the mean ``tr(Sigma)`` to the mean
    ``|G|^2`` estimates over the probe's second half, with a 95% bootstrap interval over its steps."""
    late = steps[len(steps) // 2:]
    return bootstrap_ratio([step.trace for step in late], [step.norm_sq for step in late])


def region(global_batch: float, noise_scale: float) -> str:
    """``perfect scaling``, ``diminishing returns`` or ``wasteful`` (module doc)."""
    if global_batch <= REGION_MARGIN * noise_scale:
        return "perfect scaling"
    if global_batch >= noise_scale / REGION_MARGIN:
        return "wasteful"
    return "diminishing returns"


def world_advice(noise_scale: float, *, per_worker_batch: int, base_batch: int, base_steps: int, train_samples: int,
                 sample_seconds: float, max_world_size: int = MAX_WORLD_SIZE) -> list[WorldAdvice]:
    """Predicted steps, samples, epochs and time for each power-of-two world size up to
    ``max_world_size`` or the second wasteful one, with ``S_min`` from ``S(base_batch) = base_steps`` (module doc) and a
    step of one worker taking ``per_worker_batch * sample_seconds``."""
    s_min = base_steps / (1 + noise_scale / base_batch)
    worlds, size = [], 1
    while size <= max_world_size and sum(world.region == "wasteful" for world in worlds) < WASTEFUL_SHOWN:
        batch = size * per_worker_batch
        steps = s_min * (1 + noise_scale / batch)
        worlds.append(WorldAdvice(size, batch, steps, steps * batch, steps * batch / train_samples,
                                  steps * per_worker_batch * sample_seconds, region(batch, noise_scale)))
        size *= 2
    return worlds


def recommended_world_size(worlds: list[WorldAdvice], noise_scale: float) -> int:
    """The world size whose global batch is nearest ``B_noise`` in log2 (the smaller on a tie)."""
    return min(worlds, key=lambda world: (abs(math.log2(world.global_batch / noise_scale)), world.world_size)).world_size


def advise(experiment: ExperimentConfig, steps: int | None = None, *,
           progress: Callable[[int, int, float | None], None] | None = None) -> Advice:
    """Probes the experiment (``probe_config``) and turns its noise scale into advice for the
    experiment's per-worker batch (module doc)."""
    config = probe_config(experiment, steps)
    probe_steps, built = run_probe(config, progress)
    estimate = noise_scale_estimate(probe_steps)
    settled = [step.seconds for step in probe_steps[PROBE_SETTLE_STEPS:]] or [step.seconds for step in probe_steps]
    sample_seconds = float(np.median(settled)) / config.global_batch
    user = run_config_from_dict(experiment.base_run())
    early = probe_steps[:len(probe_steps) // 2]
    probe = {"noise_scale_first_half": bootstrap_ratio([step.trace for step in early], [step.norm_sq for step in early]).mean,
             "world_size": config.training.world_size, "per_worker_batch": config.training.per_worker_batch,
             "global_batch": config.global_batch, "steps": len(probe_steps), "sample_seconds": sample_seconds,
             "model": config.model.name, "dataset": config.data.dataset, "per_worker_batch_advised": user.training.per_worker_batch}
    if estimate.mean is None or not estimate.mean > 0:
        return Advice(experiment.name, probe, estimate, [], None, None, probe_steps)
    base_steps = user.total_steps(built.steps_per_epoch)
    worlds = world_advice(estimate.mean, per_worker_batch=user.training.per_worker_batch, base_batch=config.global_batch,
                          base_steps=base_steps, train_samples=len(built.data.x_train), sample_seconds=sample_seconds)
    probe["base_steps"] = base_steps
    best = recommended_world_size(worlds, estimate.mean)
    calibration = load_findings().get("advisor_calibration")
    if calibration and calibration["geometric_mean"]:
        calibrated = estimate.mean * calibration["geometric_mean"]
        probe["calibrated"] = {"b_crit": calibrated, "multiple": calibration["geometric_mean"], "pairs": calibration["pairs"],
                               "world_size": recommended_world_size(worlds, calibrated)}
    recipe = own_evidence(experiment, best) or recipe_advice(
        config.model.name, config.data.dataset, best * user.training.per_worker_batch / config.lr.base_batch)
    return Advice(experiment.name, probe, estimate, worlds, best, recipe, probe_steps)


def _nearest(values: list[int], target: int) -> int:
    return min(values, key=lambda value: (abs(math.log2(value / target)), value))


def _answer_evidence(path: Path, world_size: int) -> dict[str, Any] | None:
    import json

    try:
        answer = json.loads(path.read_text())
        rows = {int(row["world_size"]): row for row in answer["per_world_size"]}
    except (OSError, ValueError, KeyError, TypeError):
        logger.warning("%s is damaged: the advice does not use it (rerun lbtrain scale to write it again)", path)
        return None
    row = rows[_nearest(list(rows), world_size)]
    return {"source": "answer", "path": str(path), "world_size": row["world_size"], "global_batch": row["global_batch"],
            "use": row["use"], "test_accuracy": row["test_accuracy"], "difference": row["difference"], "decision": row["decision"],
            "linear_rule_holds_up_to": answer.get("linear_rule_holds_up_to"), "first_worse": answer.get("first_worse"),
            "reference_world_size": answer.get("reference_world_size")}


def _runs_evidence(path: Path, global_batch: int) -> dict[str, Any] | None:
    from lbtrain.reports.statistics import mean_interval
    from lbtrain.reports.tables import read_summary

    try:
        rows = read_summary(path)
    except (OSError, ValueError) as error:
        logger.warning("%s: %s; the advice does not use it", path, error)
        return None
    batches = sorted({int(row["global_batch"]) for row in rows if row.get("global_batch")})
    if not batches:
        return None
    batch = _nearest(batches, global_batch)
    labels = dict.fromkeys(str(row["label"]) for row in rows if int(row["global_batch"]) == batch)
    recipes = []
    for label in labels:
        runs = [row for row in rows if str(row["label"]) == label and int(row["global_batch"]) == batch]
        ok = [row for row in runs if is_ok(row["status"])]
        validation = [float(row["validation_accuracy"]) for row in ok if row.get("validation_accuracy") is not None]
        test = mean_interval([row.get("test_accuracy") for row in ok])
        recipes.append({"recipe": label, "runs": len(runs), "ok": len(ok), "test_accuracy": dataclasses.asdict(test),
                        "validation_accuracy": statistics.fmean(validation) if validation else None})
    eligible = [recipe for recipe in recipes if recipe["ok"] == recipe["runs"] and recipe["validation_accuracy"] is not None]
    use = max(eligible, key=lambda recipe: recipe["validation_accuracy"])["recipe"] if eligible else None
    return {"source": "runs", "path": str(path), "global_batch": batch, "use": use, "recipes": recipes}


def own_evidence(experiment: ExperimentConfig, world_size: int) -> dict[str, Any] | None:
    """The user's own evidence for the recipe at ``world_size`` (module doc): the experiment's
    ``answer.json``, else its ``summary.csv``, else None."""
    from lbtrain.results import ANSWER_FILE, SUMMARY_FILE

    folder = experiment.results_dir
    if (folder / ANSWER_FILE).is_file():
        return _answer_evidence(folder / ANSWER_FILE, world_size)
    if (folder / SUMMARY_FILE).is_file():
        user = run_config_from_dict(experiment.base_run())
        return _runs_evidence(folder / SUMMARY_FILE, world_size * user.training.update_batch)
    return None


def _own_recipe_line(evidence: dict[str, Any]) -> str:
    from lbtrain.reports.answer import estimate_text as text

    if evidence["source"] == "answer":
        if evidence["use"] is None:
            return (f"LR recipe: from your own scaling study ({evidence['path']}): no recipe had every seed ok at "
                    f"{evidence['world_size']} workers")
        holds = evidence["linear_rule_holds_up_to"]
        worse = evidence["first_worse"]
        return (f"LR recipe: from your own scaling study ({evidence['path']}) at {evidence['world_size']} workers (global batch "
                f"{evidence['global_batch']}): {evidence['use']}, test accuracy {text(evidence['test_accuracy'])}, "
                f"{text(evidence['difference'], True)} against world {evidence['reference_world_size']} ({evidence['decision']}); "
                f"the linear rule holds up to {holds or 'no larger world size'}, worse from {worse or 'nowhere measured'}")
    if evidence["use"] is None:
        return (f"LR recipe: your runs ({evidence['path']}) at global batch {evidence['global_batch']} have no recipe whose every "
                "seed was ok with a validation accuracy to rank it; run lbtrain scale for a designed answer")
    chosen = next(recipe for recipe in evidence["recipes"] if recipe["recipe"] == evidence["use"])
    return (f"LR recipe: from your own runs ({evidence['path']}) at global batch {evidence['global_batch']}: {evidence['use']}, "
            f"the highest mean validation accuracy ({chosen['validation_accuracy']:.3f}) of {len(evidence['recipes'])} recipes, test "
            f"accuracy {text(chosen['test_accuracy'])} (not a designed study: lbtrain scale tunes and seeds each arm)")


def _number(value: float | None) -> str:
    return "undetermined" if value is None else f"{value:.0f}"


def describe(advice: Advice) -> str:
    """The advice as text (what ``lbtrain advise`` prints)."""
    probe, estimate = advice.probe, advice.noise_scale
    lines = [f"{advice.experiment}: probe of {probe['steps']} steps at global batch {probe['global_batch']} "
             f"({probe['world_size']} x {probe['per_worker_batch']}, {probe['model']} on {probe['dataset']})",
             f"gradient noise scale B_simple = {_number(estimate.mean)} (95% CI {_number(estimate.low)} to "
             f"{_number(estimate.high)}, over the last {estimate.n} steps; {_number(probe['noise_scale_first_half'])} over "
             "the first half: it grows as training goes on)"]
    if advice.recommended_world_size is None:
        lines.append("no advice: the noise scale is undetermined (|G|^2 estimate not positive); probe longer (--steps)")
        return "\n".join(lines)
    lines.append(f"\nper-worker batch {probe['per_worker_batch_advised']}; steps to the experiment's target taken as its "
                 f"budget at batch {probe['global_batch']} ({probe['base_steps']} steps); time = steps x one worker's step, "
                 "communication not modelled")
    lines.append(f"{'workers':>8} {'batch':>7} {'steps':>9} {'epochs':>8} {'time':>9}  region")
    for world in advice.worlds:
        lines.append(f"{world.world_size:>8} {world.global_batch:>7} {world.steps:>9.0f} {world.epochs:>8.1f} "
                     f"{_duration(world.seconds):>9}  {world.region}")
    best = next(world for world in advice.worlds if world.world_size == advice.recommended_world_size)
    lines.append(f"\nrecommended: {best.world_size} workers (global batch {best.global_batch}, nearest B_noise): "
                 f"{best.steps:.0f} steps, {best.epochs:.1f} epochs, {_duration(best.seconds)}")
    calibrated = probe.get("calibrated")
    if calibrated:
        measured = ", ".join(f"{pair['multiple']:.1f}x ({pair['pair']})" for pair in calibrated["pairs"])
        lines.append(f"calibrated: on lbtrain's validation pairs the measured B_crit was {measured} the probe's B_simple; "
                     f"their geometric mean {calibrated['multiple']:.1f}x gives B_crit ~ "
                     f"{calibrated['b_crit']:.0f}, {calibrated['world_size']} workers (fitted on those same pairs: a "
                     "correction, not a validation)")
    lines.append(_recipe_line(advice.recipe))
    return "\n".join(lines)


def _recipe_line(recipe: dict[str, Any] | None) -> str:
    if recipe is None:
        return "LR recipe: no evidence of yours (run lbtrain scale) and no study findings shipped with this lbtrain"
    if recipe.get("source") in ("answer", "runs"):
        return _own_recipe_line(recipe)
    where = (f"lbtrain's study \"{recipe['title']}\" ({recipe['model']} on {recipe['dataset']}, {recipe['budget']}; "
             f"another model's evidence, not yours: lbtrain scale measures your own) at {recipe['multiple']}x its base batch")
    if not recipe["held"]:
        return f"LR recipe: no recipe held in {where} (failed: {', '.join(recipe['failed'])}); train longer or use LARS"
    first = recipe["held"][0]
    failed = f"; failed there: {', '.join(recipe['failed'])}" if recipe["failed"] else ""
    longer = "".join(f"; {cell['recipe']} ({cell['budget']}): test accuracy {_accuracy_text(cell)}" for cell in recipe.get("longer", []))
    held, word = len(recipe["held"]), first.get("standing")
    tied = [cell["recipe"] for cell in recipe["held"][1:] if cell.get("standing") == TIED_WITH_THE_BEST]
    if held == 1:
        ranking = "the one recipe that held"
    elif first["validation_accuracy"] is None:
        ranking = f"first listed of the {held} recipes that held (none has a validation accuracy to rank it)"
    elif word == BEST:
        ranking = f"best on validation ({first['validation_accuracy']:.3f}, separable from the other {held - 1} recipes that held)"
    elif word == TIED_WITH_THE_BEST:
        ranking = (f"the highest mean validation accuracy ({first['validation_accuracy']:.3f}) of the {held} recipes that held, "
                   f"tied with the best on validation with {', '.join(tied)}")
    else:  # findings rendered before they carried a standing: the ranking alone, no "best"
        ranking = f"the highest mean validation accuracy ({first['validation_accuracy']:.3f}) of the {held} recipes that held"
    return f"LR recipe: {first['recipe']}, {ranking} in {where}: test accuracy {_accuracy_text(first)}{failed}{longer}"


def _accuracy_text(cell: dict[str, Any]) -> str:
    return f"{cell['test_accuracy']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}] (n={cell['n']})"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def plot_advice(advice: Advice, path: Path) -> Path:
    """Two panels: B_simple during the probe, and the predicted steps and samples (relative to
    their minimum) against the global batch."""
    from lbtrain.reports.plots import Line, plot_panels

    measured = [step for step in advice.steps if step.noise_scale is not None]
    estimate = advice.noise_scale
    probe = [Line("B_simple (moving average)", [step.step for step in measured], [step.noise_scale for step in measured])]
    if estimate.mean is not None:
        late = [step.step for step in advice.steps[len(advice.steps) // 2:]]
        probe.append(Line("B_simple, second half [95% CI]", late, [estimate.mean] * len(late),
                          [estimate.low] * len(late), [estimate.high] * len(late)))
    panels: dict[str, list[Line]] = {"B_simple during the probe (x: step)": probe}
    if advice.worlds:
        batches = [world.global_batch for world in advice.worlds]
        panels["predicted cost / its minimum (x: global batch)"] = [
            Line("steps S(B) / S_min", batches, [1 + estimate.mean / batch for batch in batches]),
            Line("samples E(B) / E_min", batches, [1 + batch / estimate.mean for batch in batches]),
        ]
    return plot_panels(panels, path, xlabel="step | global batch", ylabel="B_simple | relative cost", share_y=False,
                       log2_x=True, log_y=True, band_label="95% CI (bootstrap over probe steps)")


def print_progress(step: int, total: int, noise_scale: float | None) -> None:
    """The probe's progress while the ``lbtrain`` logger takes INFO records (not under
    ``--quiet``): on a terminal, a one-line bar on stderr redrawn at most about 100 times;
    elsewhere an INFO record every tenth of the probe."""
    if not logger.isEnabledFor(logging.INFO):
        return
    terminal = sys.stderr.isatty()
    if step < total and step % max(total // (100 if terminal else 10), 1):
        return
    width = 30
    filled = width * step // max(total, 1)
    line = f"probe [{'#' * filled}{'.' * (width - filled)}] {step}/{total}  B_simple {_number(noise_scale)}"
    if not terminal:
        logger.info(line)
        return
    sys.stderr.write(f"\r{line}   " + ("\n" if step >= total else ""))
    sys.stderr.flush()
