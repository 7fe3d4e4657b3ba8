"""Run under `horovodrun -np 2`: the scripts of this folder given as a JSON list of commands
``[[SCRIPT, ARG, ...], ...]``, one after another in this process, each as if it were started
alone (``python SCRIPT ARG ...``). Every rank runs the same scripts in the same order, so their
collectives meet; a script that fails ends the job (tests/conftest.py: horovod_jobs)."""

import json
import os
import runpy
import sys

FOLDER = os.path.dirname(os.path.abspath(__file__))

for script, *arguments in json.loads(sys.argv[1]):
    path = os.path.join(FOLDER, script)
    sys.argv = [path, *arguments]
    runpy.run_path(path, run_name="__main__")
