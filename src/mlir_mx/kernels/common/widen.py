"""Exact widening of MX element codes and E8M0 scales to f32 vectors.

Every decoder takes a vector of raw code bytes (``vector<n x i8>``, one code
per byte, the code in the low bits as stored by the oracle) and returns
``n / 16`` vectors of 16 f32 lanes holding the **exact element values** (no
power-of-two factor for another operand to compensate: a factor could
overflow or underflow a finite operand, ``docs/numerics.md``).  The recipe
is the format's ``ElementFormat.widening`` row, written once in
:mod:`mlir_mx.kernels.common.codec`:

* ``f16`` (E4M3, E5M2, FP6 without VBMI): the code placed into an f16,
  widened by the hardware ``f16 -> f32`` conversion, times ``2^(15 - bias)``
  (exact; no f32 subnormal, hence no microcode assist, ever appears);
* ``int`` (MXINT8): ``sitofp`` of the code, times ``2^-6``;
* ``values`` (FP4): see below.

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

FP4 without AVX-512 (AVX2 + F16C, :attr:`Decoder.shuf16`): packed codes
(:meth:`Decoder.decode_pairs`) are broadcast to both 128-bit lanes and split
into low and high nibbles by a per-lane shift, go through two ``vpshufb``
tables, the high and the low byte of each value's bf16 encoding (the f32 bits
of every E2M1 value are its bf16 bits over 16 zero bits), an in-lane byte
interleave makes bf16 words, and a shift and a mask per dword the f32:
integer pipes only, 2 shuffles per 16 codes (and two shift/mask pairs) and no
``vcvtph2ps`` (one per ~1.4 cycles on Zen 3); the vector lanes hold the
columns in :data:`PAIR_ORDER`, which :meth:`Decoder.in_order` undoes once per
block.  Session 47 (llc -mcpu=znver3, per 256 codes of the decode loop): 135
instructions, of them 32 shuffles (16 ``vpshufb``, 16 byte interleaves) and
16 ``vpblendw`` (LLVM's form of the mask), where a byte shift, a
``vinserti128`` and word interleaves with zero took 143 with 72 shuffles;
1.10-1.14x faster in L2/L3 under the AVX2 mask on a Zen 4
(``bench/results/zen4-s47-2026-12-04.md``).  One code per byte: ``vpshufb``
of the f16 high byte (every E2M1 value is exact in f16 with a zero low byte),
a byte interleave with zero and ``vcvtph2ps``.

With AVX512-VBMI, 64 other float codes are widened by table lookups instead
(:class:`Decoder` ``table=True``): two ``vpermi2b`` pick the high and low
byte of the bf16 encoding of each code's value (every MX element value is
exact in bf16, NaN included) from two 128-entry
byte tables held in registers, the sign bit is or-ed in, and byte/word
interleaves with zero make the f32 (a bf16 is the top half of an f32).
About half the instructions of the f16 path per code (``bench/results``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir

from mlir_mx.host import has_features
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import e8m0_to_f32, f16_factor, widen
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_TYPE, ElementFormat, decode_elements

__all__ = ["Decoder", "decoder", "decode_scales", "decode_scale_tile", "interleave_pairs", "LANES", "PAIR_ORDER"]

#: f32 lanes per vector register (AVX-512).
LANES = 16


@dataclass(frozen=True)
class Decoder:
    """Widening of one element format: ``decode`` yields the exact values."""

    fmt: ElementFormat
    table: bool = False  # 64-code vpermi2b lookups (needs avx512vbmi)
    #: FP4 only: the 16 values in one register, ``vpermps`` by code (avx512f)
    values16: bool = False
    #: FP4 only, without AVX-512: the high bytes of the 16 values' f16
    #: encodings in one 16-byte table, ``vpshufb`` by code, then ``vcvtph2ps``
    #: (avx2, f16c)
    shuf16: bool = False
    #: The f16 path's NaN test on the f16 word (codec.f16_bits ``word_nan``;
    #: without AVX-512, where the byte compare's mask had to be widened)
    word_nan: bool = False

    @property
    def pairs(self) -> bool:
        """Whether :meth:`decode_pairs` serves packed FP4 (even / odd columns)."""
        return self.values16 or self.shuf16

    @property
    def group(self) -> tuple[int, int]:
        """``(codes, bytes)`` of one packing group (``(1, 1)`` for 8-bit formats)."""
        return self.fmt.group

    def unpack(self, kb: KernelBuilder, raw: ir.Value) -> ir.Value:
        """Packed bytes (``vector<b x i8>``) -> one code per byte (``vector<n x i8>``)."""
        codes, nbytes = self.group
        if codes == 1:
            return raw
        b = ir.VectorType(raw.type).shape[0]
        n = b // nbytes * codes
        vb = kb.vec(b, kb.i8)
        if codes == 2:  # FP4: nibbles
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

    def block_nan(self, n: int) -> bool:
        """Whether :meth:`decode` of ``n`` codes can leave the NaN codes to
        the caller (``nan=False``): an 8-bit format with NaN codes (E4M3)
        on the f16 path, where the per-code NaN mapping costs 3-4
        instructions per 16 codes (the table path maps NaN for free)."""
        fmt = self.fmt
        table = self.table and n == 64
        # E5M2 is the top byte of an f16: its NaN (and Inf) codes widen as they are.
        mapped = fmt.has_nan and fmt.ebits != 5 and fmt.widening == "f16"
        return mapped and not fmt.is_sub_byte and not table

    def factor(self, n: int) -> float | None:
        """The power of two (> 1) :meth:`decode` of ``n`` codes multiplies
        every f16 by (:func:`~mlir_mx.kernels.common.codec.f16_factor`), which
        ``decode(scaled=False)`` leaves to the caller; None where no such
        multiply is emitted (tables, E5M2, MXINT8's ``2^-6``)."""
        f = f16_factor(self.fmt)
        if self.fmt.widening not in ("f16", "values") or f == 1:
            return None
        if self.values16 or self.shuf16 or (self.table and n == 64):
            return None
        return f

    def decode(
        self, kb: KernelBuilder, codes: ir.Value, nan: bool = True, scaled: bool = True
    ) -> list[ir.Value]:
        """``codes``: ``vector<n x i8>`` (n a multiple of 16) -> n/16 f32 vectors.

        ``nan=False`` (only where :meth:`block_nan`): NaN codes widen to a
        finite value; the caller makes their columns NaN
        (:func:`~mlir_mx.kernels.common.codec.nan_key`, ``or_nan``)."""
        n = ir.VectorType(codes.type).shape[0]
        assert nan or self.block_nan(n)
        assert scaled or self.factor(n) is not None
        if self.values16:
            v16i = kb.vec(LANES, kb.i32)
            return [
                self.lookup16(kb, kb.extui(kb.slice(codes, i, LANES), v16i))
                for i in range(0, n, LANES)
            ]
        if self.shuf16:
            return [self._shuf16(kb, kb.slice(codes, i, LANES)) for i in range(0, n, LANES)]
        if self.table and n == 64:
            return self._table_decode(kb, codes)
        return [
            widen(
                kb, kb.slice(codes, i, LANES), self.fmt,
                word_nan=self.word_nan, nan=nan, scaled=scaled,
            )
            for i in range(0, n, LANES)
        ]

    def lookup16(self, kb: KernelBuilder, idx: ir.Value) -> ir.Value:
        """FP4: ``values[idx & 15]`` for 16 dword indices (``vpermps`` reads the low 4 bits)."""
        v16f = kb.vec(LANES, kb.f32)
        values = kb.const_array_f32(self.table_values(), v16f)
        return kb.intrinsic("llvm.x86.avx512.permvar.sf.512", v16f, [values, idx])

    def _shuf16(self, kb: KernelBuilder, codes: ir.Value) -> ir.Value:
        """FP4: 16 codes (``vector<16xi8>``, values 0..15) -> their 16 f32 values.

        ``vpshufb`` looks up the high byte of each value's f16 encoding (every
        E2M1 value is exact in f16 with a zero low byte: at most 2 significant
        bits), a byte interleave with zero makes the 16 f16 words and
        ``vcvtph2ps`` widens them: the exact values, the f16 path's bits.
        """
        v16 = kb.vec(16, kb.i8)
        hi = kb.intrinsic(
            "llvm.x86.ssse3.pshuf.b.128", v16, [kb.const_array(self._f16_high_bytes(), v16), codes]
        )
        words = kb.shuffle(kb.const(0, v16), hi, [j for i in range(16) for j in (i, 16 + i)])
        return kb.extf(kb.vbitcast(words, 16, kb.f16), kb.vec(LANES, kb.f32))

    def _f16_high_bytes(self) -> list[int]:
        """The high byte of the f16 encoding of each of the 16 FP4 values
        (as signed bytes); checked: the low bytes are all zero."""
        bits = np.array(self.table_values(), np.float16).view(np.uint16)
        if np.any(bits & 0xFF) or len(bits) != 16:
            raise AssertionError(f"{self.fmt.name}: a value has a nonzero f16 low byte")
        return [int(b >> 8) - (256 if b >> 15 else 0) for b in bits]

    def decode_pairs(self, kb: KernelBuilder, raw: ir.Value) -> list[ir.Value]:
        """Packed FP4, ``16 q`` bytes -> ``2 q`` f32 vectors, in the order
        :meth:`in_order` puts back into columns: with AVX-512, for each 16
        bytes (32 codes) the even columns (low nibbles), then the odd ones
        (high); without, :meth:`_bf16_pairs`."""
        if self.shuf16:
            out = []
            for i in range(0, ir.VectorType(raw.type).shape[0], 16):
                out += self._bf16_pairs(kb, kb.slice(raw, i, 16))
            return out
        v16i = kb.vec(LANES, kb.i32)
        four = kb.const(4, v16i)
        out = []
        for i in range(0, ir.VectorType(raw.type).shape[0], LANES):
            idx = kb.extui(kb.slice(raw, i, LANES), v16i)
            out += [self.lookup16(kb, idx), self.lookup16(kb, kb.shrui(idx, four))]
        return out

    def _bf16_pairs(self, kb: KernelBuilder, b: ir.Value) -> list[ir.Value]:
        """16 bytes of packed FP4 (32 codes) -> 2 f32 vectors, integer pipes only.

        The f32 bits of every E2M1 value are its bf16 bits over 16 zero bits,
        so two ``vpshufb`` (the bf16 high and low byte of each code, sign
        included), in-lane byte interleaves (``vpunpck{l,h}bw``) into bf16
        words, and per dword a shift (the even word) and a mask (the odd one)
        build the exact f32 values: no ``vcvtph2ps``,
        which issues at one per ~1.4 cycles on Zen 3 (bench/results/
        avx2-zen3-2026-12-02.md).  The low nibbles (even columns) fill the
        low 128-bit lane, the high nibbles (odd columns) the high one, so
        vector ``v`` holds columns ``16 v + PAIR_ORDER`` (:meth:`in_order`).
        """
        v32 = kb.vec(32, kb.i8)
        # [even columns | odd columns]: the 16 bytes in both 128-bit lanes (a
        # load feeding this splat becomes one vbroadcasti128, no shuffle), the
        # high lane's dwords shifted right by 4 (vpsrlvd), then one mask.
        both = kb.vbitcast(kb.shuffle(b, b, list(range(16)) * 2), 8, kb.i32)
        shift = kb.const_array([0] * 4 + [4] * 4, kb.vec(8, kb.i32))
        codes = kb.andi(kb.vbitcast(kb.shrui(both, shift), 32, kb.i8), kb.const(0x0F, v32))
        hi_t, lo_t = self._bf16_bytes()
        pshufb = "llvm.x86.avx2.pshuf.b"
        high = kb.intrinsic(pshufb, v32, [kb.const_array(hi_t * 2, v32), codes])
        low = kb.intrinsic(pshufb, v32, [kb.const_array(lo_t * 2, v32), codes])
        v8 = kb.vec(8, kb.i32)
        out = []
        for half in (0, 8):  # bytes 0-7 / 8-15 of each lane: vpunpck{l,h}bw
            words = kb.shuffle(
                low,
                high,
                [
                    j
                    for lane in (0, 16)
                    for i in range(half, half + 8)
                    for j in (lane + i, 32 + lane + i)
                ],
            )
            w = kb.vbitcast(words, 8, kb.i32)
            # Each dword holds two bf16 words: the even one shifted up, the
            # odd one masked in place, are f32 (vpslld, and the mask as a
            # vpblendw with zero: no interleave).
            even = kb.shli(w, kb.const(16, v8))
            odd = kb.andi(w, kb.const(-65536, v8))
            both = kb.shuffle(even, odd, list(range(16)))
            out.append(kb.bitcast(both, kb.vec(LANES, kb.f32)))
        return out

    def _bf16_bytes(self) -> tuple[list[int], list[int]]:
        """The high and low byte of the bf16 encoding of each of the 16 FP4
        values (as signed bytes); checked: the f32 bits are the bf16 bits
        over 16 zero bits."""
        bits = np.array(self.table_values(), np.float32).view(np.uint32)
        if np.any(bits & 0xFFFF) or len(bits) != 16:
            raise AssertionError(f"{self.fmt.name}: a value is not exact in bf16")
        signed = lambda x: int(x) - (256 if x >= 128 else 0)  # noqa: E731
        return [signed(b >> 24) for b in bits], [signed((b >> 16) & 0xFF) for b in bits]

    def in_order(self, kb: KernelBuilder, vecs: list[ir.Value]) -> list[ir.Value]:
        """:meth:`decode_pairs`' vectors (or partial sums in their order) -> columns in order."""
        if not self.shuf16:
            return interleave_pairs(kb, vecs)
        return [kb.shuffle(v, v, PAIR_INVERSE) for v in vecs]

    def table_values(self) -> list[float]:
        """The value of every code (``2^bits`` entries), as :meth:`decode` gives."""
        codes = np.arange(self.fmt.num_codes, dtype=np.uint8 if not self.fmt.is_int else np.int8)
        return [float(v) for v in decode_elements(codes.view(self.fmt.dtype), self.fmt.name)]

    # -- the VBMI table path ---------------------------------------------------

    def bf16_tables(self) -> tuple[list[int], list[int]]:
        """High and low bytes of bf16(value) for codes 0..127 (sign excluded)."""
        f = self.fmt
        codes = np.arange(128, dtype=np.uint8)
        if f.is_sub_byte:  # the whole code fits in 7 bits: the table covers the sign
            codes = np.where(codes < f.num_codes, codes, 0).astype(np.uint8)
        vals = decode_elements(codes.view(f.dtype), f.name)
        import ml_dtypes  # on first use: its import costs 0.8-1 s

        bits = vals.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
        if not np.array_equal(
            bits.view(ml_dtypes.bfloat16).astype(np.float64), vals, equal_nan=True
        ):
            raise AssertionError(f"{f.name}: a value is not exact in bf16")
        return [int(b) >> 8 for b in bits], [int(b) & 0xFF for b in bits]

    def _table_decode(self, kb: KernelBuilder, codes: ir.Value, ordered=True) -> list[ir.Value]:
        """64 codes -> 4 x 16 f32 (columns in order), ~14 instructions.

        ``vpermb`` (a static ``vector.shuffle``) reorders the codes so that
        the in-lane byte interleaves (``vpunpck{l,h}bw``) of the looked-up
        (low, high) bf16 bytes, split into even and odd words by a shift and
        a mask, come out as columns 0-15, 16-31, 32-47, 48-63
        (``ordered=False``: no reorder, the lanes of ``lane_table.LaneTable``).
        """
        hi_t, lo_t = self.bf16_tables()
        v64 = kb.vec(64, kb.i8)
        b = kb.shuffle(codes, codes, _TABLE_PERM) if ordered else codes
        if self.fmt.num_codes <= 64:  # FP6/FP4: one 64-entry table each (vpermb)
            name = "llvm.x86.avx512.permvar.qi.512"
            hi = kb.intrinsic(name, v64, [kb.const_array(hi_t[:64], v64), b])
            lo = kb.intrinsic(name, v64, [kb.const_array(lo_t[:64], v64), b])
        else:  # 128 magnitudes: two tables each (vpermi2b)
            tables = [kb.const_array(t[i : i + 64], v64) for t in (hi_t, lo_t) for i in (0, 64)]
            name = "llvm.x86.avx512.vpermi2var.qi.512"
            hi = kb.intrinsic(name, v64, [tables[0], b, tables[1]])
            lo = kb.intrinsic(name, v64, [tables[2], b, tables[3]])
        if not self.fmt.is_sub_byte:  # bit 7 is the sign: or it into the high byte
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
    values16 = fmt.widening == "values" and has_features("avx512f")
    shuf16 = fmt.widening == "values" and not values16 and has_features("avx2", "f16c")
    return Decoder(
        fmt,
        table=bool(vbmi) and not fmt.is_int,
        values16=values16,
        shuf16=shuf16,
        word_nan=not has_features("avx512f"),
    )


#: Columns of the 16 lanes of a :meth:`Decoder.decode_pairs` vector without
#: AVX-512 (``Decoder._bf16_pairs``): lanes ``8 o + 4 e + d`` hold column
#: ``4 d + 2 o + e`` (``e``: the code's nibble, low or high; ``o``: the even
#: or odd bf16 word of each dword).
PAIR_ORDER = [4 * d + 2 * o + e for o in range(2) for e in range(2) for d in range(4)]
#: The lane holding each column: :meth:`Decoder.in_order`'s shuffle.
PAIR_INVERSE = [PAIR_ORDER.index(c) for c in range(16)]


def decode_scales(kb: KernelBuilder, codes: ir.Value, scale_type: str = SCALE_TYPE) -> ir.Value:
    """Scale codes (``vector<n x i8>``) -> ``vector<n x f32>``, exactly: E8M0
    (:func:`mlir_mx.kernels.common.codec.e8m0_to_f32`), or E4M3 (NVFP4's block
    scales, ``Problem.b_scale_type``: the E4M3 element widening, NaN codes to NaN)."""
    if scale_type == SCALE_TYPE:
        return e8m0_to_f32(kb, codes)
    return widen(kb, codes, ELEMENT_FORMATS[scale_type])


def decode_scale_tile(kb: KernelBuilder, codes: ir.Value, scale_type: str) -> list[ir.Value]:
    """``n`` scale codes (``vector<n x i8>``, n a multiple of 16) -> ``n / 16``
    vectors of 16 f32, columns in order, exactly as :func:`decode_scales`.

    E4M3 scales with AVX512-VBMI take the element table path 64 at a time
    (:meth:`Decoder._table_decode`: about 14 instructions per 64 codes, NaN
    codes to NaN from the table, no ``2^8`` multiply) instead of the f16 path
    (8-9 instructions per 16: the NaN test and the multiply among them).  A
    decode kernel's block of 16 widens 64 of them per tile and block, which
    made NVFP4's block step 18 instructions longer than MXFP4's with blocks
    of 16 (``bench/probes/kernel_asm.py``)."""
    n = ir.VectorType(codes.type).shape[0]
    if scale_type != SCALE_TYPE and n % 64 == 0:
        dec = decoder(scale_type)
        if dec.table:
            return [w for i in range(0, n, 64) for w in dec.decode(kb, kb.slice(codes, i, 64))]
    return [decode_scales(kb, kb.slice(codes, i, LANES), scale_type) for i in range(0, n, LANES)]


def interleave_pairs(kb: KernelBuilder, vecs: list[ir.Value]) -> list[ir.Value]:
    """(even, odd) column vectors of each 32 columns -> the two vectors in column order."""
    out = []
    for q in range(0, len(vecs), 2):
        even, odd = vecs[q], vecs[q + 1]
        out.append(kb.shuffle(even, odd, [j for i in range(8) for j in (i, 16 + i)]))
        out.append(kb.shuffle(even, odd, [j for i in range(8, 16) for j in (i, 16 + i)]))
    return out
