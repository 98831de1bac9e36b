"""Deprecated path of :mod:`mlir_mx_testing.differential` (moved in 0.2): importing it gives that
module; ``python -m mlir_mx.testing.differential`` runs it."""

import sys

from mlir_mx_testing import differential as moved

if __name__ == "__main__":
    sys.exit(moved.main())
sys.modules[__name__] = moved
