"""How a tuning study searches: a log2 grid extended while its best sits on an edge, or TPE only
after enough random trials.

A comparison of recipes is only as good as each recipe's tuning (Shallue et al. 2018; Nado et
al. 2021, "A Large Batch Optimizer Reality Check"): five TPE trials are five random draws, and a
best configuration on the edge of its range says the range, not the recipe, decided. So the
tuning protocol searches one of two ways (``protocol.search_method``):

- **grid** (the default): every searched field takes a fixed set of values (``grid_values``: a
  log-scale range doubles from ``low`` up to ``high``, so the LR steps by a factor of 2; a linear
  range with a ``step`` takes every step, without one 5 evenly spaced values; a categorical one
  every choice), the study tries their every combination once, and then, while its best ok
  trial sits on the edge of a log-scale field's values (a learning rate), the next value past
  that edge (x2 or /2), the other fields at the best's values, up to
  ``protocol.grid_extensions`` times per field and direction (``edge_extensions``). The report
  says which values were tried and whether the best is interior (``describe_search``).
- **tpe**: Optuna's TPE sampler, with at least ``MIN_STARTUP_TRIALS`` random startup trials and
  at least ``STARTUP_MULTIPLE`` times that many trials in all, so the model-based part has
  something to model; each study its own sampler seed.

Neither prunes: a trial stops early only when its run diverges (``lbtrain.verdict``).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterable

from lbtrain.config import ConfigError, SearchParam
from lbtrain.rounding import floor_tolerant

__all__ = ["LR_FIELD", "MIN_STARTUP_TRIALS", "STARTUP_MULTIPLE", "TOO_LARGE_A_STEP", "below_every_trial", "check_tpe_budget",
           "describe_search", "edge_extensions", "grid_points", "grid_values"]

MIN_STARTUP_TRIALS = 10
STARTUP_MULTIPLE = 3
LINEAR_POINTS = 5


def grid_values(param: SearchParam) -> list[Any]:
    """The values a grid tries for one field (see the module doc).

    >>> grid_values(SearchParam(type="float", low=0.02, high=0.2, log=True))
    [0.02, 0.04, 0.08, 0.16]
    >>> grid_values(SearchParam(type="float", low=0.0, high=1.0))
    [0.0, 0.25, 0.5, 0.75, 1.0]
    >>> grid_values(SearchParam(type="int", low=1, high=10, log=True))
    [1, 2, 4, 8]
    """
    if param.type == "categorical":
        return list(param.choices)
    low, high = float(param.low), float(param.high)
    if param.log:
        values = [low * 2.0 ** k for k in range(floor_tolerant(math.log2(high / low)) + 1)]
    elif param.step:
        values = [low + k * float(param.step) for k in range(floor_tolerant((high - low) / float(param.step)) + 1)]
    else:
        values = [low + (high - low) * k / (LINEAR_POINTS - 1) for k in range(LINEAR_POINTS)]
    if param.type == "int":
        return sorted({int(round(value)) for value in values})
    return [float(f"{value:.12g}") for value in values]


def grid_points(search: dict[str, SearchParam]) -> list[dict[str, Any]]:
    """Every combination of the fields' grid values, in a fixed order."""
    paths = list(search)
    return [dict(zip(paths, values)) for values in itertools.product(*(grid_values(search[path]) for path in paths))]


def _beyond(param: SearchParam, value: Any, direction: int) -> Any:
    """The log-scale grid value one step past ``value`` (``direction`` +1: x2, -1: /2), or None
    for an integer field that would drop below 1."""
    moved = value * 2.0 ** direction
    if param.type == "int":
        return int(round(moved)) if moved >= 1 else None
    return float(f"{moved:.12g}")


def edge_extensions(search: dict[str, SearchParam], tried: Iterable[dict[str, Any]], best: dict[str, Any],
                    cap: int) -> list[dict[str, Any]]:
    """The points to try next: for each log-scale field (a learning rate, a weight decay) whose
    best value is the smallest (largest) value tried, the value below (above) it by a factor of 2,
    the other fields at the best's values, unless that field was already extended ``cap`` times
    in that direction. Linear and categorical fields are not extended (their ranges are often
    bounds, such as a warmup of at least 0 epochs); the report still says whether their best
    is interior. Empty: nothing left to extend."""
    tried = list(tried)
    points = []
    for path, param in search.items():
        if param.type == "categorical" or not param.log:
            continue
        grid = grid_values(param)
        values = sorted({point[path] for point in tried if path in point})
        for direction, edge in ((-1, values[0]), (+1, values[-1])):
            extended = sum(1 for value in values if (value < grid[0] if direction < 0 else value > grid[-1]))
            if best.get(path) != edge or extended >= cap:
                continue
            value = _beyond(param, edge, direction)
            if value is not None and value not in values:
                points.append({**best, path: value})
    return points


