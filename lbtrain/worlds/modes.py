"""The registry of modes: every way lbtrain can run a training job, by the name a YAML gives
(``mode: simulated``), and the one place that knows what each needs. The modes themselves live
beside it in ``lbtrain.worlds``, one module each; this registry imports no TensorFlow and nothing
of lbtrain but its errors and the modes' names (``lbtrain.mode_names``, which the config schema
validates against; it sits in the foundation layer), so the command line can name the modes
without loading them.

A ``Mode`` names the module that implements it (``lbtrain.worlds.<name>``: its ``World``, and
optionally ``launch_problem()`` — why this stack cannot run it —, ``unsupported_setting(config)``
— the first setting of a run it cannot train — and ``build_world(world_size)``), and the
launcher class that starts a run's processes (``lbtrain.launch.launchers``, as Lightning's
strategies name theirs). Nothing outside this module compares mode names, and nothing outside
``lbtrain.launch`` tells launchers apart: callers ask the registry (``get_mode``), the mode and
its ``launcher()``. Importing this module loads no TensorFlow; a mode's module loads when it is used.

Adding a mode: write ``lbtrain/worlds/<name>.py`` with its ``World`` (and the hooks it needs),
and one ``Mode`` entry below; if its processes start in a new way, a launcher class in
``lbtrain.launch.launchers``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lbtrain.errors import ConfigError
from lbtrain.mode_names import DEFAULT_MODE, MODE_NAMES

if TYPE_CHECKING:
    from lbtrain.config import RunConfig
    from lbtrain.launch.launchers import Launcher
    from lbtrain.worlds.base import World

# Where the launcher classes the modes name live (imported when a mode's launcher is asked for).
LAUNCHERS_MODULE = "lbtrain.launch.launchers"


@dataclasses.dataclass(frozen=True)
class Mode:
    """One way to train. ``world`` is the class name in ``module``; ``launcher_class`` the class
    in ``lbtrain.launch.launchers`` that starts each run's processes (``launcher()``); ``sweepable``: Optuna trials of this
    mode tune the same synchronous update as a simulated world (``lbtrain sweep`` trains them
    simulated, exactly); ``micro_batches``: the world can split a step into micro-batches;
    ``ghost_batch_norm``: one process simulates several workers, so batch norm must become ghost
    batch norm (``lbtrain.models.set_virtual_batch_size``); ``elastic``: which kind of
    ``training.elastic`` the mode trains (``lbtrain.elastic``): ``schedule``, a world-size
    schedule (``world_sizes``), or ``workers``, real workers coming and going (``discovery``)."""

    name: str
    module: str
    world: str
    launcher_class: str
    summary: str
    sweepable: bool = True
    micro_batches: bool = False
    ghost_batch_norm: bool = False
    elastic: str | None = None

    def implementation(self) -> ModuleType:
        """The mode's module (imports TensorFlow)."""
        return importlib.import_module(self.module)

    def launcher(self) -> "Launcher":
        """How ``lbtrain run`` starts this mode's runs (imports no TensorFlow)."""
        return getattr(importlib.import_module(LAUNCHERS_MODULE), self.launcher_class)()

    def _hook(self, name: str) -> Any:
        return getattr(self.implementation(), name, None)

    def launch_problem(self) -> str | None:
        """Why this TensorFlow/Keras cannot run the mode, or None."""
        hook = self._hook("launch_problem")
        return hook() if hook is not None else None

    def unsupported_setting(self, config: "RunConfig") -> str | None:
        """The first setting of ``config`` the mode cannot train, as a one-line message, or None."""
        if config.training.micro_batches > 1 and not self.micro_batches:
            return f"training.micro_batches ({config.training.micro_batches}) is simulated only, not in mode: {self.name}"
        elastic = config.training.elastic
        if elastic is not None:
            kind = "schedule" if elastic.world_sizes is not None else "workers"
            if self.elastic != kind:
                return ELASTIC_REFUSALS[kind].format(mode=self.name)
        hook = self._hook("unsupported_setting")
        return hook(config) if hook is not None else None

    def check(self, config: "RunConfig") -> None:
        """``ConfigError`` if this stack or ``config`` cannot run in the mode."""
        problem = self.launch_problem() or self.unsupported_setting(config)
        if problem is not None:
            raise ConfigError(problem)

    def build_world(self, world_size: int, micro_batches: int = 1) -> "World | None":
        """The world of this process; None for a task that only serves (a parameter server's
        worker). Build it before TensorFlow runs an op: strategies set devices and collectives up
        at start-up."""
        if micro_batches > 1 and not self.micro_batches:
            raise ConfigError(f"training.micro_batches ({micro_batches}) is simulated only, not in mode: {self.name}")
        if self.elastic == "workers" and os.environ.get(ELASTIC_JOB_VARIABLE) == "1":
            return importlib.import_module(ELASTIC_WORLD_MODULE).build_world(world_size)
        build = self._hook("build_world")
        if build is not None:
            return build(world_size)
        world_class = getattr(self.implementation(), self.world)
        return world_class(world_size, micro_batches) if self.micro_batches else world_class(world_size)


