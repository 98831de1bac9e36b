"""Exact encoding of f32 values to MX codes, in vector registers.

The encoding side of :mod:`mlir_mx.kernels.common.widen`: the same numerics as the
``mx-to-linalg`` lowering of ``mx.quantize_block``
(:mod:`mlir_mx.passes.mx_to_linalg.helpers`) and the f32 -> narrow
conversion of ``mx-expand-narrow-floats``, from the same codec
(:mod:`mlir_mx.kernels.common.codec`: ``e8m0_code``, ``e8m0_inverse``,
``round_magnitude``), for vectors of 16 lanes so that a kernel encodes a
whole register at once.  Bit for bit the numpy oracle (``docs/numerics.md``):

* ``codec.e8m0_code``: the E8M0 code of a block from the f32 bits of its
  largest magnitude (the OCP FLOOR rule on the exponent field, clamped at
  code 0; a NaN or an Inf in the block gives code 255).  An integer maximum
  of the magnitude bits is the block's ``max |x|`` and sees NaN and Inf
  (their bits are the largest), so a block is one ``umax`` reduction.
* ``codec.e8m0_inverse``: ``2^-shared_exp`` as f32 (code 254: the subnormal
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

from dataclasses import dataclass

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import F32_ABS_MASK, F32_INF, f32_bits, round_magnitude
from mlir_mx.numerics.formats import ElementFormat, element_format

__all__ = ["Encoder", "LANES", "pack"]

#: f32 lanes per register.
LANES = 16


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
        i32 = kb.same_shape(p, kb.i32)
        c = lambda x: kb.const(x, i32)  # noqa: E731
        bits = kb.bitcast(p, i32)
        mag = kb.andi(bits, c(F32_ABS_MASK))
        nan = kb.cmpi("ugt", mag, c(F32_INF))
        mag = kb.minui(mag, c(f32_bits(f.max_normal)))  # saturation
        code = round_magnitude(kb, mag, f)
        # The sign bit lands on bit n (code's sign); a zero keeps its sign.
        sign = kb.andi(kb.shrui(bits, c(31 - n)), c(1 << n))
        return kb.select(nan, c(0), kb.ori(code, sign))

    def _int_codes(self, kb: KernelBuilder, p: ir.Value) -> ir.Value:
        """MXINT8: ``clamp(rint(p * 64), -127, 127)``; NaN -> 0."""
        one = 2.0**self.fmt.mbits
        q = kb.roundeven(kb.fmul(p, kb.const(one, p.type)))
        q = kb.select(kb.is_nan(q), kb.const(0.0, p.type), q)
        ci = kb.same_shape(p, kb.i32)
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
    group, nbytes = fmt.group
    if not packed or group == 1:
        return kb.trunci(c, kb.vec(n, kb.i8))
    w = kb.vbitcast(c, n // 2, i64)  # lane pairs (2i, 2i + 1) as one qword
    if (group, nbytes) == (2, 1):  # c[2i] | c[2i+1] << 4 in the qword's low byte
        t = kb.ori(w, kb.shrui(w, kb.const(32 - fmt.bits, w.type)))
        return kb.trunci(t, kb.vec(n // 2, kb.i8))
    if (group, nbytes) != (4, 3):
        raise ValueError(f"{fmt.name}: no packing of groups {fmt.group}")
    # FP6: pairs -> 12-bit fields, pairs of those -> 24-bit groups, 3 bytes each.
    t = kb.ori(w, kb.shrui(w, kb.const(32 - fmt.bits, w.type)))
    t = kb.vbitcast(kb.trunci(t, kb.vec(n // 2, kb.i32)), n // 4, i64)
    u = kb.ori(t, kb.shrui(t, kb.const(32 - 2 * fmt.bits, t.type)))
    b = kb.vbitcast(kb.trunci(u, kb.vec(n // 4, kb.i32)), n, kb.i8)
    return kb.shuffle(b, b, [4 * g + k for g in range(n // 4) for k in range(3)])
