"""The price of a plan before it runs: machine time from a short measured probe.

For each distinct global batch of a plan, the probe trains the plan's own run (its model, data
and world size, simulated in this process, its checkpoints into a scratch folder) for
``PROBE_STEPS`` steps, the way the trainer trains a run, and measures:

- ``step_seconds``: the median time of a train step after the first ``SETTLE_STEPS``;
- ``build_seconds``: loading the data and building and compiling the model;
- ``start_seconds``: the rest of ``fit``'s own time, paid once a run: tracing the train step at
  the first step, the input pipeline, the first epoch end's extra over a later one (the
  checkpoint's first save);
- ``epoch_seconds``: an epoch's end after the first (the callbacks: the checkpoint's save,
  TensorBoard's summaries), the median of ``EPOCH_ENDS`` epoch boundaries replayed after ``fit``;
- ``eval_start_seconds`` and ``eval_sample_seconds``: an evaluation's fixed cost (tracing the
  test step where training had no validation to trace it) and the time to evaluate one sample,
  from a pass of one evaluation batch and a timed pass over the validation (or else the test)
  set;

and once, ``launch_seconds``: a process's start, a fresh Python process importing lbtrain's
trainer (TensorFlow), as the runner starts one (measured once per process), plus what the first run in a process pays once
(TensorFlow's first use: the probe's first measurement less a second one of the same run's fixed
parts). A run of ``S`` updates over ``E`` epochs is then priced at::

    build_seconds + start_seconds + S x step_seconds(B) + E x epoch_seconds + eval_start_seconds
        + eval_sample_seconds x ((E + P) x n_validation + n_train + n_test + n_validation)

(the trainer evaluates the validation set after every epoch, at ``P = S // N`` points with
``training.validation_every_steps: N``, and the train, test and validation sets at the end;
the probe's own steps take no points), plus ``launch_seconds`` for each process the runs start, which the caller
counts. A run that stops at a target (``training.stop_at``) is priced at its whole budget: when
it reaches the target no probe can tell, so a plan with such runs is priced at most
(``stopping_early``). The price counts the runs one after another on this machine; runs started as other
processes (Horovod, tf.distribute) add their communication, which the probe does not see. Tuning
trials that an edge extension adds are not known in advance: the caller counts what it expects.
``benchmarks/bench_parallel.py`` compares the price with the measured time of a 12-run grid.

The probe trains the run's model and loads its data: for the user's model or data, it runs user
code, as a run does (``code_of_yours`` says whether it would).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable

from lbtrain.config import ExperimentConfig, RunConfig, run_config_from_dict, with_overrides

__all__ = ["PROBE_STEPS", "SETTLE_STEPS", "Probe", "StepCost", "code_of_yours", "estimate_seconds", "probe_costs", "run_seconds",
           "stopping_early", "stopping_text"]

logger = logging.getLogger(__name__)

SETTLE_STEPS = 3
PROBE_STEPS = 10
# At most this many samples are evaluated to time evaluation.
EVAL_PROBE_SAMPLES = 4096
# Epoch ends timed after the probe's own (the median counts).
EPOCH_ENDS = 3


@dataclasses.dataclass(frozen=True)
class StepCost:
    """What the probe measured at one global batch (module doc)."""

    global_batch: int
    step_seconds: float
    build_seconds: float
    eval_sample_seconds: float
    start_seconds: float = 0.0
    epoch_seconds: float = 0.0
    eval_start_seconds: float = 0.0

    @property
    def fixed_seconds(self) -> float:
        """What a run pays once, whatever its length: its build, ``fit``'s start, an epoch's
        end and an evaluation's start."""
        return self.build_seconds + self.start_seconds + self.epoch_seconds + self.eval_start_seconds


@dataclasses.dataclass(frozen=True)
class Probe:
    """The probe's measurements per global batch and the data's split sizes."""

    costs: dict[int, StepCost]
    train_size: int
    validation_size: int
    test_size: int
    launch_seconds: float = 0.0


