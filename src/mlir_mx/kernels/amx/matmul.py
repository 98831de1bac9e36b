"""The guarded AMX-BF16 matmul kernel (issue 51; ``docs/numerics.md``,
"AMX-BF16", the design): C accumulated in the tiles across the K blocks,
with the per-(row, block) fallback's ``t`` added at its block, B widened in
the kernel from the MX codes.

``func @name(a, codes, c, ptr, rows, scales, bptr, bidx, fa)`` (and
``claims``, appended by ``mx-parallel-tasks``):

- ``a``: ``memref<?x?x16x32xbf16>`` (M/16, K/32, 16, 32): the bf16
  activations in tile layout (M padded to 16 with zero rows), the (row,
  block)s that fail the guard already zeroed
  (:func:`mlir_mx.linear.amx_matmul.pack_activations`);
- ``codes``: ``memref<?x?x16xRxi8>`` (N/16, K/32, 16, R): the weight's codes
  in the pair order of each tile row, packed as the format packs (FP4 R =
  16, FP6 24, 8-bit formats 32; :mod:`mlir_mx.kernels.amx.panel`,
  :func:`mlir_mx.linear.amx_matmul.pack_weight`), N padded to 16 with code 0;
- ``c``: ``memref<?x?xf32>`` (M, N padded to 16): written, never read
  before written;
- ``ptr``: ``memref<?xi32>`` ((M/16) K/32 + 1) and ``rows``: ``memref<?xi32>``:
  the failing rows of each (row tile, block), CSR: ``rows[ptr[s]:ptr[s+1]]``
  (row within the tile) for ``s = row_tile * (K/32) + block``;
- ``scales``: ``memref<?x?xi8>`` (K/32, N padded): B's E8M0 scale codes;
- ``bptr`` (K/32 + 1), ``bidx``: the same failing rows by block, as indices
  ``f`` into ``rows``, each block's list padded to a multiple of four by
  repeating one; ``fa``: ``memref<?x?xf32>`` (len(bidx), 32): each entry's
  block of A (as given, f32), packed in that order.

Each thread allocates its own scratch in the prologue (``mx-parallel-tasks``
runs the code around the loop on every thread): the column group's B
``panel`` (K/32 x TN x 16 x 32 bf16, 4 KiB a block for 2 tiles), ``tbuf``
(len(rows) x 32 f32: each ``f``'s ``t`` over the current column group), and
on the stack, aligned to 64 bytes, ``bdec`` and ``cbuf``.

The column groups (``TN`` tiles of 16 columns, the last one 1 tile where
``TN`` does not divide) are one ``scf.parallel``: the threads of a team
claim them one at a time, each group computed whole by one thread, so the
bits do not depend on the thread count or on who ran what.  Per column
group (column groups outer, so the panel stays in cache while every row
group passes over it):

1. the panel: every block's ``b * sb`` widened from the codes
   (:func:`~mlir_mx.kernels.amx.panel.widen_panel`);
2. every failing (row, block)'s ``t = p sb`` into ``tbuf``: per block, B
   read back from the panel as ``(b sb) / sb`` (exact) once, then the
   in-order f32 FMA chains ``p`` of four failing rows at a time (the exact
   path's);
3. per C tile group (``TM`` x ``TN`` tiles of 16 x 16: 2 x 2 where M and N
   allow, four accumulators and two A and two B tiles: the 8 tile
   registers), ``amx.tile_zero``, then per block one ``amx.tile_mulf`` per
   accumulator, the tiles carried by the K loop; at a block where a row of
   one of the group's row tiles fails, that row tile's accumulators are
   stored to ``cbuf``, each failing row gets ``c + t`` (f32 vector add, one
   rounding: the exact path's step), and they are reloaded; at the end
   ``amx.tile_store`` to C.

Weight blocks flagged by ``amx_prepare`` and calls that fail
``amx_guard_call`` never reach this kernel (the driver runs them on the
exact path).  Lowered by ``mx-parallel-tasks`` and
:func:`mlir_mx.pipelines.amx.amx_library_pipeline`
(:func:`mlir_mx.linear.amx_matmul.amx_matmul_runner`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, memref, scf, vector

from mlir_mx.kernels.amx.panel import code_bytes, widen_panel
from mlir_mx.kernels.amx.tile import TILE_K, TILE_M, TILE_N
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import e8m0_to_f32

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


class _Args:
    """The function's arguments by name, and each thread's scratch buffers:
    ``bdec`` (a block's B decoded, 2 x 32 x 16 f32), ``cbuf`` (the C tiles,
    4 x 16 x 16 f32), ``panel`` (the column group's B, nb x TN x 16 x 32
    bf16) and ``tbuf`` (each failing (row, block)'s ``t``, len(rows) x 32
    f32)."""

    NAMES = ("a", "codes", "c", "ptr", "rows", "scales", "bptr", "bidx", "fa")

    def __init__(self, values, kb: KernelBuilder, element: str, **scratch):
        for name, value in zip(self.NAMES, values, strict=True):
            setattr(self, name, value)
        self.kb, self.element = kb, element
        for name, value in scratch.items():
            setattr(self, name, value)


def _splat(value: float) -> ir.Value:
    v16 = ir.VectorType.get([TILE_N], ir.F32Type.get())
    attr = ir.DenseElementsAttr.get_splat(v16, ir.FloatAttr.get(ir.F32Type.get(), value))
    return arith.ConstantOp(v16, attr).result


def _decode(ix: _Ix, args: _Args, j, nts) -> list[ir.Value]:
    """Block ``j``'s B for column tiles ``nts``, unscaled, into ``bdec[jn, k]``
    (16 f32 each): the panel's pair-layout rows widened, split by parity and
    divided by ``sb`` (exact: a power of two, the block not flagged).
    Returns the ``sb`` vectors."""
    f32, kb = ir.F32Type.get(), args.kb
    v32 = ir.VectorType.get([2 * TILE_N], f32)
    v32bf = ir.VectorType.get([2 * TILE_N], ir.BF16Type.get())
    zero, one = ix.c(0), _splat(1.0)
    sbv = []
    for jn, nt in enumerate(nts):
        codes = kb.vload(args.scales, [j, ix.mul(nt, ix.c(TILE_N))], TILE_N)
        sbv.append(e8m0_to_f32(kb, codes))
        inv = arith.DivFOp(one, sbv[-1]).result
        for r in range(TILE_K // 2):
            row = vector.LoadOp(v32bf, args.panel, [j, ix.c(jn), ix.c(r), zero]).result
            pair = arith.ExtFOp(v32, row).result
            for parity in range(2):
                mask = list(range(parity, 2 * TILE_N, 2))
                bk = arith.MulFOp(vector.ShuffleOp(pair, pair, mask).result, inv).result
                vector.StoreOp(bk, args.bdec, [ix.c(jn), ix.c(2 * r + parity), zero])
    return sbv


def _chains(ix: _Ix, args: _Args, j, e, sbv, tn: int) -> None:
    """``t`` of the four failing rows ``bidx[e:e+4]`` of block ``j`` (their A
    blocks ``fa[e:e+4]``) over
    ``tn`` column tiles: the in-order f32 FMA chains ``p = fma(a_k, b_k,
    p)`` from +0 (k = 0..31), then ``t = p sb`` (one rounding: the exact
    path's), into ``tbuf[f, 16 jn:]``.  Eight chains in flight."""
    v16 = ir.VectorType.get([TILE_N], ir.F32Type.get())
    zero = ix.c(0)
    fs = [ix.cast(memref.LoadOp(args.bidx, [ix.add(e, ix.c(i))]).result) for i in range(4)]
    es = [ix.add(e, ix.c(i)) for i in range(4)]
    p = [[_splat(0.0) for _ in range(tn)] for _ in range(4)]
    for k in range(TILE_K):
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


def _precompute(ix: _Ix, args: _Args, nb, nt0, tn: int) -> None:
    """For column group ``nt0``: every failing (row, block)'s ``t`` into
    ``tbuf``, block by block (B decoded once per block), before the row
    groups run (``bptr``/``bidx``: the failing rows of each block, in
    fours)."""
    nts = [ix.add(nt0, ix.c(jn)) for jn in range(tn)]
    loop = scf.ForOp(ix.c(0), nb, ix.c(1))
    with ir.InsertionPoint(loop.body):
        j = loop.induction_variable
        lo = memref.LoadOp(args.bptr, [j]).result
        hi = memref.LoadOp(args.bptr, [ix.add(j, ix.c(1))]).result
        branch = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.slt, lo, hi).result)
        with ir.InsertionPoint(branch.then_block):
            sbv = _decode(ix, args, j, nts)
            rows = scf.ForOp(ix.cast(lo), ix.cast(hi), ix.c(4))
            with ir.InsertionPoint(rows.body):
                _chains(ix, args, j, rows.induction_variable, sbv, tn)
                scf.YieldOp([])
            scf.YieldOp([])
        scf.YieldOp([])


