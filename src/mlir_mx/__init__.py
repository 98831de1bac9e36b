"""mlir-mx: OCP Microscaling (MX) block-scaled formats as a first-class MLIR dialect.

Stages, in the one direction data flows: ``dialect`` (the ``mx`` dialect and its
text syntax) -> ``passes`` -> ``pipelines`` -> ``execution``;
``numerics`` is the numpy oracle every test trusts (:mod:`mlir_mx.oracle`
names it); ``tools`` are thin CLIs.

The public API:

* :class:`MXArray`: an MX tensor (element codes and E8M0 scales, held in
  their stored form);
* :func:`quantize` / :func:`dequantize` (:mod:`mlir_mx.convert`): f32 <-> MX
  with compiled kernels, the oracle's bits at memory speed;
* :class:`Linear` and :func:`matmul` (:mod:`mlir_mx.linear`): ``x @ W.T`` with
  an MX weight;
* :class:`MXError` (and :class:`MXValueError`, :class:`MXArgTypeError`):
  ``except mlir_mx.MXError`` catches every error the library raises for bad
  input (:mod:`mlir_mx.errors`, importable without loading MLIR).

Each name is imported on first use, so ``import mlir_mx`` stays light.
"""

from mlir_mx.errors import MXArgTypeError, MXError, MXValueError

__version__ = "0.1.0"

__all__ = [
    "Linear",
    "MXArray",
    "MXArgTypeError",
    "MXError",
    "MXValueError",
    "dequantize",
    "matmul",
    "quantize",
]

_CONVERT = ("quantize", "dequantize")


def __getattr__(name):
    # The library API, imported on first use (it loads the MLIR bindings;
    # where they are missing, _no_mlir says whether this platform has them).
    try:
        if name in _CONVERT:
            from mlir_mx import convert

            return getattr(convert, name)
        if name in ("Linear", "matmul"):
            from mlir_mx import linear

            return getattr(linear, name)
    except ModuleNotFoundError as err:
        _no_mlir(err)
        raise
    if name == "MXArray":
        from mlir_mx.numerics import MXArray

        return MXArray
    raise AttributeError(f"module 'mlir_mx' has no attribute {name!r}")


def _no_mlir(err: ModuleNotFoundError) -> None:
    """``MXUnsupportedHostError`` when ``err`` is the missing MLIR bindings
    on a platform that has no wheel of them (``mlir_mx.host.check_platform``)."""
    if (err.name or "").split(".")[0] == "mlir":
        from mlir_mx.host import check_platform

        check_platform()
