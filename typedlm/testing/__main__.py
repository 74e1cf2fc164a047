"""``python -m typedlm.testing DIR``: write the tiny model to DIR (a model for CLI / server smoke tests)."""

import sys

from . import save_tiny

print(save_tiny(sys.argv[1]))
