"""The numpy oracle for OCP MX v1.0 quantization and dequantization.

Every compiled MX kernel in this project is tested bit-for-bit against
:func:`quantize` and :func:`dequantize`.  The semantics (FLOOR scale rule read from
the f32 exponent bits, RNE element rounding with saturation, NaN blocks, zero
blocks, MXINT8, single-rounding dequantize) are stated in ``docs/numerics.md``.
"""

from __future__ import annotations

import functools

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError

from . import formats
from .blocks import check_block_size, check_blocked_shape, normalize_axis
from .formats import (
    NVFP4_BLOCK_SIZE,
    SCALE_BIAS,
    SCALE_NAN_CODE,
    SCALE_TYPE,
    ElementFormat,
    block_scaling,
    element_format,
    scale_rule,
)
from .mxarray import MXArray, scale_shape
from .nvfp4 import quantize_nvfp4

__all__ = [
    "MIN_SHARED_EXP",
    "NAN_SHARED_EXP",
    "MXArray",
    "block_amax",
    "dequantize",
    "encode_scales",
    "f32_exponent",
    "fold_scale",
    "quantize",
    "round_to_element",
    "scale_shape",
    "shared_exponent",
]

#: Smallest shared exponent (E8M0 code 0 = 2**-127); the FLOOR rule is clamped here.
MIN_SHARED_EXP = -SCALE_BIAS
#: Pseudo shared exponent of a block that holds a NaN or an Inf (E8M0 code 255 = NaN).
NAN_SHARED_EXP = SCALE_NAN_CODE - SCALE_BIAS

# Input dtypes quantize() accepts; all are converted to float32 first (float32 is the
# reference input type; float16 and bfloat16 convert exactly, float64 rounds RNE).
# (A function: ml_dtypes is imported on first use, not with the oracle.)
@functools.cache
def _accepted_input_dtypes() -> tuple[np.dtype, ...]:
    import ml_dtypes

    return (
        np.dtype(np.float32),
        np.dtype(np.float64),
        np.dtype(np.float16),
        np.dtype(ml_dtypes.bfloat16),
    )


# --------------------------------------------------------------------------- helpers


