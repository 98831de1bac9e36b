"""The guarded AMX-BF16 matmul kernel (issue 51; ``docs/numerics.md``,
"AMX-BF16", the design): C accumulated in the tiles across the K blocks,
with the per-(row, block) fallback's ``t`` added at its block, B widened in
the kernel from the MX codes.  Below, blocks of 32 with E8M0 scales; with
``block=16`` and E4M3 scales (NVFP4; issue 54, docs/numerics.md, "NVFP4 on
AMX") every 32 along K reads 16: A tiles of 16 x 16 bf16, B tiles of 8 pair
rows, one ``amx.tile_mulf`` per block, the scales decoded from E4M3.

``func @name(a, codes, c, ptr, rows, scales, bptr, bidx, fa)`` (NVFP4:
then ``tptr, tidx, ta``; and ``claims``, appended by ``mx-parallel-tasks``):

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
  block of A (as given, f32), packed in that order;
- NVFP4 only (E4M3 scales: the tile route, issue 54, session 57;
  :mod:`mlir_mx.kernels.amx.fallback`): ``tptr`` (K/16 + 1), ``tidx``: the
  failing rows of each block that fail only because of the scales' odd
  part, taken out of ``bptr``/``bidx``, padded to a multiple of 16;
  ``ta``: ``memref<?x16xbf16>`` (len(tidx), 16): their A blocks, 16 to an
  A tile.

Each thread allocates its own scratch in the prologue (``mx-parallel-tasks``
runs the code around the loop on every thread): the chunk's B ``panel``
(chunk x TN x 16 x 32 bf16, 2 KiB a block for 2 tiles), ``tbuf``
(len(rows) x 32 f32: each ``f``'s ``t`` over the current column group),
``cacc`` (an item's C tiles between K chunks: M/16 x 8 TN x 16 x 16 f32),
and on the stack, aligned to 64 bytes, ``bdec`` and ``cbuf`` (and NVFP4's
``braw``).

The column groups (``TN`` tiles of 16 columns, the last one 1 tile where
``TN`` does not divide) come in items of up to 8 (``ITEM_GROUPS``; fewer
where that would leave under 8 items), the items one ``scf.parallel``: the
threads of a team claim them one at a time, each item computed whole by
one thread, so the bits do not depend on the thread count or on who ran
what.  Per item, K in chunks of 8 blocks (``CHUNK``), chunks outer, so the
chunk's A (M x 256 bf16) is read from L2 by every column group of the item
(K whole, one group an item, where A has at most 1,024 tiles, 1 MiB, or M
is over 1,024 rows: ``order.k_chunk``).  Before session 55 the whole K loop ran
per column group, reading all of A (2 MiB at M = 256, K = 4096) from L3
for every 32 columns (docs/numerics.md, "Where the tiles' time goes").
Per chunk and column group (M of one row group: 1 and 2 block by block in a ring, ``order``):

1. the panel: the chunk's blocks' ``b * sb`` widened from the codes
   (:func:`~mlir_mx.kernels.amx.panel.widen_panel`);
2. every failing (row, block)'s ``t = p sb`` of the chunk into ``tbuf``:
   per block, B decoded unscaled once (E8M0: read back from the panel as
   ``(b sb) / sb``, exact; E4M3: widened again from the codes), then the
   in-order f32 FMA chains ``p`` of four failing rows at a time (the exact
   path's), and for NVFP4 the tile route: ``p`` of 16 entries at a time by
   one ``TDPBF16PS`` from a zero tile against B's unscaled codes (exact
   where ``S/g <= T``), ``t = f32(p s)`` (:mod:`~mlir_mx.kernels.amx.fallback`);
3. per C tile group (``TM`` x ``TN`` tiles of 16 x 16: 2 x 2 where M and N
   allow, four accumulators and two A and two B tiles: the 8 tile
   registers), ``amx.tile_zero`` in the first chunk, else ``amx.tile_load``
   from ``cacc`` (exact: the bits move), then per block one
   ``amx.tile_mulf`` per accumulator, the tiles carried by the K loop;
   after each even block ``j`` where a row of one of the group's row tiles
   fails at ``j`` or ``j + 1``, that row tile's accumulators are stored to
   ``cbuf``, each such row gets ``c + t`` (f32 vector add, one rounding: the
   exact path's step; block ``j``'s rows first), and they are reloaded (a
   block's product leaves a row whose A block is zeroed as it is, so ``t``
   may go in just before or just after it: docs/numerics.md, "One stop for
   two blocks"); at the chunk's end ``amx.tile_store`` to ``cacc``, or to C
   after the last chunk.

Weight blocks flagged by ``amx_prepare`` and calls that fail
``amx_guard_call`` never reach this kernel (the driver runs them on the
exact path).  Lowered by ``mx-parallel-tasks`` and
:func:`mlir_mx.pipelines.amx.amx_library_pipeline`
(:func:`mlir_mx.linear.amx_matmul.amx_matmul_runner`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, memref, scf, vector

from mlir_mx.kernels.amx import order
from mlir_mx.kernels.amx.fallback import chains, decode_block, tile_ts
from mlir_mx.kernels.amx.panel import code_bytes, widen_panel
from mlir_mx.kernels.amx.tile import (
    TILE_M,
    TILE_N,
    tile_load,
    tile_mulf,
    tile_store,
    tile_type,
    tile_zero,
)
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.numerics.formats import SCALE_TYPE

__all__ = ["matmul_module"]


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
    ``bdec`` (a block's B decoded, 2 x bs x 16 f32), ``cbuf`` (the C tiles,
    4 x 16 x 16 f32), ``panel`` (the column group's B, nb x TN x bs/2 x 32
    bf16), ``tbuf`` (each failing (row, block)'s ``t``, len(rows) x 32
    f32) and, with the tile route (``tiles``: NVFP4), ``braw`` (a block's B
    unscaled, 2 x 8 x 32 bf16) and ``pbuf`` (a block's tile-route products,
    M/16 x TN x 16 x 16 f32)."""

    NAMES = ("a", "codes", "c", "ptr", "rows", "scales", "bptr", "bidx", "fa")
    #: The tile route's arguments (NVFP4's kernel only).
    TILE_NAMES = ("tptr", "tidx", "ta")

    def __init__(self, values, kb: KernelBuilder, element: str, block: int, scale_type: str,
                 **scratch):  # fmt: skip
        self.tiles = len(values) > len(self.NAMES)
        names = self.NAMES + (self.TILE_NAMES if self.tiles else ())
        for name, value in zip(names, values, strict=True):
            setattr(self, name, value)
        self.kb, self.element, self.block, self.scale_type = kb, element, block, scale_type
        for name, value in scratch.items():
            setattr(self, name, value)


