"""Run under `horovodrun -np 2`: the same short fit with Horovod's LearningRateWarmupCallback
and with lbtrain's LearningRateWarmup (both verbose=1), logging the LR every step and what each
rank printed, then a fit that ends at the warmup's last epoch; rank 0 writes both."""

import contextlib
import io
import json
import sys

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

import lbtrain

hvd.init()
INITIAL_LR, WARMUP_EPOCHS, STEPS, EPOCHS = 0.4, 2, 4, 3
rng = np.random.default_rng(hvd.rank())
x, y = rng.standard_normal((32, 4)).astype(np.float32), rng.integers(0, 3, 32)


def applied_rates(warmup_callback, epochs=EPOCHS):
    model = lbtrain.build_model("mlp", (4,), 3, widths=[5], seed=0)
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(INITIAL_LR))
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    logger = lbtrain.LearningRateLogger()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        history = model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, callbacks=[
            hvd.callbacks.BroadcastGlobalVariablesCallback(0), warmup_callback(), logger])
    printed = hvd_tf.allgather_object(printed.getvalue())
    return {"steps": logger.steps, "rates": logger.rates, "epoch_lr": [float(v) for v in history.history["lr"]],
            "printed": printed}


CALLBACKS = {
    "horovod": lambda: hvd.callbacks.LearningRateWarmupCallback(INITIAL_LR, warmup_epochs=WARMUP_EPOCHS, momentum_correction=False,
                                                                steps_per_epoch=STEPS, verbose=1),
    "lbtrain": lambda: lbtrain.LearningRateWarmup(INITIAL_LR, WARMUP_EPOCHS, verbose=1),  # world_size: hvd.size()
}
result = {"size": hvd.size(), **{name: applied_rates(callback) for name, callback in CALLBACKS.items()},
          "ends_at_warmup": {name: applied_rates(callback, WARMUP_EPOCHS)["printed"] for name, callback in CALLBACKS.items()}}
if hvd.rank() == 0:
    with open(sys.argv[1], "w") as handle:
        json.dump(result, handle)
