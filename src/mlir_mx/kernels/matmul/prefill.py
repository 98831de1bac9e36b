"""The prefill schedule (large M), BLAS-style.

B's codes are widened once per call into packed f32 panels that every row
tile of A reuses, and a register-tiled microkernel applies the scale product
once per block per accumulator tile (GotoBLAS/BLIS loop order)::

    A -> af (M x K f32, once), sa -> f32
    parallel over column panels jc (nc columns, one or more per thread)
      for pc in K step kc:                       # K chunk, kc a multiple of B
        pack: bp[jr][k][0:nr] = widen(B[pc + k, jc + jr*nr : +nr])
              sbp[kb][n]      = decode(sb[pc/B + kb, jc + n])
        for jr in nc / nr:                       # B micro-panel stays in L1
          for ir in M / mr:                      # A rows stream from L2
            c = C[ir*mr : +mr, jr*nr : +nr]      # mr x nr/16 registers
            for kb in kc / B:
              p = 0                              # mr x nr/16 registers
              for kk in B: p += a[m, k] * bp[jr][k][:]
              c = fma(p * sbp[kb][:], sa[m, kb], c)
            C[...] = c

Per output element this is exactly the blocked order of
:mod:`mlir_mx.kernels.common.problem`, so results equal the streaming schedule's
bit for bit.  Rows past M (the last row tile) are computed on zero rows of
``af`` and never stored; columns past N are zero in the panels and masked
in C.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir

from mlir_mx.host import has_features
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.problem import (
    KernelState,
    Operands,
    PreparedA,
    Problem,
    prepare_a,
    task_count,
)
from mlir_mx.kernels.common.widen import LANES, decode_scales

__all__ = ["PrefillConfig", "emit_prefill"]

#: Codes widened per pack step (the table decoder's width).
_PACK_W = 64


@dataclass(frozen=True)
class PrefillConfig:
    """Tile parameters of the prefill schedule."""

    mr: int = 8  # rows per microkernel tile
    nv: int = 2  # f32 vectors per microkernel tile (nr = 16 nv columns)
    kc: int = 512  # K chunk (rounded down to a multiple of the block size)
    nc: int = 256  # columns per panel (a multiple of 64)
    ku: int = 8  # unroll of the in-block loop
    threads: int = 1
    #: Accumulators in registers across the K chunk (else in an L1 tile,
    #: updated once per block: room for a larger mr x nv of partials).
    c_regs: bool = True

    @property
    def nr(self) -> int:
        return LANES * self.nv

    def adapt(self, prob: Problem) -> PrefillConfig:
        """A 6 x 16 tile without AVX-512 (with it, :meth:`block16`).

        The 8 x 32 tile's partials are 16 zmm registers; without AVX-512 a
        ``vector<16xf32>`` is two of the 16 ymm registers and the tile
        spills.  6 x 16 (12 ymm of partials, BLIS's AVX2 sgemm tile)
        measured 2.3-2.8x faster on an AMD EPYC with AVX2 only (256 x 4096
        x 4096 MXFP4, 1 and 2 threads; docs/passes/mx-matmul-kernels.md).  The
        order per output element is unchanged.
        """
        if has_features("avx512f"):
            return self.block16(prob)
        return replace(self, mr=min(self.mr, 6), nv=1)

    def block16(self, prob: Problem) -> PrefillConfig:
        """The AVX-512 tile for blocks of 16 (NVFP4's): 4 x 64 with the
        in-block loop unrolled 4 times.  Each block of 16 ends in its own
        block step (``t = p * sb; c += t``), twice per 32 codes; 8 x 32 with
        ``ku = 8`` (two trips per block) ran NVFP4 256 x 4096 x 4096 at
        1.23-1.25x MXFP4's time, ``ku = 4`` at 1.11-1.14x, 4 x 64 with ``ku =
        4`` at 1.08x (Xeon, Sapphire Rapids class, 1 thread, CPU time of
        interleaved calls on a loaded machine; docs/bench.md).  The order
        per output element is unchanged."""
        if prob.block != 16 or self != PrefillConfig(threads=self.threads):
            return self
        return replace(self, mr=4, nv=4, ku=4)


def emit_prefill(kb: KernelBuilder, prob: Problem, ops: Operands, cfg: PrefillConfig) -> None:
    """Emit the prefill kernel at the current insertion point."""
    if cfg.nc % _PACK_W or cfg.nc % cfg.nr:
        raise ValueError("prefill kernel: nc must be a multiple of 64 and of nr")
    # The K chunk holds whole blocks: the configured kc rounded down to a
    # multiple of the block (one block when the block is larger), so every
    # block size the dialect accepts (3, 5, 96, ...: not only powers of two) fits.
    cfg = replace(cfg, kc=max(cfg.kc - cfg.kc % prob.block, prob.block))
    # Narrow the panels when N is too small to give every task one (the
    # most tasks a call may start: static M, task_count; dynamic, threads).
    most = cfg.threads if prob.m is None else task_count(kb, prob, None, cfg.threads)
    nc = cfg.nc
    while nc > _PACK_W and -(-prob.n // nc) < most:
        nc -= _PACK_W
    nc -= nc % cfg.nr
    if nc % _PACK_W or nc <= 0:
        nc = cfg.nc
    cfg = replace(cfg, nc=nc)
    pa = prepare_a(kb, prob, ops, cfg.mr)
    k = _Packed(kb, prob, ops, cfg, pa)
    panels = -(-prob.n // cfg.nc)
    tasks = task_count(kb, prob, pa.m, min(cfg.threads, panels))
    if not isinstance(tasks, int) or tasks > 1:
        # One task per thread, panels dealt round-robin (t, t + tasks, ...).
        with kb.parallel(0, tasks, 1) as t:
            with kb.loop(t, panels, tasks) as j:
                k.panel(kb.mul(j.iv, cfg.nc))
    else:
        with kb.loop(0, panels, 1) as j:
            k.panel(kb.mul(j.iv, cfg.nc))
    k.free()


class _Packed(KernelState):
    def __init__(self, kb, prob: Problem, ops: Operands, cfg: PrefillConfig, pa: PreparedA):
        super().__init__(kb, prob, ops, cfg, pa)
        kc = min(cfg.kc, prob.k)
        self.kc = kc - kc % prob.block or prob.block
        self.col_tail = prob.n % cfg.nr != 0
        self.row_tail = prob.m is None or prob.m % cfg.mr != 0

    # -- one column panel --------------------------------------------------------------

    def panel(self, jc: ir.Value) -> None:
        kb, prob, cfg = self.kb, self.prob, self.cfg
        kc = self.kc
        bp = kb.alloc([cfg.nc // cfg.nr, kc, cfg.nr], kb.f32)
        sbp = kb.alloc([kc // prob.block, cfg.nc], kb.f32) if prob.b_is_mx else None
        self.ctile = None if cfg.c_regs else kb.alloc([cfg.mr, cfg.nr], kb.f32)
        width = kb.min(cfg.nc, kb.sub(prob.n, jc))  # columns of this panel
        full = prob.k - prob.k % kc
        if full:
            with kb.loop(0, full, kc) as pc:
                self.chunk(jc, width, pc.iv, kc, bp, sbp)
        if prob.k % kc:
            self.chunk(jc, width, kb.idx(full), prob.k % kc, bp, sbp)
        kb.dealloc(bp)
        if sbp is not None:
            kb.dealloc(sbp)
        if self.ctile is not None:
            kb.dealloc(self.ctile)

    def chunk(self, jc, width, pc, kc: int, bp, sbp) -> None:
        """Pack B[pc : pc + kc, panel] and run the microkernels over it."""
        kb, cfg = self.kb, self.cfg
        self.pack(jc, width, pc, kc, bp, sbp)
        n_micro = kb.ceildivu(width, cfg.nr)
        with kb.loop(0, n_micro, 1) as jr:
            with kb.loop(0, self.pa.mp, cfg.mr) as ir_:
                self.micro(jc, width, jr.iv, ir_.iv, pc, kc, bp, sbp)

    def pack(self, jc, width, pc, kc: int, bp, sbp) -> None:
        kb, prob, cfg = self.kb, self.prob, self.cfg
        groups = cfg.nc // _PACK_W
        with kb.loop(0, kc, 1) as k:
            for g in range(groups):
                col = _PACK_W * g
                valid = self._valid(width, col, _PACK_W)
                vecs = self.b_codes(kb.add(pc, k.iv), kb.add(jc, col), valid)
                for v, w in enumerate(vecs):
                    c = col + LANES * v
                    kb.vstore(w, bp, [c // cfg.nr, k.iv, c % cfg.nr])
        if sbp is not None:
            kb0 = kb.divu(pc, prob.block)
            with kb.loop(0, kc // prob.block, 1) as s:
                for col in range(0, cfg.nc, LANES):
                    valid = self._valid(width, col, LANES)
                    idx = [kb.add(kb0, s.iv), kb.add(jc, col)]
                    raw = kb.load_lanes(self.sb, idx, LANES, valid)
                    kb.vstore(decode_scales(kb, raw, prob.b_scale_type), sbp, [s.iv, col])

    def _valid(self, width, col: int, n: int):
        """Columns of [col, col + n) inside the panel (None when never partial)."""
        if self.prob.n % self.cfg.nc == 0:
            return None
        return self.kb.max(self.kb.min(n, self.kb.sub(width, col)), 0)

    def b_codes(self, k, n0, valid) -> list[ir.Value]:
        """64 columns of row ``k`` of B, widened (zeros past ``valid``)."""
        kb = self.kb
        if self.prob.b_is_mx:
            if self.prob.b_packed and self.dec.pairs and valid is None:
                raw = self.b.raw(k, n0, _PACK_W // 2)
                return self.dec.in_order(kb, self.dec.decode_pairs(kb, raw))
            return self.dec.decode(kb, self.b.load(k, n0, _PACK_W, valid))
        row = kb.load_lanes(self.b, [k, n0], _PACK_W, valid)
        return [kb.slice(row, i, LANES) for i in range(0, _PACK_W, LANES)]

    # -- the microkernel -------------------------------------------------------------

    def micro(self, jc, width, jr, m0, pc, kc: int, bp, sbp) -> None:
        kb, prob, cfg = self.kb, self.prob, self.cfg
        mr, nv, nr = cfg.mr, cfg.nv, cfg.nr
        c_mem = self.ops.c
        col0 = kb.add(jc, kb.mul(jr, nr))
        valids = self._col_valid(width, jr)
        rows = [kb.add(m0, r) for r in range(mr)]
        # Loads of rows past M read row M - 1 (never stored back).
        load_rows = [kb.min(r, kb.sub(self.pa.m, 1)) for r in rows] if self.row_tail else rows
        c = []
        for r in range(mr):
            for v in range(nv):
                idx = [load_rows[r], kb.add(col0, LANES * v)]
                c.append(kb.load_lanes(c_mem, idx, LANES, valids[v]))
        ctile = self.ctile
        if ctile is not None:  # the accumulators live in the L1 tile
            for i, cv in enumerate(c):
                kb.vstore(cv, ctile, [i // nv, LANES * (i % nv)])
            c = []
        zero = kb.const(0.0, kb.vec(LANES, kb.f32))
        kb0 = kb.divu(pc, prob.block)
        with kb.loop(0, kc // prob.block, 1, c) as blk:
            k_base = kb.mul(blk.iv, prob.block)
            ku = cfg.ku if prob.block % cfg.ku == 0 else 1
            with kb.loop(0, prob.block, ku, [zero] * (mr * nv)) as kk:
                p = list(kk.args)
                for u in range(ku):
                    k = kb.add(k_base, kb.add(kk.iv, u))
                    bvec = [kb.vload(bp, [jr, k, LANES * v], LANES) for v in range(nv)]
                    ka = kb.add(pc, k)
                    for r in range(mr):
                        a = kb.broadcast(kb.load(self.pa.af, [rows[r], ka]), LANES)
                        for v in range(nv):
                            p[r * nv + v] = kb.fma(a, bvec[v], p[r * nv + v])
                kk.yield_(p)
            p = kk.results
            cc = list(blk.args)
            if ctile is not None:
                cc = [kb.vload(ctile, [i // nv, LANES * (i % nv)], LANES) for i in range(mr * nv)]
            sbv = None
            if sbp is not None:
                sbv = [
                    kb.vload(sbp, [blk.iv, kb.add(kb.mul(jr, nr), LANES * v)], LANES)
                    for v in range(nv)
                ]
            for r in range(mr):
                sa = None
                if prob.a_is_mx:  # else sa = 1: fma(t, 1, c) is t + c, bit for bit
                    sa = kb.broadcast(kb.load(self.pa.saf, [rows[r], kb.add(kb0, blk.iv)]), LANES)
                for v in range(nv):
                    t = p[r * nv + v]
                    t = kb.fmul(t, sbv[v]) if sbv is not None else t
                    i = r * nv + v
                    cc[i] = kb.fadd(cc[i], t) if sa is None else kb.fma(t, sa, cc[i])
            if ctile is not None:
                for i, cv in enumerate(cc):
                    kb.vstore(cv, ctile, [i // nv, LANES * (i % nv)])
                cc = []
            blk.yield_(cc)
        c = blk.results
        if ctile is not None:
            c = [kb.vload(ctile, [i // nv, LANES * (i % nv)], LANES) for i in range(mr * nv)]
        for r in range(mr):

            def store(r=r):
                for v in range(nv):
                    idx = [rows[r], kb.add(col0, LANES * v)]
                    kb.store_lanes(c[r * nv + v], c_mem, idx, valids[v])

            if self.row_tail:
                with kb.if_(kb.icmp("ult", rows[r], self.pa.m)):
                    store()
            else:
                store()

    def _col_valid(self, width, jr) -> list:
        """Valid columns of each vector of micro-panel ``jr`` (None: all)."""
        kb, cfg = self.kb, self.cfg
        if not self.col_tail:
            return [None] * cfg.nv
        left = kb.sub(width, kb.mul(jr, cfg.nr))
        return [kb.max(kb.min(LANES, kb.sub(left, LANES * v)), 0) for v in range(cfg.nv)]
