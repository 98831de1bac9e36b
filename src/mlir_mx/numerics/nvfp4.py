"""NVFP4 in numpy: E2M1 codes in blocks of 16, one E4M3 scale per block and an
f32 global scale per tensor, with the arithmetic of compressed-tensors'
reference (``docs/numerics.md``, "NVFP4"), bit for bit.

In the order compressed-tensors computes it, every step one f32 rounding:

* the global scale ``g`` (:func:`global_scale`): ``2688 / max|x|`` (448 * 6:
  E4M3's and E2M1's largest values), 1.0 where that is not a finite positive
  f32 (an all-zero or a tiny tensor);
* a block's scale: ``e4m3(min(g * (amax / 6), 448))`` rounded to nearest
  even, and 0.125 (E4M3's epsilon, compressed-tensors' guard against a zero
  divisor) where that rounds to zero;
* its factor ``f = s / g``; a code ``e2m1(clip(x / f, -6, 6))`` rounded to
  nearest even (the sign kept: a negative value that rounds to zero is -0);
* dequantization: ``code * f``.

A block holding a NaN or an Inf is a NaN block, as in OCP MX here: scale
code 0x7f (E4M3 NaN) and element codes 0; it dequantizes to NaN.
"""

from __future__ import annotations

import numpy as np

from .formats import E4M3_SCALE_TYPE, E4M3_SCALED, ELEMENT_FORMATS, NVFP4, NVFP4_BLOCK_SIZE
from .mxarray import MXArray, check_global_scale

__all__ = ["E4M3_NAN_CODE", "ZERO_BLOCK_SCALE", "global_scale", "quantize_nvfp4"]

#: The E4M3 code a NaN block's scale gets (positive NaN).
E4M3_NAN_CODE = 0x7F
#: The block scale of a block whose scale rounds to zero (compressed-tensors:
#: ``torch.finfo(float8_e4m3fn).eps``; ModelOpt uses 1.0, MLX keeps 0).
ZERO_BLOCK_SCALE = 0.125
_E2M1 = ELEMENT_FORMATS[E4M3_SCALED[NVFP4]]
_E4M3 = ELEMENT_FORMATS[E4M3_SCALE_TYPE]
_RANGE = np.float32(_E4M3.max_normal * _E2M1.max_normal)  # 2688


def global_scale(x: np.ndarray) -> np.float32:
    """compressed-tensors' ``generate_gparam`` over the finite values of ``x``
    (float32): ``2688 / max|x|`` as torch computes a scalar divided by a
    tensor, ``f32(f32(1 / max|x|) * 2688)`` (two roundings), or 1.0 where
    that is not a finite positive f32 (no finite nonzero value, or ``max|x|``
    below about ``2688 / f32max``).

    compressed-tensors takes the amax over every value (NaN gives 1.0, an Inf
    gives 0.0, which makes every factor infinite); finite values only here."""
    finite = x[np.isfinite(x)]
    amax = np.max(np.abs(finite)) if finite.size else np.float32(0)
    tiny = np.finfo(np.float32).tiny
    with np.errstate(over="ignore", divide="ignore"):
        g = (np.float32(1) / np.maximum(amax, tiny)) * _RANGE
    return np.float32(g) if np.isfinite(g) and g > 0 else np.float32(1.0)


def _block_scales(amax: np.ndarray, g: np.float32) -> np.ndarray:
    """E4M3 scale codes (uint8) of float32 block maxima (``inf`` for a NaN block)."""
    with np.errstate(over="ignore"):
        s = g * (amax / np.float32(_E2M1.max_normal))  # two f32 roundings, in this order
    s = np.minimum(s, np.float32(_E4M3.max_normal))  # saturate (inf too) before the cast
    codes = s.astype(_E4M3.dtype).view(np.uint8).copy()
    codes[codes == 0] = np.float32(ZERO_BLOCK_SCALE).astype(_E4M3.dtype).view(np.uint8)
    codes[~np.isfinite(amax)] = E4M3_NAN_CODE
    return codes


def quantize_nvfp4(x: np.ndarray, axis: int, g=None) -> MXArray:
    """NVFP4 of float32 ``x`` (checked by the caller: rank >= 1, ``axis``
    normalized, its size a multiple of 16); ``g``: the global scale (a finite
    positive real; None: :func:`global_scale` of ``x``)."""
    bs = NVFP4_BLOCK_SIZE
    g = global_scale(x) if g is None else check_global_scale(g)
    xm = np.moveaxis(x, axis, -1)
    xb = xm.reshape(xm.shape[:-1] + (xm.shape[-1] // bs, bs))
    finite = np.isfinite(xb).all(axis=-1)
    amax = np.where(finite, np.max(np.abs(xb), axis=-1), np.float32(np.inf))
    scodes = _block_scales(amax, g)
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        factor = scodes.view(_E4M3.dtype).astype(np.float32) / g
        p = xb / factor[..., None]  # one f32 division, as the reference
    # A zero quotient (either sign; x = -0, or an underflow) is +0: torch.sign(-0.0) is 0.
    p = np.where(finite[..., None] & ~np.isnan(p) & (p != 0), p, np.float32(0))
    p = np.clip(p, -_E2M1.max_normal, _E2M1.max_normal).astype(np.float32)
    codes = p.astype(_E2M1.dtype)  # RNE, the sign of zero kept
    codes = np.where(finite[..., None], codes.view(np.uint8), np.uint8(0)).view(_E2M1.dtype)
    codes = np.moveaxis(codes.reshape(xm.shape), -1, axis)
    scales = np.moveaxis(scodes, -1, axis)
    return MXArray(
        np.ascontiguousarray(codes), np.ascontiguousarray(scales), NVFP4, bs, axis,
        copy=False, global_scale=g,
    )  # fmt: skip
