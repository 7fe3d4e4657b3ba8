"""``python -m lbtrain.kernels``: builds lbtrain's CPU kernels for the installed TensorFlow."""

import sys

from lbtrain.kernels import main

sys.exit(main())
