"""Exact encoding of f32 values to MX codes, in vector registers.

The encoding side of :mod:`mlir_mx.kernels.widen`: the same numerics as the
``mx-to-linalg`` lowering of ``mx.quantize_block``
(:mod:`mlir_mx.passes.mx_to_linalg.helpers`: ``amax_to_code``,
``pow2_neg_shared_exp``, ``scaled_to_element``) and the f32 -> narrow
conversion of ``mx-expand-narrow-floats``, written for vectors of 16 lanes
so that a kernel encodes a whole register at once.  Bit for bit the numpy
oracle (``docs/numerics.md``):

* :func:`scale_code`: the E8M0 code of a block from the f32 bits of its
  largest magnitude (the OCP FLOOR rule on the exponent field, clamped at
  code 0; a NaN or an Inf in the block gives code 255).  An integer maximum
  of the magnitude bits is the block's ``max |x|`` and sees NaN and Inf
  (their bits are the largest), so a block is one ``umax`` reduction.
* :func:`inverse_scale`: ``2^-shared_exp`` as f32 (code 254: the subnormal
  2^-127) and NaN for code 255, so that every element of a NaN block scales
  to NaN and :meth:`Encoder.codes` turns it into code 0.
* :meth:`Encoder.codes`: ``x * 2^-shared_exp`` (one f32 multiply, exact
  unless below 2^-126, where every format rounds to a signed zero anyway),
  saturated to ``+-max_normal`` and rounded to nearest even on the f32 bits
  (normal results) or by the f32 adder (subnormal results, the magic-number
  addition of ``mx-expand-narrow-floats``); MXINT8 ``rint(64 p)`` clamped
  to ``+-127``.
* :func:`pack`: codes in i32 lanes to their stored bytes
  (:mod:`mlir_mx.numerics.packing`): one byte per code, FP4 two per byte
  (element ``2i`` in the low nibble), FP6 four per three bytes
  (little-endian 24-bit groups).  Shifts of 64-bit lanes and truncations
  (``vpmovqb``/``vpmovqd``), no table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mlir import ir

from mlir_mx.kernels.builder import KernelBuilder
from mlir_mx.numerics.formats import SCALE_BIAS, SCALE_NAN_CODE, ElementFormat, element_format

__all__ = ["Encoder", "LANES", "abs_bits", "inverse_scale", "pack", "scale_code"]

#: f32 lanes per register.
LANES = 16

_ABS_MASK = 0x7FFFFFFF
_F32_INF = 0x7F800000
_F32_QNAN = 0x7FC00000
#: f32 bits of 2^-127 (an f32 subnormal): 2^-shared_exp of scale code 254.
_F32_2_POW_M127 = 0x00400000


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _like(kb: KernelBuilder, v: ir.Value, value, elem: ir.Type | None = None) -> ir.Value:
    """A constant shaped like ``v`` (scalar or vector), element type ``elem``."""
    t = v.type
    if elem is not None:
        t = kb.vec(ir.VectorType(t).shape[0], elem) if isinstance(t, ir.VectorType) else elem
    return kb.const(value, t)


def _retype(kb: KernelBuilder, v: ir.Value, elem: ir.Type) -> ir.Type:
    return kb.vec(ir.VectorType(v.type).shape[0], elem) if isinstance(v.type, ir.VectorType) else elem


def scale_code(kb: KernelBuilder, abs_bits: ir.Value, emax: int) -> ir.Value:
    """E8M0 code (i32, scalar or vector) of blocks whose largest magnitude has
    f32 bits ``abs_bits`` (sign cleared; NaN/Inf bits are the largest).

    ``code = max(field - emax, 0)``, 255 when the exponent field is 255.
    """
    c = lambda x: _like(kb, abs_bits, x)  # noqa: E731
    field = kb.shrui(abs_bits, c(23))
    code = kb.maxsi(kb.subi(field, c(emax)), c(0)) if emax else field
    return kb.select(kb.cmpi("eq", field, c(SCALE_NAN_CODE)), c(SCALE_NAN_CODE), code)


def inverse_scale(kb: KernelBuilder, code: ir.Value) -> ir.Value:
    """f32 ``2^(127 - code)`` for an i32 E8M0 code; NaN for code 255."""
    c = lambda x: _like(kb, code, x)  # noqa: E731
    biased = kb.subi(c(2 * SCALE_BIAS), code)
    bits = kb.shli(biased, c(23))
    bits = kb.select(kb.cmpi("eq", biased, c(0)), c(_F32_2_POW_M127), bits)
    bits = kb.select(kb.cmpi("eq", code, c(SCALE_NAN_CODE)), c(_F32_QNAN), bits)
    return kb.bitcast(bits, _retype(kb, code, kb.f32))


def abs_bits(kb: KernelBuilder, x: ir.Value) -> ir.Value:
    """The f32 bits of ``|x|`` as i32 (``x`` f32, scalar or vector)."""
    bits = kb.bitcast(x, _retype(kb, x, kb.i32))
    return kb.andi(bits, _like(kb, bits, _ABS_MASK))


@dataclass(frozen=True)
class Encoder:
    """Rounding of scaled f32 values to the codes of one element format."""

    fmt: ElementFormat

    @classmethod
    def of(cls, element: str) -> Encoder:
        """The encoder of element format ``element`` (``f8E4M3FN``, ``i8``, ...)."""
        return cls(element_format(element))

    def codes(self, kb: KernelBuilder, p: ir.Value) -> ir.Value:
        """``vector<n x f32>`` of scaled values -> ``vector<n x i32>`` codes (in
        the low bits); a NaN lane (a NaN block) gives code 0."""
        if self.fmt.is_int:
            return self._int_codes(kb, p)
        f = self.fmt
        n = f.ebits + f.mbits
        sh = 23 - f.mbits
        c = lambda x: _like(kb, p, x, kb.i32)  # noqa: E731
        bits = kb.bitcast(p, _retype(kb, p, kb.i32))
        mag = kb.andi(bits, c(_ABS_MASK))
        nan = kb.cmpi("ugt", mag, c(_F32_INF))
        mag = kb.minui(mag, c(_f32_bits(f.max_normal)))  # saturation
        # Normal results: round to nearest even on the bits, then rebias.
        odd = kb.andi(kb.shrui(mag, c(sh)), c(1))
        rounded = kb.addi(kb.addi(mag, odd), c((1 << (sh - 1)) - 1))
        norm = kb.subi(kb.shrui(rounded, c(sh)), c((127 - f.bias) << f.mbits))
        # Subnormal results: adding a power of two whose ulp is the format's
        # subnormal step makes the f32 adder round (RNE); the low bits are the
        # code (a carry into min-normal gives min-normal's code, also right).
        magic = 2.0 ** (24 - f.bias - f.mbits)
        s = kb.fadd(kb.bitcast(mag, p.type), kb.const(magic, p.type))
        sub = kb.subi(kb.bitcast(s, bits.type), c(_f32_bits(magic)))
        code = kb.select(kb.cmpi("ult", mag, c(_f32_bits(2.0 ** (1 - f.bias)))), sub, norm)
        # The sign bit lands on bit n (code's sign); a zero keeps its sign.
        sign = kb.andi(kb.shrui(bits, c(31 - n)), c(1 << n))
        return kb.select(nan, c(0), kb.ori(code, sign))

    def _int_codes(self, kb: KernelBuilder, p: ir.Value) -> ir.Value:
        """MXINT8: ``clamp(rint(p * 64), -127, 127)``; NaN -> 0."""
        one = 2.0**self.fmt.mbits
        q = kb.roundeven(kb.fmul(p, kb.const(one, p.type)))
        q = kb.select(kb.is_nan(q), kb.const(0.0, p.type), q)
        ci = _retype(kb, p, kb.i32)
        top = int(self.fmt.max_normal * one)
        v = kb.fptosi(q, ci)  # |q| <= 128: the block's scale bounds |p| < 2
        return kb.minsi(kb.maxsi(v, kb.const(-top, ci)), kb.const(top, ci))


def pack(kb: KernelBuilder, fmt: ElementFormat, codes: list[ir.Value], packed: bool) -> ir.Value:
    """i32 code vectors (16 lanes each, in order) -> one ``vector<b x i8>`` of
    their stored bytes: one per code, or packed (FP4/FP6, ``packed``)."""
    parts = [_pack16(kb, fmt, c, packed) for c in codes]
    while len(parts) > 1:  # concatenate pairwise
        nxt = []
        for i in range(0, len(parts) - 1, 2):
            a, b = parts[i], parts[i + 1]
            na, nb = ir.VectorType(a.type).shape[0], ir.VectorType(b.type).shape[0]
            nxt.append(kb.shuffle(a, b, list(range(na + nb))))
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    return parts[0]


def _pack16(kb: KernelBuilder, fmt: ElementFormat, c: ir.Value, packed: bool) -> ir.Value:
    n = ir.VectorType(c.type).shape[0]
    i64 = ir.IntegerType.get_signless(64)
    if not packed or fmt.bits == 8:
        return kb.trunci(c, kb.vec(n, kb.i8))
    w = kb.vbitcast(c, n // 2, i64)  # lane pairs (2i, 2i + 1) as one qword
    if fmt.bits == 4:  # c[2i] | c[2i+1] << 4 in the qword's low byte
        t = kb.ori(w, kb.shrui(w, kb.const(32 - 4, w.type)))
        return kb.trunci(t, kb.vec(n // 2, kb.i8))
    # FP6: pairs -> 12-bit fields, pairs of those -> 24-bit groups, 3 bytes each.
    t = kb.ori(w, kb.shrui(w, kb.const(32 - 6, w.type)))
    t = kb.vbitcast(kb.trunci(t, kb.vec(n // 2, kb.i32)), n // 4, i64)
    u = kb.ori(t, kb.shrui(t, kb.const(32 - 12, t.type)))
    b = kb.vbitcast(kb.trunci(u, kb.vec(n // 4, kb.i32)), n, kb.i8)
    return kb.shuffle(b, b, [4 * g + k for g in range(n // 4) for k in range(3)])
