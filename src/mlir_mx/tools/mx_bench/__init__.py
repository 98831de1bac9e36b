"""Deprecated path of ``mx-bench``: the command moved to :mod:`mlir_mx_bench.cli`
(0.2); ``python -m mlir_mx.tools.mx_bench`` and ``from mlir_mx.tools.mx_bench
import main`` still work.  A package, not a module, so that git sees
``tools/mx_bench.py`` renamed to ``mlir_mx_bench/cli.py``."""

from mlir_mx_bench.cli import main

__all__ = ["main"]
