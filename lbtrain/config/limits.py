"""What input lbtrain accepts at all: bounds no legitimate experiment reaches, checked where the
input is read, so a hostile or careless file is one bounded line rather than a hang, a flood or
a traceback.

- YAML (``check_yaml_node``): at most ``MAX_YAML_NODES`` nodes once aliases are expanded (a
  600-byte "billion laughs" expands to billions), at most ``MAX_YAML_DEPTH`` levels of nesting,
  no alias that contains itself; ``MAX_EXTENDS_DEPTH`` files in an ``extends`` chain.
- Numbers (``check_numbers``): every float finite, every integer within ``MAX_INTEGER``
  (2**53, what a float holds exactly: lbtrain's arithmetic on batch sizes, steps and world sizes
  goes through floats), wherever it sits in a config, options and grids included. Fields with
  tighter natural bounds carry them in the schema: seeds (``MAX_SEED``), world sizes, batches
  and budgets (``MAX_WORLD_SIZE``, ...), heartbeats.
- Quoting (``quote``): an error quotes at most ``QUOTE_LIMIT`` characters of what it was given.
- Files (``lbtrain.config.loading``): an experiment file, or one it ``extends``, is a regular file
  (not a FIFO, ``/dev/zero`` or a folder) of at most ``MAX_CONFIG_BYTES``; composing its YAML stops
  at ``MAX_YAML_NODES`` nodes, before they are built into Python values.
- Grids (``check_grid_size``): at most ``MAX_GRID_RUNS`` runs, counted from the sizes of the
  grid's lists before any run is expanded.
- Memory (``memory_problem``): data lbtrain generates and models of its zoo are sized before
  they are allocated, against the memory this machine (or its cgroup) has available.
"""

from __future__ import annotations

import math
import os
import reprlib
from typing import Any

import yaml

from lbtrain.errors import ConfigError

__all__ = ["MAX_BATCH", "MAX_CONFIG_BYTES", "MAX_EPOCHS", "MAX_EXTENDS_DEPTH", "MAX_GRID_RUNS", "MAX_INTEGER", "MAX_SAMPLES", "MAX_SEED", "MAX_STEPS", "MAX_WORLD_SIZE",
           "MAX_YAML_DEPTH", "MAX_YAML_NODES", "QUOTE_LIMIT", "available_memory", "check_grid_size", "check_numbers",
           "check_yaml_node", "clip", "memory_problem", "quote"]

MAX_YAML_NODES = 100_000
# The committed experiments are a few kB; an experiment of a megabyte is a generated list.
MAX_CONFIG_BYTES = 1 << 20
MAX_GRID_RUNS = 10_000
MAX_YAML_DEPTH = 64
MAX_EXTENDS_DEPTH = 32
MAX_INTEGER = 2**53
# What every generator lbtrain seeds takes: NumPy's legacy seed is 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1
# Caps no real run reaches (a budget beyond them would train until killed; sizes beyond them
# overflow the float arithmetic of scaling rules): 2**20 workers, 2**24 samples per worker batch,
# a million epochs, a billion steps, 10**13 samples.
MAX_WORLD_SIZE, MAX_BATCH = 2**20, 2**24
MAX_EPOCHS, MAX_STEPS, MAX_SAMPLES = 10**6, 10**9, 10**13
QUOTE_LIMIT = 120

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = QUOTE_LIMIT
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple = 3, 8, 8, 8
_REPR.maxlong = 40


def quote(value: Any) -> str:
    """``repr(value)``, cut to at most ``QUOTE_LIMIT`` characters without building the whole of it.

    >>> quote(10**400)[:12], len(quote(10**400)) <= 120
    ('100000000000', True)
    """
    text = _REPR.repr(value)
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT - 3] + "..."


def clip(text: str) -> str:
    """``text`` cut to at most ``QUOTE_LIMIT`` characters.

    >>> clip("x" * 300)[-5:], len(clip("x" * 300))
    ('xx...', 120)
    """
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT - 3] + "..."


