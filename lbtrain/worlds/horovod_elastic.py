"""``mode: horovod`` with ``training.elastic``: real workers that come and go while the run trains.

``ElasticHorovodWorld`` is the Horovod world of a job that ``horovodrun --min-np --max-np
--host-discovery-script`` started (``lbtrain.launch.horovodrun``; Horovod sets
``HOROVOD_ELASTIC=1`` in its workers). Horovod's elastic protocol (``hvd.elastic.run``) drives
it: the training function runs from a state synchronized from rank 0 (the model, the optimizer
and the run's own attributes: samples seen, epoch, history, the learning rate's segment and the
changes so far); the state is committed every ``commit_steps`` steps and at every epoch end; when
a worker fails, the survivors roll back to the last commit, Horovod re-forms the ring, and the
function runs again in the new world; when hosts are added, the workers stop at the next commit
and the function runs again with the newcomers, which receive the state.

The function must not call a collective before the state is synchronized (a newcomer would
block in it while the others wait in the sync), so nothing of the trainer's start-up is a
collective in this world (``elastic`` tells the trainer). The trainer's part (the learning rate
following the world, the data stream continuing in samples) is ``lbtrain.trainer``'s
``_fit_elastic_job``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import tensorflow as tf

from lbtrain.worlds.horovod import HorovodWorld

logger = logging.getLogger(__name__)


class ElasticHorovodWorld(HorovodWorld):
    """The Horovod world of an elastic job: its size and ranks change at every reset (``refresh``)."""

    elastic = True

    def __repr__(self) -> str:
        return f"ElasticHorovodWorld(size={self.size}, rank={self.rank})"

    def refresh(self) -> None:
        """Reads the world's size and this process's ranks again (after Horovod re-formed it)."""
        self.size, self.rank, self.local_rank = self._hvd.size(), self._hvd.rank(), self._hvd.local_rank()

    def callbacks(self) -> list[tf.keras.callbacks.Callback]:
        # No broadcast callback: the elastic state's sync broadcasts the model at every (re)start.
        return [self._hvd.callbacks.MetricAverageCallback()]

    def elastic_state(self, model: tf.keras.Model, optimizer: tf.keras.optimizers.Optimizer, **attributes: Any):
        """Horovod's ``KerasState`` of ``model`` and ``optimizer`` with the run's ``attributes``
        (plain Python values, broadcast from rank 0 at every sync, saved at every commit)."""
        return self._hvd.elastic.KerasState(model, optimizer, **attributes)

    def commit_callback(self, state, steps: int) -> tf.keras.callbacks.Callback:
        """Commits ``state`` every ``steps`` batches and at every epoch end; a commit is also
        where a worker learns that hosts were added (and stops to let them in)."""
        return self._hvd.elastic.CommitStateCallback(state, batches_per_commit=steps)

    def run_elastic(self, train: Callable[[Any], None], state) -> None:
        """Runs ``train(state)`` under Horovod's elastic protocol until it returns on every worker
        of the final world; ``refresh`` is called before every (re)start."""
        def restart(state_) -> None:
            self.refresh()
            train(state_)

        self._hvd.elastic.run(restart)(state)
        self.refresh()


def build_world(world_size: int) -> ElasticHorovodWorld:
    """This rank's world in an elastic job (its size, any from ``min_workers`` to ``max_workers``)."""
    return ElasticHorovodWorld()