def _fallback(ix: _Ix, args: _Args, accs, s, i: int) -> list[ir.Value]:
    """At a block where rows of row tile ``i`` of the group fail: store its
    accumulators (``accs``, one per column tile) to the scratch ``cbuf``
    (4 KiB, contiguous: C's own rows, 16 KiB apart, would share L1 sets),
    ``c += t`` on each failing row (``t`` from ``tbuf``, f32 add: the exact
    path's step), reload."""
    tn, zero = len(accs), ix.c(0)
    slots = [ix.c(i * tn + jn) for jn in range(tn)]
    for jn in range(tn):
        _store(args.cbuf, [slots[jn], zero, zero], accs[jn])
    v16 = ir.VectorType.get([TILE_N], ir.F32Type.get())
    lo = ix.cast(memref.LoadOp(args.ptr, [s]).result)
    hi = ix.cast(memref.LoadOp(args.ptr, [ix.add(s, ix.c(1))]).result)
    loop = scf.ForOp(lo, hi, ix.c(1))
    with ir.InsertionPoint(loop.body):
        f = loop.induction_variable
        row = ix.cast(memref.LoadOp(args.rows, [f]).result)
        for jn in range(tn):
            at = [slots[jn], row, zero]
            cv = vector.LoadOp(v16, args.cbuf, at).result
            tv = vector.LoadOp(v16, args.tbuf, [f, ix.c(jn * TILE_N)]).result
            vector.StoreOp(arith.AddFOp(cv, tv).result, args.cbuf, at)
        scf.YieldOp([])
    tile_c = _tile("f32", TILE_N)
    return [_load(args.cbuf, [slots[jn], zero, zero], tile_c) for jn in range(tn)]


