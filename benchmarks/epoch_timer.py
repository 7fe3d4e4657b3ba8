"""The steady-state epoch time of a plain ``model.fit``, shared by the benchmarks that set lbtrain's
trainer beside Keras's own loop (bench_trainer.py, bench_jit.py)."""

from __future__ import annotations

import statistics
import time

import tensorflow as tf


def mean_fit_epoch_seconds(model: tf.keras.Model, pipeline: tf.data.Dataset, epochs: int, steps: int, **fit_options) -> float:
    """The mean wall time of ``model.fit``'s epochs after the first (which traces and, with
    ``jit_compile``, compiles the step); ``epochs`` must be at least 2."""
    times: list[float] = []

    class EpochTimer(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(pipeline, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=[EpochTimer()], **fit_options)
    return statistics.mean(times[1:])
