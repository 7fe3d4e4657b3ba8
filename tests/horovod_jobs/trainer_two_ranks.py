"""Run under `horovodrun -np 2`: lbtrain's trainer in a HorovodWorld on run configs, given as
triples of arguments ``CONFIG_JSON OUTPUT RUN_ROOT`` (one or several, trained one after another
in the same job), with a run directory per rank (only rank 0 may write into its own). For each
run, rank 0 writes the final weights of every rank (gathered) and the run result to its OUTPUT."""

import json
import sys

import horovod.tensorflow as hvd_tf
import numpy as np

from lbtrain.config import run_config_from_dict
from lbtrain.trainer import train
from lbtrain.worlds.horovod import HorovodWorld

arguments = sys.argv[1:]
if not arguments or len(arguments) % 3:
    sys.exit(f"expected triples CONFIG_JSON OUTPUT RUN_ROOT, got {len(arguments)} arguments")
for start in range(0, len(arguments), 3):
    spec, output, run_root = arguments[start:start + 3]
    config = run_config_from_dict(json.loads(spec))
    world = HorovodWorld()
    result = train(config, world, run_dir=f"{run_root}/rank{world.rank}")
    gathered = hvd_tf.allgather_object([w for w in result.model.get_weights()])
    if world.is_root:
        arrays = {f"rank{rank}:{i}": w for rank, weights in enumerate(gathered) for i, w in enumerate(weights)}
        arrays["trainable"] = np.array([v.name for v in result.model.trainable_variables])
        arrays["result"] = np.array(json.dumps(result.to_dict()))
        np.savez(output, **arrays)
