"""The per-call preparation of A for the guarded AMX-BF16 matmul (issue 51;
``docs/numerics.md``, "AMX-BF16"): the guard per (row, block), A packed in
tile layout with the failing (row, block)s zeroed, and the failing ones
listed, in one pass over A (vector dialect; no tile instruction).

``func @name(x, lim, cap, tq, par, tiles, ptr, rows, fblk, cnt)`` (with
``lists``, the serial E8M0 kernel: ``..., cnt, bptr, bidx, fa``, the
by-block lists, :func:`prepare_module`), for weight
blocks of ``B`` = 32 or 16 (NVFP4) along K (``prepare_module``'s ``block``):

- ``x``: ``memref<?x?xf32>`` (M, K): the activations (any f32; each is
  rounded to bf16, nearest even, as ``Linear(activations="bf16")`` does:
  :func:`mlir_mx.kernels.common.codec.round_bf16`);
- ``lim``: ``memref<?xi32>`` (K/B): per weight block ``j``, the per-call
  condition's bound ``-126 - log2 q - log2 sb_min[j]`` on ``log2 g``;
- ``cap``: ``memref<?xf64>`` (K/B): ``2^128 / max(1, sb_max[j])``;
- ``tq``: ``memref<?xf64>`` (K/B): ``2^24 q / m_max[j]`` (``m_max`` the
  largest odd part of the block's scale significands: 1 for E8M0; the
  bound ``(S / g) bmax <= tq[j]`` decides as the oracle's ``(S / g) bmax
  m_max <= 2^24 q``: ``(S / g) bmax`` is an integer, and ``f64(Y / m)``
  lies strictly between the integers around ``Y / m`` where that is not one);
- ``par``: ``memref<4xf64>``: ``bmax``, ``2^24 q`` (read by NVFP4's
  kernel only: the bound with ``m_max`` 1, which decides the tile route;
  ``tq`` holds the guard's bound per block), ``-126 - log2 q``, 0;
- ``tiles``: ``memref<?x?x16xBxi16>`` (M/16 rounded up, K/B, 16, B),
  written: the rounded A's bf16 bits in tile layout, zero in every failing
  (row, block) and in the padding rows (the matmul kernel's ``a``);
- ``ptr``: ``memref<?xi32>`` ((M/16) K/B + 1), ``rows``: ``memref<?xi32>``
  (at least M K/B), written: the failing (row, block)s, CSR by ``s =
  row_tile K/B + block``, each the row within its tile (the matmul
  kernel's ``ptr`` and ``rows``), plus 16 in NVFP4's kernel (``split``)
  where the entry passes with ``(S / g) bmax <= 2^24 q`` and every other
  condition: it fails only because of ``m_max`` and takes the matmul
  kernel's tile route (:func:`mlir_mx.linear.amx_prepare.tile_route` takes
  the 16 off);
- ``fblk``: ``memref<?x?xf32>`` (like ``rows``, B), written: each failing
  one's block of the rounded A, in ``rows``' order;
- ``cnt``: ``memref<4xi32>``, written: the failing (row, block)s, those
  breaking the per-call condition, the blocks holding a value that is not
  bf16 (before rounding), 0 (``lists``: the by-block entries written).

Per (row, block), from the rounded bits with integer vector ops: every
element finite (no exponent field 255); ``L = log2 g``, the smallest
``log2`` of the lowest set significand bit over the finite nonzero
elements (the lowest set bit isolated as ``sig & -sig``, its ``log2`` read
from its f32 conversion's exponent); ``S = sum |a|`` in f64.  Then in f64,
as :func:`mlir_mx.oracle.amx_plan` evaluates it: it passes where finite,
``L >= -126 - log2 q``, ``(S / g) bmax <= tq[j]``, ``S bmax < 2^127`` and
``S bmax < cap[j]``; it breaks the per-call condition where it has a
finite nonzero element and ``L < lim[j]``.  ``S`` is summed in another
order than the oracle's, which decides nothing: where ``S / g <= T <
2^24`` every partial sum is a multiple of ``g`` below ``2^53 g``, exact in
any order, and then every product above is exact; where ``S / g`` is
larger both sums exceed ``T g`` (``docs/numerics.md``).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, memref, scf, vector

from mlir_mx.kernels.amx.tile import TILE_M
from mlir_mx.kernels.common.builder import ArithBuilder
from mlir_mx.kernels.common.codec import round_bf16

__all__ = ["NO_LSB", "prepare_module"]

#: ``L`` of a block with no finite nonzero element (passes the bounds on ``L``).
NO_LSB = 1 << 14


class _Ops:
    """The builder, its types and the function's arguments by name."""

    NAMES = ("x", "lim", "cap", "tq", "par", "tiles", "ptr", "rows", "fblk", "cnt")
    LISTS = ("bptr", "bidx", "fa")  # ``prepare_module(lists=True)``'s

    def __init__(self, values, block: int, split: bool = False):
        names = self.NAMES + (self.LISTS if len(values) > len(self.NAMES) else ())
        for name, value in zip(names, values, strict=True):
            setattr(self, name, value)
        self.block, self.split = block, split
        self.b = ArithBuilder()
        self.f64 = ir.F64Type.get()
        self.i64 = ir.IntegerType.get_signless(64)
        self.index = ir.IndexType.get()

    def c(self, v: int) -> ir.Value:
        return arith.ConstantOp(self.index, v).result

    def ci(self, v: int, t=None) -> ir.Value:
        return self.b.const(v, t or self.b.i32)


