"""One worker of a two-worker ``MultiWorkerMirroredStrategy`` job ($TF_CONFIG): worker 1 raises
after the job has formed, worker 0 waits for it in an all-reduce that never completes on its own."""

from lbtrain.worlds.multiworker import MultiWorkerWorld

world = MultiWorkerWorld(2)
if world.rank == 1:
    raise RuntimeError("worker 1 fails on purpose")
world.allreduce_mean([1.0])
