"""Run under `horovodrun -np 2` (one script of the shared job, one_after_another.py): a user's
package written into FOLDER as tests/helpers.py's ``write_package`` writes it (``ownpkg``, a
functional convnet with batch norm, and ``data.npz``), then trainer_two_ranks.py with FOLDER
first on the ranks' path, as a user's ranks started with ``PYTHONPATH=FOLDER`` import it.
Arguments: FOLDER, then trainer_two_ranks.py's (its run config names ``FOLDER/data.npz``)."""

import os
import runpy
import shutil
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/, for helpers

from helpers import write_package  # noqa: E402

folder, *arguments = sys.argv[1:]
if not os.path.isdir(folder):
    # Both ranks write the same files (write_package is seeded); the first to rename its copy
    # into place wins, so neither reads a half-written package.
    staged = tempfile.mkdtemp(dir=os.path.dirname(folder))
    write_package(Path(staged))
    try:
        os.rename(staged, folder)
    except OSError:
        shutil.rmtree(staged)
sys.path.insert(0, folder)
sys.argv = [os.path.join(HERE, "trainer_two_ranks.py"), *arguments]
runpy.run_path(sys.argv[0], run_name="__main__")
