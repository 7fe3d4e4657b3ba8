"""Run under `horovodrun -np 2`: LARS wrapped in hvd.DistributedOptimizer trains a small mlp
for 5 steps, each rank on its own half of every global batch. Rank 0 gathers both ranks'
weights, trains the same model in one process on the whole global batches, and writes all."""

import sys

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

import lbtrain
from lbtrain.optimizers import LARS

hvd.init()
STEPS, BATCH = 5, 8
rng = np.random.default_rng(0)
x = rng.standard_normal((STEPS * 2 * BATCH, 6)).astype(np.float32)
y = rng.integers(0, 3, STEPS * 2 * BATCH)


def model_and_optimizer(wrap):
    model = lbtrain.build_model("mlp", (6,), 3, widths=[16], seed=0)
    optimizer = LARS(lbtrain.Warmup(0.5, 2, start_lr=0.1), momentum=0.9, weight_decay=1e-3, eta=0.02)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer) if wrap else optimizer,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


model = model_and_optimizer(wrap=True)
initial = model.get_weights()
# Step k's global batch is rows [2kB, 2(k+1)B); rank r takes every second row of it.
model.fit(x[hvd.rank()::2], y[hvd.rank()::2], batch_size=BATCH, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
gathered = hvd_tf.allgather_object(model.get_weights())
if hvd.rank() == 0:
    single = model_and_optimizer(wrap=False)
    single.fit(x, y, batch_size=2 * BATCH, shuffle=False, verbose=0)
    arrays = {f"initial:{i}": w for i, w in enumerate(initial)}
    for who, weights in (("rank0", gathered[0]), ("rank1", gathered[1]), ("single", single.get_weights())):
        arrays.update({f"{who}:{i}": w for i, w in enumerate(weights)})
    np.savez(sys.argv[1], **arrays)
