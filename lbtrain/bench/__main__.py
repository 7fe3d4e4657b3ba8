"""``python -m lbtrain.bench JOB_JSON`` (or ``--peak``, or ``--check CHECK_JSON``): one
configuration measured in this process (``lbtrain.bench.measure.child_main``)."""

import sys

from lbtrain.bench.measure import child_main

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