# The world of a worker of an elastic job (``training.elastic`` with ``discovery``), which Horovod's
# elastic launcher marks by setting ``HOROVOD_ELASTIC=1`` in its workers' environment.
ELASTIC_WORLD_MODULE = "lbtrain.worlds.horovod_elastic"
ELASTIC_JOB_VARIABLE = "HOROVOD_ELASTIC"

# Why a mode refuses each kind of ``training.elastic`` it does not train.
ELASTIC_REFUSALS = {
    "schedule": ("training.elastic.world_sizes (a world-size schedule) is simulated only, not in mode: {mode} "
                 "(a Horovod job grows and shrinks with min_workers, max_workers and discovery)"),
    "workers": ("training.elastic.discovery (real workers coming and going) needs mode: horovod, not mode: {mode} "
                "(a simulated world takes a world_sizes schedule)"),
}

MODES: dict[str, Mode] = {mode.name: mode for mode in (
    Mode("simulated", "lbtrain.worlds.simulated", "SimulatedWorld", "IsolatedChildLauncher",
         "W synchronous workers simulated exactly in one process (ghost batch norm)", micro_batches=True,
         ghost_batch_norm=True, elastic="schedule"),
    Mode("horovod", "lbtrain.worlds.horovod", "HorovodWorld", "HorovodrunLauncher",
         "real workers started by horovodrun (Gloo or MPI), one process per worker", elastic="workers"),
    Mode("mirrored", "lbtrain.worlds.mirrored", "MirroredWorld", "FreshProcessLauncher",
         "tf.distribute.MirroredStrategy over W devices of one process"),
    Mode("multiworker", "lbtrain.worlds.multiworker", "MultiWorkerWorld", "TfClusterLauncher",
         "tf.distribute.MultiWorkerMirroredStrategy, one process per worker"),
    Mode("parameter_server", "lbtrain.worlds.parameter_server", "ParameterServerWorld", "ParameterServerLauncher",
         "asynchronous SGD: a chief, W workers and parameter servers (tf.distribute)", sweepable=False),
)}
if tuple(MODES) != MODE_NAMES:  # the names the config schema accepts (lbtrain.mode_names) are these modes'
    raise ImportError(f"lbtrain.mode_names lists {MODE_NAMES}, the mode registry {tuple(MODES)}: they must be the same names")
# Set by horovodrun (Gloo), mpirun (Open MPI) and MPICH/Intel MPI respectively.
LAUNCHER_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def get_mode(name: str) -> Mode:
    """The mode called ``name``; a ``ConfigError`` lists the modes otherwise."""
    if name not in MODES:
        raise ConfigError(f"mode {name!r} is not a mode (allowed: {', '.join(MODE_NAMES)})")
    return MODES[name]


def launched_by_horovod() -> bool:
    """Whether this process was started by horovodrun/mpirun (their environment is set)."""
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


def default_mode_name() -> str:
    """``horovod`` in a process that horovodrun/mpirun started, else ``simulated``."""
    return "horovod" if launched_by_horovod() else DEFAULT_MODE
