"""The dot kernels: MX block partials on the CPU's dot units, same bits as f32.

B is read from VNNI records (:mod:`.units`, ``Problem.b_dot``: what
``mlir_mx.Linear`` stores) or from its codes and scales (the Runner's ABI:
chunks expanded per call by :mod:`.codes`, decode swept 8 rows at a time by
:mod:`.sweep`), A from the words :mod:`.prep` builds once per call.  One schedule serves the three shape classes through its
:class:`DotConfig`::

    parallel over column panels (64 columns; a contiguous range per thread)
      for each K chunk of kcb blocks:        (codes: chunks outer, panels inner)
        [expand the chunk's scales (and FP4 data, or all from codes) into a scratch]
        for each column sub-tile (16 nv columns) of the panel:
          for each group of mr rows, then the rest in 3, 2, 1:   # (row_tiles)
            c = C[rows, cols]                          # mr x nv registers
            for kb in the chunk:
              acc = A's compensation (i8) | 0 | BIAS  # mr x nv registers (.biased)
              for each K group g of the block:          # 8 quads / 16 pairs
                acc = dot(acc, broadcast(A word), B vector)
              t = float(acc) * (sb * 2^-(fa+fb))       # bf16: acc * sb
              c = fma(t, sa, c)                        # bf16 activations: c + t
              # lifted (.biased): c = fma(f32(bits(acc)) - 3 sa, sb 2^(22-fa-fb), c)
            C[rows, cols] = c                          # NVFP4's last: c / g (.store)

Per output element this is the blocked order of ``docs/numerics.md`` with
the block step ``t = p * sb; c = fma(t, sa, c)``: the integer partial is
exact, and the bf16 one is the in-order FMA chain (swapped pairs), so the
results are the f32 kernels' bit for bit at every shape, tile and thread
count.  decode (M = 1): mr = 1, nv = 4, the whole K in one chunk (B streams
once, panel after panel); small: a few rows (4; bf16: 7), chunks that
stay in L1; prefill: a register tile of 6 x 2 vectors (bf16: 7 x 2) over
chunks that stay in L2.  The rows of M past the last full tile take tiles
of fewer rows (:data:`~.tiles.TAIL_ROWS`), so no tile computes a row past M.
Instructions come from :mod:`mlir_mx.host` at emission (:mod:`.isa`):
``vpdpbusd``/``vpdpwssd`` with AVX512-VNNI, else ``vpmaddubsw``+``vpmaddwd`` /
``vpmaddwd`` (AVX512BW, :func:`~.units.dot_kind` only picks ``i8`` then
when no pair sum can saturate), ``vdpbf16ps`` with AVX512_BF16; without
AVX-512 the same steps on two 256-bit halves (AVX-VNNI or AVX2, at most
:data:`~.tiles.HALF_ROWS` rows per tile, :meth:`DotConfig.adapt`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from mlir import ir

from mlir_mx.host import software_prefetch
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.problem import BF16, Operands, Problem
from mlir_mx.kernels.common.widen import LANES, decode_scale_tile, decode_scales
from mlir_mx.kernels.dot.biased import (
    BIAS,
    LIFT_SHIFT,
    biased,
    block_partial,
    chunk_blocks,
    lifted,
    lifted_start,
    lifted_step,
    offsets,
    start_value,
)
from mlir_mx.kernels.dot.codes import CodesSource, even_odd, in_order
from mlir_mx.kernels.dot.expand import column_sums, expand_records
from mlir_mx.kernels.dot.isa import DotOps, dot_isa, mmla_block, neon_tile, routed
from mlir_mx.kernels.dot.prep import prepare_dot_a
from mlir_mx.kernels.dot.prescale import both_ways, call_bounds, chunk_prescaled
from mlir_mx.kernels.dot.store import store_tile
from mlir_mx.kernels.dot.sweep import sweep_decode
from mlir_mx.kernels.dot.tiles import (
    DECODE_PREFETCH,
    DECODE_STREAMS,
    HALF_ROWS,
    HALF_ROWS_VNNI,
    ONE_ROW_KCB,
    TAIL_ROWS,
    row_tiles,
)
from mlir_mx.kernels.dot.units import PANEL, RecordLayout, a_offset_run, dot_kind, int_factor
from mlir_mx.numerics.formats import SCALE_TYPE

__all__ = ["DotConfig", "emit_dot", "supports_int", "supports_bf16"]


@dataclass(frozen=True)
class DotConfig:
    """Tile parameters of the dot schedule."""

    mr: int = 1  # rows of A per register group
    nv: int = 4  # vectors of 16 columns per register tile (1, 2 or 4)
    kcb: int = 0  # blocks per K chunk (0: all of K)
    expand: bool = False  # expand each chunk's records into a scratch (several row groups)
    threads: int = 1
    #: Decode from records: panels a thread reads side by side, block by
    #: block (:meth:`_Dot._side_by_side`), and the software prefetch distance in
    #: records of each panel's run (0: none).  :meth:`adapt` sets both.
    streams: int = 1
    prefetch: int = 0
    ahead: int = 0  # decode from codes: prefetch rows this many sweeps ahead (sweep.py; registry)

    def adapt(self, prob: Problem) -> DotConfig:
        """This config for ``prob`` on this CPU: on 256-bit halves (no AVX-512,
        :mod:`.isa`) at most :data:`HALF_ROWS` rows (:data:`HALF_ROWS_VNNI`
        with AVX-VNNI), so that the 2 x mr x nv ymm accumulators and B's
        vectors (nearly) fit the 16 ymm registers, and one row of 32 columns
        where B can be the multiply's memory operand (:data:`ONE_ROW_KCB`);
        unchanged on AVX-512."""
        kind = _kind(prob)
        if kind is None:
            return self
        isa = dot_isa(kind, prob.a_element or prob.a_quant, prob.b_element, self.expand)
        if isa.wide and prob.b_dot is not None and self.mr == 1 and not self.expand:
            if software_prefetch():
                return replace(self, streams=DECODE_STREAMS, prefetch=DECODE_PREFETCH)
            return self
        if isa.neon:  # 32 q registers (isa.neon_tile)
            return replace(self, **neon_tile(self.mr, self.nv, isa.mmla))
        rows = HALF_ROWS_VNNI if isa.vnni else HALF_ROWS
        if self.expand and not isa.wide and not isa.vnni:
            if kind.name == "i16" or _a_offset(prob, self, isa):
                return replace(self, mr=1, nv=2, kcb=ONE_ROW_KCB)
        if isa.wide:  # NVFP4's biased step: chunks of as many K values as MXFP4's
            return replace(self, kcb=chunk_blocks(prob, kind, self.kcb, self.expand))
        return self if self.mr <= rows else replace(self, mr=rows)


def _kind(prob: Problem):
    """The dot unit of the problem's pair on this CPU (None: f32 kernels)."""
    return dot_kind(prob.a_element or prob.a_quant, prob.b_element, prob.block)


