"""One task of a parameter-server job ($TF_CONFIG): the task named by $LBTRAIN_FAILING_TASK
(``worker 1``, ``ps 0``) raises after a moment; the chief and the other servers would run forever
(the chief as a coordinator waiting for its workers)."""

import json
import os
import time

task = json.loads(os.environ["TF_CONFIG"])["task"]
name = task["type"] if task["type"] == "chief" else f"{task['type']} {task['index']}"
if name == os.environ.get("LBTRAIN_FAILING_TASK"):
    time.sleep(1)
    raise RuntimeError(f"{name} fails on purpose")
if name == "chief":
    while True:
        time.sleep(1)
from lbtrain.worlds.parameter_server import serve  # noqa: E402 (the failing task fails before TensorFlow loads

serve()
