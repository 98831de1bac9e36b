"""The guarded AMX-BF16 matmul kernel (issue 51; ``docs/numerics.md``,
"AMX-BF16", the design): C accumulated in the tiles across the K blocks,
with the per-(row, block) fallback's ``t`` added at its block.

``func @name(a, b, c, ptr, rows, af, sb)``:

- ``a``: ``memref<?x?x16x32xbf16>`` (M/16, K/32, 16, 32): the bf16
  activations in tile layout (M padded to 16 with zero rows), the (row,
  block)s that fail the guard already zeroed
  (:func:`mlir_mx.linear.amx_matmul.pack_activations`);
- ``b``: ``memref<?x?x16x32xbf16>`` (N/16, K/32, 16, 32): each block's
  ``b * sb`` in AMX's pair layout (:class:`mlir_mx.oracle.AMXWeight`'s
  ``tiles``), cut into 16-column tiles (N padded to 16 with zero columns);
- ``c``: ``memref<?x?xf32>`` (M, N padded to 16): written, never read
  before written;
- ``ptr``: ``memref<?xi32>`` ((M/16) K/32 + 1) and ``rows``: ``memref<?xi32>``:
  the failing rows of each (row tile, block), CSR: ``rows[ptr[s]:ptr[s+1]]``
  (row within the tile) for ``s = row_tile * (K/32) + block``;
- ``af``: ``memref<?x?xf32>`` (M, K): A as given (the failing rows' chains
  read it); ``sb``: ``memref<?x?xf32>`` (K/32, N padded): B's block scales.

Per C tile group (``TM`` x ``TN`` tiles of 16 x 16: 2 x 2 where M and N
allow, four accumulators and two A and two B tiles: the 8 tile registers),
``amx.tile_zero``, then per block one ``amx.tile_mulf`` per accumulator; at a
block where a row of the row tile fails, the accumulators are stored to C,
each failing row gets ``c + t`` (f32 vector add, one rounding: the exact
path's step) with ``t = p sb`` from the in-order f32 FMA chain ``p`` over
the block (B read back from its tile as ``(b sb) / sb``, exact), and the
tiles are reloaded; at the end ``amx.tile_store``.
Weight blocks flagged by ``amx_prepare`` and calls that fail
``amx_guard_call`` never reach this kernel (the driver runs them on the
exact path).  Lowered by :func:`mlir_mx.pipelines.amx.amx_library_pipeline`.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, memref, scf, vector

from mlir_mx.kernels.amx.tile import TILE_K, TILE_M, TILE_N

__all__ = ["matmul_module"]


def _tile(elem: str, cols: int) -> ir.Type:
    return ir.Type.parse(f"!amx.tile<16x{cols}x{elem}>")


def _load(base: ir.Value, idx: list[ir.Value], tile: ir.Type) -> ir.Value:
    return ir.Operation.create(
        "amx.tile_load",
        results=[tile],
        operands=[base, *idx],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, len(idx), 0])},
    ).result


def _store(base: ir.Value, idx: list[ir.Value], value: ir.Value) -> None:
    ir.Operation.create(
        "amx.tile_store",
        operands=[base, *idx, value],
        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, len(idx), 1, 0])},
    )


def _zero(tile: ir.Type) -> ir.Value:
    return ir.Operation.create("amx.tile_zero", results=[tile]).result


def _mulf(a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    return ir.Operation.create("amx.tile_mulf", results=[c.type], operands=[a, b, c]).result


class _Ix:
    """Index constants and arithmetic in the current insertion point."""

    def __init__(self):
        self.index = ir.IndexType.get()

    def c(self, v: int) -> ir.Value:
        return arith.ConstantOp(self.index, v).result

    def add(self, x, y):
        return arith.AddIOp(x, y).result

    def mul(self, x, y):
        return arith.MulIOp(x, y).result

    def cast(self, v: ir.Value) -> ir.Value:
        return arith.IndexCastOp(self.index, v).result


def _chain_t(ix: _Ix, args, j, grow, nt, inv, sbv) -> ir.Value:
    """One failing row's ``t`` over one column tile: the in-order f32 FMA
    chain over block ``j`` from +0 (``p = fma(a_k, b_k, p)``, k = 0..31),
    ``b_k`` read back from the pair-layout tile as ``(b sb) / sb`` (exact:
    a power of two, the block not flagged), then ``t = p sb`` (one rounding:
    the exact path's)."""
    a, b, c, ptr, rows, af, sb = args
    f32 = ir.F32Type.get()
    v16, v32 = ir.VectorType.get([TILE_N], f32), ir.VectorType.get([2 * TILE_N], f32)
    v32bf = ir.VectorType.get([2 * TILE_N], ir.BF16Type.get())
    zero = ix.c(0)
    k0 = ix.mul(j, ix.c(TILE_K))
    p = arith.ConstantOp(v16, ir.DenseElementsAttr.get_splat(v16, ir.FloatAttr.get(f32, 0.0)))
    p = p.result
    for r in range(TILE_K // 2):
        pair = arith.ExtFOp(v32, vector.LoadOp(v32bf, b, [nt, j, ix.c(r), zero]).result).result
        for parity in range(2):
            mask = list(range(parity, 2 * TILE_N, 2))
            bk = arith.MulFOp(vector.ShuffleOp(pair, pair, mask).result, inv).result
            ak = memref.LoadOp(af, [grow, ix.add(k0, ix.c(2 * r + parity))]).result
            p = vector.FMAOp(vector.BroadcastOp(v16, ak).result, bk, p).result
    return arith.MulFOp(p, sbv).result


def _fallback(ix: _Ix, args, accs, j, s, m0, nts) -> list[ir.Value]:
    """At a block where rows of the row tile(s) fail: store the
    accumulators, ``c += t`` on each failing row (:func:`_chain_t`), reload
    (the new values)."""
    a, b, c, ptr, rows, af, sb = args
    tm, tn = len(accs), len(accs[0])
    n0s = [ix.mul(v, ix.c(TILE_N)) for v in nts]
    for i in range(tm):
        for jn in range(tn):
            _store(c, [m0[i], n0s[jn]], accs[i][jn])
    f32 = ir.F32Type.get()
    v16 = ir.VectorType.get([TILE_N], f32)
    one = arith.ConstantOp(v16, ir.DenseElementsAttr.get_splat(v16, ir.FloatAttr.get(f32, 1.0)))
    sbv = [vector.LoadOp(v16, sb, [j, n0]).result for n0 in n0s]
    inv = [arith.DivFOp(one.result, v).result for v in sbv]
    for i in range(tm):
        lo = ix.cast(memref.LoadOp(ptr, [s[i]]).result)
        hi = ix.cast(memref.LoadOp(ptr, [ix.add(s[i], ix.c(1))]).result)
        loop = scf.ForOp(lo, hi, ix.c(1))
        with ir.InsertionPoint(loop.body):
            row = ix.add(m0[i], ix.cast(memref.LoadOp(rows, [loop.induction_variable]).result))
            for jn in range(tn):
                t = _chain_t(ix, args, j, row, nts[jn], inv[jn], sbv[jn])
                cv = vector.LoadOp(v16, c, [row, n0s[jn]]).result
                vector.StoreOp(arith.AddFOp(cv, t).result, c, [row, n0s[jn]])
            scf.YieldOp([])
    tile_c = _tile("f32", TILE_N)
    return [_load(c, [m0[i], n0s[jn]], tile_c) for i in range(tm) for jn in range(tn)]


def _k_loop(ix: _Ix, args, nb, mt0, nt0, tm: int, tn: int) -> None:
    """One group of ``tm`` x ``tn`` C tiles at row tile ``mt0``, column tile
    ``nt0``: zero, the K loop, store."""
    a, b, c, ptr, rows, _af, _sb = args
    tile_a, tile_b = _tile("bf16", TILE_K), _tile("bf16", TILE_K)
    tile_c = _tile("f32", TILE_N)
    zero = ix.c(0)
    mts = [ix.add(mt0, ix.c(i)) for i in range(tm)]
    nts = [ix.add(nt0, ix.c(j)) for j in range(tn)]
    m0 = [ix.mul(v, ix.c(TILE_M)) for v in mts]
    n0s = [ix.mul(v, ix.c(TILE_N)) for v in nts]
    init = [_zero(tile_c) for _ in range(tm * tn)]
    loop = scf.ForOp(zero, nb, ix.c(1), init)
    with ir.InsertionPoint(loop.body):
        j = loop.induction_variable
        carried = list(loop.inner_iter_args)
        ta = [_load(a, [mts[i], j, zero, zero], tile_a) for i in range(tm)]
        tb = [_load(b, [nts[jn], j, zero, zero], tile_b) for jn in range(tn)]
        accs = [[_mulf(ta[i], tb[jn], carried[i * tn + jn]) for jn in range(tn)] for i in range(tm)]
        s = [ix.add(ix.mul(mts[i], nb), j) for i in range(tm)]
        any_fail = None
        for i in range(tm):
            lo = memref.LoadOp(ptr, [s[i]]).result
            hi = memref.LoadOp(ptr, [ix.add(s[i], ix.c(1))]).result
            fails = arith.CmpIOp(arith.CmpIPredicate.slt, lo, hi).result
            any_fail = fails if any_fail is None else arith.OrIOp(any_fail, fails).result
        flat = [v for row in accs for v in row]
        branch = scf.IfOp(any_fail, [tile_c] * len(flat), has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp(_fallback(ix, args, accs, j, s, m0, nts))
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp(flat)
        scf.YieldOp(list(branch.results))
    for i in range(tm):
        for jn in range(tn):
            _store(c, [m0[i], n0s[jn]], loop.results[i * tn + jn])


def _groups(ix: _Ix, args, mtiles, ntiles, nb, tm: int, tn: int) -> None:
    """The loops over C tile groups: ``tm`` x ``tn`` tiles over the full
    groups, then ``tm`` x 1 over the last column tile where ``tn`` does not
    divide, then 1 x 1 over the last row tile where ``tm`` does not."""
    mfull = ix.mul(arith.DivUIOp(mtiles, ix.c(tm)).result, ix.c(tm))
    nfull = ix.mul(arith.DivUIOp(ntiles, ix.c(tn)).result, ix.c(tn))
    regions = [((ix.c(0), mfull, tm), (ix.c(0), nfull, tn))]
    if tn > 1:
        regions.append(((ix.c(0), mfull, tm), (nfull, ntiles, 1)))
    if tm > 1:
        regions.append(((mfull, mtiles, 1), (ix.c(0), ntiles, 1)))
    for (m_lo, m_hi, m_n), (n_lo, n_hi, n_n) in regions:
        # N outer: a column group's B panel (K/32 KiB per tile) stays in
        # cache while every row group passes over it.
        nloop = scf.ForOp(n_lo, n_hi, ix.c(n_n))
        with ir.InsertionPoint(nloop.body):
            mloop = scf.ForOp(m_lo, m_hi, ix.c(m_n))
            with ir.InsertionPoint(mloop.body):
                _k_loop(ix, args, nb, mloop.induction_variable, nloop.induction_variable, m_n, n_n)
                scf.YieldOp([])
            scf.YieldOp([])


def matmul_module(name: str = "amx_matmul", group: tuple[int, int] = (2, 2)) -> ir.Module:
    """A module with ``func @name(a, b, c, ptr, rows, af, sb)`` (the module
    docstring); C tile groups of ``group`` = (row tiles, column tiles), at
    most 2 x 2 (the tile registers); in the current context and location."""
    tm, tn = group
    if not (1 <= tm <= 2 and 1 <= tn <= 2):
        raise ValueError(f"group {group}: at most 2 x 2 C tiles (8 tile registers)")
    bf16, f32, i32 = ir.BF16Type.get(), ir.F32Type.get(), ir.IntegerType.get_signless(32)
    dyn = ir.ShapedType.get_dynamic_size()
    tiles = ir.MemRefType.get([dyn, dyn, TILE_M, TILE_K], bf16)
    mat = ir.MemRefType.get([dyn, dyn], f32)
    vec = ir.MemRefType.get([dyn], i32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        ftype = ir.FunctionType.get([tiles, tiles, mat, vec, vec, mat, mat], [])
        fn = func.FuncOp(name, ftype)
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            ix = _Ix()
            args = list(entry.arguments)
            mtiles = memref.DimOp(args[0], ix.c(0)).result
            nb = memref.DimOp(args[0], ix.c(1)).result
            ntiles = memref.DimOp(args[1], ix.c(0)).result
            _groups(ix, args, mtiles, ntiles, nb, tm, tn)
            func.ReturnOp([])
    return module
