"""``python -m lbtrain.cli``: the command line."""

import sys

from lbtrain.cli import main

sys.exit(main())