def _k_loop(ix: _Ix, args, nb, mt0, nt0, tm: int, tn: int) -> None:
    """One group of ``tm`` x ``tn`` C tiles at row tile ``mt0``, column tile
    ``nt0`` (B from the panel): zero, the K loop, store."""
    a, c, ptr = args.a, args.c, args.ptr
    tile_a, tile_b = _tile("bf16", TILE_K), _tile("bf16", TILE_K)
    tile_c = _tile("f32", TILE_N)
    zero = ix.c(0)
    mts = [ix.add(mt0, ix.c(i)) for i in range(tm)]
    m0 = [ix.mul(v, ix.c(TILE_M)) for v in mts]
    n0s = [ix.mul(ix.add(nt0, ix.c(jn)), ix.c(TILE_N)) for jn in range(tn)]
    init = [_zero(tile_c) for _ in range(tm * tn)]
    loop = scf.ForOp(zero, nb, ix.c(1), init)
    with ir.InsertionPoint(loop.body):
        j = loop.induction_variable
        carried = list(loop.inner_iter_args)
        ta = [_load(a, [mts[i], j, zero, zero], tile_a) for i in range(tm)]
        tb = [_load(args.panel, [j, ix.c(jn), zero, zero], tile_b) for jn in range(tn)]
        accs = [[_mulf(ta[i], tb[jn], carried[i * tn + jn]) for jn in range(tn)] for i in range(tm)]
        s = [ix.add(ix.mul(mts[i], nb), j) for i in range(tm)]
        out = []
        for i in range(tm):  # only the row tile(s) with a failing row leave the tiles
            lo = memref.LoadOp(ptr, [s[i]]).result
            hi = memref.LoadOp(ptr, [ix.add(s[i], ix.c(1))]).result
            fails = arith.CmpIOp(arith.CmpIPredicate.slt, lo, hi).result
            branch = scf.IfOp(fails, [tile_c] * tn, has_else=True)
            with ir.InsertionPoint(branch.then_block):
                scf.YieldOp(_fallback(ix, args, accs[i], s[i], i))
            with ir.InsertionPoint(branch.else_block):
                scf.YieldOp(accs[i])
            out += list(branch.results)
        scf.YieldOp(out)
    for i in range(tm):
        for jn in range(tn):
            _store(c, [m0[i], n0s[jn]], loop.results[i * tn + jn])


def _column_group(ix: _Ix, args, mtiles, nb, nt0, tm: int, tn: int) -> None:
    """Column tiles ``nt0 .. nt0 + tn``: B's panel widened from the codes,
    the fallback's ``t`` precomputed, then every row group over the panel
    (``tm`` row tiles, then 1 where ``tm`` does not divide)."""
    widen_panel(args.kb, args.element, args.codes, args.scales, args.panel, nb, nt0, tn)
    _precompute(ix, args, nb, nt0, tn)
    mfull = ix.mul(arith.DivUIOp(mtiles, ix.c(tm)).result, ix.c(tm))
    spans = [(ix.c(0), mfull, tm)] + ([(mfull, mtiles, 1)] if tm > 1 else [])
    for lo, hi, step in spans:
        mloop = scf.ForOp(lo, hi, ix.c(step))
        with ir.InsertionPoint(mloop.body):
            _k_loop(ix, args, nb, mloop.induction_variable, nt0, step, tn)
            scf.YieldOp([])


