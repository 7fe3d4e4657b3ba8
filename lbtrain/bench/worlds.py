"""The worlds ``lbtrain bench`` measures, ``KIND:N``: how each is set up (``WORLD_KINDS``), which
of lbtrain's modes it stands for, and which can run on this machine.

- ``single``: one worker in one process;
- ``simulated:W``: ``SimulatedWorld(W)``, one process feeding ``W x b`` with ghost batch norm;
- ``horovod:N``: ``horovodrun -np N --gloo`` on this machine, the bench in every rank;
- ``independent:N``: N single-worker processes started together, nothing exchanged: the
  machine's own limit for ``horovod:N`` (same per-rank step, same cores, no communication);
- ``mirrored:N``: ``tf.distribute.MirroredStrategy`` over N logical CPU devices (N GPUs on GPU).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from lbtrain.bench.processes import HorovodRanks, OneProcess, SideBySide, Starter

DEFAULT_WORLDS = ("single", "simulated:4", "mirrored:2", "independent:2", "horovod:2")
ONE_PROCESS = OneProcess()


class BenchError(ValueError):
    """Bad input to the benchmark (a model, world or device that cannot run here)."""


@dataclasses.dataclass(frozen=True)
class WorldKind:
    """How ``lbtrain bench`` sets up a kind of world of N workers: ``starter`` says how its
    processes start (``lbtrain.bench.processes``: one process, N single-worker processes side by
    side, the machine's own limit, or N Horovod ranks); ``mode``: the mode of lbtrain's registry
    whose launcher says whether this machine can start it (None: no mode's); ``feeds_all_workers``: one
    process feeds all N workers' batches (a simulated world, a mirrored strategy);
    ``mirrored_devices``: those batches go through a ``MirroredStrategy`` over N logical devices;
    ``baseline``: the single worker every ratio divides by."""

    name: str
    starter: Starter = ONE_PROCESS
    mode: str | None = None
    feeds_all_workers: bool = False
    mirrored_devices: bool = False
    baseline: bool = False


WORLD_KINDS = {kind.name: kind for kind in (
    WorldKind("single", mode="simulated", baseline=True),
    WorldKind("simulated", mode="simulated", feeds_all_workers=True),
    WorldKind("horovod", starter=HorovodRanks(), mode="horovod"),
    WorldKind("independent", starter=SideBySide()),
    WorldKind("mirrored", mode="mirrored", feeds_all_workers=True, mirrored_devices=True),
)}


@dataclasses.dataclass(frozen=True)
class WorldSpec:
    """A world to benchmark: ``kind`` (one of ``WORLD_KINDS``) with ``size`` workers."""

    kind: str
    size: int = 1

    @classmethod
    def parse(cls, text: str) -> WorldSpec:
        """``single`` or ``KIND:N``.

        >>> WorldSpec.parse("horovod:2")
        WorldSpec(kind='horovod', size=2)
        >>> WorldSpec.parse("simulated")
        Traceback (most recent call last):
          ...
        lbtrain.bench.worlds.BenchError: world 'simulated' needs a size: simulated:N
        """
        kind, _, size = text.strip().partition(":")
        if kind not in WORLD_KINDS:
            allowed = [name if known.baseline else f"{name}:N" for name, known in WORLD_KINDS.items()]
            raise BenchError(f"unknown world {text!r} (allowed: {', '.join(allowed)})")
        if WORLD_KINDS[kind].baseline:
            if size not in ("", "1"):
                raise BenchError(f"world {kind!r} has one worker, got {text!r}")
            return cls(kind)
        if not size:
            raise BenchError(f"world {text!r} needs a size: {kind}:N")
        if not size.isdigit() or int(size) < 1:
            raise BenchError(f"world {text!r}: the size must be a whole number >= 1")
        return cls(kind, int(size))

    @property
    def label(self) -> str:
        return self.kind if self.setup.baseline else f"{self.kind}:{self.size}"

    @property
    def processes(self) -> int:
        """How many processes compute side by side."""
        return self.setup.starter.processes(self.size)

    @property
    def setup(self) -> WorldKind:
        """How this kind of world is set up."""
        return WORLD_KINDS[self.kind]


def check_worlds(worlds: Sequence[WorldSpec], explicit: bool) -> tuple[list[WorldSpec], list[str]]:
    """The worlds that can run here, and a note for each left out. A world that cannot run is
    a ``BenchError`` when asked for explicitly, a note when it came from the defaults."""
    runnable, notes = [], []
    for world in worlds:
        problem = world_problem(world)
        if problem is None:
            runnable.append(world)
        elif explicit:
            raise BenchError(problem)
        else:
            notes.append(f"skipped {world.label}: {problem}")
    return runnable, notes


def world_problem(world: WorldSpec) -> str | None:
    """Why ``world`` cannot run on this stack, or None: its mode's launcher says (horovodrun
    must be installed for ``horovod:N``)."""
    if world.setup.mode is None:
        return None
    from lbtrain.worlds.modes import get_mode

    return get_mode(world.setup.mode).launcher().problem()