def _probe_config(config: RunConfig, steps: int) -> RunConfig:
    data = with_overrides(config.to_dict(), {"training.epochs": None, "training.samples": None, "training.min_steps": None,
                                             "training.steps": steps, "training.stop_at": None, "training.elastic": None,
                                             "training.validation_every_steps": None, "lr.warmup_epochs": 0})
    return run_config_from_dict(data)


def _measure(config: RunConfig) -> tuple[StepCost, tuple[int, int, int]]:
    with tempfile.TemporaryDirectory(prefix="lbtrain-price-") as scratch:
        return _measure_in(config, Path(scratch))


def _measure_in(config: RunConfig, scratch: Path) -> tuple[StepCost, tuple[int, int, int]]:
    import tensorflow as tf

    from lbtrain.trainer import build, evaluate, fit, make_callbacks
    from lbtrain.worlds.simulated import SimulatedWorld

    class Timer(tf.keras.callbacks.Callback):
        """Each train step's seconds and the last epoch's logs."""

        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []
            self.epoch, self.logs = 0, {}

        def on_train_batch_begin(self, batch, logs=None):
            self._started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.seconds.append(time.perf_counter() - self._started)

        def on_epoch_end(self, epoch, logs=None):
            self.epoch, self.logs = epoch, dict(logs or {})

    settings = config.training
    world = SimulatedWorld(settings.world_size, settings.micro_batches)
    started = time.perf_counter()
    built = build(config, world)
    build_seconds = time.perf_counter() - started
    timer = Timer()
    callbacks = make_callbacks(config, built, world, scratch, False, (timer,))
    started = time.perf_counter()
    fit(config, built, world, callbacks, verbose=0)
    fit_seconds = time.perf_counter() - started
    step_seconds = statistics.median(timer.seconds[SETTLE_STEPS:] or timer.seconds)
    # More epoch boundaries: what an epoch's end costs once the first has traced and saved.
    boundaries = []
    for epoch in range(timer.epoch + 1, timer.epoch + 1 + EPOCH_ENDS):
        started = time.perf_counter()
        for callback in callbacks.all:
            callback.on_epoch_begin(epoch)
        for callback in callbacks.all:
            callback.on_epoch_end(epoch, dict(timer.logs))
        boundaries.append(time.perf_counter() - started)
    epoch_seconds = statistics.median(boundaries)
    data = built.data
    x, y = (data.x_validation, data.y_validation) if len(data.x_validation) else (data.x_test, data.y_test)
    x, y = x[:EVAL_PROBE_SAMPLES], y[:EVAL_PROBE_SAMPLES]
    first = min(settings.eval_batch, len(x))
    started = time.perf_counter()
    evaluate(built.model, x[:first], y[:first], world, settings.eval_batch)
    first_seconds = time.perf_counter() - started
    started = time.perf_counter()
    evaluate(built.model, x, y, world, settings.eval_batch)
    eval_sample_seconds = (time.perf_counter() - started) / max(len(x), 1)
    validated = len(data.x_validation) * eval_sample_seconds  # fit's validation pass, beyond its fixed cost
    start_seconds = fit_seconds - len(timer.seconds) * step_seconds - epoch_seconds - validated
    cost = StepCost(config.global_batch, step_seconds, build_seconds, eval_sample_seconds, start_seconds=max(start_seconds, 0.0),
                    epoch_seconds=epoch_seconds, eval_start_seconds=max(first_seconds - first * eval_sample_seconds, 0.0))
    return cost, (len(data.x_train), len(data.x_validation), len(data.x_test))


