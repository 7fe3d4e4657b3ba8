"""Run under `horovodrun -np 2`: hvd.DistributedOptimizer(..., backward_passes_per_step=2,
average_aggregated_gradients=True) trains a small mlp for 4 updates (8 backward passes per
rank), each update on 4 batches of 4 (2 ranks x 2 passes). Rank 0 also trains the same model in
one process on the updates' global batches of 16, with the same optimizer and schedule
unwrapped, and writes every case's weights and final step counts.

Cases: LARS and LAMB with a Warmup (lbtrain clocks them in updates), Keras's SGD with
``PerUpdate(Warmup(...), 2)`` (the documented fix for Keras's own optimizers), and Keras's SGD
with the bare Warmup (the schedule runs twice too fast: its weights must differ)."""

import sys

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

import lbtrain
from lbtrain.optimizers import LAMB, LARS
from lbtrain.schedules import PerUpdate, Warmup

hvd.init()
UPDATES, BATCH, PASSES = 4, 4, 2
GLOBAL = BATCH * PASSES * hvd.size()
rng = np.random.default_rng(0)
x = rng.standard_normal((UPDATES * GLOBAL, 6)).astype(np.float32)
y = rng.integers(0, 3, UPDATES * GLOBAL)
# Update u's global batch is rows [u G, (u + 1) G); pass p of rank r takes its batch (p * size + r).
rows = np.concatenate([np.arange(u * GLOBAL + (p * hvd.size() + hvd.rank()) * BATCH,
                                 u * GLOBAL + (p * hvd.size() + hvd.rank() + 1) * BATCH)
                       for u in range(UPDATES) for p in range(PASSES)])


def warmup():
    return Warmup(0.5, 3, start_lr=0.05)


CASES = {
    "lars": (lambda: LARS(warmup(), momentum=0.9, weight_decay=1e-3, eta=0.05), lambda: LARS(warmup(), momentum=0.9,
                                                                                            weight_decay=1e-3, eta=0.05)),
    "lamb": (lambda: LAMB(Warmup(0.05, 3, start_lr=0.005), weight_decay=1e-3), lambda: LAMB(Warmup(0.05, 3, start_lr=0.005),
                                                                                          weight_decay=1e-3)),
    "sgd_per_update": (lambda: tf.keras.optimizers.SGD(PerUpdate(warmup(), PASSES), momentum=0.9),
                       lambda: tf.keras.optimizers.SGD(warmup(), momentum=0.9)),
    "sgd_bare": (lambda: tf.keras.optimizers.SGD(warmup(), momentum=0.9), lambda: tf.keras.optimizers.SGD(warmup(), momentum=0.9)),
}


def compiled(optimizer):
    model = lbtrain.build_model("mlp", (6,), 3, widths=[16], seed=0)
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


arrays = {}
for case, (distributed, single) in CASES.items():
    model = compiled(hvd.DistributedOptimizer(distributed(), backward_passes_per_step=PASSES, average_aggregated_gradients=True))
    model.fit(x[rows], y[rows], batch_size=BATCH, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    gathered = hvd_tf.allgather_object(model.get_weights())
    if hvd.rank() == 0:
        one = compiled(single())
        one.fit(x, y, batch_size=GLOBAL, shuffle=False, verbose=0)
        for who, weights in (("rank0", gathered[0]), ("rank1", gathered[1]), ("single", one.get_weights())):
            arrays.update({f"{case}:{who}:{i}": w for i, w in enumerate(weights)})
        arrays[f"{case}:iterations"] = np.array([int(model.optimizer.iterations.numpy()), int(one.optimizer.iterations.numpy())])
if hvd.rank() == 0:
    arrays.update({f"initial:{i}": w for i, w in enumerate(compiled(tf.keras.optimizers.SGD()).get_weights())})
    np.savez(sys.argv[1], **arrays)
