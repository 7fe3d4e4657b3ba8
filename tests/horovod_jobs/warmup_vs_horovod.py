"""Run under `horovodrun -np 2`: the same short fit with Horovod's LearningRateWarmupCallback
and with lbtrain's LearningRateWarmup, logging the LR every step; rank 0 writes both."""

import json
import sys

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

import lbtrain

hvd.init()
INITIAL_LR, WARMUP_EPOCHS, STEPS, EPOCHS = 0.4, 2, 4, 3
rng = np.random.default_rng(hvd.rank())
x, y = rng.standard_normal((32, 4)).astype(np.float32), rng.integers(0, 3, 32)


def applied_rates(warmup_callback):
    model = lbtrain.build_model("mlp", (4,), 3, widths=[5], seed=0)
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(INITIAL_LR))
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    logger = lbtrain.LearningRateLogger()
    history = model.fit(x, y, batch_size=8, epochs=EPOCHS, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0), warmup_callback, logger])
    return {"steps": logger.steps, "rates": logger.rates, "epoch_lr": [float(v) for v in history.history["lr"]]}


result = {
    "size": hvd.size(),
    "horovod": applied_rates(hvd.callbacks.LearningRateWarmupCallback(
        INITIAL_LR, warmup_epochs=WARMUP_EPOCHS, momentum_correction=False, steps_per_epoch=STEPS)),
    "lbtrain": applied_rates(lbtrain.LearningRateWarmup(INITIAL_LR, WARMUP_EPOCHS)),  # world_size: hvd.size()
}
if hvd.rank() == 0:
    with open(sys.argv[1], "w") as handle:
        json.dump(result, handle)
