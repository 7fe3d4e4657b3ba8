"""One process of a tf.distribute world (``mirrored``, or one worker of ``multiworker`` with
``$TF_CONFIG`` set), for tests/worlds/test_strategy.py.

``batches MODE W B OUTPUT``: the first two training batches of lbtrain's global stream (W x B
samples each) as the world distributes them; writes ``OUTPUT-<rank>.npz`` with the samples each
of this process's replicas receives (``replica<r>:<step>``).

``train MODE CONFIG_JSON OUTPUT``: lbtrain's trainer in the world; the root writes the final
trainable weights and the run result to ``OUTPUT``.
"""

import json
import sys

import numpy as np

from lbtrain.worlds.build import current_world

command, mode = sys.argv[1], sys.argv[2]
if command == "batches":
    world_size, batch, output = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    world = current_world(world_size, mode=mode)
    from lbtrain.data import make_input_pipeline

    x = np.arange(40 * world_size * batch, dtype=np.float32).reshape(-1, 2)
    y = np.arange(len(x), dtype=np.int32)
    stream = make_input_pipeline(x, y, per_worker_batch=world.process_batch(batch), rank=0, world_size=1, seed=3, training=True)
    iterator = iter(world.training_input(stream, batch))
    arrays = {}
    first_replica = world.rank  # one replica per multiworker process; all of them in a mirrored one
    for step in range(2):
        samples, labels = next(iterator)
        for index, tensor in enumerate(world.strategy.experimental_local_results(labels)):
            arrays[f"replica{first_replica + index}:{step}"] = tensor.numpy()
    np.savez(f"{output}-{world.rank}.npz", **arrays)
elif command == "train":
    from lbtrain.trainer import train
    from lbtrain.worlds.build import prepare_run

    spec, output = json.loads(sys.argv[3]), sys.argv[4]
    world, config = prepare_run(spec, mode)
    result = train(config, world)
    weights = [variable.numpy() for variable in result.model.trainable_variables]
    if world.is_root:
        np.savez(output, result=np.array(json.dumps(result.to_dict())), **{f"w{i}": w for i, w in enumerate(weights)})
else:
    raise SystemExit(f"unknown command {command!r}")
