"""Run under `horovodrun -np 2`: rank 1 raises at its third training step; the job must end
non-zero quickly with that error visible, not hang in an allreduce."""

import json
import sys

import tensorflow as tf

from lbtrain.config import run_config_from_dict
from lbtrain.trainer import train
from lbtrain.worlds.horovod import HorovodWorld


class FailAtStepThree(tf.keras.callbacks.Callback):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def on_train_batch_begin(self, batch, logs=None):
        if self.rank == 1 and batch == 2:
            raise RuntimeError("rank 1 failed on purpose at step 3")


world = HorovodWorld()
train(run_config_from_dict(json.loads(sys.argv[1])), world, callbacks=[FailAtStepThree(world.rank)])
