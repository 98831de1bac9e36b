"""Exact widening of MX element codes and E8M0 scales to f32 vectors.

Every decoder takes a vector of raw code bytes (``vector<n x i8>``, one code
per byte, the code in the low bits as stored by the oracle) and returns
``n / 16`` vectors of 16 f32 lanes holding ``value * 2^exp2``: the exact
element value times a power of two that the decoder is free to choose
(:attr:`Decoder.exp2`).  The kernels compensate the factor exactly on the
other operand (``A`` is widened once per call, see ``docs/numerics.md``), so a
product of two widened values is the exact product of the element values.

Float formats are placed into an f16 and widened by the hardware
``f16 -> f32`` conversion (``vcvtph2ps``): an f16 has room for every
exponent of E4M3/E5M2/FP6/FP4 and the format's subnormals land on f16
subnormals, so no f32 subnormal (and no microcode assist) ever appears:

* E5M2 is the top byte of an f16 (``exp2 = 0``; Inf and NaN included).
* E4M3, FP6 and FP4: ``S.E..E.M..M`` becomes ``S.0..0E..E.M..M0..0``, the
  value times ``2^(bias - 15)``; E4M3's NaN code (``S.1111.111``) is mapped
  to an f16 NaN explicitly.
* MXINT8: ``sitofp`` of the code, i.e. the value times ``2^6``.

Packed FP4/FP6 codes (``mlir_mx.numerics.packing``: a little-endian bit
stream along the row, FP4 two per byte, FP6 four per three bytes) are first
unpacked in registers (:meth:`Decoder.unpack`): FP4 splits the nibbles and
interleaves them (static shuffles); FP6 uses ``vpmultishiftqb`` with VBMI
(one byte permutation, one multishift, one mask per 64 codes) or shifts of
static byte shuffles otherwise.

FP4 (16 codes) with AVX-512: the 16 values sit in one register and
``vpermps`` picks each code's value (two instructions per 16 codes); packed
codes give the even columns from the low nibbles and the odd ones from the
high nibbles (:meth:`Decoder.decode_pairs`), interleaved once per block.

With AVX512-VBMI, 64 other float codes are widened by table lookups instead
(:class:`Decoder` ``table=True``): two ``vpermi2b`` pick the high and low
byte of the bf16 encoding of each code's value (the same ``value * 2^exp2``;
every MX element value is exact in bf16, NaN included) from two 128-entry
byte tables held in registers, the sign bit is or-ed in, and byte/word
interleaves with zero make the f32 (a bf16 is the top half of an f32).
About half the instructions of the f16 path per code (``bench/results``).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from mlir import ir

from mlir_mx.host import has_features
from mlir_mx.kernels.builder import KernelBuilder
from mlir_mx.numerics.formats import ELEMENT_FORMATS, ElementFormat, decode_elements
from mlir_mx.numerics.packing import packing_group

__all__ = ["Decoder", "decoder", "decode_scales", "LANES"]

#: f32 lanes per vector register (AVX-512).
LANES = 16

#: f32 bits of 2^-127 (E8M0 code 0, an f32 subnormal) and of a quiet NaN.
_F32_2_POW_M127 = 0x00400000
_F32_QNAN = 0x7FC00000


@dataclass(frozen=True)
class Decoder:
    """Widening of one element format: ``decode`` yields ``value * 2^exp2``."""

    fmt: ElementFormat
    table: bool = False  # 64-code vpermi2b lookups (needs avx512vbmi)
    #: FP4 only: the 16 values in one register, ``vpermps`` by code (avx512f)
    values16: bool = False

    @property
    def exp2(self) -> int:
        f = self.fmt
        if f.is_int:
            return 6
        if f.name == "f8E5M2":
            return 0
        return f.bias - 15

    @property
    def group(self) -> tuple[int, int]:
        """``(codes, bytes)`` of one packing group (``(1, 1)`` for 8-bit formats)."""
        return packing_group(self.fmt)

    def packed_bytes(self, n_codes: int) -> int:
        """Bytes holding ``n_codes`` packed codes."""
        codes, nbytes = self.group
        return n_codes // codes * nbytes

    def unpack(self, kb: KernelBuilder, raw: ir.Value) -> ir.Value:
        """Packed bytes (``vector<b x i8>``) -> one code per byte (``vector<n x i8>``)."""
        codes, nbytes = self.group
        if codes == 1:
            return raw
        b = ir.VectorType(raw.type).shape[0]
        n = b // nbytes * codes
        vb = kb.vec(b, kb.i8)
        if self.fmt.bits == 4:
            lo = kb.andi(raw, kb.const(0x0F, vb))
            hi = kb.shrui(raw, kb.const(4, vb))
            return kb.shuffle(lo, hi, [j for i in range(b) for j in (i, b + i)])
        if n == 64 and self.table:
            return _unpack6_multishift(kb, raw)
        # FP6 generic: per group (b0, b1, b2) -> 4 codes by shifts and masks.
        g = b // 3
        parts = [kb.shuffle(raw, raw, [3 * i + j for i in range(g)]) for j in range(3)]
        vg = kb.vec(g, kb.i8)
        m = lambda v: kb.const(v, vg)  # noqa: E731
        b0, b1, b2 = parts
        c0 = kb.andi(b0, m(0x3F))
        c1 = kb.ori(kb.shrui(b0, m(6)), kb.shli(kb.andi(b1, m(0x0F)), m(2)))
        c2 = kb.ori(kb.shrui(b1, m(4)), kb.shli(kb.andi(b2, m(0x03)), m(4)))
        c3 = kb.shrui(b2, m(2))
        c01 = kb.shuffle(c0, c1, [j for i in range(g) for j in (i, g + i)])
        c23 = kb.shuffle(c2, c3, [j for i in range(g) for j in (i, g + i)])
        return kb.shuffle(
            c01,
            c23,
            [j for i in range(g) for j in (2 * i, 2 * i + 1, 2 * g + 2 * i, 2 * g + 2 * i + 1)],
        )

    def decode(self, kb: KernelBuilder, codes: ir.Value) -> list[ir.Value]:
        """``codes``: ``vector<n x i8>`` (n a multiple of 16) -> n/16 f32 vectors."""
        n = ir.VectorType(codes.type).shape[0]
        if self.values16:
            v16i = kb.vec(LANES, kb.i32)
            return [
                self.lookup16(kb, kb.extui(kb.slice(codes, i, LANES), v16i))
                for i in range(0, n, LANES)
            ]
        if self.table and n == 64:
            return self._table_decode(kb, codes)
        if self.fmt.is_int:
            wide = kb.sitofp(kb.extsi(codes, kb.vec(n, kb.i32)), kb.vec(n, kb.f32))
            return [kb.slice(wide, i, LANES) for i in range(0, n, LANES)]
        h = self._to_f16_bits(kb, codes, n)
        f16 = kb.bitcast(h, kb.vec(n, kb.f16))
        out = []
        for i in range(0, n, LANES):
            out.append(kb.extf(kb.slice(f16, i, LANES), kb.vec(LANES, kb.f32)))
        return out

    def _to_f16_bits(self, kb: KernelBuilder, codes: ir.Value, n: int) -> ir.Value:
        f = self.fmt
        v16 = kb.vec(n, kb.i16)
        if f.name == "f8E5M2":
            return kb.shli(kb.extui(codes, v16), kb.const(8, v16))
        x = codes
        if f.bits < 8:  # put the sign bit at bit 7 of the byte
            x = kb.shli(codes, kb.const(8 - f.bits, codes.type))
        # Sign extension copies S into bits 8..15; after the shift the
        # exponent's low bit sits at f16 bit 10, S at bit 15, and the mask
        # drops the other copies of S.
        shift = 2 + f.bits - f.mbits
        mag = ((1 << (f.ebits + f.mbits)) - 1) << (10 - f.mbits)
        h = kb.andi(kb.shli(kb.extsi(x, v16), kb.const(shift, v16)), kb.const(0x8000 | mag, v16))
        if f.has_nan:  # E4M3FN: S.1111.111 -> f16 NaN (tested on the byte)
            low = kb.const(0x7F, codes.type)
            nan = kb.cmpi("eq", kb.andi(codes, low), low)
            h = kb.select(nan, kb.ori(h, kb.const(0x7E00, v16)), h)
        return h

    def lookup16(self, kb: KernelBuilder, idx: ir.Value) -> ir.Value:
        """FP4: ``values[idx & 15]`` for 16 dword indices (``vpermps`` reads the low 4 bits)."""
        v16f = kb.vec(LANES, kb.f32)
        values = kb.const_array_f32(self.table_values(), v16f)
        return kb.intrinsic("llvm.x86.avx512.permvar.sf.512", v16f, [values, idx])

    def decode_pairs(self, kb: KernelBuilder, raw: ir.Value) -> list[ir.Value]:
        """Packed FP4, ``16 q`` bytes -> ``2 q`` f32 vectors: for each 16 bytes
        (32 codes) the even columns (low nibbles), then the odd ones (high)."""
        v16i = kb.vec(LANES, kb.i32)
        four = kb.const(4, v16i)
        out = []
        for i in range(0, ir.VectorType(raw.type).shape[0], LANES):
            idx = kb.extui(kb.slice(raw, i, LANES), v16i)
            out += [self.lookup16(kb, idx), self.lookup16(kb, kb.shrui(idx, four))]
        return out

    def table_values(self) -> list[float]:
        """``value * 2^exp2`` of every code (``2^bits`` entries), as :meth:`decode` gives."""
        codes = np.arange(self.fmt.num_codes, dtype=np.uint8 if not self.fmt.is_int else np.int8)
        return [
            float(v)
            for v in decode_elements(codes.view(self.fmt.dtype), self.fmt.name) * 2.0**self.exp2
        ]

    # -- the VBMI table path ---------------------------------------------------

    def _tables(self) -> tuple[list[int], list[int]]:
        """High and low bytes of bf16(value * 2^exp2) for codes 0..127 (sign excluded)."""
        f = self.fmt
        codes = np.arange(128, dtype=np.uint8)
        if f.bits < 8:  # the whole code fits in 7 bits: the table covers the sign
            codes = np.where(codes < f.num_codes, codes, 0).astype(np.uint8)
        vals = decode_elements(codes.view(f.dtype), f.name) * 2.0**self.exp2
        bits = vals.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
        if not np.array_equal(
            bits.view(ml_dtypes.bfloat16).astype(np.float64), vals, equal_nan=True
        ):
            raise AssertionError(f"{f.name}: a value is not exact in bf16")
        return [int(b) >> 8 for b in bits], [int(b) & 0xFF for b in bits]

    def _table_decode(self, kb: KernelBuilder, codes: ir.Value) -> list[ir.Value]:
        """64 codes -> 4 x 16 f32 (columns in order), ~14 instructions.

        ``vpermb`` (a static ``vector.shuffle``) reorders the codes so that
        the in-lane byte interleaves (``vpunpck{l,h}bw``) of the looked-up
        (low, high) bf16 bytes, split into even and odd words by a shift and
        a mask, come out as columns 0-15, 16-31, 32-47, 48-63.
        """
        hi_t, lo_t = self._tables()
        v64 = kb.vec(64, kb.i8)
        b = kb.shuffle(codes, codes, _TABLE_PERM)
        if self.fmt.num_codes <= 64:  # FP6/FP4: one 64-entry table each (vpermb)
            name = "llvm.x86.avx512.permvar.qi.512"
            hi = kb.intrinsic(name, v64, [kb.const_array(hi_t[:64], v64), b])
            lo = kb.intrinsic(name, v64, [kb.const_array(lo_t[:64], v64), b])
        else:  # 128 magnitudes: two tables each (vpermi2b)
            tables = [kb.const_array(t[i : i + 64], v64) for t in (hi_t, lo_t) for i in (0, 64)]
            name = "llvm.x86.avx512.vpermi2var.qi.512"
            hi = kb.intrinsic(name, v64, [tables[0], b, tables[1]])
            lo = kb.intrinsic(name, v64, [tables[2], b, tables[3]])
        if self.fmt.bits == 8:  # bit 7 is the sign: or it into the high byte
            hi = kb.ori(hi, kb.andi(b, kb.const(0x80, v64)))
        v16i = kb.vec(16, kb.i32)
        out = []
        for half in (0, 8):
            mask = [
                j
                for lane in range(4)
                for i in range(half, half + 8)
                for j in (16 * lane + i, 64 + 16 * lane + i)
            ]
            w = kb.vbitcast(kb.shuffle(lo, hi, mask), 16, kb.i32)
            even = kb.shli(w, kb.const(16, v16i))
            odd = kb.andi(w, kb.const(-65536, v16i))
            out += [kb.bitcast(even, kb.vec(16, kb.f32)), kb.bitcast(odd, kb.vec(16, kb.f32))]
        return out


def _unpack6_multishift(kb: KernelBuilder, raw: ir.Value) -> ir.Value:
    """48 bytes of packed FP6 -> 64 codes: qword q gets bytes 6q..6q+5 (codes
    8q..8q+7), ``vpmultishiftqb`` picks each code's 8-bit window at bit 6r, and
    a mask keeps its 6 bits."""
    v64 = kb.vec(64, kb.i8)
    spread = kb.shuffle(raw, raw, [6 * q + min(i, 5) for q in range(8) for i in range(8)])
    offsets = kb.const_array([6 * r for q in range(8) for r in range(8)], v64)
    fields = kb.intrinsic("llvm.x86.avx512.pmultishift.qb.512", v64, [offsets, spread])
    return kb.andi(fields, kb.const(0x3F, v64))


#: Code order for :meth:`Decoder._table_decode`: position
#: ``16 L + 8 h + 2 d + e`` takes column ``32 h + 16 e + 4 L + d``.
_TABLE_PERM = [
    32 * h + 16 * e + 4 * lane + d
    for lane in range(4)
    for h in range(2)
    for d in range(4)
    for e in range(2)
]


def decoder(element: str, vbmi: bool | None = None) -> Decoder:
    """The :class:`Decoder` of MX element type ``element`` (``f8E4M3FN``, ``i8``, ...).

    ``vbmi``: use the table path (default: when the CPU has AVX512-VBMI).
    """
    fmt = ELEMENT_FORMATS[element]
    if vbmi is None:
        vbmi = has_features("avx512f", "avx512bw", "avx512vbmi")
    values16 = fmt.bits == 4 and has_features("avx512f")
    return Decoder(fmt, table=bool(vbmi) and not fmt.is_int, values16=values16)


def decode_scales(kb: KernelBuilder, codes: ir.Value) -> ir.Value:
    """E8M0 codes (``vector<n x i8>``) -> ``vector<n x f32>``, exactly.

    Code ``c`` is ``2^(c - 127)``: its bits shifted into the f32 exponent
    field; code 0 is the f32 subnormal 2^-127 and code 255 is NaN.
    """
    n = ir.VectorType(codes.type).shape[0]
    v32 = kb.vec(n, kb.i32)
    c = kb.extui(codes, v32)
    bits = kb.shli(c, kb.const(23, v32))
    bits = kb.select(kb.cmpi("eq", c, kb.const(0, v32)), kb.const(_F32_2_POW_M127, v32), bits)
    bits = kb.select(kb.cmpi("eq", c, kb.const(255, v32)), kb.const(_F32_QNAN, v32), bits)
    return kb.bitcast(bits, kb.vec(n, kb.f32))
