"""NVFP4's scales in registers, for the conversion kernels: the E4M3 block
scale of a block from its amax and the global scale, and an E4M3 scale's
f32 value, scalars or vectors alike.  The arithmetic of the oracle
(:mod:`mlir_mx.numerics.nvfp4`, compressed-tensors' order) and of the
``mx-to-linalg`` lowering, with the E4M3 rounding done on the f32 bits by
:func:`~mlir_mx.kernels.common.codec.round_magnitude` (the element encoder's
RNE, E4M3 subnormals included), so no narrow-float type is needed here.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import F32_INF, F32_QNAN, f32_bits, round_magnitude
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE, E4M3_SCALED, ELEMENT_FORMATS, NVFP4
from mlir_mx.numerics.nvfp4 import E4M3_NAN_CODE, ZERO_BLOCK_SCALE

__all__ = ["block_scale", "e4m3_value", "scaled_codes_input"]

_E4M3 = ELEMENT_FORMATS[E4M3_SCALE_TYPE]
_E2M1 = ELEMENT_FORMATS[E4M3_SCALED[NVFP4]]
_ZERO_CODE = 0x20  # E4M3 0.125 = 2^-3: exponent field 4, mantissa 0
assert ZERO_BLOCK_SCALE == 2.0 ** ((_ZERO_CODE >> 3) - _E4M3.bias)


def _like(kb: KernelBuilder, v: ir.Value, g: ir.Value) -> ir.Value:
    """The scalar ``g`` broadcast to ``v``'s shape (``g`` itself for a scalar)."""
    if isinstance(v.type, ir.VectorType):
        return kb.broadcast(g, ir.VectorType(v.type).shape[0])
    return g


def e4m3_value(kb: KernelBuilder, code: ir.Value) -> ir.Value:
    """The exact f32 value of E4M3 codes (``i32`` in [0, 255]): normal codes
    rebiased into the f32 fields, subnormals ``m * 2^-9``, the sign bit, NaN
    for 0x7f and 0xff."""
    i32, f32 = code.type, kb.same_shape(code, kb.f32)
    c = lambda x: kb.const(x, i32)  # noqa: E731
    mag = kb.andi(code, c(0x7F))
    e, m = kb.shrui(mag, c(_E4M3.mbits)), kb.andi(mag, c(7))
    rebias = 127 - _E4M3.bias
    normal = kb.bitcast(kb.ori(kb.shli(kb.addi(e, c(rebias)), c(23)), kb.shli(m, c(20))), f32)
    sub = kb.fmul(kb.sitofp(m, f32), kb.const(_E4M3.min_subnormal, f32))
    v = kb.select(kb.cmpi("eq", e, c(0)), sub, normal)
    v = kb.select(kb.cmpi("eq", mag, c(0x7F)), kb.bitcast(c(F32_QNAN), f32), v)
    sign = kb.shli(kb.andi(code, c(0x80)), c(24))  # the code's sign to the f32 sign bit
    return kb.bitcast(kb.ori(kb.bitcast(v, i32), sign), f32)


def block_scale(kb: KernelBuilder, m: ir.Value, g: ir.Value) -> tuple[ir.Value, ir.Value]:
    """``(E4M3 code as i32, the block's factor f32(s / g))`` of blocks whose
    largest magnitude has the f32 bits ``m`` (``i32``; NaN and Inf have the
    largest bits): ``e4m3(min(g * (amax / 6), 448))``, 0.125 for a zero, the
    NaN code 0x7f (and a NaN factor) for a non-finite amax."""
    i32, f32 = m.type, kb.same_shape(m, kb.f32)
    c = lambda x: kb.const(x, i32)  # noqa: E731
    gv = _like(kb, m, g)
    s = kb.fmul(gv, kb.fdiv(kb.bitcast(m, f32), kb.const(_E2M1.max_normal, f32)))
    s = kb.minimumf(s, kb.const(_E4M3.max_normal, f32))  # an Inf product saturates
    bits = kb.minui(kb.bitcast(s, i32), c(f32_bits(_E4M3.max_normal)))  # NaN: fixed below
    code = round_magnitude(kb, bits, _E4M3)
    code = kb.select(kb.cmpi("eq", code, c(0)), c(_ZERO_CODE), code)
    finite = kb.cmpi("ult", m, c(F32_INF))
    code = kb.select(finite, code, c(E4M3_NAN_CODE))
    return code, kb.fdiv(e4m3_value(kb, code), gv)


def scaled_codes_input(kb: KernelBuilder, x: ir.Value, factor: ir.Value) -> ir.Value:
    """``x / factor`` (one f32 division), +0 where that is zero (either sign)
    or NaN: the value :class:`~mlir_mx.kernels.convert.encode.Encoder` rounds
    (it saturates at 6 and keeps the sign of a nonzero value)."""
    p = kb.fdiv(x, factor)
    zero = kb.const(0.0, p.type)
    return kb.select(kb.cmpf("one", p, zero), p, zero)
