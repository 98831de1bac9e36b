"""An expanding dot kernel's chunk of B from its VNNI records (``Linear``).

Several row groups share each K chunk of a panel (``DotConfig.expand``), so
the kernel expands it once into a scratch (:mod:`.kernel`): per block, B's
scales as f32 (E8M0 or E4M3 decoded, times ``2^-(fa+fb)``) in the header
``hs`` and, for the biased step (:mod:`.biased`), each scale's offset beside
it; FP4 nibbles through the ``vpshufb`` table into bytes in ``ds``.  With A
offset and B signed (:func:`~.biased.signed_b`) the offsets carry B's column
sums of the block (:func:`~.biased.b_starts`), computed here from the bytes
the table gives, once per chunk and panel.
"""

from __future__ import annotations

from mlir_mx.kernels.dot.biased import b_starts, store_scale

__all__ = ["expand_records"]


def expand_records(k, j, c0, nblk: int) -> None:
    """Scales (and FP4 data as bytes) of panel ``j``'s records of blocks
    ``c0 .. c0 + nblk`` into the scratch of ``k`` (the kernel's ``_Dot``)."""
    kb = k.kb
    with kb.loop(0, nblk, 1) as b:
        row = k.record_row(j, kb.add(c0, b.iv))
        vecs = None
        if k.ds is not None:  # as the dot unit reads them (isa.DotOps.store_block)
            vecs = [k.data(row, None, g, range(4), True) for g in range(k.stored.groups)]
        starts = b_starts(kb, k.units, vecs) if k.units.a_plus else [None] * 4
        for v in range(4):
            scale = k.scale(row, v, stored=True)
            store_scale(kb, k.hs, [b.iv, 64 * v], scale, k.bias and k.full.data_offset, starts[v])
        if vecs is not None:
            k.units.store_block(k.ds, b.iv, 0, vecs)
