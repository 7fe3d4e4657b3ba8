"""``mode: simulated``: W synchronous workers simulated exactly in one process.

``SimulatedWorld(W)``: one process feeds the whole global batch ``W * per_worker_batch``;
every BatchNormalization layer normalizes per worker's share (ghost BN, Hoffer et al.
2017, with ``virtual_batch_size = per_worker_batch``), and the mean loss over the global
batch has exactly the average of the W workers' gradients. One update therefore equals
W-worker synchronous SGD (Goyal et al. 2017 sec. 3: the allreduce averages gradients). If
the global batch does not fit in memory, ``micro_batches=k`` accumulates the gradient over k
pieces, each holding W/k whole workers' batches, and applies their mean once
(``lbtrain.train_step.GradientStepModel``). A simulated world also applies gradients
``staleness=tau`` updates late (asynchronous SGD with a constant delay,
``lbtrain.train_step.StaleGradients``).
"""

from __future__ import annotations

import tensorflow as tf

from lbtrain.measures.noise_scale import NoiseScaleSettings, measurement_pieces
from lbtrain.models import batch_norm_layers, set_virtual_batch_size
from lbtrain.train_step import GradientStepModel, NoiseScaleTracker
from lbtrain.worlds.base import World


class SimulatedWorld(World):
    """``size`` synchronous workers simulated exactly in one process (see the module doc)."""

    def __init__(self, size: int, micro_batches: int = 1):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"world size must be a positive integer, got {size!r}")
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1 or size % micro_batches:
            raise ValueError(f"micro_batches must be a positive integer dividing the world size {size}, got {micro_batches!r}")
        self.size, self.rank, self.local_rank = size, 0, 0
        self.micro_batches = micro_batches
        self.largest_size = size

    def plan_sizes(self, sizes) -> None:
        """The world sizes this world will take in turn (``resize``; an elastic run's
        ``training.elastic.world_sizes``): batch norm is made ghost batch norm when any is above 1,
        so every worker's share is normalized alone whatever the size of the moment."""
        self.largest_size = max(self.size, *sizes)

    def resize(self, size: int) -> None:
        """From now on, ``size`` workers (between ``fit`` calls: the process batch changes)."""
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= self.largest_size:
            raise ValueError(f"world size must be an integer from 1 to the planned {self.largest_size}, got {size!r}")
        self.size = size

    def __repr__(self) -> str:
        return f"SimulatedWorld(size={self.size}, micro_batches={self.micro_batches})"

    def input_shard(self) -> tuple[int, int]:
        return 0, 1

    def process_batch(self, per_worker_batch: int) -> int:
        return self.size * per_worker_batch

    def prepare_model(self, model: tf.keras.Model, per_worker_batch: int, noise_scale: NoiseScaleSettings | None = None,
                      accumulation_steps: int = 1, staleness: int = 0, jit_compile: bool = False) -> tf.keras.Model:
        """Ghost batch norm at the per-worker batch; a ``GradientStepModel`` when the step runs
        in micro-batches, accumulates batches, measures the noise scale or applies stale
        gradients. The step then takes ``accumulation_steps * micro_batches`` pieces (each of
        ``size / micro_batches`` workers' batches of one accumulated step) one after another.
        The noise scale comes from those pieces if there are several, else from
        ``noise_scale.pieces`` pieces; with one worker and batch norm (whose statistics a split
        would change) this world cannot measure it in the step unless the pieces are the
        worker's accumulated batches."""
        has_batch_norm = bool(batch_norm_layers(model))
        if self.largest_size > 1 and has_batch_norm:
            model = set_virtual_batch_size(model, per_worker_batch)
        pieces, tracker = accumulation_steps * self.micro_batches, None
        if noise_scale is not None and not (self.size == 1 and has_batch_norm and pieces == 1):
            if pieces == 1:
                pieces = measurement_pieces(self.size, per_worker_batch, noise_scale.pieces) or 1
            if pieces > 1:
                big_batch = self.size * per_worker_batch * accumulation_steps
                tracker = NoiseScaleTracker(big_batch // pieces, big_batch, noise_scale.decay)
        if pieces == 1 and not staleness:
            return model
        return GradientStepModel(model, world=self, per_worker_batch=per_worker_batch, pieces=pieces,
                                 accumulation_steps=accumulation_steps, noise_scale=tracker,
                                 sequential=self.micro_batches * accumulation_steps > 1, staleness=staleness)

