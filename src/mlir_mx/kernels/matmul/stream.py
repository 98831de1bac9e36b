"""The streaming schedule: decode (M = 1) and small batches.

B is read once, in order, and widened in registers: for every block row
range ``kb`` and every column tile of ``16 * nv`` columns, the ``B`` rows of
the block are loaded, widened and multiplied into the partial sums of all
rows of A (``p``, in registers), then each partial is scaled into ``C``
(``fma(p * sb, sa, c)``, C read and written once per block and tile)::

    parallel over column chunks (one per thread)
      for kb in blocks:
        for each column tile n0 of the chunk:
          sbv = scales of B for (kb, n0)             (mx x mx)
          [widen the B tile into an L1 scratch when there are several row groups]
          for each group of `mr` rows:
            p = 0;  for kk in block: p += a[m, k] * b[k, n0:n0+16nv]
            c[m, n0:..] = fma(p * sbv, sa[m, kb], c[m, n0:..])

Streaming ``kb`` outermost keeps the ``B`` accesses of a block within ``B``
rows that are read in parallel left to right (one stream per row), which the
hardware prefetchers follow; iterating a column tile down all of K instead
touches one cache line per 4 KiB page and runs at a fraction of the memory
bandwidth (measured: ``bench/results``).

Column tails (N not a multiple of the tile) use masked loads and stores.  A
tiled B's one-byte decode takes each tile of ``blocks`` blocks in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import F32_INF, abs_bits, f32_bits, nan_key, or_nan
from mlir_mx.kernels.common.lane_table import lane_order
from mlir_mx.kernels.common.problem import (
    TILE_COLUMNS,
    KernelState,
    Operands,
    PreparedA,
    Problem,
    code_columns,
    prepare_a,
    task_count,
    vector_loop,
)
from mlir_mx.kernels.common.widen import LANES, decode_scale_tile, decode_scales
from mlir_mx.kernels.matmul.stream_config import (
    SHORT_BLOCK_PREFETCH,
    TILED_PREFETCH,
    TILED_STREAMS,
    StreamConfig,
)
from mlir_mx.numerics.formats import SCALE_TYPE

__all__ = [
    "SHORT_BLOCK_PREFETCH",
    "StreamConfig",
    "emit_stream",
    "prefetch_sweep",
    "TILED_PREFETCH",
    "TILED_STREAMS",
]

def emit_stream(kb: KernelBuilder, prob: Problem, ops: Operands, cfg: StreamConfig) -> None:
    """Emit the streaming kernel at the current insertion point."""
    tile = LANES * cfg.nv
    if prob.b_tiled and TILE_COLUMNS % tile:
        # CodeRows reads a run of codes within one tile of a tiled B.
        raise ValueError(f"stream kernel: a tiled B needs 16 nv to divide {TILE_COLUMNS}")
    pa = prepare_a(kb, prob, ops, cfg.mr)
    k = _Kernel(kb, prob, ops, cfg, pa)
    k.move_factor()
    tasks = task_count(kb, prob, pa.m, cfg.threads)
    # Column chunk per task: whole tiles, the last chunk takes the rest.
    if isinstance(tasks, int):
        per = -(-prob.n // tasks)
        per = -(-per // tile) * tile
        chunks = -(-prob.n // per)
    elif -(-prob.n // tile) > 1:  # a dynamic M: the count per call
        per = kb.mul(kb.ceildivu(kb.ceildivu(kb.idx(prob.n), tasks), tile), tile)
        chunks = kb.ceildivu(kb.idx(prob.n), per)
    else:
        chunks = 1
    if not isinstance(chunks, int) or chunks > 1:
        with kb.parallel(0, chunks, 1) as t:
            lo = kb.mul(t, per)
            k.chunk(lo, kb.min(kb.add(lo, per), prob.n))
    else:
        k.chunk(kb.idx(0), kb.idx(prob.n))
    k.free()


#: Rows of B a decode from a row-major B reads at once (:meth:`_Kernel._sweep`).
SWEEP_ROWS = 8


def prefetch_sweep(
    kb: KernelBuilder, prob: Problem, rows, row, col, ahead: int, count: int = SWEEP_ROWS
) -> None:
    """Prefetch the ``count`` rows of a sweep ``ahead`` sweeps past ``row``
    (clamped to B's last rows) at column ``col`` (``rows``: the
    :class:`~mlir_mx.kernels.common.problem.CodeRows` of B).  At 2 threads
    every row of a row-major B is split between the threads, and each
    thread's run of a row ends where the hardware prefetchers would go on
    into the other's half; the next sweep's rows are then requested while
    this one runs.  A prefetch changes no value, so no bit.  Used by this
    kernel's :meth:`_Kernel._sweep` (``StreamConfig.ahead``) and the
    ``int-decode`` sweep (``DotConfig.ahead``, :mod:`mlir_mx.kernels.dot.sweep`)."""
    first = kb.min(kb.add(row, ahead * count), prob.k - count)
    for i in range(count):
        kb.prefetch(rows.mem, rows.address(kb.add(first, i), col))


@dataclass(frozen=True)
class _Partials:
    """One task's partial sums (f32) and NaN keys (i8) per column of its chunk
    (offset ``lo``), carried between the row groups ``rows`` of a block."""

    p: ir.Value
    keys: ir.Value
    lo: ir.Value
    rows: tuple[int, int]

    def load(self, kb, n0, nv: int, valid, nan_keys: bool) -> list[ir.Value]:
        at = kb.sub(n0, self.lo)
        out = [kb.load_lanes(self.p, [kb.add(at, LANES * v)], LANES, valid) for v in range(nv)]
        if nan_keys:
            out.append(kb.load_lanes(self.keys, [at], LANES * nv, valid))
        return out

    def store(self, kb, values, n0, nv: int, valid) -> None:
        at = kb.sub(n0, self.lo)
        for v in range(nv):
            kb.store_lanes(values[v], self.p, [kb.add(at, LANES * v)], valid)
        if len(values) > nv:
            kb.store_lanes(values[nv], self.keys, [at], valid)


class _Kernel(KernelState):
    def __init__(self, kb, prob: Problem, ops: Operands, cfg: StreamConfig, pa: PreparedA):
        super().__init__(kb, prob, ops, cfg, pa)
        self.single_group = prob.m is not None and prob.m <= cfg.mr
        # Packed FP4 on full tiles: columns come in (even, odd) pairs of vectors
        # (Decoder.decode_pairs), 8-bit table codes in lane order (lane_table.py),
        # put in column order once per block.
        self.dec, lanes = lane_order(self.dec, cfg.nv if cfg.lanes else 0)
        self.pairs = prob.b_is_mx and (prob.b_packed or lanes) and self.dec.pairs and cfg.nv % 2 == 0

    def chunk(self, lo: ir.Value, hi: ir.Value) -> None:
        """All blocks of the columns [lo, hi)."""
        kb, cfg = self.kb, self.cfg
        self.span = (lo, hi)  # the tiled prefetch runs on into the next block's row
        if cfg.threads > 1:
            self._own_c(lo, hi)
        tile = LANES * cfg.nv
        width = kb.sub(hi, lo)
        full_tiles = kb.add(lo, kb.mul(kb.divu(width, tile), tile))
        full_vecs = kb.add(lo, kb.mul(kb.divu(width, LANES), LANES))
        # Several row groups share each widened B tile through an L1 scratch.
        self.scratch = None
        if not self.single_group:
            self.scratch = kb.alloc([self.prob.block, tile], kb.f32)
        if self._sweeps():
            self._sweep(lo, hi, full_tiles, full_vecs)
            return
        with kb.loop(0, self.prob.kblocks, cfg.blocks) as blks:
            with kb.loop(lo, full_tiles, tile) as t:  # C per column in block order
                for j in range(cfg.blocks):
                    self.tile(kb.add(blks.iv, j), t.iv, cfg.nv, None)
            for blk in [kb.add(blks.iv, j) for j in range(cfg.blocks)]:
                with kb.loop(full_tiles, full_vecs, LANES) as t:
                    self.tile(blk, t.iv, 1, None)
                rest = kb.sub(hi, full_vecs)
                with kb.if_(kb.icmp("sgt", rest, 0)):
                    self.tile(blk, full_vecs, 1, rest)
        if self.scratch is not None:
            kb.dealloc(self.scratch)

    def _sweeps(self) -> bool:
        """Whether one row of A reads a row-major B :data:`SWEEP_ROWS` rows at a
        time across the chunk's columns (:meth:`_sweep`)."""
        prob = self.prob
        rows_ok = prob.block % SWEEP_ROWS == 0 and prob.block > SWEEP_ROWS
        return self.single_group and prob.m == 1 and prob.b_is_mx and not prob.b_tiled and rows_ok

    def _sweep(self, lo, hi, full_tiles, full_vecs) -> None:
        """Decode from a row-major B: for each block, :data:`SWEEP_ROWS` of its
        rows across all of the chunk's columns, then the next ones, the
        partials (and NaN keys) of each column kept in an L1/L2 buffer between
        them; each column's FMAs stay in K order (the same bits).  A block's
        32 rows read at once are 32 streams 4 KiB or more apart, which the
        prefetchers follow poorly (``bench/results/dot-units-findings-2026-12-01.md``:
        14.5 GB/s for 32 rows in parallel, 34 for 8, one Zen 4 core); the
        ``int-decode`` sweep (:mod:`mlir_mx.kernels.dot.sweep`) reads B the
        same way."""
        kb, cfg, bs = self.kb, self.cfg, self.prob.block
        tile = LANES * cfg.nv
        width = self.prob.n + tile  # a chunk's columns, whatever its start
        part = _Partials(kb.alloc([width], kb.f32), kb.alloc([width], kb.i8), lo, (0, 0))
        with kb.loop(0, self.prob.kblocks, 1) as blk:
            for r0 in range(0, bs, SWEEP_ROWS):
                rows = replace(part, rows=(r0, r0 + SWEEP_ROWS))
                with kb.loop(lo, full_tiles, tile) as t:
                    if cfg.ahead:
                        row = kb.add(kb.mul(blk.iv, bs), r0)
                        prefetch_sweep(kb, self.prob, self.b, row, t.iv, cfg.ahead)
                    self.tile(blk.iv, t.iv, cfg.nv, None, rows)
                with kb.loop(full_tiles, full_vecs, LANES) as t:
                    self.tile(blk.iv, t.iv, 1, None, rows)
                rest = kb.sub(hi, full_vecs)
                with kb.if_(kb.icmp("sgt", rest, 0)):
                    self.tile(blk.iv, full_vecs, 1, rest, rows)
        kb.dealloc(part.p)
        kb.dealloc(part.keys)

    def _own_c(self, lo: ir.Value, hi: ir.Value) -> None:
        """Prefetch for writing (``prefetchw``) the chunk's lines of C, rows
        ``[0, M)``, columns ``[lo, hi)``, before its first block.

        The caller zeroed C on its own core, so on another core every line of
        the chunk's C is first read (the first block's ``fma(p * sb, sa, c)``)
        from the caller's cache, one cross-core transfer each, with the
        kernel waiting on it: ``perf`` of a 2-thread 1 x 2048 x 2048 MXFP4
        decode put a quarter of the worker's samples on that load, none on
        the caller's.  Requested for ownership up front, those transfers
        overlap the first block's widening (1 x 2048 x 2048, 2 threads: about
        1.15x; bench/results/decode-streams-2026-12-03.md).  No bit changes."""
        kb = self.kb
        with kb.loop(lo, hi, LANES) as col:
            if self.prob.m is not None:
                for m in range(self.prob.m):
                    kb.prefetch(self.ops.c, [m, col.iv], write=True)
            else:
                with kb.loop(0, self.pa.m, 1) as row:
                    kb.prefetch(self.ops.c, [row.iv, col.iv], write=True)

    # -- one column tile of one block -------------------------------------------------

    def tile(self, blk, n0, nv: int, valid, part=None) -> None:
        """Columns ``n0 .. n0 + 16 nv`` of block ``blk`` (``valid``: columns in a tail;
        ``part``: some of the block's rows, :meth:`_sweep`)."""
        kb, prob, cfg = self.kb, self.prob, self.cfg
        bs = prob.block
        sbv = None
        if prob.b_is_mx and (part is None or part.rows[1] == bs) and self._scale_tile(valid):
            sbv = decode_scale_tile(kb, kb.vload(self.sb, [blk, n0], LANES * nv), prob.b_scale_type)
        elif prob.b_is_mx and (part is None or part.rows[1] == bs):  # used when scaling
            sbv = [
                decode_scales(
                    kb,
                    kb.load_lanes(self.sb, [blk, kb.add(n0, LANES * v)], LANES, valid),
                    prob.b_scale_type,
                )
                for v in range(nv)
            ]
        k0 = kb.mul(blk, bs)
        if cfg.prefetch and prob.b_is_mx and prob.b_tiled:
            self._prefetch_tiled(blk, n0)
        elif cfg.prefetch and prob.b_is_mx:
            # The same columns of the rows `prefetch` blocks ahead (clamped).
            ahead = kb.min(kb.add(k0, cfg.prefetch * bs), prob.k - bs)
            for r in range(bs):
                kb.prefetch(self.b.mem, self.b.address(kb.add(ahead, r), n0))
        if self.single_group:
            args = (blk, k0, n0, nv, valid, kb.idx(0), prob.m, sbv, None)
            if self.afs is None or self.dec.factor(LANES * nv) is None:
                self.group(*args, part=part)
            elif self.fast is True:
                self.group(*args, moved=True, part=part)
            else:  # the factor moves onto A where A's range lets it (per call)
                with kb.if_(self.fast):
                    self.group(*args, moved=True, part=part)
                with kb.if_(kb.xori(self.fast, kb.const(1, kb.i1))):
                    self.group(*args, part=part)
            return
        scratch = self.scratch
        with kb.loop(0, bs, 1) as kk:
            for v, w in enumerate(self.b_row(blk, kk.iv, n0, nv, valid)):
                kb.vstore(w, scratch, [kk.iv, LANES * v])
        with kb.loop(0, self.pa.mp, cfg.mr) as g:
            self.group(blk, k0, n0, nv, valid, g.iv, cfg.mr, sbv, scratch=scratch)

    def _scale_tile(self, valid) -> bool:
        """Whether a whole tile's E4M3 scales widen at once
        (:func:`~mlir_mx.kernels.common.widen.decode_scale_tile`); E8M0's are
        one shift per 16 either way."""
        return valid is None and self.prob.b_scale_type != SCALE_TYPE

    def _prefetch_tiled(self, blk, n0) -> None:
        """A tiled B read by a thread is one stream over its columns [lo, hi)
        of each block's row: prefetch the tile `prefetch` tiles ahead in that
        stream, one prefetch per 64-byte line; past ``hi`` it runs on at
        ``lo`` of the next block (the last block's clamps to its last tile).
        Clamping at ``N`` instead prefetched the other thread's tiles and left
        the first tiles of every block's row unprefetched: a quarter of a
        thread's tiles at 2 threads and N = 2048 (measured: 1-4 % at 2
        threads; docs/passes/mx-matmul-kernels.md, "The schedules")."""
        kb, prob, cfg = self.kb, self.prob, self.cfg
        lo, hi = self.span
        tile = LANES * cfg.nv
        nxt = kb.add(n0, cfg.prefetch * tile)
        wrap = kb.icmp("sge", nxt, hi)
        col = kb.select(wrap, kb.min(kb.add(lo, kb.sub(nxt, hi)), kb.sub(hi, tile)), nxt)
        last = kb.icmp("sge", blk, prob.kblocks - 1)
        col = kb.select(kb.andi(wrap, last), kb.sub(hi, tile), col)
        ahead = kb.select(wrap, kb.min(kb.add(blk, 1), prob.kblocks - 1), blk)
        row_bytes = code_columns(prob.b_element, tile, prob.b_packed)
        for r in range(0, prob.block, max(1, 64 // row_bytes)):  # (block, row in block)
            kb.prefetch(self.b.mem, self.b.address(None, col, (ahead, kb.idx(r))))

    def move_factor(self) -> None:
        """Where the register loop widens B through f16 with a multiply by
        ``f = 2^(15 - bias)`` per code (``Decoder.factor``: E4M3 without the
        VBMI tables, FP6 on AVX2), keep ``afs = f * A`` (rows < M) and let
        the loop leave ``f`` out: each product ``(f a) (b / f)`` is ``a b``
        exactly, so every FMA, hence every bit, is the same, for one pass
        over A per call instead of one ``vmulps`` per 8 or 16 codes.
        ``f a`` is exact unless it overflows: an MX A's element values are
        at most 448, an f32 A is tested once per call (``self.fast``: every
        finite ``|a| < 2^128 / f``; Inf and NaN scale to themselves), and a
        call that fails the test runs the loop with the multiply."""
        kb, prob = self.kb, self.prob
        self.afs, self.fast = None, None
        if not (self.single_group and prob.b_is_mx) or (self.pairs and prob.b_packed):
            return
        f = self.dec.factor(LANES * self.cfg.nv) or self.dec.factor(LANES)
        if f is None:
            return
        k, rows = prob.k, prob.m
        self.afs = kb.alloc([rows, k], kb.f32)
        v16f, v16i = kb.vec(LANES, kb.f32), kb.vec(LANES, kb.i32)
        most = kb.alloc([LANES], kb.i32)  # the largest finite |a| bits so far
        kb.vstore(kb.const(0, v16i), most, [0])
        inf = kb.const(F32_INF, v16i)
        for r in range(rows):

            def body(off, valid, r=r):
                a = kb.load_lanes(self.pa.af, [r, off], LANES, valid)
                kb.store_lanes(kb.fmul(a, kb.const(f, v16f)), self.afs, [r, off], valid)
                bits = abs_bits(kb, a)
                finite = kb.select(kb.cmpi("ult", bits, inf), bits, kb.const(0, v16i))
                kb.vstore(kb.maxui(kb.vload(most, [0], LANES), finite), most, [0])

            vector_loop(kb, k, LANES, body)
        if prob.a_is_mx:  # element values <= 448: never near 2^128 / f
            self.fast = True
        else:
            top = kb.reduce("maxui", kb.vload(most, [0], LANES))
            self.fast = kb.cmpi("ult", top, kb.const(f32_bits(2.0**128 / f), kb.i32))
        kb.dealloc(most)

    def free(self) -> None:
        super().free()
        if self.afs is not None:
            self.kb.dealloc(self.afs)

    def b_row(self, blk, kk, n0, nv: int, valid, scaled: bool = True) -> list[ir.Value]:
        """Row ``kk`` of block ``blk`` of B at columns ``n0 .. n0 + 16 nv``, widened to f32
        (``scaled=False``: without ``Decoder.factor``, :meth:`move_factor`)."""
        kb = self.kb
        k = kb.add(kb.mul(blk, self.prob.block), kk)
        split = (blk, kk)
        if not self.prob.b_is_mx:
            return [
                kb.load_lanes(self.b, [k, kb.add(n0, LANES * v)], LANES, valid) for v in range(nv)
            ]
        if self._paired(nv, valid):
            raw = self.b.raw(k, n0, code_columns(self.prob.b_element, LANES * nv, True), split)
            return self.dec.decode_pairs(kb, raw)
        return self.dec.decode(kb, self.b_codes(blk, kk, n0, nv, valid), scaled=scaled)

    def b_codes(self, blk, kk, n0, nv: int, valid) -> ir.Value:
        """Row ``kk`` of block ``blk`` of an MX B, columns ``n0 .. n0 + 16 nv``:
        one code per byte (zero in a tail's missing columns)."""
        k = self.kb.add(self.kb.mul(blk, self.prob.block), kk)
        return self.b.load(k, n0, LANES * nv, valid, (blk, kk))

    def _block_nan(self, nv: int, scratch) -> bool:
        """Whether the register loop tests B's NaN codes once per block
        (``Decoder.block_nan``; B widened in registers, not to a scratch):
        each row's codes update a running maximum of their :func:`nan_key`
        (2 instructions per 32 codes instead of 3-4 per 16 in the widening),
        and a column whose block held a NaN code becomes NaN before its
        scaling, the value the per-code mapping gives.  The same bits."""
        return scratch is None and self.prob.b_is_mx and self.dec.block_nan(LANES * nv)

    def _paired(self, nv: int, valid) -> bool:
        return self.pairs and valid is None and nv == self.cfg.nv

    def group(
        self, blk, k0, n0, nv: int, valid, m0, mr: int, sbv, scratch, moved=False, part=None
    ) -> None:
        """Rows ``m0 .. m0 + mr`` of one (block, tile): partials, then scale into C
        (``moved``: A times B's widening factor, B without it, :meth:`move_factor`;
        ``part``: only the block's rows ``part.rows``, the partials carried
        in ``part``'s buffers between them, :meth:`_sweep`)."""
        kb, prob, cfg = self.kb, self.prob, self.cfg
        af = self.afs if moved else self.pa.af
        zero = kb.const(0.0, kb.vec(LANES, kb.f32))
        n_acc = mr * nv
        ku = cfg.ku if prob.block % cfg.ku == 0 else 1
        nan_keys = self._block_nan(nv, scratch)
        r0, r1 = (0, prob.block) if part is None else part.rows
        init = [zero] * n_acc + ([kb.const(0, kb.vec(LANES * nv, kb.i8))] if nan_keys else [])
        if r0 > 0:  # mr = 1: the partials (and NaN keys) of the rows before
            init = part.load(kb, n0, nv, valid, nan_keys)
        with kb.loop(r0, r1, ku, init) as kk:
            p = list(kk.args)
            keys = p.pop() if nan_keys else None
            for u in range(ku):
                kk_u = kb.add(kk.iv, u)
                k = kb.add(k0, kk_u)
                if nan_keys:
                    codes = self.b_codes(blk, kk_u, n0, nv, valid)
                    keys = kb.maxui(keys, nan_key(kb, codes))
                    bvec = self.dec.decode(kb, codes, nan=False, scaled=not moved)
                elif scratch is None:
                    bvec = self.b_row(blk, kk_u, n0, nv, valid, scaled=not moved)
                else:
                    bvec = [kb.vload(scratch, [kk_u, LANES * v], LANES) for v in range(nv)]
                for r in range(mr):
                    a = kb.broadcast(kb.load(af, [kb.add(m0, r), k]), LANES)
                    for v in range(nv):
                        p[r * nv + v] = kb.fma(a, bvec[v], p[r * nv + v])
            kk.yield_(p + ([keys] if nan_keys else []))
        p = list(kk.results)
        if r1 < prob.block:
            part.store(kb, p, n0, nv, valid)
            return
        if nan_keys:
            keys = p.pop()
            p = [or_nan(kb, x, kb.slice(keys, LANES * (i % nv), LANES)) for i, x in enumerate(p)]
        if self._paired(nv, valid):
            p = [w for r in range(mr) for w in self.dec.in_order(kb, p[r * nv : (r + 1) * nv])]
        for r in range(mr):
            m = kb.add(m0, r)
            sa = kb.broadcast(kb.load(self.pa.saf, [m, blk]), LANES)
            self._scale_row(m, n0, nv, valid, p[r * nv : (r + 1) * nv], sa, sbv)

    def _scale_row(self, m, n0, nv, valid, p, sa, sbv) -> None:
        if self.single_group:
            self._scale_row_unguarded(m, n0, nv, valid, p, sa, sbv)
        else:  # padding rows (m >= M) are computed, never stored
            with self.kb.if_(self.kb.icmp("ult", m, self.pa.m)):
                self._scale_row_unguarded(m, n0, nv, valid, p, sa, sbv)

    def _scale_row_unguarded(self, m, n0, nv, valid, p, sa, sbv) -> None:
        kb = self.kb
        c = self.ops.c
        for v in range(nv):
            t = kb.fmul(p[v], sbv[v]) if sbv is not None else p[v]
            col = kb.add(n0, LANES * v)
            cv = kb.load_lanes(c, [m, col], LANES, valid)
            kb.store_lanes(kb.fma(t, sa, cv), c, [m, col], valid)