@functools.cache
def launch_seconds() -> float:
    """The wall time of a fresh Python process that imports lbtrain's trainer (module doc),
    measured once per process: every price this process gives (a command prices once; a test
    run or a notebook, many times) counts the same start, as the machine was at the first price."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import lbtrain.trainer"], capture_output=True, check=False,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return time.perf_counter() - started


def probe_costs(configs: Iterable[RunConfig], steps: int = PROBE_STEPS) -> Probe:
    """Measures each distinct global batch of ``configs`` once, and a process's start: the first
    global batch is measured twice, the first time for what a process's first run pays once
    (module doc)."""
    costs: dict[int, StepCost] = {}
    sizes = (0, 0, 0)
    first_use = None
    for config in configs:
        if config.global_batch in costs:
            continue
        logger.info("price probe: %d steps at global batch %d (%s)", steps, config.global_batch, config.training.world_text)
        probed = _probe_config(config, steps)
        if first_use is None:
            first_use, _ = _measure(_probe_config(config, SETTLE_STEPS + 1))
        costs[config.global_batch], sizes = _measure(probed)
    first_run = 0.0 if first_use is None else max(first_use.fixed_seconds - costs[first_use.global_batch].fixed_seconds, 0.0)
    return Probe(costs, *sizes, launch_seconds=launch_seconds() + first_run)


def run_seconds(config: RunConfig, probe: Probe) -> float:
    """The priced seconds of one run (module doc), a process's start included, from the probe's
    cost at its global batch."""
    from lbtrain.data import steps_per_epoch

    cost = probe.costs[config.global_batch]
    per_epoch = steps_per_epoch(probe.train_size, config.training.update_batch, config.training.world_size)
    steps = config.total_steps(per_epoch)
    epochs = -(-steps // per_epoch)
    points = steps // config.training.validation_every_steps if config.training.validation_every_steps else 0
    evaluated = (epochs + points) * probe.validation_size + probe.train_size + probe.test_size + probe.validation_size
    return (probe.launch_seconds + cost.build_seconds + cost.start_seconds + steps * cost.step_seconds + epochs * cost.epoch_seconds
            + cost.eval_start_seconds + evaluated * cost.eval_sample_seconds)


def code_of_yours(experiment: ExperimentConfig, configs: Iterable[RunConfig], imports: Iterable[str] = ()) -> str | None:
    """What of the user's a probe of ``configs`` would run, as a phrase (``model
    'my_pkg.models:build'``), or None where it would run lbtrain's and Keras's code only: models
    of lbtrain's zoo or Keras's applications on lbtrain's datasets. Modules the experiment imports
    (its ``imports:``, the command line's ``--import``) count whatever the runs name, since they
    may register or change what trains. Decided from the names: nothing is imported or called.

    >>> code_of_yours(ExperimentConfig(name="x"), [run_config_from_dict({"model": {"name": "mlp"}})]) is None
    True
    >>> code_of_yours(ExperimentConfig(name="x"), [], imports=["my_pkg.models"])
    'imports my_pkg.models'
    """
    from lbtrain.data import DATASETS
    from lbtrain.models import APPLICATION_PREFIXES, MODELS

    modules = [*experiment.imports, *imports]
    if modules:
        return f"imports {', '.join(modules)}"
    for config in configs:
        if config.model.name not in MODELS and not config.model.name.startswith(APPLICATION_PREFIXES):
            return f"model {config.model.name!r}"
        if config.data.dataset not in DATASETS:
            return f"dataset {config.data.dataset!r}"
    return None


def estimate_seconds(configs: Iterable[RunConfig], probe: Probe) -> float:
    """The priced seconds of ``configs`` run one after another."""
    return sum(run_seconds(config, probe) for config in configs)


def stopping_early(configs: Iterable[RunConfig]) -> int:
    """How many of ``configs`` stop at a target (``training.stop_at``): priced at their whole
    budget, they make a price an upper bound."""
    return sum(config.training.stop_at is not None for config in configs)


def stopping_text(count: int) -> str:
    """Why a price with ``count`` runs stopping at a target is an upper bound, as a phrase."""
    return (f"{count} run{'s' * (count != 1)} stop{'s' * (count == 1)} at a target, each priced at its whole budget: "
            "when a run reaches its target no probe can tell")