def _supports(prob: Problem, bf16: bool) -> bool:
    """B as dot records of the unit this CPU uses for the pair, or as
    row-major codes (expanded per call, :mod:`.codes`)."""
    kind = _kind(prob)
    if kind is None or prob.block % LANES or (kind.name == "bf16") != bf16:
        return False
    codes = prob.b_dot is None and (not prob.b_tiled or prob.a_quant == BF16)
    return prob.b_dot == kind.name or codes


def supports_int(prob: Problem) -> bool:
    """An integer pair (FP4/FP6/INT8 x FP4/FP6/INT8) on VNNI or AVX512BW."""
    return _supports(prob, bf16=False)


def supports_bf16(prob: Problem) -> bool:
    """A pair with an FP8 operand on AVX512_BF16."""
    return _supports(prob, bf16=True)


def emit_dot(kb: KernelBuilder, prob: Problem, ops: Operands, cfg: DotConfig) -> None:
    """Emit the dot kernel at the current insertion point."""
    kind = _kind(prob)
    if cfg.nv not in (1, 2, 4) or kind is None:
        raise ValueError("dot kernel: needs a pair with a dot unit here and nv in (1, 2, 4)")
    isa = dot_isa(kind, prob.a_element or prob.a_quant, prob.b_element, cfg.expand)
    offset = _a_offset(prob, cfg, isa) > 0  # A's words a + 128
    lift = lifted(prob, kind, isa, cfg.expand)  # .biased: A's scale in the start
    bias = 0 if lift else biased(prob, kind)  # the accumulators' start: 0 or .biased.BIAS
    compensate = not (isa.sign or offset)
    pa = prepare_dot_a(kb, prob, ops, kind, cfg.mr, compensate, offset, bias=bias, lift=lift)
    k = _Dot(kb, prob, ops, cfg, pa)
    run = k.panels
    if k.codes is not None and prob.m == 1 and cfg.mr == 1 and not cfg.expand:
        run = lambda lo, hi: sweep_decode(k, lo, hi)  # noqa: E731 - decode from codes
    run = routed(kb, pa.tiny, run, k.rare(k.units.take_fma_form))  # bf16 near 0: FMA form
    run = routed(kb, pa.huge, run, k.rare(k.take_unlifted_form))  # an A scale 2^127: not lifted
    panels = -(-prob.n // PANEL)
    per = -(-panels // max(1, cfg.threads))
    tasks = -(-panels // per)
    if tasks > 1:
        with kb.parallel(0, tasks, 1) as t:
            lo = kb.mul(t, per)
            run(lo, kb.min(kb.add(lo, per), panels))
    else:
        run(kb.idx(0), kb.idx(panels))
    for buf in (pa.words, pa.scales, pa.comp, pa.tiny, pa.span):
        if buf is not None:
            kb.dealloc(buf)


def _a_offset(prob: Problem, cfg: DotConfig, isa) -> int:
    """The A-offset mode of :mod:`.isa` (its run of K groups; 0: not taken):
    where the kernel expands B's chunks (several row groups share them, so
    B's sums cost once per chunk) and the pair fits
    (:func:`~.units.a_offset_run`: FP4 B with an 8-bit A, E2M3 B), on
    256-bit halves without VNNI (:data:`ONE_ROW_KCB`)."""
    a_element = prob.a_element or prob.a_quant
    if not cfg.expand or isa.wide or isa.vnni or _kind(prob).name != "i8":
        return 0
    return a_offset_run(a_element, prob.b_element, prob.block)


class _Dot:
    def __init__(self, kb: KernelBuilder, prob: Problem, ops: Operands, cfg: DotConfig, pa):
        self.kb, self.prob, self.ops, self.cfg, self.pa = kb, prob, ops, cfg, pa
        self.kind = _kind(prob)
        self.biased = self.bias = biased(prob, self.kind) != 0  # t in one FMA (.biased)
        isa = dot_isa(self.kind, prob.a_element or prob.a_quant, prob.b_element, cfg.expand)
        self.a_offset = _a_offset(prob, cfg, isa)
        a_fmt = prob.a_element or prob.a_quant
        args = (self.a_offset, cfg.expand)
        self.units = DotOps(self.kind, isa, a_fmt, prob.b_element, kb, *args)
        self.stored = RecordLayout(self.kind, prob.b_element, prob.block)
        self.full = RecordLayout(self.kind, prob.b_element, prob.block, full=True)
        self.unscale, self.lift = None, False  # 2^-(fa+fb), int kinds (lifted: .biased)
        if self.kind.name != "bf16":
            self.fab = int_factor(a_fmt) + int_factor(prob.b_element)
            self.take_unlifted_form(False)
        self.codes = None  # B as codes: chunks expanded per call into full records
        if prob.b_dot is None:
            self.codes = CodesSource(kb, prob, ops, self.units, self.full, self.unscale)
        else:
            self.rec = kb.as_bytes(ops.b)
        # From codes, chunks of 4 blocks (10 KiB of scratch) stay in L1.
        self.kcb = min(cfg.kcb or (1 if self.codes else prob.kblocks), prob.kblocks)
        if self.stored.nibbles:  # FP4 code -> doubled value (+ 128), per 128-bit lane
            self.table = kb.const_array(self.units.table_bytes(prob.b_element), kb.vec(64, kb.i8))
        # M not a multiple of mr: tiles of fewer rows after the full ones (tiles.py)
        self.row_tail = cfg.mr > 1 and (prob.m is None or prob.m % cfg.mr != 0)
        self.tails = TAIL_ROWS  # (rare: 1-row tails in a routed form's copy)
        self.col_tail = prob.n % PANEL != 0
        # bf16 A, E8M0 B from codes: chunks prescaled where A allows (.prescale)
        self.prescaled = False  # the block step being emitted: c + acc
        self.bounds = call_bounds(kb, prob, pa, self.codes is not None and cfg.expand, isa)

    def rare(self, form):
        """``form`` (a routed form's switch, :func:`~.isa.routed`) that also
        gives the form's copy of the kernel 1-row tail tiles: those calls are
        rare (a bf16 A near the denormals, an A scale of 2^127), and the 3-
        and 2-row tails' microkernels in both copies took a fifth of a bf16
        kernel's compile time."""

        def switch(on: bool) -> None:
            form(on)
            self.tails = (1,) if on else TAIL_ROWS

        return switch

    def take_unlifted_form(self, on: bool) -> None:
        """A lifted kernel's form (:func:`~.isa.routed`): the lifted step, or
        (``on``) the biased one (E4M3 scales; E8M0: the plain step);
        ``unscale`` and ``bias`` follow."""
        lifting = self.pa.lift is not None
        self.lift = lifting and not on
        self.bias = on and self.biased if lifting else self.biased
        shift = LIFT_SHIFT if self.lift else 0
        self.unscale = self.kb.const(2.0 ** (shift - self.fab), self.kb.vec(LANES, self.kb.f32))

    # -- panels and chunks -----------------------------------------------------------

    def panels(self, lo, hi) -> None:
        kb, cfg = self.kb, self.cfg
        self.hs = self.ds = self.cs = None
        if cfg.expand:  # several row groups share each chunk: expand it once
            self.hs = kb.alloc([self.kcb, self.full.data_offset * (1 + self.bias)], kb.i8)
            if self.stored.nibbles or self.codes or self.a_offset or self.units.signed_scratch:
                self.ds = kb.alloc(self.units.scratch_shape(self.kcb, self.full), kb.i8)
            if self.a_offset:  # -128 x B's sums per block, run and int16 lane (A-offset)
                runs = self.stored.groups // self.a_offset
                self.cs = kb.alloc([self.kcb, runs * 2 * PANEL], kb.i16)
        nb, kcb = self.prob.kblocks, self.kcb
        full = nb - nb % kcb
        # Records: one panel's records are contiguous, so a panel streams
        # through all of K.  Codes: a chunk of rows is read left to right by
        # the panels (row-major B; a panel down all of K would touch one
        # line per row, 4 KiB apart, and defeat the prefetchers).
        if cfg.streams > 1 and self.codes is None and kcb == nb:
            lo = self._side_by_side(lo, hi)
        for c0, nblk in ([(None, kcb)] if full else []) + ([(full, nb % kcb)] if nb % kcb else []):
            if self.codes is None:
                with kb.loop(lo, hi, 1) as j:
                    self._chunks(j.iv, c0, nblk, full)
            else:
                self._chunks_codes(lo, hi, c0, nblk, full)
        for buf in (self.hs, self.ds, self.cs):
            if buf is not None:
                kb.dealloc(buf)

    def _side_by_side(self, lo, hi):
        """Decode from records: the thread's panels ``lo .. hi`` as
        ``streams`` runs of ``q`` panels read side by side, block by block;
        returns the first panel left over (``lo + streams * q``), which the
        one-run loop then takes."""
        kb, s = self.kb, self.cfg.streams
        q = kb.divu(kb.sub(hi, lo), s)
        with kb.loop(0, q, 1) as i:
            js = [kb.add(kb.add(lo, kb.mul(q, r)), i.iv) for r in range(s)]
            self.chunk(js, kb.idx(0), self.prob.kblocks)
        return kb.add(lo, kb.mul(q, s))

    def _chunks(self, j, c0, nblk: int, full: int) -> None:
        """Panel ``j``: every chunk of ``nblk`` blocks (``c0`` None: the full
        chunks up to block ``full``; else the one chunk at ``c0``)."""
        if c0 is not None:
            self.chunk(j, self.kb.idx(c0), nblk)
            return
        with self.kb.loop(0, full, nblk) as c:
            self.chunk(j, c.iv, nblk)

    def _chunks_codes(self, lo, hi, c0, nblk: int, full: int) -> None:
        """Chunks outermost, then the panels ``lo .. hi`` (B from codes)."""
        kb = self.kb
        if c0 is not None:
            with kb.loop(lo, hi, 1) as j:
                self.chunk(j.iv, kb.idx(c0), nblk)
            return
        with kb.loop(0, full, nblk) as c:
            with kb.loop(lo, hi, 1) as j:
                self.chunk(j.iv, c.iv, nblk)

    def chunk(self, j, c0, nblk: int) -> None:
        kb, cfg = self.kb, self.cfg
        safe = None  # i1: the chunk expanded prescaled (.prescale)
        if self.bounds is not None and not self.units.fma_form:
            safe = chunk_prescaled(kb, self.bounds, self.codes, self.pa.m, j, c0, nblk)
        if self.hs is not None and self.codes is not None:
            self.codes.expand(self.hs, self.ds, j, c0, nblk, safe)
        elif self.hs is not None:
            expand_records(self, j, c0, nblk)
        if self.cs is not None:
            column_sums(self, nblk)
        def tiles(prescaled: bool):
            self.prescaled = prescaled
            for sub in range(PANEL // (LANES * cfg.nv)):
                body = functools.partial(self.micro, j, sub, c0, nblk)  # (m0, mr)
                tails = self.tails if self.row_tail else ()
                row_tiles(kb, self.pa, cfg.mr, tails, body, self.prob.m)

        both_ways(kb, safe, tiles)  # the plain tiles last: self.prescaled is False after

    def record_row(self, j, blk) -> ir.Value:
        return self.kb.add(self.kb.mul(j, self.prob.kblocks), blk)

    # -- reading records ---------------------------------------------------------------

    def scale(self, row, v: int, stored: bool, local=None) -> ir.Value:
        """B's scales (f32 x 16, times ``2^-(fa+fb)`` for integer units) of
        columns ``16v ..`` of a record (``stored``) or of the scratch row ``local``."""
        kb = self.kb
        if not stored:
            return kb.vbitcast(kb.vload(self.hs, [local, 64 * v], 64), LANES, kb.f32)
        scale = decode_scales(kb, kb.vload(self.rec, [row, LANES * v], LANES), self.prob.b_scale_type)
        return scale if self.unscale is None else kb.fmul(scale, self.unscale)

    def scales(self, row, vs, stored: bool, local) -> list[ir.Value]:
        """:meth:`scale` of each of ``vs``; a record's four vectors of E4M3
        scales widen at once (``decode_scale_tile``: the table path)."""
        if not stored or list(vs) != list(range(4)) or self.prob.b_scale_type == SCALE_TYPE:
            return [self.scale(row, v, stored, local) for v in vs]
        kb = self.kb
        tile = decode_scale_tile(kb, kb.vload(self.rec, [row, 0], 4 * LANES), self.prob.b_scale_type)
        return tile if self.unscale is None else [kb.fmul(s, self.unscale) for s in tile]

    def data(self, row, local, g: int, vs, stored: bool) -> list[ir.Value]:
        """The B vectors ``vs`` (64 bytes each) of K group ``g`` of a record."""
        kb = self.kb
        if not stored and self.ds is not None:
            return [kb.vload(self.ds, self.units.scratch_at(local, g, v), 64) for v in vs]
        base = self.stored.data_offset + self.stored.group_bytes * g
        if not self.stored.nibbles:
            return [kb.vload(self.rec, [row, base + 64 * v], 64) for v in vs]
        v64 = kb.vec(64, kb.i8)
        out = {}
        for h in sorted({v // 2 for v in vs}):
            raw = kb.vload(self.rec, [row, base + 64 * h], 64)
            lo = kb.andi(raw, kb.const(0x0F, v64))
            hi = kb.shrui(raw, kb.const(4, v64))
            out[2 * h] = self.lookup(lo)
            out[2 * h + 1] = self.lookup(hi)
        return [out[v] for v in vs]

    def lookup(self, idx: ir.Value) -> ir.Value:
        """FP4 codes -> their doubled values + 128 (``vpshufb``, 16 entries per lane)."""
        return self.units.lookup(self.table, idx)

    # -- the microkernel ---------------------------------------------------------------

    def micro(self, j, sub: int, c0, nblk: int, m0, mr: int) -> None:
        """The register tile of rows ``m0 .. m0 + mr`` (rows of A:
        :func:`~.tiles.row_tiles`) and sub-tile ``sub`` over ``nblk`` blocks, of panel
        ``j`` or of each panel of the list ``j`` (:meth:`_side_by_side`)."""
        kb, cfg, prob = self.kb, self.cfg, self.prob
        nv = cfg.nv
        js = j if isinstance(j, list) else [j]
        vs = [sub * nv + v for v in range(nv)]
        col0s = [kb.add(kb.mul(jj, PANEL), sub * LANES * nv) for jj in js]
        valids = [[None] * nv for _ in js]
        if self.col_tail:
            valids = [
                [kb.max(kb.min(LANES, kb.sub(prob.n, kb.add(c0_, LANES * v))), 0) for v in range(nv)]
                for c0_ in col0s
            ]
        rows = [kb.add(m0, r) for r in range(mr)]
        c = [
            kb.load_lanes(self.ops.c, [rows[r], kb.add(col0, LANES * v)], LANES, val[v])
            for col0, val in zip(col0s, valids, strict=True)
            for r in range(mr)
            for v in range(nv)
        ]
        # Packed FP4 from codes at decode: the accumulators hold the panel's
        # columns even/odd split (codes.EVEN_ODD), like the B vectors.
        permuted = self.codes is not None and self.hs is None and self.codes.permutes(vs)
        if permuted:
            c = [w for r in range(mr) for w in even_odd(kb, c[r * nv : (r + 1) * nv])]
        n = mr * nv
        with kb.loop(0, nblk, 1, c) as b:
            blk = kb.add(c0, b.iv)
            cc = []
            for p, jj in enumerate(js):
                cc += self.block(jj, blk, b.iv, rows, vs, list(b.args[p * n : (p + 1) * n]))
            b.yield_(cc)
        c = b.results
        if permuted:
            c = [w for r in range(mr) for w in in_order(kb, c[r * nv : (r + 1) * nv])]
        store_tile(self, c, rows, col0s, valids, c0, nblk)  # NVFP4: c / g at the last

    def block(self, j, blk, local, rows, vs, c) -> list[ir.Value]:
        """One block of the register tile: partials on the dot unit, then into C."""
        kb, kind, nv = self.kb, self.kind, self.cfg.nv
        if self.units.isa.mmla:  # NEON smmla on the expanded chunk (neon_mmla.py)
            return mmla_block(self, blk, local, rows, vs, c)
        direct = self.codes is not None and self.hs is None  # from codes, in registers
        stored = self.hs is None
        row = None if direct else self.record_row(j, blk)
        if direct:
            scales, vecs = self.codes.block(j, blk, vs)
        elif self.prescaled:  # the chunk's values carry their scales (.prescale)
            scales = None
        else:
            if self.cfg.prefetch and vs[0] == 0:
                self.prefetch(row)
            scales = self.scales(row, vs, stored, local)
        if self.pa.lift is not None:
            acc = []  # bits(LIFT * sa) or BIAS, + A's compensation (.biased)
            for m in rows:
                acc += [kb.broadcast(lifted_start(kb, self.pa, m, blk, self.lift, self.biased and BIAS), LANES)] * nv
        elif self.pa.comp is not None:  # the accumulators start at A's compensation of B's offset
            acc = []
            for m in rows:
                comp = kb.broadcast(kb.load(self.pa.comp, [m, blk]), LANES)
                acc += [comp] * nv
        else:
            acc = [start_value(kb, kind, self.bias)] * (len(rows) * nv)
        # run > 1: int16 pair sums over `run` groups (a divisor of the block's groups)
        run, sums = math.gcd(self.units.run, self.stored.groups), list(acc)
        a_word = self.units.a_words(self.pa.words, rows, blk, self.stored.groups)  # (r, g) -> 16
        for g in range(self.stored.groups):
            bvec = vecs[g] if direct else self.data(row, local, g, vs, stored)
            for r, _m in enumerate(rows):
                a = a_word(r, g)
                for v in range(nv):
                    i = r * nv + v
                    if run == 1 and not self.a_offset:
                        acc[i] = self.dot(acc[i], a, bvec[v])
                        continue
                    p = self.units.pairs(a, bvec[v])
                    if g % run == 0 and self.a_offset:  # the run's start
                        at = 2 * LANES * (4 * (g // run) + vs[v])
                        sums[i] = kb.add(kb.vload(self.cs, [local, at], 2 * LANES), p)
                    elif g % run == 0:
                        sums[i] = p
                    else:
                        sums[i] = kb.add(sums[i], p)
                    if g % run == run - 1:
                        acc[i] = self.units.add_pairs(acc[i], sums[i])
        if self.prescaled:  # t = p * sb is the partial itself
            return [kb.fadd(cv, t) for cv, t in zip(c, acc, strict=True)]
        at = None if stored else (self.hs, local, [self.full.data_offset + 64 * v for v in vs])
        out, offs = [], offsets(kb, scales, self.bias, at)
        unit = self.prob.a_quant == BF16  # sa = 1 (rows past M: 0, never stored)
        for r, m in enumerate(rows):
            if self.lift:  # c = fma(bits(acc) - LIFT * sa, sb * 2^22, c) (.biased)
                lift = kb.broadcast(kb.load(self.pa.lift, [m, blk]), LANES)
                for i in range(r * nv, (r + 1) * nv):
                    out.append(lifted_step(kb, acc[i], lift, scales[i - r * nv], c[i]))
                continue
            sa = None if unit else kb.broadcast(kb.load(self.pa.scales, [m, blk]), LANES)
            for v in range(nv):  # t = p * sb: one rounding
                t = block_partial(kb, kind, acc[r * nv + v], scales[v], offs[v])
                cv = c[r * nv + v]  # fma(t, 1, c) = c + t: Zen's adders, not its FMA units
                out.append(kb.fadd(cv, t) if unit else kb.fma(t, sa, cv))
        return out

    def prefetch(self, row, records=None) -> None:
        """Prefetch the record ``records`` (default ``prefetch``) records past ``row``, every 64-byte
        line (the last record's past the end): the same panel's run, or the
        next panel's, which is the same thread's next in its run."""
        kb = self.kb
        last = self.stored.shape(self.prob.k, self.prob.n)[0] - 1
        ahead = kb.min(kb.add(row, records or self.cfg.prefetch), last)
        for off in range(0, self.stored.nbytes, 64):
            kb.prefetch(self.rec, [ahead, off])

    def dot(self, acc, a_words, b_bytes) -> ir.Value:
        """``acc + sum over each lane's group of a * b`` on this CPU's dot unit."""
        return self.units.dot(acc, a_words, b_bytes)
