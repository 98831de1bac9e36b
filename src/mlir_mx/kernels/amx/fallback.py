"""The fallback's ``t`` of the guarded AMX-BF16 matmul (issue 51, 54;
``docs/numerics.md``, "AMX-BF16" and "NVFP4 on AMX"): per block of a K
chunk and column group, every failing (row, block)'s ``t = p sb`` into the
kernel's ``tbuf`` (:func:`mlir_mx.kernels.amx.matmul.matmul_module`'s
``_precompute`` calls these), by one of two routes:

- **the chains** (:func:`chains`): the in-order f32 FMA chains ``p =
  fma(a_k, b_k, p)`` from +0 of four failing rows at a time against B
  decoded unscaled (:func:`decode_block`), then ``t = p sb`` (one rounding:
  the exact path's step);
- **the tiles** (:func:`tile_ts`; NVFP4 only): the (row, block)s that fail
  the guard only because of the scales' odd part ``m`` (``T / m_max < S/g
  <= T``, every other condition of the guard met) are packed by the
  driver 16 to an A tile (bf16); one ``TDPBF16PS`` from a zero tile against
  B's raw code values (unscaled, exact in bf16) gives ``p`` exactly (under
  ``S/g <= T`` every partial is a multiple of ``g q`` of magnitude at most ``2^24 g q``:
  the guard's argument with ``m = 1``), then ``t = f32(p s)``, one
  ``vmulps`` by the column's decoded E4M3 scale: the chain's ``p`` (exact
  too) times the same ``s``, so the same bits.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, scf, vector

from mlir_mx.kernels.amx.panel import unscaled_row
from mlir_mx.kernels.amx.tile import (
    TILE_M,
    TILE_N,
    tile_load,
    tile_mulf,
    tile_store,
    tile_type,
    tile_zero,
)
from mlir_mx.kernels.common.codec import e8m0_to_f32
from mlir_mx.kernels.common.widen import decode_scales
from mlir_mx.numerics.formats import SCALE_TYPE

__all__ = ["chains", "decode_block", "splat", "tile_ts"]


def splat(value: float) -> ir.Value:
    """A ``vector<16xf32>`` constant of ``value``."""
    v16 = ir.VectorType.get([TILE_N], ir.F32Type.get())
    attr = ir.DenseElementsAttr.get_splat(v16, ir.FloatAttr.get(ir.F32Type.get(), value))
    return arith.ConstantOp(v16, attr).result


def _bf16_row(kb, pair: ir.Value) -> ir.Value:
    """32 f32 values exact in bf16 (a code's value) as ``vector<32xbf16>``:
    their top 16 bits."""
    v32i, v32w = kb.vec(32, kb.i32), kb.vec(32, kb.i16)
    words = kb.trunci(kb.shrui(kb.bitcast(pair, v32i), kb.const(16, v32i)), v32w)
    return kb.vbitcast(words, 32, ir.BF16Type.get())


def decode_block(ix, args, j, jp, nts) -> list[ir.Value]:
    """Block ``j``'s B for column tiles ``nts``, unscaled, into ``bdec[jn, k]``
    (16 f32 each): E8M0, the panel's pair-layout rows (at ``jp``, the
    block's place in the chunk's panel) widened, split by parity and times
    ``1 / sb`` (exact: a power of two, the block not flagged); E4M3 (not a
    power of two), the codes widened again (``unscaled_row``: a division
    ``(b sb) / sb``, exact too, took 32 ``vdivps`` a block and column group),
    and the same rows as bf16 into ``braw[jn]`` (the tile route's B, where
    the kernel has one).  Returns the ``sb`` vectors."""
    f32, kb = ir.F32Type.get(), args.kb
    v32 = ir.VectorType.get([2 * TILE_N], f32)
    v32bf = ir.VectorType.get([2 * TILE_N], ir.BF16Type.get())
    zero, one = ix.c(0), splat(1.0)
    braw = getattr(args, "braw", None)
    sbv = []
    for jn, nt in enumerate(nts):
        codes = kb.vload(args.scales, [j, ix.mul(nt, ix.c(TILE_N))], TILE_N)
        e8m0 = args.scale_type == SCALE_TYPE
        sbv.append(e8m0_to_f32(kb, codes) if e8m0 else decode_scales(kb, codes, args.scale_type))
        inv = arith.DivFOp(one, sbv[-1]).result if e8m0 else None
        for r in range(args.block // 2):
            if e8m0:
                row = vector.LoadOp(v32bf, args.panel, [jp, ix.c(jn), ix.c(r), zero]).result
                pair = arith.ExtFOp(v32, row).result
            else:
                pair = unscaled_row(kb, args.element, args.codes, nt, j, ix.c(r))
                if braw is not None:
                    vector.StoreOp(_bf16_row(kb, pair), braw, [ix.c(jn), ix.c(r), zero])
            for parity in range(2):
                mask = list(range(parity, 2 * TILE_N, 2))
                bk = vector.ShuffleOp(pair, pair, mask).result
                bk = arith.MulFOp(bk, inv).result if e8m0 else bk
                vector.StoreOp(bk, args.bdec, [ix.c(jn), ix.c(2 * r + parity), zero])
    return sbv


def chains(ix, args, e, sbv, tn: int) -> None:
    """``t`` of the four failing rows ``bidx[e:e+4]`` of the block (their A
    blocks ``fa[e:e+4]``) over ``tn`` column tiles: the in-order f32 FMA
    chains ``p = fma(a_k, b_k, p)`` from +0 (k = 0..bs-1, B from ``bdec``),
    then ``t = p sb`` (one rounding: the exact path's), into ``tbuf[f, 16
    jn:]``.  Eight chains in flight."""
    v16 = ir.VectorType.get([TILE_N], ir.F32Type.get())
    zero = ix.c(0)
    fs = [ix.cast(memref.LoadOp(args.bidx, [ix.add(e, ix.c(i))]).result) for i in range(4)]
    es = [ix.add(e, ix.c(i)) for i in range(4)]
    p = [[splat(0.0) for _ in range(tn)] for _ in range(4)]
    for k in range(args.block):
        bk = [vector.LoadOp(v16, args.bdec, [ix.c(jn), ix.c(k), zero]).result for jn in range(tn)]
        for i in range(4):
            ak = memref.LoadOp(args.fa, [es[i], ix.c(k)]).result
            av = vector.BroadcastOp(v16, ak).result
            for jn in range(tn):
                p[i][jn] = vector.FMAOp(av, bk[jn], p[i][jn]).result
    for i in range(4):
        for jn in range(tn):
            t = arith.MulFOp(p[i][jn], sbv[jn]).result
            vector.StoreOp(t, args.tbuf, [fs[i], ix.c(jn * TILE_N)])


def tile_ts(ix, args, lo, hi, sbv, tn: int) -> None:
    """``t`` of the block's tile-route entries ``tidx[lo:hi]`` (``hi - lo`` a
    multiple of 16; their A blocks ``ta[lo:hi]``, bf16, a list padded by
    repeating entries, which writes the same ``t`` twice) over ``tn``
    column tiles: per 16 of them one A tile, per column tile ``TDPBF16PS``
    from a zero tile against ``braw[jn]`` (B's code values, unscaled:
    :func:`decode_block`) stored to ``pbuf[g, jn]`` (every product of the
    block first: a vector load just after a tile store waits for it), then
    ``t = p s`` (``vmulps``, the chain's rounding) into ``tbuf[f, 16 jn:]``."""
    zero, sixteen = ix.c(0), ix.c(TILE_M)
    lo, hi = ix.cast(lo), ix.cast(hi)
    count = arith.DivUIOp(arith.SubIOp(hi, lo).result, sixteen).result
    some = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.ult, zero, count).result)
    with ir.InsertionPoint(some.then_block):  # no route entry: no B tile loads
        _tile_products(ix, args, lo, count, sbv, tn)
        scf.YieldOp([])


