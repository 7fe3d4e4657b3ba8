"""Run under `horovodrun -np 2`: lbtrain's trainer in a HorovodWorld on a run config (JSON
argument) with ``training.jit_compile: true``; rank 0 writes its final weights, whether its step
compiled its forward and backward pass with XLA, and whether the ranks' trainable weights are
equal (each rank keeps its own batch-norm moving statistics)."""

import json
import sys

import horovod.tensorflow as hvd_tf
import numpy as np

from lbtrain.config import run_config_from_dict
from lbtrain.trainer import train
from lbtrain.worlds.horovod import HorovodWorld

config = run_config_from_dict(json.loads(sys.argv[1]))
world = HorovodWorld()
result = train(config, world)
gathered = hvd_tf.allgather_object([variable.numpy() for variable in result.model.trainable_variables])
if world.is_root:
    np.savez(sys.argv[2], *gathered[0], compiled_gradients=getattr(result.model, "compiled_gradients", False),
             ranks_equal=all(np.array_equal(a, b) for a, b in zip(*gathered)))
