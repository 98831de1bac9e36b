"""Exact conversions between f32 and MX codes, written once for every IR builder.

The generated kernels (:mod:`mlir_mx.kernels.common.widen`, :mod:`mlir_mx.kernels.convert.encode`,
the dot kernels), the ``mx-to-linalg`` lowering
(:mod:`mlir_mx.passes.mx_to_linalg.helpers`) and the ``mx-expand-narrow-floats``
pass all widen element codes and E8M0 scales, derive E8M0 codes and round f32
values to element codes; all of them call these functions with an
:class:`~mlir_mx.kernels.common.builder.ArithBuilder` (the kernels'
:class:`~mlir_mx.kernels.common.builder.KernelBuilder` hoists the constants, the
pass's builder works on its op's shape).  Each function works on scalars,
vectors or static tensors; constants take the shape of the operand.  Code
bytes are ``i8`` (the code in the low bits), their values exactly as
``ml_dtypes`` decodes them.

Which widening a format uses is its ``ElementFormat.widening`` row
(:mod:`mlir_mx.numerics.formats`; :func:`widen`).
"""

from __future__ import annotations

import struct

from mlir import ir

from mlir_mx.numerics.formats import SCALE_BIAS, SCALE_NAN_CODE, ElementFormat

__all__ = [
    "BF16",
    "F32_2_POW_M127",
    "F32_ABS_MASK",
    "F32_INF",
    "F32_QNAN",
    "abs_bits",
    "e8m0_code",
    "e8m0_inverse",
    "e8m0_to_f32",
    "f16_bits",
    "f16_factor",
    "f16_widen",
    "f32_bits",
    "int_widen",
    "nan_key",
    "or_nan",
    "round_bf16",
    "round_magnitude",
    "widen",
]

#: f32 bits: a quiet NaN, +Inf, the magnitude mask, and 2^-127 (E8M0 code 0,
#: an f32 subnormal).
F32_QNAN = 0x7FC00000
F32_INF = 0x7F800000
F32_ABS_MASK = 0x7FFFFFFF
F32_2_POW_M127 = 0x00400000

assert SCALE_BIAS == 127  # E8M0 codes are f32 exponent fields (shifts by 23 below)


