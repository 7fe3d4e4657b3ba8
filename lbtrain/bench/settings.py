"""How every configuration of ``lbtrain bench`` is measured (``Settings``): the device and
threads, how long, Horovod's knobs, core pinning, the synthetic data's shape."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Settings:
    """How every configuration is measured.

    - ``device``: ``cpu`` (GPUs hidden) or ``gpu``; ``threads``: each process's intra- and
      inter-op threads (None: TensorFlow's default);
    - ``steps``: measured steps per worker; None: about ``seconds`` each (from a timed probe
      after ``warmup_steps``), the worlds of a model and batch taking the single worker's count
      (divided by W for the one-process worlds of W workers);
    - Horovod worlds: ``horovod_env`` is added to ``horovodrun``'s environment (Horovod's
      knobs); ``timeline`` records a Horovod timeline over the measured steps;
      ``allreduce_groups`` allreduces the gradients in that many groups, each once all its
      gradients are ready (None: Horovod's per-tensor allreduce, as the trainer's ``HorovodWorld``);
      ``idle_horovod_threads`` runs the threads Horovod starts (its background loop, Gloo's) at
      ``SCHED_IDLE``: only while the process's own compute waits;
    - ``pin_cores`` binds the i-th process of a world (rank or index) to core i mod the cores;
      in a Horovod world, ``pin_cores`` and ``idle_horovod_threads`` None leave both to
      ``HorovodWorld``'s ``auto`` (``lbtrain.worlds.horovod.place_threads``);
    - ``input_shape`` (one sample's, no batch axis) and ``classes``: the synthetic data every
      model is built for and fed (None: ``ZOO_INPUT``'s, ``RESNET50_INPUT``'s for ``resnet50``);
    - ``input_pipeline``: after the step alone, also measure the trainer's input pipeline alone
      and the step fed by it (False: the step alone, in about half the time).
    """

    device: str = "cpu"
    threads: int | None = 1
    seconds: float = 2.0
    steps: int | None = None
    warmup_steps: int = 5
    seed: int = 0
    horovod_env: dict[str, str] = dataclasses.field(default_factory=dict)
    timeline: bool = False
    pin_cores: bool | None = False
    allreduce_groups: int | None = None
    idle_horovod_threads: bool | None = False
    input_shape: tuple[int, ...] | None = None
    classes: int | None = None
    input_pipeline: bool = True
