"""A linear weight's two orientations: ``(n_out, n_in)`` as stored, ``(K, N)`` as multiplied.

GGUF (ggml) and ``torch.nn.Linear`` store a linear layer's weight as
``W: (n_out, n_in)`` with the MX blocks along ``n_in``, the contiguous axis.  The
project's matmul ``C = A @ B`` takes ``B: (K, N)`` blocked along ``K`` (axis 0), so
``B = W^T``.  Transposing moves every code and every scale: it is one copy of both
arrays (the Runner takes C-contiguous buffers only, so a strided view would be
rejected there anyway).
"""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import MXArray

__all__ = ["check_linear_weight", "transpose", "weight_to_rhs"]


def transpose(a: MXArray) -> MXArray:
    """The transpose of a 2-D MX array; the blocks keep running along the same data.

    Blocks along axis 1 of ``a`` are blocks along axis 0 of the result and vice
    versa.  Codes and scales are copied once into C-contiguous arrays.
    """
    if not isinstance(a, MXArray):
        raise MXArgTypeError(f"a: expected an MXArray, got {type(a).__name__}")
    if a.ndim != 2:
        raise MXValueError(f"a: transpose needs a 2-D MXArray, got shape {a.shape}")
    return MXArray(
        codes=np.ascontiguousarray(a.codes.T),
        scales=np.ascontiguousarray(a.scales.T),
        element=a.format_name,  # nvfp4 stays nvfp4, with its global scale
        block_size=a.block_size,
        axis=1 - a.axis,
        global_scale=a.global_scale,
    )


def check_linear_weight(w, arg: str = "w", dims: tuple[str, str] = ("n_out", "n_in")) -> None:
    """Raise unless ``w`` is a linear layer's MX weight ``(dims[0], dims[1])``
    blocked along ``dims[1]`` (axis 1), the GGUF / ``torch.nn.Linear`` layout:
    ``TypeError`` for another type, ``ValueError`` for another rank or axis,
    naming ``arg``."""
    if not isinstance(w, MXArray):
        raise MXArgTypeError(f"{arg}: expected an MXArray, got {type(w).__name__}")
    if w.ndim != 2 or w.axis != 1:
        out, inn = dims
        raise MXValueError(
            f"{arg}: expected a 2-D MXArray ({out}, {inn}) blocked along {inn} (axis 1), got "
            f"shape {w.shape} blocked along axis {w.axis}"
        )


def weight_to_rhs(w: MXArray) -> MXArray:
    """``B = W^T`` for a weight ``W: (n_out, n_in)`` blocked along ``n_in`` (axis 1).

    The result has shape ``(K, N) = (n_in, n_out)``, blocked along axis 0: the
    right-hand side the matmul takes for ``y = x @ W^T``.  One copy (see
    :func:`transpose`).  Raises ``ValueError`` for a weight that is not 2-D or not
    blocked along its last axis (a GGUF or ``torch.nn.Linear`` weight always is).
    """
    check_linear_weight(w)
    return transpose(w)
