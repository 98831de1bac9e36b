"""Decode (M = 1) from B's codes: sweep 8 rows of B at a time, end to end.

Row-major B is streamed fastest a few rows at a time: reading 32 rows in
parallel (a block, left to right, as the f32 decode schedule does) runs at
14.5 GB/s on the Zen 4 this was written on, 8 rows at 34 GB/s, one row at
35 GB/s (``bench/results/dot-units-findings-2026-12-01.md``).  With one row
of A there is nothing to reuse a widened tile for, so the dot kernel's
decode from codes keeps the integer partials of every column of its panels
in a small buffer (``N / threads`` int32, in L1) instead of in registers::

    for each block:
      acc[:] = A's compensation (i8) | 0
      for each step of 8 rows (2 i8 quads, 4 pairs):
        for each panel (64 columns):               # 8 sequential streams
          acc[panel] = dot(acc[panel], A words, B vectors of the 8 rows)
      for each panel:
        C[panel] = fma(float(acc) * sb, sa, C[panel])

Per output element this is the blocked order (the same partial, the same
block step), so the results are the other dot schedules' and the f32
kernels' bit for bit.  Packed FP4 keeps the panel's columns even/odd split
(``codes.EVEN_ODD``) in the buffer and the scales, and C is read and
written in that order through two shuffles per 32 columns.
"""

from __future__ import annotations

from mlir_mx.kernels.common.widen import LANES, decode_scale_tile
from mlir_mx.kernels.dot.codes import EVEN_ODD, even_odd, in_order
from mlir_mx.kernels.dot.units import PANEL
from mlir_mx.kernels.matmul.stream import prefetch_sweep

__all__ = ["sweep_decode"]

#: Rows of B in flight per sweep.
SWEEP_ROWS = 8


def sweep_decode(k, lo, hi) -> None:
    """Panels ``lo .. hi`` of a decode from codes (``k``: the dot kernel state)."""
    kb, prob, src = k.kb, k.prob, k.codes
    g = k.kind.group
    per = SWEEP_ROWS // g  # K groups per sweep step
    groups = prob.block // g
    permuted = src.permutes(range(4))
    elem = kb.f32 if k.kind.name == "bf16" else kb.i32
    acc = kb.alloc([-1, PANEL], elem, [kb.sub(hi, lo)])
    vt = kb.vec(LANES, elem)
    with kb.loop(0, prob.kblocks, 1) as blk:
        start = kb.const(0.0 if k.kind.name == "bf16" else 0, vt)
        if k.pa.comp is not None:
            start = kb.broadcast(kb.load(k.pa.comp, [0, blk.iv]), LANES)
        with kb.loop(lo, hi, 1) as j:
            for v in range(4):
                kb.vstore(start, acc, [kb.sub(j.iv, lo), LANES * v])
        k0 = kb.mul(blk.iv, prob.block)
        # The sweep steps as a loop (one copy of the panel loop, not
        # groups / per: FP6 without VBMI took 6 s of llc unrolled).
        with kb.loop(0, groups, per) as step:
            g0 = kb.add(kb.mul(blk.iv, groups), step.iv)
            words = [kb.broadcast(kb.load(k.pa.words, [0, kb.add(g0, i)]), LANES) for i in range(per)]
            with kb.loop(lo, hi, 1) as j:
                col = kb.mul(j.iv, PANEL)
                valid = _valid(kb, prob, col)
                row = kb.add(k0, kb.mul(step.iv, g))
                if k.cfg.ahead:  # DotConfig.ahead: the registry's int-decode-ahead
                    prefetch_sweep(kb, prob, src.rows, row, col, k.cfg.ahead, SWEEP_ROWS)
                vecs = [src.quads(kb.add(row, i * g), col, valid) for i in range(per)]
                for v in range(4):
                    a = kb.vload(acc, [kb.sub(j.iv, lo), LANES * v], LANES)
                    for i in range(per):
                        a = k.dot(a, words[i], vecs[i][v])
                    kb.vstore(a, acc, [kb.sub(j.iv, lo), LANES * v])
        _scale_into_c(k, blk.iv, acc, lo, hi, permuted)
    kb.dealloc(acc)


def _valid(kb, prob, col):
    if prob.n % PANEL == 0:
        return None
    return kb.max(kb.min(PANEL, kb.sub(prob.n, col)), 0)


def _scale_into_c(k, blk, acc, lo, hi, permuted: bool) -> None:
    """``C[0, panel] = fma(float(acc) * sb, sa, C[0, panel])`` for the block."""
    kb, prob, src = k.kb, k.prob, k.codes
    sa = kb.broadcast(kb.load(k.pa.scales, [0, blk]), LANES)
    with kb.loop(lo, hi, 1) as j:
        col = kb.mul(j.iv, PANEL)
        valid = _valid(kb, prob, col)
        valids = [None] * 4
        if valid is not None:
            left = kb.sub(prob.n, col)
            valids = [kb.max(kb.min(LANES, kb.sub(left, LANES * v)), 0) for v in range(4)]
        raw = kb.load_lanes(src.sb, [blk, col], PANEL, valid)
        if permuted:
            raw = kb.shuffle(raw, raw, EVEN_ODD)
        c = [
            kb.load_lanes(k.ops.c, [0, kb.add(col, LANES * v)], LANES, valids[v]) for v in range(4)
        ]
        if permuted:
            c = even_odd(kb, c)
        out = []
        tile = decode_scale_tile(kb, raw, prob.b_scale_type)  # E4M3: 64 at once
        for v in range(4):
            scale = tile[v]
            if k.unscale is not None:
                scale = kb.fmul(scale, k.unscale)
            p = kb.vload(acc, [kb.sub(j.iv, lo), LANES * v], LANES)
            if k.kind.name != "bf16":
                p = kb.sitofp(p, kb.vec(LANES, kb.f32))
            out.append(kb.fma(kb.fmul(p, scale), sa, c[v]))  # t = p * sb; fma(t, sa, c)
        if permuted:
            out = in_order(kb, out)
        for v in range(4):
            kb.store_lanes(out[v], k.ops.c, [0, kb.add(col, LANES * v)], valids[v])
