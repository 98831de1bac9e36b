"""mlir-mx: OCP Microscaling (MX) block-scaled formats as a first-class MLIR dialect.

Stages, in the one direction data flows: ``dialect`` (the ``mx`` dialect and its
text syntax) -> ``passes`` -> ``pipelines`` -> ``execution``;
``numerics`` is the numpy oracle every test trusts; ``tools`` are thin CLIs.
``mlir_mx.matmul`` / ``mlir_mx.Linear`` (:mod:`mlir_mx.linear`) are the
library API for MX weights; ``mlir_mx.quantize`` / ``mlir_mx.dequantize``
(:mod:`mlir_mx.convert`) convert at memory speed with compiled kernels.
``except mlir_mx.MXError`` catches every error the library raises for bad
input (:mod:`mlir_mx.errors`, importable without loading MLIR).
"""

from mlir_mx.errors import MXArgTypeError, MXError, MXValueError

__version__ = "0.1.0"

__all__ = [
    "Linear",
    "MXArgTypeError",
    "MXError",
    "MXValueError",
    "dequantize",
    "matmul",
    "quantize",
]

_CONVERT = ("quantize", "dequantize")


def __getattr__(name):
    # The library API, imported on first use (it loads the MLIR bindings).
    if name in _CONVERT:
        from mlir_mx import convert

        return getattr(convert, name)
    if name in ("Linear", "matmul"):
        from mlir_mx import linear

        return getattr(linear, name)
    raise AttributeError(f"module 'mlir_mx' has no attribute {name!r}")
