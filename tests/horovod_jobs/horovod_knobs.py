"""Started by tests/studies/test_runner.py through ``lbtrain.launch.horovodrun.launch_horovod`` (what ``mode:
horovod`` uses): each rank writes OUT/rank<r>.json with what it sees of the experiment's Horovod
knobs: Horovod's variables in its environment, the compression ``HorovodWorld`` chose, the cores
its threads may run on, the names of its threads at SCHED_IDLE and of the others, and the
weight after one allreduced SGD step (lr 1, w = 0) whose gradient, 1 + 2**-12, float16 cannot
hold (10 mantissa bits): -1 when the gradient crossed the allreduce as float16."""

import json
import os
import sys
from pathlib import Path

import tensorflow as tf

from lbtrain.worlds.horovod import HorovodWorld

VARIABLES = ("HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_TIMELINE", "HOROVOD_HIERARCHICAL_ALLREDUCE",
             "LBTRAIN_HOROVOD_COMPRESSION", "LBTRAIN_HOROVOD_IDLE_THREADS", "LBTRAIN_HOROVOD_PIN_CORES")


def threads() -> dict[str, list]:
    """Per scheduling policy (idle, other), the names of this process's threads; and the cores
    each thread may use."""
    policies: dict[str, list] = {"idle": [], "other": [], "cores": []}
    for tid in sorted(int(name) for name in os.listdir("/proc/self/task")):
        name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        policies["idle" if os.sched_getscheduler(tid) == os.SCHED_IDLE else "other"].append(name)
        policies["cores"].append(sorted(os.sched_getaffinity(tid)))
    return policies

world = HorovodWorld()
weight = tf.Variable(0.0)
optimizer = world.wrap_optimizer(tf.keras.optimizers.SGD(1.0))
with tf.GradientTape() as tape:
    loss = weight * (1.0 + 2.0**-12)
optimizer.minimize(loss, [weight], tape=tape)
report = {
    "size": world.size,
    "environment": {name: os.environ.get(name) for name in VARIABLES},
    "compression": world.compression.__name__,
    "cores": list(world.cores),
    "threads": threads(),
    "weight": float(weight.numpy()),
}
(Path(sys.argv[1]) / f"rank{world.rank}.json").write_text(json.dumps(report))
