"""mlir-mx: OCP Microscaling (MX) block-scaled formats as a first-class MLIR dialect.

Stages, in the one direction data flows: ``dialect`` (the ``mx`` dialect and its
text syntax) -> ``passes`` -> ``pipelines`` -> ``execution``;
``numerics`` is the numpy oracle every test trusts; ``tools`` are thin CLIs.
``mlir_mx.matmul`` / ``mlir_mx.Linear`` (:mod:`mlir_mx.linear`) are the
library API for MX weights.
"""

__version__ = "0.1.0"

__all__ = ["Linear", "matmul"]


def __getattr__(name):
    # The library API, imported on first use (it loads the MLIR bindings).
    if name in __all__:
        from mlir_mx import linear

        return getattr(linear, name)
    raise AttributeError(f"module 'mlir_mx' has no attribute {name!r}")