def f32_exponent(x) -> np.ndarray:
    """``floor(log2(|x|))`` read from the float32 exponent bits: biased exponent - 127.

    ``x`` must be float32.  Zero and f32 subnormals give -127 (exponent field 0);
    Inf and NaN give 128 (exponent field 255).  Returns int32.
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise MXArgTypeError(f"x: expected float32, got {x.dtype}")
    bits = x.view(np.uint32)
    return ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32) - np.int32(127)


def shared_exponent(amax, element: str | ElementFormat) -> np.ndarray:
    """The OCP MX FLOOR rule: ``floor(log2(amax)) - emax_elem``, clamped below at -127.

    ``amax`` is the float32 block maximum magnitude; ``floor(log2(amax))`` is read
    from its exponent bits (:func:`f32_exponent`).  A non-finite ``amax`` (a block
    holding a NaN or an Inf) gives :data:`NAN_SHARED_EXP` (128), so that
    ``shared_exp + 127`` is always the E8M0 scale code (255 = NaN).  For finite
    ``amax`` the result lies in ``[-127, 127 - emax]``.  Returns int32.
    """
    fmt = element_format(element)
    amax = np.asarray(amax)
    if amax.dtype != np.float32:
        raise MXArgTypeError(f"amax: expected float32, got {amax.dtype}")
    e = np.maximum(f32_exponent(amax) - np.int32(fmt.emax), np.int32(MIN_SHARED_EXP))
    return np.where(np.isfinite(amax), e, np.int32(NAN_SHARED_EXP)).astype(np.int32)


def encode_scales(shared_exp) -> np.ndarray:
    """E8M0 scale codes for shared exponents in ``[-127, 128]`` (128 = NaN)."""
    e = np.asarray(shared_exp)
    if not np.issubdtype(e.dtype, np.integer):
        raise MXArgTypeError(f"shared_exp: expected an integer array, got {e.dtype}")
    if e.size and (e.min() < MIN_SHARED_EXP or e.max() > NAN_SHARED_EXP):
        raise MXValueError(
            f"shared_exp: values must lie in [{MIN_SHARED_EXP}, {NAN_SHARED_EXP}], "
            f"got [{e.min()}, {e.max()}]"
        )
    return (e.astype(np.int32) + SCALE_BIAS).astype(np.uint8).view(formats.SCALE_DTYPE)


def _blocked(x: np.ndarray, block_size: int, axis: int) -> np.ndarray:
    """View ``x`` as ``(..., nblocks, block_size)`` with the blocked axis moved last."""
    xm = np.moveaxis(x, axis, -1)
    return xm.reshape(xm.shape[:-1] + (xm.shape[-1] // block_size, block_size))


def _unblocked(xb: np.ndarray, axis: int) -> np.ndarray:
    xm = xb.reshape(xb.shape[:-2] + (xb.shape[-2] * xb.shape[-1],))
    return np.moveaxis(xm, -1, axis)


def check_input(x) -> np.ndarray:
    """``x`` (quantize's input) as an array: of an accepted dtype (float32;
    float64, float16 and bfloat16 are converted to float32 by the caller),
    rank >= 1; else ``MXArgTypeError`` / ``MXValueError`` naming ``x``.  The
    compiled :func:`mlir_mx.quantize` checks with it too."""
    x = np.asarray(x)
    if x.dtype not in _accepted_input_dtypes():
        raise MXArgTypeError(
            f"x: expected a float32 array (float64, float16 and bfloat16 are converted to "
            f"float32 first), got dtype {x.dtype}"
        )
    if x.ndim == 0:
        raise MXValueError("x: MX quantization needs rank >= 1, got a rank-0 array")
    return x


def _as_f32_input(x) -> np.ndarray:
    x = check_input(x)
    with np.errstate(over="ignore"):
        return x.astype(np.float32)


def block_amax(x, block_size: int = 32, axis: int = -1) -> np.ndarray:
    """Per-block ``max |x|`` in float32, shaped like the scales (NaN if the block has a NaN)."""
    x = _as_f32_input(x)
    block_size = check_block_size(block_size)
    axis = normalize_axis(axis, x.ndim)
    check_blocked_shape(x.shape, block_size, axis, "x")
    amax = np.max(np.abs(_blocked(x, block_size, axis)), axis=-1)
    return np.moveaxis(amax, -1, axis)


def round_to_element(p, element: str | ElementFormat) -> np.ndarray:
    """Round scaled values ``p`` (float32 or float64) to element codes.

    Round to nearest, ties to even, with saturation to ``+-max_normal`` (sign kept;
    E5M2 saturates too, never Inf).  Zeros keep their sign in the float formats.
    ``p`` must be finite.  For ``i8`` the code is ``rint(p * 64)`` clamped to
    ``[-127, 127]``.

    A float64 ``p`` must be exactly representable in float32 unless ``|p| < 2**-126``
    (values below that round to zero in every element format whichever way they are
    rounded): the final cast goes float64 -> float32 -> element, because ml_dtypes'
    float64 casts are not single-rounding.  :func:`quantize` guarantees this.
    """
    fmt = element_format(element)
    p = np.asarray(p)
    if p.dtype not in (np.float32, np.float64):
        raise MXArgTypeError(f"p: expected float32 or float64, got {p.dtype}")
    if not np.all(np.isfinite(p)):
        raise MXValueError("p: scaled values must be finite (NaN/Inf blocks are handled by quantize)")
    p = p.astype(np.float64)
    if fmt.is_int:
        return np.clip(np.rint(p * 64.0), -127.0, 127.0).astype(np.int8)
    # Saturate BEFORE the narrow cast: ml_dtypes maps E4M3 overflow to NaN and E5M2
    # overflow to Inf.  np.clip keeps the sign of zero.
    p = np.clip(p, -fmt.max_normal, fmt.max_normal)
    return p.astype(np.float32).astype(fmt.dtype)


# --------------------------------------------------------------------------- quantize


def check_scaling(element, block_size, global_scale) -> tuple[ElementFormat, str, int]:
    """``(element format, scale type, block size)`` of quantize's arguments,
    checked: ``block_size`` None is 32 for E8M0 formats and 16 for ``nvfp4``;
    the triple passes :func:`~mlir_mx.numerics.formats.scale_rule`; a
    ``global_scale`` is given only for ``nvfp4``."""
    fmt, scale_type = block_scaling(element)
    if block_size is None:
        block_size = 32 if scale_type == SCALE_TYPE else NVFP4_BLOCK_SIZE
    block_size = check_block_size(block_size)
    rule = scale_rule(fmt.name, scale_type, block_size)
    if rule is not None:
        raise MXValueError(f"block_size: {rule}")
    if global_scale is not None and scale_type == SCALE_TYPE:
        raise MXValueError(f"global_scale: only nvfp4 takes one, not {fmt.name} with E8M0 scales")
    return fmt, scale_type, block_size


def quantize(
    x, element: str | ElementFormat = "f8E4M3FN", block_size: int | None = None, axis: int = -1,
    *, global_scale=None,
) -> MXArray:
    """Quantize ``x`` to MX with OCP MX v1.0 semantics (see ``docs/numerics.md``),
    or to NVFP4 (``element="nvfp4"``: :mod:`mlir_mx.numerics.nvfp4`).

    ``block_size`` None is 32 (16 for ``nvfp4``, its only block size).
    ``global_scale`` (``nvfp4`` only): the per-tensor scale, a finite positive
    real; None computes compressed-tensors' ``2688 / max|x|``.

    ``x`` is float32 (float64, float16 and bfloat16 are converted to float32 first;
    float64 -> float32 rounds to nearest even and may overflow to Inf), any rank
    >= 1; blocks are ``block_size`` consecutive elements along ``axis``, whose size
    must be a multiple of ``block_size``.

    Per block: ``shared_exp = f32_exponent(amax) - emax`` clamped below at -127
    (scale code ``shared_exp + 127``); elements ``x / 2**shared_exp`` (exact) rounded
    to nearest even in the element format with saturation to ``+-max_normal``.  A
    block holding a NaN or an Inf gets scale code 255 (NaN) and all-zero element
    codes.
    """
    fmt, scale_type, block_size = check_scaling(element, block_size, global_scale)
    x = _as_f32_input(x)
    axis = normalize_axis(axis, x.ndim)
    check_blocked_shape(x.shape, block_size, axis, "x")
    if scale_type != SCALE_TYPE:
        return quantize_nvfp4(x, axis, global_scale)

    xb = _blocked(x, block_size, axis)  # (..., nblocks, block_size) float32
    finite = np.isfinite(xb).all(axis=-1)
    amax = np.max(np.abs(xb), axis=-1)  # float32, exact
    amax = np.where(finite, amax, np.float32(np.inf))
    shared = shared_exponent(amax, fmt)  # int32, 128 for NaN blocks

    # Exact division by the power-of-two scale (in float64: no overflow or underflow).
    safe_x = np.where(finite[..., None], xb, np.float32(0)).astype(np.float64)
    safe_e = np.where(finite, shared, 0)
    p = np.ldexp(safe_x, -safe_e[..., None])
    code_bits = round_to_element(p, fmt).view(np.uint8)
    codes_b = np.where(finite[..., None], code_bits, np.uint8(0)).view(fmt.dtype)

    codes = np.ascontiguousarray(_unblocked(codes_b, axis))
    scales = np.ascontiguousarray(np.moveaxis(encode_scales(shared), -1, axis))
    # Fresh arrays of our own: taken over, not copied (FP4/FP6 codes are packed).
    return MXArray(codes, scales, fmt, block_size, axis, copy=False)


def dequantize(a: MXArray) -> np.ndarray:
    """Decode ``a`` to float32: ``f32(element_value * 2**(scale_code - 127))``.

    The product is formed exactly in float64 and rounded once to float32 (round to
    nearest even, f32 subnormals kept, overflow to +-Inf), which equals an IEEE f32
    multiply of the two exactly-representable f32 factors.  Scale code 255 gives NaN
    for the whole block.
    """
    if not isinstance(a, MXArray):
        raise MXArgTypeError(f"a: expected an MXArray, got {type(a).__name__}")
    return a.dequantize()


# --------------------------------------------------------------------------- fold_scale


def _power_of_two_exponent(alpha: np.float32) -> int | None:
    """``p`` when ``alpha`` is exactly ``2**p`` (f32 subnormal powers included)."""
    if not (np.isfinite(alpha) and alpha > 0):
        return None
    mant, exp = np.frexp(np.float64(alpha))
    return int(exp) - 1 if mant == 0.5 else None


def fold_scale(a: MXArray, alpha) -> MXArray:
    """``mx.fold_scale``: the tensor's real values times ``alpha``, as an MX
    tensor of the same format (``docs/numerics.md``, "fold_scale").

    ``alpha`` is rounded to float32 first.  When it is ``2**p`` (``p`` in
    [-149, 127]), each block's scale code moves by ``p`` and its element codes
    are kept, which is exact, wherever the new code stays in [0, 254]; a NaN
    block (code 255) is kept as it is; a block whose code would leave the
    range is requantized.  Any other alpha requantizes every block:
    ``quantize(dequantize(a) * alpha)`` with the product rounded once in
    float32 (a NaN or an overflow to Inf makes a NaN block).
    """
    if not isinstance(a, MXArray):
        raise MXArgTypeError(f"a: expected an MXArray, got {type(a).__name__}")
    if a.scale_type != SCALE_TYPE:
        raise MXValueError(
            f"a: fold_scale takes E8M0-scaled arrays; an {a.format_name} array's factor "
            "belongs in its global_scale"
        )
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(
        alpha, (int, float, np.integer, np.floating)
    ):
        raise MXArgTypeError(f"alpha: expected a real number, got {type(alpha).__name__}")
    with np.errstate(over="ignore", invalid="ignore"):
        alpha = np.float32(alpha)
        product = dequantize(a) * alpha
    requantized = quantize(product, a.format, a.block_size, a.axis)
    p = _power_of_two_exponent(alpha)
    if p is None:
        return requantized
    code = a.scales.view(np.uint8).astype(np.int32)
    moved = code + p
    keep = code == SCALE_NAN_CODE
    add = ~keep & (moved >= 0) & (moved <= SCALE_NAN_CODE - 1)
    scale_codes = np.where(
        keep, code, np.where(add, moved, requantized.scales.view(np.uint8).astype(np.int32))
    )
    own = np.repeat(keep | add, a.block_size, axis=a.axis)
    codes = np.where(own, a.codes.view(np.uint8), requantized.codes.view(np.uint8))
    return MXArray(
        codes=codes.view(a.format.dtype),
        scales=scale_codes.astype(np.uint8).view(formats.SCALE_DTYPE),
        element=a.format,
        block_size=a.block_size,
        axis=a.axis,
        copy=False,
    )