# A trial whose step was too large: it diverged, or its loss spiked (ok-unstable). A study none of
# whose trials trained ok, every one for one of these, tried LRs above the one that trains.
TOO_LARGE_A_STEP = ("diverged", "ok-unstable")
LR_FIELD = "lr.base_lr"


def below_every_trial(search: dict[str, SearchParam], tried: Iterable[tuple[dict[str, Any], str | None]],
                      cap: int) -> list[dict[str, Any]]:
    """The point to try next in a study where no trial ended ok and every trial diverged or was
    unstable (``TOO_LARGE_A_STEP``; ``tried`` holds each finished trial's parameters and status):
    the LR (``LR_FIELD``, a log-scale field) halved below the smallest tried, the other fields at
    that trial's values, unless the field was already extended ``cap`` times below the grid. With
    no ok trial there is no best to extend from (``edge_extensions``), yet the grid clearly sat
    above the LR that trains (goyal_v4's LARS at batch 512-2,048: every LR from 0.5 to 8 diverged
    or spiked, and the grid stopped there). Empty otherwise: a failed trial (an error) or a
    collapsed one says nothing about the step's size, and a study without a log-scale LR field
    has nothing to lower.

    >>> lr = {"lr.base_lr": SearchParam(type="float", low=0.5, high=8.0, log=True)}
    >>> below_every_trial(lr, [({"lr.base_lr": 0.5}, "diverged"), ({"lr.base_lr": 1.0}, "ok-unstable")], cap=3)
    [{'lr.base_lr': 0.25}]
    >>> below_every_trial(lr, [({"lr.base_lr": 0.5}, "diverged"), ({"lr.base_lr": 1.0}, "failed")], cap=3)
    []
    """
    tried = list(tried)
    param = search.get(LR_FIELD)
    if (param is None or param.type == "categorical" or not param.log or not tried
            or any(status not in TOO_LARGE_A_STEP for _, status in tried)):
        return []
    lowest = min((point for point, _ in tried if LR_FIELD in point), key=lambda point: point[LR_FIELD], default=None)
    if lowest is None:
        return []
    grid = grid_values(param)
    if sum(1 for point, _ in tried if point.get(LR_FIELD, grid[0]) < grid[0]) >= cap:
        return []
    return [{**lowest, LR_FIELD: _beyond(param, lowest[LR_FIELD], -1)}]


def describe_search(search: dict[str, SearchParam], tried: list[dict[str, Any]], best: dict[str, Any] | None) -> dict[str, Any]:
    """What a study searched, as plain data for the report: per field the values tried, the
    best's value and whether it is interior (a categorical field's best always is)."""
    fields = {}
    for path, param in search.items():
        values = sorted({point[path] for point in tried if path in point}, key=lambda value: (str(type(value)), value))
        value = None if best is None else best.get(path)
        interior = param.type == "categorical" or (value is not None and len(values) > 2 and values[0] < value < values[-1])
        fields[path] = {"values": values, "best": value, "interior": bool(best is not None and interior)}
    return {"fields": fields, "interior": best is not None and all(field["interior"] for field in fields.values())}


def check_tpe_budget(trials: int, startup_trials: int) -> None:
    """``ConfigError`` unless TPE gets ``MIN_STARTUP_TRIALS`` random trials and ``STARTUP_MULTIPLE``
    times its startup trials in all."""
    if startup_trials < MIN_STARTUP_TRIALS:
        raise ConfigError(f"protocol.tpe_startup_trials must be at least {MIN_STARTUP_TRIALS}, got {startup_trials}: "
                          "fewer random trials leave TPE nothing to model")
    if trials < STARTUP_MULTIPLE * startup_trials:
        raise ConfigError(f"sweep.trials ({trials}) must be at least {STARTUP_MULTIPLE} x protocol.tpe_startup_trials "
                          f"({STARTUP_MULTIPLE * startup_trials}) for protocol.search_method tpe, or every trial is a random "
                          "draw; use search_method: grid for a small budget")