def _precompute(ix: _Ix, args: _Args, span, nt0, tn: int, route: bool = True) -> None:
    """For column group ``nt0`` and the K chunk ``span`` (blocks ``j0 <= j <
    j1``): every failing (row, block)'s ``t`` into ``tbuf``, block by block
    (B decoded once per block), before the row groups run (``bptr``/``bidx``:
    the chains' failing rows of each block, in fours; NVFP4's
    ``tptr``/``tidx``: the tile route's, in sixteens:
    :mod:`mlir_mx.kernels.amx.fallback`)."""
    nts = [ix.add(nt0, ix.c(jn)) for jn in range(tn)]
    loop = scf.ForOp(span.j0, span.j1, ix.c(1))
    with ir.InsertionPoint(loop.body):
        j = loop.induction_variable
        lo = memref.LoadOp(args.bptr, [j]).result
        hi = memref.LoadOp(args.bptr, [ix.add(j, ix.c(1))]).result
        any_ = arith.CmpIOp(arith.CmpIPredicate.slt, lo, hi).result
        route = route and args.tiles  # NVFP4's tile route: never in the ring (order.RING_TILES)
        if route:  # or tile-route entries
            tlo = memref.LoadOp(args.tptr, [j]).result
            thi = memref.LoadOp(args.tptr, [ix.add(j, ix.c(1))]).result
            any_ = arith.OrIOp(any_, arith.CmpIOp(arith.CmpIPredicate.slt, tlo, thi)).result
        branch = scf.IfOp(any_)
        with ir.InsertionPoint(branch.then_block):
            sbv = decode_block(ix, args, j, arith.SubIOp(j, span.j0).result, nts)
            rows = scf.ForOp(ix.cast(lo), ix.cast(hi), ix.c(4))
            with ir.InsertionPoint(rows.body):
                chains(ix, args, rows.induction_variable, sbv, tn)
                scf.YieldOp([])
            if route:
                tile_ts(ix, args, tlo, thi, sbv, tn)
            scf.YieldOp([])
        scf.YieldOp([])


