"""ggml's ``NVFP4`` tensors (type 40, ``block_nvfp4``) as NVFP4 MXArrays.

gguf-py 0.19.0's ``GGMLQuantizationType.NVFP4 = 40`` and its decoder
(``gguf.quants.NVFP4``, ggml's ``block_nvfp4``): blocks of 64 elements in 36
bytes along the contiguous axis, four UE4M3 scale bytes (one per 16 elements)
then 32 code bytes, byte ``j`` of a 16-element sub-block holding element
``j`` (low nibble) and ``j + 8`` (high nibble).  ggml's values are its doubled
E2M1 table (``kvalues_mxfp4``) times half the scale, which is the E2M1 value
times the E4M3 scale: the scale bytes are E4M3 bytes (ggml's writer never sets
the sign bit nor writes 0x7f, which its decoder reads as 0 and E4M3 as NaN;
such a file is refused), and there is no per-tensor scale (the global scale is
1).  gguf-py 0.19.0 has no NVFP4 quantizer (``quantize`` raises
``NotImplementedError``).

The stored form of an MXArray pairs elements ``2j`` / ``2j + 1`` in a byte and
keeps the scales apart, so a tensor is converted once (:func:`nvfp4_packed_from_ggml`:
the scale bytes gathered, the nibbles re-paired, no value decoded), as for
MXFP4 (:func:`mlir_mx.interop.gguf.mxfp4_packed_from_ggml`).
"""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.interop.gguf_format import matrix_blocks
from mlir_mx.numerics import MXArray

__all__ = ["NVFP4_BLOCK", "NVFP4_BLOCK_BYTES", "NVFP4_TYPE", "nvfp4_packed_from_ggml", "nvfp4_to_ggml"]

#: gguf-py's ``GGMLQuantizationType.NVFP4``.
NVFP4_TYPE = 40
NVFP4_BLOCK, NVFP4_BLOCK_BYTES, _SUB = 64, 36, 16


def _check_scales(scales: np.ndarray, arg: str) -> None:
    bad = (scales & 0x7F) == 0x7F
    neg = scales >= 0x80
    for mask, what in ((bad, "0x7f (E4M3 NaN; ggml reads it as 0)"), (neg, "a sign bit (UE4M3 has none)")):
        if mask.any():
            first = np.unravel_index(int(np.argmax(mask)), scales.shape)
            raise MXValueError(
                f"{arg}: {int(mask.sum())} NVFP4 scale byte(s) with {what}, first at "
                f"{tuple(int(i) for i in first)}: not a file ggml writes"
            )


def nvfp4_packed_from_ggml(data, rows: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The raw bytes of a ggml NVFP4 matrix ``(rows, n)`` (``rows * n / 64``
    blocks of 36 bytes) as the stored form of an NVFP4 MXArray blocked along
    ``n`` (:meth:`MXArray.from_packed`, global scale 1): ``(packed (rows, n / 2),
    scales (rows, n / 16))``, new arrays."""
    blocks, rows, n = matrix_blocks(data, rows, n, "NVFP4", NVFP4_BLOCK, NVFP4_BLOCK_BYTES)
    scales = np.ascontiguousarray(blocks[:, :, :4]).reshape(rows, n // _SUB)
    _check_scales(scales, "data")
    qs = blocks[:, :, 4:].reshape(rows, n // _SUB, _SUB // 2)
    lo, hi = qs & np.uint8(0x0F), qs >> np.uint8(4)  # elements 0..7, 8..15 of a sub-block
    packed = np.empty((rows, n // _SUB, _SUB // 2), np.uint8)
    packed[:, :, :4] = lo[:, :, 0::2] | (lo[:, :, 1::2] << np.uint8(4))
    packed[:, :, 4:] = hi[:, :, 0::2] | (hi[:, :, 1::2] << np.uint8(4))
    return packed.reshape(rows, n // 2), scales


def nvfp4_to_ggml(a: MXArray) -> np.ndarray:
    """The raw ggml NVFP4 bytes of ``a`` (an NVFP4 MXArray of global scale 1,
    blocked along its last axis of a multiple of 64): ``uint8`` of shape
    ``a.shape[:-1] + (n / 64 * 36,)``."""
    if not isinstance(a, MXArray):
        raise MXArgTypeError(f"a: expected an MXArray, got {type(a).__name__}")
    if a.format_name != "nvfp4" or a.axis != a.ndim - 1 or a.shape[-1] % NVFP4_BLOCK:
        raise MXValueError(
            f"a: ggml NVFP4 is nvfp4 along the last axis, a multiple of {NVFP4_BLOCK}; got "
            f"{a.format_name} along axis {a.axis} of shape {a.shape}"
        )
    if a.global_scale != np.float32(1):
        raise MXValueError(f"a: ggml NVFP4 has no per-tensor scale; got global_scale {a.global_scale}")
    scales = a.scales.view(np.uint8).reshape(-1, 4)
    _check_scales(scales, "a")
    codes = np.ascontiguousarray(a.codes).view(np.uint8).reshape(-1, 4, _SUB)
    out = np.empty((codes.shape[0], NVFP4_BLOCK_BYTES), np.uint8)
    out[:, :4] = scales
    out[:, 4:] = (codes[:, :, :8] | (codes[:, :, 8:] << np.uint8(4))).reshape(-1, 32)
    return out.reshape(a.shape[:-1] + (a.shape[-1] // NVFP4_BLOCK * NVFP4_BLOCK_BYTES,))