def f32_bits(x: float) -> int:
    """The bits of ``x`` rounded to f32, as an unsigned int."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _const(b, like: ir.Value, value, elem: ir.Type | None = None) -> ir.Value:
    """A constant shaped like ``like``, element type ``elem`` (default ``like``'s)."""
    t = like.type if elem is None else b.same_shape(like, elem)
    return b.const(value, t)


# --------------------------------------------------------------------------- E8M0


def e8m0_to_f32(b, codes: ir.Value) -> ir.Value:
    """E8M0 codes (unsigned bytes, or ``i32`` in [0, 255]) -> f32
    ``2^(code - 127)``, exactly.

    The code's bits are shifted into the f32 exponent field; code 0 is the f32
    subnormal 2^-127 (never zero) and code 255 is NaN.
    """
    i32 = b.same_shape(codes, b.i32)
    c = codes if codes.type == i32 else b.extui(codes, i32)
    bits = b.shli(c, b.const(23, i32))
    bits = b.select(b.cmpi("eq", c, b.const(0, i32)), b.const(F32_2_POW_M127, i32), bits)
    nan = b.cmpi("eq", c, b.const(SCALE_NAN_CODE, i32))
    bits = b.select(nan, b.const(F32_QNAN, i32), bits)
    return b.bitcast(bits, b.same_shape(codes, b.f32))


def e8m0_code(b, abs_bits: ir.Value, emax: int) -> ir.Value:
    """The E8M0 code (``i32``) of blocks whose largest magnitude has the f32
    bits ``abs_bits`` (``i32``, sign cleared; NaN and Inf bits are the largest).

    The OCP FLOOR rule on the exponent field: ``shared_exp = field - 127 -
    emax`` clamped below at -127, so ``code = max(field - emax, 0)``; an
    exponent field of 255 (the block holds a NaN or an Inf) gives code 255.
    """
    c = lambda x: _const(b, abs_bits, x)  # noqa: E731
    field = b.shrui(abs_bits, c(23))
    code = b.maxsi(b.subi(field, c(emax)), c(0)) if emax else field
    return b.select(b.cmpi("eq", field, c(SCALE_NAN_CODE)), c(SCALE_NAN_CODE), code)


def e8m0_inverse(b, code: ir.Value) -> ir.Value:
    """f32 ``2^-shared_exp = 2^(127 - code)`` for ``i32`` E8M0 codes: the value
    of code ``254 - code`` (code 254 gives the f32 subnormal 2^-127), and NaN
    for code 255 (every element of a NaN block scales to NaN)."""
    c = lambda x: _const(b, code, x)  # noqa: E731
    nan = b.cmpi("eq", code, c(SCALE_NAN_CODE))
    return e8m0_to_f32(b, b.select(nan, code, b.subi(c(2 * SCALE_BIAS), code)))


# --------------------------------------------------------------------------- widening


def widen(
    b,
    codes: ir.Value,
    fmt: ElementFormat,
    *,
    word_nan: bool = False,
    nan: bool = True,
    scaled: bool = True,
) -> ir.Value:
    """Element code bytes -> their exact f32 values, by the format's
    ``widening`` row: ``int`` (:func:`int_widen`), ``f16`` (:func:`f16_widen`).

    ``values`` (FP4) is a 16-entry table lookup only the kernels emit (the
    values in one register with AVX-512,
    :meth:`mlir_mx.kernels.common.widen.Decoder.lookup16`; with AVX2,
    ``Decoder.shuf16``: ``vpshufb`` tables of the bf16 bytes for packed
    pairs, of the f16 high byte for one code per byte); its
    elementwise form, for any shape and builder, is the f16 construction,
    exact for every code of such a format.
    """
    if fmt.widening == "int":
        return int_widen(b, codes, fmt)
    if fmt.widening in ("f16", "values"):
        return f16_widen(b, codes, fmt, word_nan=word_nan, nan=nan, scaled=scaled)
    raise ValueError(f"{fmt.name}: no codec for widening {fmt.widening!r}")


def int_widen(b, codes: ir.Value, fmt: ElementFormat) -> ir.Value:
    """Integer codes (``i8``) -> ``code * 2^-mbits`` (MXINT8: ``c / 64``), exactly
    (``sitofp`` is exact for 8-bit integers)."""
    wide = b.sitofp(codes, b.same_shape(codes, b.f32))
    return b.fmul(wide, _const(b, wide, 2.0**-fmt.mbits))


def f16_bits(
    b, codes: ir.Value, fmt: ElementFormat, *, word_nan: bool = False, nan: bool = True
) -> ir.Value:
    """The f16 bits (``i16``) of ``value * 2^(bias - 15)`` for float code bytes.

    An f16 has room for every exponent of E4M3/FP6/FP4 and their subnormals
    land on f16 subnormals; E5M2 is exactly the top byte of an f16 (factor 1,
    Inf and NaN included).  Others: ``S.E..E.M..M`` becomes
    ``S.0..0E..E.M..M0..0`` by one sign extension, one shift and one mask;
    E4M3's NaN code (``S.1111.111``) is mapped to an f16 NaN explicitly:
    tested on the code byte, or with ``word_nan`` on the f16 word (its
    magnitude field all ones; or-ing in a masked ``0x7E00`` instead of a
    select: the same bits in fewer instructions where a byte compare must be
    widened to words, e.g. AVX2).  ``nan=False`` leaves the NaN code's
    word finite (``S.0111.1111.0000000``): for a caller that makes the
    result of each column holding one NaN itself (the decode kernel's
    per-block test, :func:`nan_key`).
    """
    i16 = b.same_shape(codes, b.i16)
    if fmt.ebits == 5:  # E5M2: the top byte of an f16
        return b.shli(b.extui(codes, i16), b.const(8, i16))
    x = codes
    if fmt.is_sub_byte:  # put the sign bit at bit 7 of the byte
        x = b.shli(codes, b.const(8 - fmt.bits, codes.type))
    # Sign extension copies S into bits 8..15; after the shift the exponent's
    # low bit sits at f16 bit 10, S at bit 15, and the mask drops the other
    # copies of S.
    shift = 2 + fmt.bits - fmt.mbits
    mag = ((1 << (fmt.ebits + fmt.mbits)) - 1) << (10 - fmt.mbits)
    h = b.andi(b.shli(b.extsi(x, i16), b.const(shift, i16)), b.const(0x8000 | mag, i16))
    if not nan:
        return h
    if fmt.has_nan and word_nan:  # the magnitude field of the word all ones
        nan = b.cmpi("eq", b.andi(h, b.const(mag, i16)), b.const(mag, i16))
        return b.ori(h, b.andi(b.extsi(nan, i16), b.const(0x7E00, i16)))
    if fmt.has_nan:  # E4M3FN: S.1111.111 -> f16 NaN (tested on the byte)
        low = b.const(0x7F, codes.type)
        nan = b.cmpi("eq", b.andi(codes, low), low)
        h = b.select(nan, b.ori(h, b.const(0x7E00, i16)), h)
    return h


def f16_widen(
    b,
    codes: ir.Value,
    fmt: ElementFormat,
    *,
    word_nan: bool = False,
    nan: bool = True,
    scaled: bool = True,
) -> ir.Value:
    """Float code bytes -> their exact f32 values through the hardware f16 -> f32
    conversion (``vcvtph2ps``: no f32 subnormal operand, no microcode assist),
    then the exact power-of-two correction ``2^(15 - bias)`` (:func:`f16_factor`;
    ``scaled=False`` leaves it out, for a caller that multiplied the other
    operand by it, exactly)."""
    bits = f16_bits(b, codes, fmt, word_nan=word_nan, nan=nan)
    h = b.bitcast(bits, b.same_shape(codes, b.f16))
    w = b.extf(h, b.same_shape(codes, b.f32))
    if not scaled or f16_factor(fmt) == 1:
        return w
    return b.fmul(w, b.const(f16_factor(fmt), w.type))


def f16_factor(fmt: ElementFormat) -> float:
    """The power of two :func:`f16_widen` multiplies the f16's value by:
    ``2^(15 - bias)`` (E4M3 2^8, E2M3 2^14, E3M2 2^12, E2M1 2^14); 1 for E5M2."""
    return 1.0 if fmt.ebits == 5 else 2.0 ** (15 - fmt.bias)


def nan_key(b, codes: ir.Value) -> ir.Value:
    """8-bit float codes (``i8``, a format with one NaN code per sign,
    ``S.1..1``: E4M3) -> ``code + code`` (wrapping): ``0xFE`` exactly for
    the NaN codes (``0x7F``, ``0xFF``), at most ``0xFC`` for every other, so
    the unsigned maximum of the keys of a column's codes is ``0xFE`` iff
    one of them is NaN (:func:`or_nan`)."""
    return b.addi(codes, codes)


def or_nan(b, x: ir.Value, keys: ir.Value) -> ir.Value:
    """``x`` (f32 lanes) made NaN where the maximum ``keys`` (``i8``, one per
    lane; :func:`nan_key`) say a NaN code was among the lane's operands: the
    quiet-NaN bits or-ed in (NaN whatever ``x`` was, Inf or finite)."""
    hit = b.cmpi("eq", keys, _const(b, keys, 0xFE - 256))
    bits = b.bitcast(x, b.same_shape(x, b.i32))
    mask = b.andi(b.extsi(hit, b.same_shape(x, b.i32)), _const(b, bits, F32_QNAN))
    return b.bitcast(b.ori(bits, mask), x.type)


# --------------------------------------------------------------------------- rounding


def abs_bits(b, x: ir.Value) -> ir.Value:
    """The f32 bits of ``|x|`` as ``i32`` (``x`` f32)."""
    bits = b.bitcast(x, b.same_shape(x, b.i32))
    return b.andi(bits, _const(b, bits, F32_ABS_MASK))


def round_magnitude(b, mag: ir.Value, fmt: ElementFormat) -> ir.Value:
    """The code (``i32``, sign bit clear) of the f32 magnitude with bits ``mag``
    rounded to nearest, ties to even, in float format ``fmt``.

    Valid for magnitudes up to the format's largest finite value plus half an
    ulp; callers saturate or select their overflow, Inf and NaN codes.  Normal
    results round on the f32 bits and are rebiased; subnormal results come
    from adding a power of two whose ulp is the format's subnormal step, which
    makes the (RNE) f32 adder round: the low bits are then the code (a carry
    into the smallest normal gives that normal's code, also right).
    """
    c = lambda x: _const(b, mag, x)  # noqa: E731
    sh = 23 - fmt.mbits
    odd = b.andi(b.shrui(mag, c(sh)), c(1))
    rounded = b.addi(b.addi(mag, odd), c((1 << (sh - 1)) - 1))
    norm = b.subi(b.shrui(rounded, c(sh)), c((127 - fmt.bias) << fmt.mbits))
    magic = 2.0 ** (24 - fmt.bias - fmt.mbits)
    f32 = b.same_shape(mag, b.f32)
    s = b.fadd(b.bitcast(mag, f32), b.const(magic, f32))
    sub = b.subi(b.bitcast(s, mag.type), c(f32_bits(magic)))
    return b.select(b.cmpi("ult", mag, c(f32_bits(2.0 ** (1 - fmt.bias)))), sub, norm)


#: ``Problem.a_quant`` for bf16 activations: an f32 A rounded to bf16 per
#: call (:func:`round_bf16`), no scales (``sa = 1``); the f32 kernels run it
#: on the rounded values, the ``bf16`` dot kernels on ``vdpbf16ps``, with the
#: same bits (``docs/numerics.md``).
BF16 = "bf16"


def round_bf16(b, x: ir.Value) -> ir.Value:
    """``x`` (f32) rounded to bf16, nearest even, as the f32 value it is
    (``ml_dtypes.bfloat16``'s rounding: overflow to Inf, a NaN stays NaN)."""
    bits = b.bitcast(x, b.same_shape(x, b.i32))
    c = lambda v: _const(b, bits, v)  # noqa: E731
    odd = b.andi(b.shrui(bits, c(16)), c(1))
    rounded = b.addi(bits, b.addi(odd, c(0x7FFF)))
    quiet = b.ori(bits, c(0x00400000))  # a NaN: quiet, never rounded into Inf
    out = b.select(b.cmpf("uno", x, x), quiet, rounded)
    return b.bitcast(b.andi(out, c(-65536)), x.type)