def _tile_products(ix, args, lo, count, sbv, tn: int) -> None:
    """:func:`tile_ts`'s body for its ``count`` (> 0) A tiles from ``lo``."""
    tile_a = tile_type(TILE_M, args.block, "bf16")
    tile_b = tile_type(args.block // 2, 2 * TILE_N, "bf16")
    tile_c = tile_type(TILE_M, TILE_N, "f32")
    v16 = ir.VectorType.get([TILE_N], ir.F32Type.get())
    zero, sixteen = ix.c(0), ix.c(TILE_M)
    bs = [tile_load(args.braw, [ix.c(jn), zero, zero], tile_b) for jn in range(tn)]
    groups = scf.ForOp(zero, count, ix.c(1))
    with ir.InsertionPoint(groups.body):
        g = groups.induction_variable
        a = tile_load(args.ta, [ix.add(lo, ix.mul(g, sixteen)), zero], tile_a)
        cs = [tile_mulf(a, b, tile_zero(tile_c)) for b in bs]  # live together: two C registers
        for jn, c in enumerate(cs):
            tile_store(args.pbuf, [g, ix.c(jn), zero, zero], c)
        scf.YieldOp([])
    groups = scf.ForOp(zero, count, ix.c(1))
    with ir.InsertionPoint(groups.body):
        g = groups.induction_variable
        rows = scf.ForOp(zero, sixteen, ix.c(1))
        with ir.InsertionPoint(rows.body):
            r = rows.induction_variable
            at = ix.add(ix.add(lo, ix.mul(g, sixteen)), r)
            f = ix.cast(memref.LoadOp(args.tidx, [at]).result)
            for jn in range(tn):
                p = vector.LoadOp(v16, args.pbuf, [g, ix.c(jn), r, zero]).result
                vector.StoreOp(arith.MulFOp(p, sbv[jn]).result, args.tbuf, [f, ix.c(jn * TILE_N)])
            scf.YieldOp([])
        scf.YieldOp([])
