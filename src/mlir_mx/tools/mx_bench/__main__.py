"""``python -m mlir_mx.tools.mx_bench``: the deprecated path of ``mx-bench``."""

import sys

from mlir_mx_bench.cli import main

sys.exit(main())
