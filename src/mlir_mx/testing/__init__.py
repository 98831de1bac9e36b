"""Deprecated path: the testing machinery moved to :mod:`mlir_mx_testing` (0.2).

``mlir_mx.testing.differential`` and ``python -m mlir_mx.testing.fuzz`` /
``python -m mlir_mx.testing.differential`` still work (docs/architecture.md,
"Moved in 0.2")."""
