"""``matmul``: one call of an MX weight, the prepared :class:`Linear` cached
for as long as the weight lives."""

from __future__ import annotations

import weakref

import numpy as np

from mlir_mx.linear.layer import Linear
from mlir_mx.numerics import MXArray

__all__ = ["matmul"]

_LINEARS: dict[int, tuple[weakref.ref, Linear]] = {}


def matmul(
    x, w: MXArray, *, threads: int | None = None, element: str | None = None, block_size: int = 32
) -> np.ndarray:
    """``x @ W.T`` (W (out, in) blocked along in) or ``x @ B`` (B (in, out),
    blocked along axis 0) with the MX weight ``w``: ``Linear(w)(x)``, the
    prepared weight cached for as long as ``w`` lives.

    Args:
        x: the activations, as :meth:`Linear.__call__` takes them.
        w: the weight, as :class:`Linear` takes it.  Float weights (out, in)
            with ``element=`` are quantized on every call (compiled,
            :func:`mlir_mx.quantize`); keep a :class:`Linear` to quantize them once.
        threads: this call's thread count (default: this machine's cores).
        element: the MX element format of float weights.
        block_size: their block size (default 32).

    Returns:
        f32 ``(M, out)`` (``(out,)`` for a vector) as numpy.

    Raises:
        MXArgTypeError, MXValueError: as :class:`Linear` and its call raise them.
    """
    if element is not None and not isinstance(w, MXArray):
        return Linear(w, threads=threads, element=element, block_size=block_size)(x)
    key = id(w)
    hit = _LINEARS.get(key)
    lin = hit[1] if hit is not None and hit[0]() is w else None
    if lin is None:
        lin = Linear(w, threads=threads)
        _LINEARS[key] = (weakref.ref(w, lambda _r: _LINEARS.pop(key, None)), lin)
    return lin(x, threads=threads)  # per call: the cached Linear is shared
