"""The whole matrix: every model x batch x world measured in turn (the single worker first in each
group, its throughput the others' baseline), the machine's peak first on CPU, and the report
written (``run_benchmark``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from lbtrain.bench.cases import (
    MIN_STEPS,
    Case,
    check_models,
    check_models_fit,
    measure_case,
    measure_peak_flops,
    model_names,
)
from lbtrain.bench.processes import CaseFailed
from lbtrain.bench.report import INPUT_BOUND_MARGIN, add_ratios, machine, make_row, write_report
from lbtrain.bench.settings import Settings
from lbtrain.bench.worlds import WorldSpec

DEFAULT_OUTPUT = Path("results/benchmarks/bench")


def plan(models: Sequence[str], batches: Sequence[int], worlds: Sequence[WorldSpec]) -> list[Case]:
    """Every model x batch x world, the single worker first in each (model, batch) group (its
    throughput is the others' baseline and its steps theirs)."""
    ordered = sorted(dict.fromkeys(worlds), key=lambda world: not world.setup.baseline)
    return [Case(model, batch, world) for model in models for batch in batches for world in ordered]


def _steps_for(case: Case, settings: Settings, single_steps: dict[tuple[str, int], int]) -> int | None:
    """When the settings fix no steps: the single worker's count for this model and batch
    (divided by W for one process of W workers); None where the settings decide."""
    base = single_steps.get((case.model, case.per_worker_batch))
    if settings.steps is not None or base is None:
        return None
    return base if case.world.processes > 1 or case.world.setup.baseline else max(MIN_STEPS, base // case.world.size)


def run_benchmark(
    models: Sequence[str | Callable[..., Any]],
    batches: Sequence[int],
    worlds: Sequence[WorldSpec],
    settings: Settings = Settings(),
    output: str | os.PathLike | None = DEFAULT_OUTPUT,
    progress: Callable[[int, int, str], None] | None = None,
    check: bool = True,
) -> dict:
    """Measures every configuration of ``plan(models, batches, worlds)`` (and, on CPU, the
    machine's matmul peak first); writes ``bench.csv``, ``bench.json`` and ``bench.png`` into
    ``output`` (unless None). ``progress(done, total, label)`` is called before each step.
    A model is a name (``check_models``) or an importable factory ``build(input_shape,
    num_classes, **options)``, reported by its reference. Every model is resolved, and built
    where it might not fit (``check_models_fit``, unless ``check`` is False: the caller did),
    before anything is measured.
    Returns the report: ``rows``, ``peak_gflops``, ``input_bound_margin`` (``bound_by``'s rule),
    ``machine``, ``settings``."""
    models = model_names(models)
    if check:
        check_models(models)
        check_models_fit(models, batches, worlds, settings)
    cases = plan(models, batches, worlds)
    total = len(cases) + (settings.device == "cpu")
    peak = None
    if settings.device == "cpu":
        _tell(progress, 0, total, "matmul peak")
        peak = measure_peak_flops()
    rows, single_steps = [], {}
    for done, case in enumerate(cases, start=total - len(cases)):
        _tell(progress, done, total, f"{case.model} b{case.per_worker_batch} {case.world.label}")
        try:
            result = measure_case(case, settings, _steps_for(case, settings, single_steps))
        except CaseFailed as error:
            rows.append(make_row(case, settings, None, f"failed: {error}"))
            continue
        if case.world.setup.baseline:
            single_steps[(case.model, case.per_worker_batch)] = result["steps"]
        rows.append(make_row(case, settings, result, "ok"))
    _tell(progress, total, total, "done")
    report = {"benchmark": "lbtrain bench", "rows": add_ratios(rows, peak), "peak_gflops": peak and peak / 1e9,
              "input_bound_margin": INPUT_BOUND_MARGIN, "machine": machine(), "settings": dataclasses.asdict(settings)}
    if output is not None:
        write_report(report, Path(output))
    return report


def _tell(progress: Callable[[int, int, str], None] | None, done: int, total: int, label: str) -> None:
    if progress is not None:
        progress(done, total, label)
