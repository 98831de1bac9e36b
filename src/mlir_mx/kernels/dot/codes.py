"""B straight from its codes: the dot kernels without VNNI records.

``mx-matmul-kernels`` (the Runner) hands the kernels B as row-major codes
(FP4/FP6 packed or not) and E8M0 scales, not as the records ``Linear``
makes once (:mod:`.units`).  The dot schedule then expands each chunk
of B into full records in its scratch, per call, and runs the same
microkernel on them (:mod:`.dot`)::

    for each block of the chunk:
      for each K group g (4 rows for i8, 2 for i16/bf16):
        rows = the g rows' 64 codes of the panel, as dot-unit values
        scratch[g, v] = the rows interleaved (K innermost), v = 0..3
      scratch header = the scales as f32 (times 2^-(fa+fb))

or, at decode (one row of A: nothing to share), builds the same vectors
in registers inside the microkernel (:meth:`CodesSource.block`).

Values (i8: the bytes ``b + 128``): FP4 by a ``vpshufb`` table of doubled
values, INT8 codes with their top bit flipped,
E2M3 by a 64-entry ``vpermb`` table (AVX512-VBMI); bf16 pairs of FP4/FP6
by one ``vpermi2b`` over their bf16 bytes (AVX512-VBMI,
:meth:`CodesSource._bf16_pairs`), of a tiled FP4 B by ``vpshufb`` tables
and in-lane interleaves (:meth:`CodesSource._bf16_fp4_pairs`); everything else by the
exact f32 widening of :mod:`.widen` and a conversion (integers
``value * 2^f``, or the bf16 half of the f32).  The interleaves are static
``vector.shuffle`` ops (LLVM picks ``vpermt2b``/``vpunpck``).  Every step is
exact, so the records equal :func:`~.units.pack_records`'s (expanded),
and the results equal the f32 kernels' bit for bit.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.host import has_features
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.problem import CodeRows
from mlir_mx.kernels.common.widen import LANES, decode_scale_tile, decoder, interleave_pairs
from mlir_mx.kernels.dot import tiles
from mlir_mx.kernels.dot.isa import DotOps
from mlir_mx.kernels.dot.prescale import both_ways, exponent_adds, has_specials, prescale
from mlir_mx.kernels.dot.units import PANEL, int_factor, offset_bytes, value_table
from mlir_mx.numerics import ELEMENT_FORMATS

__all__ = ["CodesSource", "EVEN_ODD", "even_odd", "in_order"]

#: The panel's columns in the order :meth:`CodesSource.block` gives packed
#: FP4 at decode: vector 0 the even columns 0..30, 1 the even 32..62, 2 the
#: odd 1..31, 3 the odd 33..63 (the nibbles of a byte are columns 2e, 2e + 1).
EVEN_ODD = [2 * e for e in range(32)] + [2 * e + 1 for e in range(32)]


class CodesSource:
    """Expands chunks of B's codes into the full records of a dot kernel."""

    def __init__(self, kb: KernelBuilder, prob, ops, dots: DotOps, full, unscale):
        self.kb, self.prob, self.kind, self.full = kb, prob, dots.kind, full
        self.dots = dots  # the ISA's instructions (the vpshufb table)
        kind = dots.kind
        self.unscale = unscale  # 2^-(fa+fb) for integer kinds (None: bf16)
        tiled = (prob.block, prob.n // PANEL) if prob.b_tiled else None  # bf16 activations
        self.rows = CodeRows(kb, ops.b, prob.b_element, prob.b_packed, tiled)
        self.sb = kb.as_bytes(ops.sb)
        self.dec = decoder(prob.b_element)
        fmt = ELEMENT_FORMATS[prob.b_element]
        self.f = int_factor(prob.b_element)
        self.table = None
        v64 = kb.vec(64, kb.i8)
        if kind.name == "i8" and value_table(fmt.name):  # vpshufb: 16 entries per lane
            table = dots.table_bytes(fmt.name)
            self.table = ("vpshufb", kb.const_array(table, v64))
        elif kind.name == "i8" and not fmt.is_int and has_features("avx512vbmi"):
            table = offset_bytes(fmt.name, 64)
            self.table = ("llvm.x86.avx512.permvar.qi.512", kb.const_array(table, v64))
        self.bf16_bytes = None  # FP4/FP6 -> bf16 pairs by one byte table (_bf16_pairs)
        self.bf16_nibbles = None  # a tiled FP4 B: by vpshufb (_bf16_fp4_pairs)
        if kind.name == "bf16" and fmt.num_codes <= 64 and has_features("avx512vbmi"):
            hi, lo = self.dec.bf16_tables()
            self.bf16_bytes = [kb.const_array(t[:64], v64) for t in (lo, hi)]
            if fmt.num_codes == 16 and prob.b_packed and tiled is not None:
                self.bf16_nibbles = [kb.const_array(t[:16] * 4, v64) for t in (lo, hi)]

    def expand(self, hs, ds, j, c0, nblk: int, prescaled=None) -> None:
        """Full records of blocks ``c0 .. c0 + nblk`` of panel ``j`` into
        the header scratch ``hs`` and the data scratch ``ds``; where
        ``prescaled`` (an ``i1``, bf16 pairs) holds, each value times its
        scale (:mod:`.prescale`: a second copy of the loop, so that the
        other chunks pay nothing for it)."""
        both_ways(self.kb, prescaled, lambda on: self._expand(hs, ds, j, c0, nblk, on))

    def _expand(self, hs, ds, j, c0, nblk: int, scaled: bool) -> None:
        kb, g = self.kb, self.kind.group
        col, valid = self._panel(j)
        specials = has_specials(self.prob.b_element)
        # A tiled B (Linear's): the same rows of the panel EXPAND_AHEAD on, as
        # they are expanded here (tiles.py: the hardware's prefetchers alone
        # left a chunk's streams waiting on memory)
        ahead = tiles.EXPAND_AHEAD if self.rows.tiled is not None else 0
        with kb.loop(0, nblk, 1) as b:
            blk = kb.add(c0, b.iv)
            k0 = kb.mul(blk, self.prob.block)
            scales = self._scales(blk, col, valid, range(4), permuted=False)
            adds = exponent_adds(kb, scales) if scaled else None
            if ahead and tiles.SCALES_AHEAD:  # and the scales' line of that panel
                kb.prefetch(self.sb, [blk, kb.min(kb.add(col, PANEL * ahead), self.prob.n - 1)])
            # One K group per iteration, not the block unrolled: the same
            # records, and LLVM's register coalescing and sinking (superlinear
            # in a block's size) see g rows, not the block's 32 (FP6 without
            # VBMI: 12 s of llc for an int-small kernel, unrolled).
            # (smmla: two K groups, whose words its layout interleaves.)
            step = 2 if self.dots.isa.mmla else 1
            with kb.loop(0, self.prob.block // (g * step), 1) as grp:
                vecs = []
                for h in range(step):
                    kk = kb.mul(kb.add(kb.mul(grp.iv, step), h), g)  # the row in the block
                    if ahead:
                        self.rows.prefetch_ahead(col, (blk, kk), g, ahead)
                    # (blk, kk): a tiled B's address without dividing k by the block
                    vecs.append(self._group(kb.add(k0, kk), col, valid, range(4), (blk, kk)))
                if adds is not None:
                    vecs = [[prescale(kb, w, adds[v], specials) for v, w in enumerate(ws)] for ws in vecs]
                self.dots.store_block(ds, b.iv, kb.mul(grp.iv, 256 * step), vecs)
            for v, sv in enumerate(scales):
                kb.vstore(kb.vbitcast(sv, 64, kb.i8), hs, [b.iv, 64 * v])

    def scale_span(self, j, c0, nblk: int, lo) -> tuple[ir.Value, ir.Value]:
        """The smallest and largest scale code of blocks ``c0 .. c0 + nblk``
        of panel ``j`` (``i8`` scalars; columns past N count as ``lo``)."""
        kb = self.kb
        col, valid = self._panel(j)
        v64 = kb.vec(PANEL, kb.i8)
        pad = None if valid is None else (kb.mask(PANEL, valid), kb.broadcast(lo, PANEL))
        start = [kb.const(255, v64), kb.const(0, v64)]
        with kb.loop(0, nblk, 1, start) as b:
            raw = kb.load_lanes(self.sb, [kb.add(c0, b.iv), col], PANEL, valid)
            if pad is not None:
                raw = kb.select(pad[0], raw, pad[1])
            b.yield_([kb.minui(b.args[0], raw), kb.maxui(b.args[1], raw)])
        return kb.reduce("minui", b.results[0]), kb.reduce("maxui", b.results[1])

    def _panel(self, j):
        """Panel ``j``'s first column and its valid columns (None: all 64)."""
        kb, prob = self.kb, self.prob
        col = kb.mul(j, PANEL)
        valid = None
        if prob.n % PANEL:
            valid = kb.max(kb.min(PANEL, kb.sub(prob.n, col)), 0)
        return col, valid

    def _scales(self, blk, col, valid, vs, permuted: bool) -> list[ir.Value]:
        """B's scales of block ``blk`` for the vectors ``vs``, as f32 times ``2^-(fa+fb)``."""
        kb = self.kb
        raw = kb.load_lanes(self.sb, [blk, col], PANEL, valid)
        if permuted:
            raw = kb.shuffle(raw, raw, EVEN_ODD)
        scales = []
        tile = decode_scale_tile(kb, raw, self.prob.b_scale_type)  # E4M3: 64 at once
        for v in vs:
            scale = tile[v]
            if self.unscale is not None:  # exact: sb * 2^-(fa+fb) >= 2^-139
                scale = kb.fmul(scale, self.unscale)
            scales.append(scale)
        return scales

    def permutes(self, vs) -> bool:
        """Whether :meth:`block` gives ``vs`` with the panel's columns permuted
        (:data:`EVEN_ODD`): packed FP4 under i8, all four vectors."""
        pairs = self.kind.name == "i8" and value_table(self.prob.b_element) and self.prob.b_packed
        return pairs and list(vs) == [0, 1, 2, 3]

    def block(self, j, blk, vs) -> tuple[list[ir.Value], list[list[ir.Value]]]:
        """Block ``blk`` of panel ``j``: B's scales (f32, times ``2^-(fa+fb)``)
        and, per K group, the vectors ``vs`` (64 bytes each); in the
        :data:`EVEN_ODD` column order when :meth:`permutes` (the caller then
        keeps its partials and C in that order)."""
        kb, prob, g = self.kb, self.prob, self.kind.group
        col, valid = self._panel(j)
        k0 = kb.mul(blk, prob.block)
        permuted = self.permutes(vs)
        vecs = []
        for grp in range(prob.block // g):
            if permuted:
                vecs.append(self._fp4_quads(kb.add(k0, grp * g), col, valid))
                continue
            vecs.append(self._group(kb.add(k0, grp * g), col, valid, vs))
        return self._scales(blk, col, valid, vs, permuted), vecs

    def quads(self, k, col, valid) -> list[ir.Value]:
        """The 4 vectors of the K group at row ``k`` (all 64 columns from
        ``col``), in :data:`EVEN_ODD` order when :meth:`permutes`."""
        if self.permutes(range(4)):
            return self._fp4_quads(k, col, valid)
        return self._group(k, col, valid, range(4))

    def _group(self, k, col, valid, vs, split=None) -> list[ir.Value]:
        """The vectors ``vs`` of the K group at row ``k`` (columns from
        ``col``); ``split``: ``(blk, kk)``, row ``k`` as block and row in it
        (:meth:`CodeRows.address`)."""
        kb = self.kb
        if self.bf16_nibbles is not None and split is not None and list(vs) == [0, 1, 2, 3]:
            return self._bf16_fp4_pairs(col, split)
        at = (
            [None] * self.kind.group
            if split is None
            else [(split[0], kb.add(split[1], i)) for i in range(self.kind.group)]
        )
        if self.bf16_bytes is not None:
            return self._bf16_pairs(k, col, valid, vs, at)
        rows = [self.values(kb.add(k, i), col, valid, at[i]) for i in range(self.kind.group)]
        return [self.interleave(rows, v) for v in vs]

    def _bf16_pairs(self, k, col, valid, vs, at) -> list[ir.Value]:
        """Rows ``k``, ``k + 1`` of FP4/FP6 codes -> :meth:`interleave`'s
        swapped bf16 pairs, one table lookup per vector (AVX512-VBMI): per
        column the bytes ``(c[k+1], c[k+1], c[k], c[k])`` (one ``vpermt2b``),
        each high byte's index offset by 64 (``vpord``), then ``vpermi2b``
        over the codes' 64 low and 64 high bf16 bytes (every FP4/FP6 value
        is exact in bf16): 3 instructions a vector, where widening to f32
        and narrowing back took about 20."""
        kb = self.kb
        v64 = kb.vec(64, kb.i8)
        nxt, cur = (self.rows.load(kb.add(k, i), col, 64, valid, at[i]) for i in (1, 0))
        high = kb.const_array([0, 64] * 32, v64)
        out = []
        for v in vs:
            idx = [x for c in range(LANES * v, LANES * (v + 1)) for x in (c, c, 64 + c, 64 + c)]
            pairs = kb.ori(kb.shuffle(nxt, cur, idx), high)
            name = "llvm.x86.avx512.vpermi2var.qi.512"
            out.append(kb.intrinsic(name, v64, [self.bf16_bytes[0], pairs, self.bf16_bytes[1]]))
        return out

    def _bf16_fp4_pairs(self, col, split) -> list[ir.Value]:
        """Rows ``kk``, ``kk + 1`` (``split``, ``kk`` even) of a tiled FP4 B
        -> :meth:`_bf16_pairs`' 4 vectors with in-lane steps: the two rows are
        one 64-byte line of the tile (32 bytes each); its low and high
        nibbles (even and odd columns) through two ``vpshufb`` tables each
        (the bf16 value's low and high byte), ``vpunpck{l,h}bw`` of each
        pair into bf16 words, then per vector one ``vpermt2w`` placing
        ``(bf16(b[kk+1][c]), bf16(b[kk][c]))`` in dword ``c``: 4 cross-lane
        permutes per 128 weights where :meth:`_bf16_pairs` has 10."""
        kb = self.kb
        v64 = kb.vec(64, kb.i8)
        z = self.rows.raw(None, col, 64, split)  # row kk: bytes 0..31, kk + 1: 32..63
        nibbles = (kb.andi(z, kb.const(0x0F, v64)), kb.shrui(z, kb.const(4, v64)))
        words = []  # [even columns (lo nibbles), odd] x [bytes 0..7 of each lane, 8..15]
        for nib in nibbles:
            low, high = (self.dots.lookup(t, nib) for t in self.bf16_nibbles)
            for h in (0, 8):
                mask = [
                    x
                    for ln in range(4)
                    for j in range(h, h + 8)
                    for x in (16 * ln + j, 64 + 16 * ln + j)
                ]
                words.append(kb.vbitcast(kb.shuffle(low, high, mask), 32, kb.i16))
        out = []
        for v in range(4):  # columns 16v ..: bytes 8v .. 8v + 7 of each row
            even, odd = words[v % 2], words[2 + v % 2]
            lane = 8 * (v // 2)  # row kk's words in lane v // 2, row kk + 1's two lanes on
            mask = [32 * p + w + t for t in range(8) for p in (0, 1) for w in (16 + lane, lane)]
            out.append(kb.vbitcast(kb.shuffle(even, odd, mask), 64, kb.i8))
        return out

    def _fp4_quads(self, k, col, valid) -> list[ir.Value]:
        """Rows ``k .. k + 4`` of packed FP4 -> the 4 quad vectors, columns in
        :data:`EVEN_ODD` order: two rows per register, the low nibbles
        (even columns) and high nibbles (odd ones) split, one ``vpermt2b``
        per vector (no interleave of the nibbles), one ``vpshufb``."""
        kb = self.kb
        bvalid = None if valid is None else kb.ceildivu(valid, 2)
        raws = [
            kb.load_lanes(self.rows.mem, self.rows.address(kb.add(k, i), col), 32, bvalid)
            for i in range(4)
        ]
        v64 = kb.vec(64, kb.i8)
        pairs = [kb.shuffle(raws[i], raws[i + 1], list(range(64))) for i in (0, 2)]
        lows = [kb.andi(z, kb.const(0x0F, v64)) for z in pairs]
        highs = [kb.shrui(z, kb.const(4, v64)) for z in pairs]
        out = []
        for nib in (lows, highs):
            for h in range(2):  # byte e of a nibble vector is column 2e (+1): e = 16h + i
                idx = [x for e in range(16 * h, 16 * h + 16) for x in (e, 32 + e, 64 + e, 96 + e)]
                codes = kb.shuffle(nib[0], nib[1], idx)
                out.append(self._lookup(codes))
        return out

    def _lookup(self, codes: ir.Value) -> ir.Value:
        """64 codes through the table: ``vpshufb`` (:class:`~.isa.DotOps`) or ``vpermb``."""
        name, table = self.table
        if name == "vpshufb":
            return self.dots.lookup(table, codes)
        return self.kb.intrinsic(name, codes.type, [table, codes])

    def values(self, k, col, valid, split=None) -> ir.Value:
        """Row ``k``'s 64 codes from column ``col`` as dot-unit values:
        ``vector<64xi8>`` (i8) or ``vector<64xi16>`` (i16: integers, bf16: bits)."""
        kb = self.kb
        codes = self.rows.load(k, col, 64, valid, split)
        if self.kind.name == "i8" and ELEMENT_FORMATS[self.prob.b_element].is_int:
            return kb.xori(codes, kb.const(0x80, codes.type))  # b + 128
        if self.table is not None:
            return self._lookup(codes)
        v16i = kb.vec(LANES, kb.i32)
        parts = []
        for x in self.dec.decode(kb, codes):  # exact f32 values, 16 columns each
            if self.kind.name == "bf16":
                bits = kb.shrui(kb.bitcast(x, v16i), kb.const(16, v16i))
            else:
                bits = kb.fptosi(kb.fmul(x, kb.const(2.0**self.f, x.type)), v16i)
            if self.kind.name == "i8":  # b + 128 as a byte
                b8 = kb.trunci(bits, kb.vec(LANES, kb.i8))
                parts.append(kb.xori(b8, kb.const(0x80, b8.type)))
            else:
                parts.append(kb.trunci(bits, kb.vec(LANES, kb.i16)))
        lo = kb.shuffle(parts[0], parts[1], list(range(32)))
        hi = kb.shuffle(parts[2], parts[3], list(range(32)))
        return kb.shuffle(lo, hi, list(range(64)))

    def interleave(self, rows: list[ir.Value], v: int) -> ir.Value:
        """Columns ``16v .. 16v + 16`` of the group's rows, K innermost, as 64 bytes."""
        kb = self.kb
        cols = range(LANES * v, LANES * (v + 1))
        if self.kind.group == 2:  # 16-bit pairs; bf16 swapped (element 2i in the odd slot)
            first, second = (1, 0) if self.kind.name == "bf16" else (0, 1)
            mask = [x for c in cols for x in (64 * first + c, 64 * second + c)]
            return kb.vbitcast(kb.shuffle(rows[0], rows[1], mask), 64, kb.i8)
        pair = [x for c in cols for x in (c, 64 + c)]
        a = kb.shuffle(rows[0], rows[1], pair)
        b = kb.shuffle(rows[2], rows[3], pair)
        return kb.shuffle(
            a, b, [x for i in range(16) for x in (2 * i, 2 * i + 1, 32 + 2 * i, 33 + 2 * i)]
        )


def even_odd(kb: KernelBuilder, vecs: list[ir.Value]) -> list[ir.Value]:
    """4 vectors of 16 consecutive columns -> :data:`EVEN_ODD` order."""
    even = [2 * i for i in range(16)]
    odd = [2 * i + 1 for i in range(16)]
    return [
        kb.shuffle(vecs[0], vecs[1], even),
        kb.shuffle(vecs[2], vecs[3], even),
        kb.shuffle(vecs[0], vecs[1], odd),
        kb.shuffle(vecs[2], vecs[3], odd),
    ]


def in_order(kb: KernelBuilder, vecs: list[ir.Value]) -> list[ir.Value]:
    """Inverse of :func:`even_odd`."""
    return interleave_pairs(kb, [vecs[0], vecs[2], vecs[1], vecs[3]])