def _fallback(ix: _Ix, args: _Args, accs, lo, hi, i: int) -> list[ir.Value]:
    """Where rows of row tile ``i`` of the group fail (``rows[lo:hi]``, in
    block order): store its accumulators (``accs``, one per column tile) to
    the scratch ``cbuf`` (4 KiB, contiguous: C's own rows, 16 KiB apart,
    would share L1 sets), ``c += t`` on each failing row in turn (``t`` from
    ``tbuf``, f32 add: the exact path's step), reload."""
    tn, zero = len(accs), ix.c(0)
    slots = [ix.c(i * tn + jn) for jn in range(tn)]
    for jn in range(tn):
        tile_store(args.cbuf, [slots[jn], zero, zero], accs[jn])
    v16 = ir.VectorType.get([TILE_N], ir.F32Type.get())
    loop = scf.ForOp(ix.cast(lo), ix.cast(hi), ix.c(1))
    with ir.InsertionPoint(loop.body):
        f = loop.induction_variable
        row = ix.cast(memref.LoadOp(args.rows, [f]).result)
        for jn in range(tn):
            at = [slots[jn], row, zero]
            cv = vector.LoadOp(v16, args.cbuf, at).result
            tv = vector.LoadOp(v16, args.tbuf, [f, ix.c(jn * TILE_N)]).result
            vector.StoreOp(arith.AddFOp(cv, tv).result, args.cbuf, at)
        scf.YieldOp([])
    tile_c = tile_type(TILE_M, TILE_N, "f32")
    return [tile_load(args.cbuf, [slots[jn], zero, zero], tile_c) for jn in range(tn)]