def _groups(ix: _Ix, args, mtiles, ntiles, nb, tm: int, tn: int) -> None:
    """The column groups of ``tn`` tiles as one ``scf.parallel`` (column
    groups outer: a group's panel stays in cache while every row group
    passes over it; ``mx-parallel-tasks`` lets each thread claim groups),
    the last one of 1 tile where ``tn`` does not divide."""
    kb = args.kb
    groups = kb.ceildivu(ntiles, tn)
    with kb.parallel(0, groups, 1) as g:
        nt0 = kb.mul(g, tn)
        if tn == 1:
            _column_group(ix, args, mtiles, nb, nt0, tm, 1)
        else:
            whole = kb.icmp("sle", kb.add(nt0, tn), ntiles)
            branch = scf.IfOp(whole, [], has_else=True)
            with ir.InsertionPoint(branch.then_block):
                _column_group(ix, args, mtiles, nb, nt0, tm, tn)
                scf.YieldOp([])
            with ir.InsertionPoint(branch.else_block):
                _column_group(ix, args, mtiles, nb, nt0, tm, 1)
                scf.YieldOp([])


def _alloca(shape: list[int], elem: ir.Type) -> ir.Value:
    """A stack scratch aligned to the cache line: its 64-byte rows (a tile's
    rows, a vector each) then never straddle two lines (unaligned, the
    fallback's store, add and reload took about 2x as long: 4.6 against
    2.1 ms at 256 x 4096 x 4096 E2M1, loaded)."""
    i64 = ir.IntegerType.get_signless(64)
    mem = ir.MemRefType.get(shape, elem)
    return memref.AllocaOp(mem, [], [], alignment=ir.IntegerAttr.get(i64, 64)).result


def matmul_module(
    name: str = "amx_matmul", group: tuple[int, int] = (2, 2), element: str = "f4E2M1FN"
) -> ir.Module:
    """A module with ``func @name(a, codes, c, ptr, rows, scales, bptr, bidx,
    fa)`` (the module docstring) for weights in ``element``; C tile groups of
    ``group`` = (row tiles, column tiles), at most 2 x 2 (the tile
    registers); in the current context and location."""
    tm, tn = group
    if not (1 <= tm <= 2 and 1 <= tn <= 2):
        raise ValueError(f"group {group}: at most 2 x 2 C tiles (8 tile registers)")
    bf16, f32, i32 = ir.BF16Type.get(), ir.F32Type.get(), ir.IntegerType.get_signless(32)
    i8 = ir.IntegerType.get_signless(8)
    dyn = ir.ShapedType.get_dynamic_size()
    tiles = ir.MemRefType.get([dyn, dyn, TILE_M, TILE_K], bf16)
    codes = ir.MemRefType.get([dyn, dyn, TILE_K // 2, code_bytes(element)], i8)
    mat, bytes2 = ir.MemRefType.get([dyn, dyn], f32), ir.MemRefType.get([dyn, dyn], i8)
    vec = ir.MemRefType.get([dyn], i32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        ftype = ir.FunctionType.get([tiles, codes, mat, vec, vec, bytes2, vec, vec, mat], [])
        fn = func.FuncOp(name, ftype)
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            ix = _Ix()
            kb = KernelBuilder(ir.InsertionPoint(ix.c(0).owner))  # constants: first
            a, nrows = entry.arguments[0], memref.DimOp(entry.arguments[4], ix.c(0)).result
            mtiles, nb = memref.DimOp(a, ix.c(0)).result, memref.DimOp(a, ix.c(1)).result
            ntiles = memref.DimOp(entry.arguments[1], ix.c(0)).result
            scratch = {  # each thread's own (mx-parallel-tasks: the prologue is per thread)
                "bdec": _alloca([2, TILE_K, TILE_N], f32),
                "cbuf": _alloca([4, TILE_M, TILE_N], f32),
                "panel": kb.alloc([-1, tn, TILE_K // 2, TILE_K], bf16, [nb]),
                "tbuf": kb.alloc([-1, TILE_K], f32, [nrows]),
            }
            args = _Args(entry.arguments, kb, element, **scratch)
            _groups(ix, args, mtiles, ntiles, nb, tm, tn)
            kb.dealloc(args.panel)
            kb.dealloc(args.tbuf)
            func.ReturnOp([])
    return module
