"""Exact code -> f32 conversions, written once for every IR builder.

The generated kernels (:mod:`mlir_mx.kernels.widen`) and the
``mx-expand-narrow-floats`` pass both widen element codes and E8M0 scales;
both call these functions with an :class:`~mlir_mx.kernels.builder.ArithBuilder`
(the kernels' :class:`~mlir_mx.kernels.builder.KernelBuilder` hoists the
constants, the pass's builder works on its op's shape).  Each function works
on scalars, vectors or static tensors of code bytes: ``i8`` (the code in the
low bits), its values exactly as ``ml_dtypes`` decodes them.

Which recipe a format uses is its ``ElementFormat.widening`` row
(:mod:`mlir_mx.numerics.formats`).
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.numerics.formats import SCALE_BIAS, SCALE_NAN_CODE, ElementFormat

__all__ = ["F32_QNAN", "e8m0_to_f32", "f16_bits", "f16_widen"]

#: f32 bits of a quiet NaN, and of 2^-127 (E8M0 code 0, an f32 subnormal).
F32_QNAN = 0x7FC00000
_F32_2_POW_M127 = 0x00400000


def e8m0_to_f32(b, codes: ir.Value) -> ir.Value:
    """E8M0 codes (unsigned bytes, or ``i32`` in [0, 255]) -> f32
    ``2^(code - 127)``, exactly.

    The code's bits are shifted into the f32 exponent field; code 0 is the f32
    subnormal 2^-127 (never zero) and code 255 is NaN.
    """
    i32 = b.same_shape(codes, b.i32)
    c = codes if codes.type == i32 else b.extui(codes, i32)
    bits = b.shli(c, b.const(23, i32))
    bits = b.select(b.cmpi("eq", c, b.const(0, i32)), b.const(_F32_2_POW_M127, i32), bits)
    nan = b.cmpi("eq", c, b.const(SCALE_NAN_CODE, i32))
    bits = b.select(nan, b.const(F32_QNAN, i32), bits)
    assert SCALE_BIAS == 127  # the shift above places code - 127 as the exponent
    return b.bitcast(bits, b.same_shape(codes, b.f32))


def f16_bits(b, codes: ir.Value, fmt: ElementFormat) -> ir.Value:
    """The f16 bits (``i16``) of ``value * 2^(bias - 15)`` for float codes.

    An f16 has room for every exponent of E4M3/FP6/FP4 and their subnormals
    land on f16 subnormals; E5M2 is exactly the top byte of an f16 (factor 1,
    Inf and NaN included).  Others: ``S.E..E.M..M`` becomes
    ``S.0..0E..E.M..M0..0`` by one sign extension, one shift and one mask;
    E4M3's NaN code (``S.1111.111``) is mapped to an f16 NaN explicitly.
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
    if fmt.has_nan:  # E4M3FN: S.1111.111 -> f16 NaN (tested on the byte)
        low = b.const(0x7F, codes.type)
        nan = b.cmpi("eq", b.andi(codes, low), low)
        h = b.select(nan, b.ori(h, b.const(0x7E00, i16)), h)
    return h


def f16_widen(b, codes: ir.Value, fmt: ElementFormat) -> ir.Value:
    """Float codes -> their exact f32 values through the hardware f16 -> f32
    conversion (``vcvtph2ps``: no f32 subnormal operand, no microcode assist),
    then the exact power-of-two correction ``2^(15 - bias)``."""
    h = b.bitcast(f16_bits(b, codes, fmt), b.same_shape(codes, b.f16))
    w = b.extf(h, b.same_shape(codes, b.f32))
    if fmt.ebits == 5:
        return w
    return b.fmul(w, b.const(2.0 ** (15 - fmt.bias), w.type))