def _reduce(kind, v: ir.Value, reassoc: bool = False) -> ir.Value:
    fm = ir.Attribute.parse("#arith.fastmath<reassoc>") if reassoc else None
    return vector.ReductionOp(v.type.element_type, kind, v, fastmath=fm).result


def _block_stats(o: _Ops, v: ir.Value):
    """``(rounded, rbits, L, finite, S, nonbf16)`` of one row's block ``v``
    (vector<B x f32>)."""
    b, K = o.b, vector.CombiningKind
    vi = ir.VectorType.get([o.block], b.i32)
    c = lambda x: b.const(x, vi)  # noqa: E731
    raw = b.bitcast(v, vi)
    nonbf16 = b.cmpi("ne", _reduce(K.OR, b.andi(raw, c(0xFFFF))), o.ci(0))
    rv = round_bf16(b, v)
    bits = b.bitcast(rv, vi)
    e = b.andi(b.shrui(bits, c(23)), c(0xFF))
    mant = b.andi(b.shrui(bits, c(16)), c(0x7F))
    sig = b.select(b.cmpi("ugt", e, c(0)), b.ori(mant, c(0x80)), mant)
    low = b.andi(sig, b.subi(c(0), sig))  # the lowest set bit: 2^t (0 for 0)
    t127 = b.shrui(b.bitcast(b.uitofp(low, ir.VectorType.get([o.block], b.f32)), vi), c(23))
    lk = b.addi(b.subi(t127, c(127)), b.subi(b.maxsi(e, c(1)), c(134)))
    valid = b.andi(b.cmpi("ne", sig, c(0)), b.cmpi("ne", e, c(255)))
    L = _reduce(K.MINSI, b.select(valid, lk, c(NO_LSB)))
    finite = b.cmpi("ne", _reduce(K.MAXUI, e), o.ci(255))
    wide = b.extf(b.absf(rv), ir.VectorType.get([o.block], o.f64))
    s = _reduce(K.ADD, wide, reassoc=True)
    return rv, bits, L, finite, s, nonbf16


def _decide(o: _Ops, j: ir.Value, L, finite, s):
    """``(passes, breaks the per-call condition, passes unscaled)`` of one
    (row, block), i1 each; the last (``o.split``, else None) with the bound
    ``par[1] = 2^24 q`` for ``tq[j]`` (``m_max`` taken as 1)."""
    b, f64 = o.b, o.f64
    bmax, lq = (memref.LoadOp(o.par, [o.c(i)]).result for i in (0, 2))
    t24q, lq = memref.LoadOp(o.tq, [j]).result, b.fptosi(lq, b.i32)
    has_g = b.cmpi("ne", L, o.ci(NO_LSB))
    g = b.bitcast(b.shli(b.extsi(b.addi(L, o.ci(1023)), o.i64), b.const(52, o.i64)), f64)
    ratio = b.select(has_g, b.fdiv(s, g), b.const(0.0, f64))
    sb = b.fmul(s, bmax)
    conds = [
        finite,
        b.cmpi("sge", L, lq),
        b.cmpf("ole", b.fmul(ratio, bmax), t24q),
        b.cmpf("olt", sb, b.const(2.0**127, f64)),
        b.cmpf("olt", sb, memref.LoadOp(o.cap, [j]).result),
    ]
    loose = None
    if o.split:
        conds.append(b.cmpf("ole", b.fmul(ratio, bmax), memref.LoadOp(o.par, [o.c(1)]).result))
        loose = conds[0]
        for cond in conds[:2] + conds[3:]:
            loose = b.andi(loose, cond)
        conds.pop()
    passes = conds[0]
    for cond in conds[1:]:
        passes = b.andi(passes, cond)
    breaks = b.andi(has_g, b.cmpi("slt", L, memref.LoadOp(o.lim, [j]).result))
    return passes, breaks, loose