def _ring_fill(ix: _Ix, args, span, nt0, tn: int, b) -> None:
    """Block ``b``, if in the chunk, widened into its ring slot (:mod:`.order`),
    then its failing rows' ``t`` (``_precompute``, B read back from the slot)."""
    kb = args.kb
    with kb.if_(kb.icmp("slt", b, span.j1)):
        s = order.ring_slot(kb, b, span.j0)
        widen_panel(kb, args.element, args.codes, args.scales, args.panel, kb.add(b, 1), nt0,
                    tn, b, None, args.block, args.scale_type, at=s)  # fmt: skip
        panel, shape = args.panel, [1, tn, args.block // 2, 2 * TILE_N]
        args.panel = memref.subview(panel, [s, 0, 0, 0], shape, [1, 1, 1, 1])  # one block
        _precompute(ix, args, order.Span(b, kb.add(b, 1), span.slot), nt0, tn, route=False)
        args.panel = panel


def _k_step(ix: _Ix, args, j, jp, mts, carried, tn: int) -> list[ir.Value]:
    """Block ``j`` (B at panel slot ``jp``) on the carried C tiles of row
    tiles ``mts``: one ``amx.tile_mulf`` per tile, then, after an even block,
    the stop of the row tiles with a failing row at ``j`` or ``j + 1``."""
    a, ptr, nb, zero, tm = args.a, args.ptr, args.nb, ix.c(0), len(mts)
    tile_a, tile_b = tile_type(TILE_M, args.block, "bf16"), tile_type(args.block // 2, 2 * TILE_N, "bf16")
    ta = [tile_load(a, [mts[i], j, zero, zero], tile_a) for i in range(tm)]
    tb = [tile_load(args.panel, [jp, ix.c(jn), zero, zero], tile_b) for jn in range(tn)]
    accs = [[tile_mulf(ta[i], tb[jn], carried[i * tn + jn]) for jn in range(tn)] for i in range(tm)]
    s = [ix.add(ix.mul(mts[i], nb), j) for i in range(tm)]
    out = []
    # one stop after each even block j for the failing rows of j and j + 1
    # (the product of a block leaves a row whose A block is zeroed as it is)
    even = arith.CmpIOp(arith.CmpIPredicate.eq, arith.AndIOp(j, ix.c(1)).result, zero)
    pair = arith.MinSIOp(ix.c(2), arith.SubIOp(nb, j).result).result
    for i in range(tm):  # only the row tile(s) with a failing row leave the tiles
        lo = memref.LoadOp(ptr, [s[i]]).result
        hi = memref.LoadOp(ptr, [ix.add(s[i], pair)]).result
        fails = arith.CmpIOp(arith.CmpIPredicate.slt, lo, hi).result
        branch = scf.IfOp(arith.AndIOp(even.result, fails).result, [accs[i][0].type] * tn,
                          has_else=True)  # fmt: skip
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp(_fallback(ix, args, accs[i], lo, hi, i))
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp(accs[i])
        out += list(branch.results)
    return out


def _k_loop(ix: _Ix, args, span, mt0, nt0, tm: int, tn: int, ring: bool = False) -> None:
    """One group of ``tm`` x ``tn`` C tiles at row tile ``mt0``, column tile
    ``nt0`` over the K chunk ``span`` (B from the chunk's panel): the tiles
    zeroed in the first chunk, else loaded from ``cacc`` (where the chunk
    before stored them: exact, a tile store and load move the bits), the K
    loop (:func:`_k_step`), then stored to ``cacc``, or to C after the last
    chunk.  ``ring``: B from the ring, the loop from ``j0 - AHEAD``: each step
    widens block ``j + AHEAD`` and computes its ``t`` (before block ``j``'s
    stop, which adds the ``t`` of ``j + 1``), then runs block ``j >= j0``."""
    (j0, j1, slot), tile_c = span, tile_type(TILE_M, TILE_N, "f32")
    zero, mts = ix.c(0), [ix.add(mt0, ix.c(i)) for i in range(tm)]
    m0 = [ix.mul(v, ix.c(TILE_M)) for v in mts]
    n0s = [ix.mul(ix.add(nt0, ix.c(jn)), ix.c(TILE_N)) for jn in range(tn)]
    held = [[mts[i], ix.add(slot, ix.c(jn)), zero, zero] for i in range(tm) for jn in range(tn)]
    init = scf.IfOp(args.kb.icmp("eq", j0, zero), [tile_c] * (tm * tn), has_else=True)
    with ir.InsertionPoint(init.then_block):
        scf.YieldOp([tile_zero(tile_c) for _ in range(tm * tn)])
    with ir.InsertionPoint(init.else_block):
        scf.YieldOp([tile_load(args.cacc, at, tile_c) for at in held])
    lo = arith.SubIOp(j0, ix.c(order.AHEAD)).result if ring else j0
    loop = scf.ForOp(lo, j1, ix.c(1), list(init.results))
    with ir.InsertionPoint(loop.body):
        j, carried = loop.induction_variable, list(loop.inner_iter_args)
        if not ring:
            scf.YieldOp(_k_step(ix, args, j, arith.SubIOp(j, j0).result, mts, carried, tn))
        else:
            _ring_fill(ix, args, span, nt0, tn, ix.add(j, ix.c(order.AHEAD)))
            step = scf.IfOp(args.kb.icmp("sge", j, j0), [tile_c] * (tm * tn), has_else=True)
            with ir.InsertionPoint(step.then_block):
                jp = order.ring_slot(args.kb, j, j0)
                scf.YieldOp(_k_step(ix, args, j, jp, mts, carried, tn))
            with ir.InsertionPoint(step.else_block):
                scf.YieldOp(carried)
            scf.YieldOp(list(step.results))
    branch = scf.IfOp(args.kb.icmp("eq", j1, args.nb), [], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        for i in range(tm):
            for jn in range(tn):
                tile_store(args.c, [m0[i], n0s[jn]], loop.results[i * tn + jn])
        scf.YieldOp([])
    with ir.InsertionPoint(branch.else_block):
        for at, tile in zip(held, loop.results, strict=True):
            tile_store(args.cacc, at, tile)
        scf.YieldOp([])


def _column_group(ix: _Ix, args, mtiles, span, nt0, tm: int, tn: int, ring: int = -1) -> None:
    """Column tiles ``nt0 .. nt0 + tn`` over the K chunk ``span``: where M is
    one row group (``mtiles`` of ``ring`` = ``tm`` .. 1; ``ring=0``: the
    last group's odd tile), its ``_k_loop`` on B's ring; else B's panel
    widened from the codes, the fallback's ``t`` precomputed, then every row
    group over the panel (``tm`` row tiles, then 1 where ``tm`` does not
    divide)."""
    kb, ring = args.kb, tm if ring < 0 else ring
    if ring:
        branch = scf.IfOp(kb.icmp("eq", mtiles, ring), [], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            _k_loop(ix, args, span, ix.c(0), nt0, ring, tn, ring=True)
            scf.YieldOp([])
        with ir.InsertionPoint(branch.else_block):
            _column_group(ix, args, mtiles, span, nt0, tm, tn, ring - 1)
            scf.YieldOp([])
        return
    ahead = kb.min(kb.add(span.j1, args.chunk), args.nb)  # the next chunk's codes
    codes, scales = args.codes, args.scales
    widen_panel(kb, args.element, codes, scales, args.panel, span.j1, nt0, tn, span.j0, ahead,
                args.block, args.scale_type)  # fmt: skip
    _precompute(ix, args, span, nt0, tn)
    mfull = ix.mul(arith.DivUIOp(mtiles, ix.c(tm)).result, ix.c(tm))
    spans = [(ix.c(0), mfull, tm)] + ([(mfull, mtiles, 1)] if tm > 1 else [])
    for lo, hi, step in spans:
        mloop = scf.ForOp(lo, hi, ix.c(step))
        with ir.InsertionPoint(mloop.body):
            _k_loop(ix, args, span, mloop.induction_variable, nt0, step, tn)
            scf.YieldOp([])


def _groups(ix: _Ix, args, mtiles, ntiles, tm: int, tn: int) -> None:
    """The column groups of ``tn`` tiles (the last one of 1 tile where ``tn``
    does not divide) in items of ``ITEM_GROUPS`` (fewer where that would
    leave under ``MIN_ITEMS`` items; 1 where K is whole), the items one
    ``scf.parallel`` (``mx-parallel-tasks`` lets each thread claim them).  Per item, K in
    chunks of ``chunk`` blocks (outer), each chunk over every column group
    of the item: the chunk's A (M x 32 chunk bf16) is read from L2 by all of
    them, where the whole K loop per column group read all of A (2 MiB at
    256 x 4096) from L3 for each group of 32 columns (``args.chunk``:
    :func:`~mlir_mx.kernels.amx.order.k_chunk`)."""
    kb = args.kb
    groups = kb.ceildivu(ntiles, tn)
    width = kb.max(1, kb.min(order.ITEM_GROUPS, kb.divu(groups, order.MIN_ITEMS)))
    # K whole: one group an item (8 took 1.05-1.14x the time at 2048 x 2048 x 2048)
    width = arith.SelectOp(kb.icmp("slt", args.chunk, args.nb), width, kb.idx(1)).result
    with kb.parallel(0, kb.ceildivu(groups, width), 1) as item:
        g0 = kb.mul(item, width)
        g1 = kb.min(kb.add(g0, width), groups)
        with kb.loop(0, args.nb, args.chunk) as chunks:
            j1 = kb.min(kb.add(chunks.iv, args.chunk), args.nb)
            with kb.loop(g0, g1, 1) as g:
                nt0 = kb.mul(g.iv, tn)
                span = order.Span(chunks.iv, j1, kb.mul(kb.sub(g.iv, g0), tn))
                whole = kb.icmp("sle", kb.add(nt0, tn), ntiles)
                branch = scf.IfOp(whole, [], has_else=tn > 1)
                with ir.InsertionPoint(branch.then_block):
                    _column_group(ix, args, mtiles, span, nt0, tm, tn)
                    scf.YieldOp([])
                if tn > 1:  # the last group: 1 tile where tn does not divide
                    with ir.InsertionPoint(branch.else_block):
                        _column_group(ix, args, mtiles, span, nt0, tm, 1, ring=0)
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
    name: str = "amx_matmul",
    group: tuple[int, int] = (2, 2),
    element: str = "f4E2M1FN",
    chunk: int | None = None,
    whole_k_tiles: int | None = None,
    block: int = 32,
    scale_type: str = SCALE_TYPE,
) -> ir.Module:
    """A module with ``func @name(a, codes, c, ptr, rows, scales, bptr, bidx,
    fa)`` (the module docstring) for weights in ``element``; C tile groups of
    ``group`` = (row tiles, column tiles), at most 2 x 2 (the tile
    registers); K in chunks of ``chunk`` blocks (even: the stop after an
    even block adds the next block's ``t``, computed with its chunk's panel,
    so no chunk may end on an even block but the last; default ``CHUNK`` K
    blocks of 32, the same K in blocks of 16) where A has more than
    ``whole_k_tiles`` tiles (default ``WHOLE_K_TILES`` in 1 KiB tiles), else
    whole (the bits depend on neither); ``block``: the weight's block size,
    one tile K step per block (32, or NVFP4's 16: A tiles of 16 x 16 bf16, B
    tiles of 8 pair rows, so that ``c + t`` rounds once per block);
    ``scale_type``: E8M0, or E4M3 (NVFP4, whose function also takes the
    tile route's ``tptr``, ``tidx``, ``ta``); in the current context and
    location."""
    if block not in (16, 32):
        raise ValueError(f"block {block}: 16 or 32 (one tile K step per block)")
    chunk = order.CHUNK * 32 // block if chunk is None else chunk
    if whole_k_tiles is None:
        whole_k_tiles = order.WHOLE_K_TILES * 32 // block
    tm, tn = group
    if not (1 <= tm <= 2 and 1 <= tn <= 2):
        raise ValueError(f"group {group}: at most 2 x 2 C tiles (8 tile registers)")
    if chunk < 2 or chunk % 2:
        raise ValueError(f"chunk {chunk}: an even number of K blocks (a stop serves two)")
    bf16, f32, i32 = ir.BF16Type.get(), ir.F32Type.get(), ir.IntegerType.get_signless(32)
    i8 = ir.IntegerType.get_signless(8)
    dyn = ir.ShapedType.get_dynamic_size()
    tiles = ir.MemRefType.get([dyn, dyn, TILE_M, block], bf16)
    codes = ir.MemRefType.get([dyn, dyn, block // 2, code_bytes(element)], i8)
    mat, bytes2 = ir.MemRefType.get([dyn, dyn], f32), ir.MemRefType.get([dyn, dyn], i8)
    vec = ir.MemRefType.get([dyn], i32)
    inputs = [tiles, codes, mat, vec, vec, bytes2, vec, vec, mat]
    route = scale_type != SCALE_TYPE  # NVFP4: the tile route's tptr, tidx, ta
    inputs += [vec, vec, ir.MemRefType.get([dyn, block], bf16)] if route else []
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        ftype = ir.FunctionType.get(inputs, [])
        fn = func.FuncOp(name, ftype)
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            ix = _Ix()
            kb = KernelBuilder(ir.InsertionPoint(ix.c(0).owner))  # constants: first
            a, nrows = entry.arguments[0], memref.DimOp(entry.arguments[4], ix.c(0)).result
            mtiles, nb = memref.DimOp(a, ix.c(0)).result, memref.DimOp(a, ix.c(1)).result
            ntiles = memref.DimOp(entry.arguments[1], ix.c(0)).result
            kc = order.k_chunk(kb, mtiles, nb, tn, chunk, whole_k_tiles, block)
            scratch = {  # each thread's own (mx-parallel-tasks: the prologue is per thread)
                "bdec": _alloca([2, block, TILE_N], f32),
                "cbuf": _alloca([4, TILE_M, TILE_N], f32),
                "panel": order.alloc_panel(kb, mtiles, (tm, tn), kc, block),
                "tbuf": kb.alloc([-1, 2 * TILE_N], f32, [nrows]),
            }
            if route:  # a block's raw B, and its tile-route products (at most M/16 A tiles)
                scratch["braw"] = _alloca([2, block // 2, 2 * TILE_N], bf16)
                scratch["pbuf"] = kb.alloc([-1, tn, TILE_M, TILE_N], f32, [mtiles])
            held = [-1, order.ITEM_GROUPS * tn, TILE_M, TILE_N]  # an item's C between chunks
            used = arith.SelectOp(kb.icmp("slt", kc, nb), mtiles, kb.idx(1)).result  # K whole: none
            scratch["cacc"] = kb.alloc(held, f32, [used])
            args = _Args(entry.arguments, kb, element, block, scale_type, nb=nb, chunk=kc,
                         **scratch)  # fmt: skip
            _groups(ix, args, mtiles, ntiles, tm, tn)
            kb.dealloc(args.panel)
            kb.dealloc(args.tbuf)
            kb.dealloc(args.cacc)
            if route:
                kb.dealloc(args.pbuf)
            func.ReturnOp([])
    return module
