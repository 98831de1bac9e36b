"""An expanding dot kernel's chunk of B from its VNNI records (``Linear``).

Several row groups share each K chunk of a panel (``DotConfig.expand``), so
the kernel expands it once into a scratch (:mod:`.kernel`): per block, B's
scales as f32 (E8M0 or E4M3 decoded, times ``2^-(fa+fb)``) in the header
``hs`` and, for the biased step (:mod:`.biased`), each scale's offset beside
it (the lifted step's scales carry ``2^22`` instead, no offsets); FP4
nibbles through the ``vpshufb`` table into bytes in ``ds``.  The A-offset
mode's column sums of a chunk (:func:`column_sums`) come from the expanded
bytes.
"""

from __future__ import annotations

from mlir_mx.kernels.common.widen import LANES
from mlir_mx.kernels.dot import tiles
from mlir_mx.kernels.dot.biased import store_scale

__all__ = ["column_sums", "expand_records"]


def expand_records(k, j, c0, nblk: int) -> None:
    """Scales (and FP4 data as bytes) of panel ``j``'s records of blocks
    ``c0 .. c0 + nblk`` into the scratch of ``k`` (the kernel's ``_Dot``)."""
    kb = k.kb
    with kb.loop(0, nblk, 1) as b:
        row = k.record_row(j, kb.add(c0, b.iv))
        if tiles.RECORDS_AHEAD and not k.units.isa.neon:  # the run ahead (tiles.py; x86: measured)
            k.prefetch(row, tiles.RECORDS_AHEAD)
        vecs = None
        if k.ds is not None:  # as the dot unit reads them (isa.DotOps.store_block)
            vecs = [k.data(row, None, g, range(4), True) for g in range(k.stored.groups)]
        for v in range(4):
            scale = k.scale(row, v, stored=True)
            store_scale(kb, k.hs, [b.iv, 64 * v], scale, k.bias and k.full.data_offset)
        if vecs is not None:
            k.units.store_block(k.ds, b.iv, 0, vecs)


def column_sums(k, nblk: int) -> None:
    """``cs[b, (q, v, l)] = -128 * sum`` over run ``q`` of block ``b`` of
    the chunk of the B values that int16 lane ``l`` of vector ``v``
    multiplies (lane ``2n``: column ``n``'s rows ``4g, 4g + 1`` of each K
    group ``g`` of the run; ``2n + 1``: rows ``4g + 2, 4g + 3``):
    ``vpmaddubsw`` of 128 against them, summed in int16 (wrapping is
    harmless: :func:`~.units.a_offset_run`).  Where the A-offset mode's
    lanes start, since they add ``(a + 128) * b``.  B's expanded bytes
    hold ``b + 128`` unless a signed table made them (FP4): those are
    turned into ``b`` here, once per chunk."""
    kb, run = k.kb, k.a_offset
    v32h = kb.vec(2 * LANES, kb.i16)
    offset = kb.const(0x80808080 - 2**32, kb.vec(LANES, kb.i32))  # 128 in every byte
    signed = k.units.signed_table
    with kb.loop(0, nblk, 1) as b:
        for v in range(4):
            total = None
            for g in range(k.stored.groups):
                (bv,) = k.data(None, b.iv, g, [v], stored=False)
                if not signed:
                    bv = kb.xori(bv, kb.const(0x80, bv.type))
                    kb.vstore(bv, k.ds, [b.iv, 256 * g + 64 * v])
                p = k.units.pairs(offset, bv)
                total = p if g % run == 0 else kb.add(total, p)
                if g % run == run - 1:
                    at = 2 * LANES * (4 * (g // run) + v)
                    kb.vstore(kb.sub(kb.const(0, v32h), total), k.cs, [b.iv, at])