def _row_block(o: _Ops, m, mt, j, r, f, nc, nn, base=None):
    """One row ``m``'s block ``j``: tile row written, listed if it fails (at
    slot ``base + f``; ``base`` None: 0); returns the counters ``(f, nc, nn)``
    after it."""
    b = o.b
    v32 = ir.VectorType.get([o.block], b.f32)
    col = arith.MulIOp(j, o.c(o.block)).result
    v = vector.LoadOp(v32, o.x, [m, col]).result
    rv, bits, L, finite, s, nonbf16 = _block_stats(o, v)
    passes, breaks, loose = _decide(o, j, L, finite, s)
    vi16 = ir.VectorType.get([o.block], b.i16)
    word = b.trunci(b.shrui(bits, b.const(16, bits.type)), vi16)
    keep = vector.BroadcastOp(ir.VectorType.get([o.block], b.i1), passes).result
    vector.StoreOp(b.select(keep, word, b.const(0, vi16)), o.tiles, [mt, j, r, o.c(0)])
    branch = scf.IfOp(passes, [b.i32], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp([f])
    with ir.InsertionPoint(branch.else_block):
        fi = arith.IndexCastOp(o.index, f).result
        fi = fi if base is None else arith.AddIOp(base, fi).result
        row = arith.IndexCastOp(b.i32, r).result
        if loose is not None:  # the tile route's: row + 16
            row = b.addi(row, b.shli(b.extui(loose, b.i32), o.ci(4)))
        memref.StoreOp(row, o.rows, [fi])
        vector.StoreOp(rv, o.fblk, [fi, o.c(0)])
        scf.YieldOp([b.addi(f, o.ci(1))])
    nc = b.addi(nc, b.extui(breaks, b.i32))
    return branch.result, nc, b.addi(nn, b.extui(nonbf16, b.i32))


def _rows(o: _Ops, mt, j, m_rows, carried, base=None):
    """The 16 rows of row tile ``mt`` at block ``j`` (padding rows zeroed;
    failing ones listed from slot ``base``, :func:`_row_block`)."""
    b = o.b
    loop = scf.ForOp(o.c(0), o.c(TILE_M), o.c(1), carried)
    with ir.InsertionPoint(loop.body):
        r = loop.induction_variable
        f, nc, nn = loop.inner_iter_args
        m = arith.AddIOp(arith.MulIOp(mt, o.c(TILE_M)).result, r).result
        inside = arith.CmpIOp(arith.CmpIPredicate.ult, m, m_rows).result
        branch = scf.IfOp(inside, [b.i32] * 3, has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp(list(_row_block(o, m, mt, j, r, f, nc, nn, base)))
        with ir.InsertionPoint(branch.else_block):
            zero = b.const(0, ir.VectorType.get([o.block], b.i16))
            vector.StoreOp(zero, o.tiles, [mt, j, r, o.c(0)])
            scf.YieldOp([f, nc, nn])
        scf.YieldOp(list(branch.results))
    return list(loop.results)


def _body(o: _Ops) -> None:
    m_rows = memref.DimOp(o.x, o.c(0)).result
    mtiles = memref.DimOp(o.tiles, o.c(0)).result
    nb = memref.DimOp(o.tiles, o.c(1)).result
    memref.StoreOp(o.ci(0), o.ptr, [o.c(0)])
    outer = scf.ForOp(o.c(0), mtiles, o.c(1), [o.ci(0)] * 3)
    with ir.InsertionPoint(outer.body):
        mt = outer.induction_variable
        inner = scf.ForOp(o.c(0), nb, o.c(1), list(outer.inner_iter_args))
        with ir.InsertionPoint(inner.body):
            j = inner.induction_variable
            out = _rows(o, mt, j, m_rows, list(inner.inner_iter_args))
            s = arith.AddIOp(arith.MulIOp(mt, nb).result, j).result
            memref.StoreOp(out[0], o.ptr, [arith.AddIOp(s, o.c(1)).result])
            scf.YieldOp(out)
        scf.YieldOp(list(inner.results))
    if not hasattr(o, "bidx"):
        for i, value in enumerate([*outer.results, o.ci(0)]):
            memref.StoreOp(value, o.cnt, [o.c(i)])
        return
    size = _lists(o, mtiles, nb)
    for i, value in enumerate([*outer.results, arith.IndexCastOp(o.b.i32, size).result]):
        memref.StoreOp(value, o.cnt, [o.c(i)])


def _copy_entry(o: _Ops, src: ir.Value, at: ir.Value, fblk: ir.Value) -> None:
    """``bidx[at] = src`` and ``fa[at] = fblk[src]`` (one block)."""
    memref.StoreOp(arith.IndexCastOp(o.b.i32, src).result, o.bidx, [at])
    v32 = ir.VectorType.get([o.block], o.b.f32)
    vector.StoreOp(vector.LoadOp(v32, fblk, [src, o.c(0)]).result, o.fa, [at, o.c(0)])


def _lists(o: _Ops, mtiles: ir.Value, nb: ir.Value) -> ir.Value:
    """The by-block lists after the pass (``lists``): per block ``j``, the
    failing entries of its row tiles in turn (``ptr``'s runs ``s = mt nb +
    j``), then repeated in turn up to a multiple of four, into ``bidx``
    (indices into ``rows``) and their A blocks into ``fa``; ``bptr[j + 1]``
    the end.  Returns the entries written (index)."""
    memref.StoreOp(o.ci(0), o.bptr, [o.c(0)])
    blocks = scf.ForOp(o.c(0), nb, o.c(1), [o.c(0)])
    with ir.InsertionPoint(blocks.body):
        j, start = blocks.induction_variable, blocks.inner_iter_args[0]
        tiles = scf.ForOp(o.c(0), mtiles, o.c(1), [start])
        with ir.InsertionPoint(tiles.body):
            s = arith.AddIOp(arith.MulIOp(tiles.induction_variable, nb).result, j).result
            lo, hi = (arith.IndexCastOp(o.index, memref.LoadOp(o.ptr, [i]).result).result
                      for i in (s, arith.AddIOp(s, o.c(1)).result))  # fmt: skip
            run = scf.ForOp(lo, hi, o.c(1), [tiles.inner_iter_args[0]])
            with ir.InsertionPoint(run.body):
                at = run.inner_iter_args[0]
                _copy_entry(o, run.induction_variable, at, o.fblk)
                scf.YieldOp([arith.AddIOp(at, o.c(1)).result])
            scf.YieldOp(list(run.results))
        end = tiles.results[0]
        count = arith.SubIOp(end, start).result
        fours = arith.MulIOp(arith.DivUIOp(arith.AddIOp(count, o.c(3)).result, o.c(4)).result,
                             o.c(4)).result  # fmt: skip
        stop = arith.AddIOp(start, fours).result
        pad = scf.ForOp(end, stop, o.c(1))  # runs only where count > 0
        with ir.InsertionPoint(pad.body):
            q = pad.induction_variable
            src = arith.AddIOp(start, arith.RemUIOp(arith.SubIOp(q, start).result, count).result)
            entry = arith.IndexCastOp(o.index, memref.LoadOp(o.bidx, [src.result]).result).result
            _copy_entry(o, entry, q, o.fblk)
            scf.YieldOp([])
        memref.StoreOp(arith.IndexCastOp(o.b.i32, stop).result, o.bptr,
                       [arith.AddIOp(j, o.c(1)).result])  # fmt: skip
        scf.YieldOp([stop])
    return blocks.results[0]


def _body_tiles(o: _Ops) -> None:
    """The row tiles as one ``scf.parallel`` (``mx-parallel-tasks``: a team
    claims them one at a time), each tile writing only its own slots: its
    entries of ``ptr`` counted from 0 within the tile, its failing ones in
    ``rows``/``fblk`` from slot ``16 mt K/B`` (a tile has at most 16 K/B),
    its counters at ``cnt[4 mt : 4 mt + 4]``; ``ptr[0]`` not written.  The
    caller adds the tiles' bases and packs the slots (the serial kernel's
    arrays, bit for bit: :func:`mlir_mx.linear.amx_prepare.prepare_activations`)."""
    m_rows = memref.DimOp(o.x, o.c(0)).result
    mtiles = memref.DimOp(o.tiles, o.c(0)).result
    nb = memref.DimOp(o.tiles, o.c(1)).result
    loop = scf.ParallelOp([], [o.c(0)], [mtiles], [o.c(1)], [])
    body = loop.regions[0].blocks.append(o.index)
    with ir.InsertionPoint(body):
        mt = body.arguments[0]
        base = arith.MulIOp(arith.MulIOp(mt, nb).result, o.c(TILE_M)).result
        inner = scf.ForOp(o.c(0), nb, o.c(1), [o.ci(0)] * 3)
        with ir.InsertionPoint(inner.body):
            j = inner.induction_variable
            out = _rows(o, mt, j, m_rows, list(inner.inner_iter_args), base)
            s = arith.AddIOp(arith.MulIOp(mt, nb).result, j).result
            memref.StoreOp(out[0], o.ptr, [arith.AddIOp(s, o.c(1)).result])
            scf.YieldOp(out)
        at = arith.MulIOp(mt, o.c(4)).result
        for i, value in enumerate([*inner.results, o.ci(0)]):
            memref.StoreOp(value, o.cnt, [arith.AddIOp(at, o.c(i)).result])
        scf.ReduceOp([], 0)


def prepare_module(
    name: str = "amx_prepare",
    block: int = 32,
    tiles: bool = False,
    split: bool | None = None,
    lists: bool = False,
) -> ir.Module:
    """A module with ``func @name(x, lim, cap, tq, par, tiles, ptr, rows,
    fblk, cnt)`` (the module docstring) for weight blocks of ``block`` (32,
    or NVFP4's 16); in the current context and location.  ``tiles``: the
    row tiles in parallel (:func:`_body_tiles`; ``cnt`` then holds 4 per
    row tile).  ``split`` (default: ``block == 16``, NVFP4): a failing
    entry that passes the guard with ``2^24 q`` for ``tq[j]`` (it fails only
    because of ``m_max``: the matmul kernel's tile route) is listed as its
    row + 16.  ``lists`` (the serial kernel without ``split``): three more
    arguments ``bptr`` (``memref<?xi32>``, K/B + 1), ``bidx``
    (``memref<?xi32>``) and ``fa`` (``memref<?x?xf32>``, B), each at least
    (M K/B + 3 K/B) long, written with the by-block lists and their A
    blocks (:func:`_lists`; ``cnt[3]`` the entries written): the arrays of
    :func:`mlir_mx.linear.amx_prepare.by_block` and its ``fa``."""
    split = block == 16 if split is None else split
    if lists and (tiles or split):
        raise ValueError("lists: the serial kernel without split only")
    f32, f64 = ir.F32Type.get(), ir.F64Type.get()
    i16, i32 = ir.IntegerType.get_signless(16), ir.IntegerType.get_signless(32)
    dyn = ir.ShapedType.get_dynamic_size()
    mat = ir.MemRefType.get([dyn, dyn], f32)
    ivec = ir.MemRefType.get([dyn], i32)
    fvec = ir.MemRefType.get([dyn], f64)
    types = [
        mat, ivec, fvec, fvec, ir.MemRefType.get([4], f64),
        ir.MemRefType.get([dyn, dyn, TILE_M, block], i16), ivec, ivec, mat,
        ivec if tiles else ir.MemRefType.get([4], i32),
    ] + ([ivec, ivec, mat] if lists else [])  # fmt: skip
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(name, ir.FunctionType.get(types, []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            (_body_tiles if tiles else _body)(_Ops(entry.arguments, block, split))
            func.ReturnOp([])
    return module