def check_yaml_node(node: yaml.Node, where: str) -> None:
    """``ConfigError`` when a composed YAML document expands past ``MAX_YAML_NODES`` nodes, nests
    deeper than ``MAX_YAML_DEPTH`` or holds an alias inside itself. Walks each node once (sizes
    are memoized by node), so a bomb is refused in the time of its text."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(node, 1, False)]
    open_nodes: set[int] = set()
    while stack:
        current, depth, children_done = stack.pop()
        key = id(current)
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep")
        children = _children(current)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            depths[key] = 1 + max((depths[id(child)] for child in children), default=0)
            if sizes[key] > MAX_YAML_NODES:
                raise ConfigError(f"{where}: expands to more than {MAX_YAML_NODES} values (aliases repeated inside "
                                  "aliases?); write the values out, or use extends")
            if depth + depths[key] - 1 > MAX_YAML_DEPTH:
                raise ConfigError(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep")
            continue
        if key in sizes:
            if depth + depths[key] - 1 > MAX_YAML_DEPTH:
                raise ConfigError(f"{where}: nested more than {MAX_YAML_DEPTH} levels deep")
            continue
        if key in open_nodes:
            raise ConfigError(f"{where}: an alias refers to a value that contains it")
        open_nodes.add(key)
        stack.append((current, depth, True))
        stack.extend((child, depth + 1, False) for child in children)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def check_numbers(value: Any, path: str = "") -> None:
    """``ConfigError`` naming the first non-finite float or integer beyond ``MAX_INTEGER`` in
    ``value`` (mappings and lists walked), with its path.

    >>> check_numbers({"lr": {"base_lr": float("inf")}})
    Traceback (most recent call last):
      ...
    lbtrain.errors.ConfigError: lr.base_lr: must be a finite number, got inf
    """
    stack = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(f"{where or 'value'}: must be a finite number, got {item}")
        if isinstance(item, int) and abs(item) > MAX_INTEGER:
            raise ConfigError(f"{where or 'value'}: {quote(item)} is too large (at most 2**53 = {MAX_INTEGER})")
        if isinstance(item, dict):
            stack.extend((f"{where}.{key}" if where else str(key), child) for key, child in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{index}]", child) for index, child in enumerate(item))


def check_grid_size(grid: Any) -> None:
    """``ConfigError`` when ``grid`` would expand to more than ``MAX_GRID_RUNS`` runs: the product
    of its lists' lengths times its number of variants, counted without expanding anything
    (what is not a list is left to the schema).

    >>> check_grid_size({"world_sizes": [1, 2], "seeds": list(range(10))})
    >>> check_grid_size({f"axis{i}": list(range(10)) for i in range(5)})
    Traceback (most recent call last):
      ...
    lbtrain.errors.ConfigError: grid: expands to 100000 runs (axis0 10 x axis1 10 x axis2 10 x axis3 10 x axis4 10), more than 10000; split the study into experiments
    """
    if not isinstance(grid, dict):
        return
    sizes = [(str(key), len(values)) for key, values in grid.items() if isinstance(values, list)]
    runs = math.prod(size for _, size in sizes)
    if runs > MAX_GRID_RUNS:
        factors = " x ".join(f"{key} {size}" for key, size in sizes)
        factors = factors if len(factors) <= 120 else factors[:117] + "..."
        shown = str(runs) if runs < 10**12 else f"{float(runs):.1e}"
        raise ConfigError(f"grid: expands to {shown} runs ({factors}), more than {MAX_GRID_RUNS}; "
                          "split the study into experiments")


def available_memory() -> int:
    """Bytes this process can still allocate: the smaller of Linux's ``MemAvailable`` and what
    the cgroup (a container's limit) leaves; the physical memory where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as meminfo:
            found += [int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:")]
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as limit, open("/sys/fs/cgroup/memory.current") as current:
            text = limit.read().strip()
            if text.isdigit():
                found.append(int(text) - int(current.read().strip()))
    except (OSError, ValueError):
        pass
    if not found:
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return max(0, min(found))


def memory_problem(needed: float, what: str) -> str | None:
    """Why ``needed`` bytes for ``what`` cannot be allocated here, or None when they fit.

    >>> memory_problem(1e18, "the model's 2.5e17 parameters").startswith("the model's 2.5e17 parameters need about 931322574.6 GiB")
    True
    >>> memory_problem(1024, "a tiny array") is None
    True
    """
    available = available_memory()
    if needed <= available:
        return None
    return (f"{what} need about {needed / 2**30:.1f} GiB of memory, more than the {available / 2**30:.1f} GiB "
            "available here")
