"""Run under `horovodrun -np 2`: lbtrain's trainer in a HorovodWorld on a run config (JSON
argument), with a run directory per rank (only rank 0 may write into its own). Rank 0 writes
the final weights of every rank (gathered) and the run result."""

import json
import sys

import horovod.tensorflow as hvd_tf
import numpy as np

from lbtrain.config import run_config_from_dict
from lbtrain.trainer import train
from lbtrain.worlds.horovod import HorovodWorld

config = run_config_from_dict(json.loads(sys.argv[1]))
output, run_root = sys.argv[2], sys.argv[3]
world = HorovodWorld()
result = train(config, world, run_dir=f"{run_root}/rank{world.rank}")
gathered = hvd_tf.allgather_object([w for w in result.model.get_weights()])
if world.is_root:
    arrays = {f"rank{rank}:{i}": w for rank, weights in enumerate(gathered) for i, w in enumerate(weights)}
    arrays["trainable"] = np.array([v.name for v in result.model.trainable_variables])
    arrays["result"] = np.array(json.dumps(result.to_dict()))
    np.savez(output, **arrays)
