"""The price of a plan before it runs: machine time from a short measured probe.

For each distinct global batch of a plan, the probe trains the plan's own run (its model, data
and world size, simulated in this process) for ``PROBE_STEPS`` steps and measures:

- ``step_seconds``: the median time of a train step after the first ``SETTLE_STEPS`` (which
  trace and compile);
- ``build_seconds``: loading the data and building and compiling the model;
- ``eval_sample_seconds``: the time to evaluate one sample (a timed pass over the validation,
  or else the test, set);

and once, ``launch_seconds``: a fresh Python process importing lbtrain's trainer (TensorFlow), as
the runner starts one for every run. A run of ``S`` updates over ``E`` epochs is then priced at::

    launch_seconds + build_seconds + S x step_seconds(B) + eval_sample_seconds x (E x n_validation + n_train + n_test)

(the trainer evaluates the validation set after every epoch and the train and test sets at the
end). The price counts the runs one after another on this machine; runs started as other
processes (Horovod, tf.distribute) add their launch and communication, which the probe does not
see. Tuning trials that an edge extension adds are not known in advance: the caller counts
what it expects. ``benchmarks/`` compares the price with the measured time of the same plan.

The probe trains the user's model: it runs user code, as a run does.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import subprocess
import sys
import time
from typing import Iterable

from lbtrain.config import RunConfig, run_config_from_dict, with_overrides

__all__ = ["PROBE_STEPS", "SETTLE_STEPS", "Probe", "StepCost", "estimate_seconds", "probe_costs", "run_seconds"]

logger = logging.getLogger(__name__)

SETTLE_STEPS = 3
PROBE_STEPS = 10
# At most this many samples are evaluated to time evaluation.
EVAL_PROBE_SAMPLES = 4096


@dataclasses.dataclass(frozen=True)
class StepCost:
    """What the probe measured at one global batch (module doc)."""

    global_batch: int
    step_seconds: float
    build_seconds: float
    eval_sample_seconds: float


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
                                             "training.steps": steps, "training.stop_at": None, "training.checkpoint": False,
                                             "training.tensorboard": False, "training.elastic": None, "lr.warmup_epochs": 0})
    return run_config_from_dict(data)


def _measure(config: RunConfig) -> tuple[StepCost, tuple[int, int, int]]:
    import tensorflow as tf

    from lbtrain.trainer import build, evaluate, fit, make_callbacks
    from lbtrain.worlds.simulated import SimulatedWorld

    class StepTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds: list[float] = []

        def on_train_batch_begin(self, batch, logs=None):
            self._started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.seconds.append(time.perf_counter() - self._started)

    world = SimulatedWorld(config.training.world_size)
    started = time.perf_counter()
    built = build(config, world)
    build_seconds = time.perf_counter() - started
    timer = StepTimer()
    callbacks = make_callbacks(config, built, world, None, False, (timer,))
    fit(config, built, world, callbacks, verbose=0)
    settled = timer.seconds[SETTLE_STEPS:] or timer.seconds
    data = built.data
    x, y = (data.x_validation, data.y_validation) if len(data.x_validation) else (data.x_test, data.y_test)
    x, y = x[:EVAL_PROBE_SAMPLES], y[:EVAL_PROBE_SAMPLES]
    evaluate(built.model, x[:config.training.eval_batch], y[:config.training.eval_batch], world, config.training.eval_batch)
    started = time.perf_counter()
    evaluate(built.model, x, y, world, config.training.eval_batch)
    eval_seconds = (time.perf_counter() - started) / max(len(x), 1)
    cost = StepCost(config.global_batch, statistics.median(settled), build_seconds, eval_seconds)
    return cost, (len(data.x_train), len(data.x_validation), len(data.x_test))


def launch_seconds() -> float:
    """The wall time of a fresh Python process that imports lbtrain's trainer (module doc)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import lbtrain.trainer"], capture_output=True, check=False,
                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return time.perf_counter() - started


def probe_costs(configs: Iterable[RunConfig], steps: int = PROBE_STEPS) -> Probe:
    """Measures each distinct global batch of ``configs`` once, and a process's start (module doc)."""
    costs: dict[int, StepCost] = {}
    sizes = (0, 0, 0)
    for config in configs:
        if config.global_batch in costs:
            continue
        logger.info("price probe: %d steps at global batch %d (%s)", steps, config.global_batch, config.training.world_text)
        costs[config.global_batch], sizes = _measure(_probe_config(config, steps))
    return Probe(costs, *sizes, launch_seconds=launch_seconds())


def run_seconds(config: RunConfig, probe: Probe) -> float:
    """The priced seconds of one run (module doc) from the probe's cost at its global batch."""
    from lbtrain.data import steps_per_epoch

    cost = probe.costs[config.global_batch]
    per_epoch = steps_per_epoch(probe.train_size, config.training.update_batch, config.training.world_size)
    steps = config.total_steps(per_epoch)
    epochs = -(-steps // per_epoch)
    evaluated = epochs * probe.validation_size + probe.train_size + probe.test_size
    return probe.launch_seconds + cost.build_seconds + steps * cost.step_seconds + evaluated * cost.eval_sample_seconds


def estimate_seconds(configs: Iterable[RunConfig], probe: Probe) -> float:
    """The priced seconds of ``configs`` run one after another."""
    return sum(run_seconds(config, probe) for config in configs)
