"""8-bit codes widened by the VBMI tables in lane order (issue 51, MXFP8 decode).

The f32 decode kernel of E4M3/E5M2 weights (``decode``/``small``, M = 1 and
row groups) is bound by the vector ports, not by memory: on the Intel Xeon
of session 52 a 1 x 1024 x 1024 MXFP8 decode (B in L2) ran at the same codes
per second as 1 x 8192 x 8192 (B in L3).  ``llc -mcpu=sapphirerapids`` of its
loop gives, per 64 codes, 4 ``vfmadd`` and 10 widening instructions on ports
0 and 5 (:meth:`~mlir_mx.kernels.common.widen.Decoder._table_decode`: one
``vpermb`` reordering the codes, two ``vpermt2b`` lookups, the sign's
``vpternlogq``, two byte interleaves, two shifts and two masks), plus
two table copies.

:class:`LaneTable` leaves the ``vpermb`` out: the looked-up bytes are
interleaved as loaded, so vector ``2h + e`` lane ``4L + d`` holds column
``16L + 8h + 2d + e`` (:data:`LANE_COLUMN`) of the 64.  Every column's
products and FMAs are the same, in the same order, whichever lane computes
them; the kernel (:mod:`mlir_mx.kernels.matmul.stream`) keeps its partial
sums in this lane order down the block and puts them in column order once
per block (:meth:`LaneTable.in_order`: 8 ``vpermt2ps`` and 4
``vinsertf64x4`` per 64 columns and 32 rows) before scaling them into C, as
it does for packed FP4's (even, odd) pairs.  So the bits are the ordered
decoder's, for 13 instead of 14 instructions per 64 codes on ports 0/5
(measured 3-4 % faster with B in L2, docs/passes/mx-matmul-kernels.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.widen import LANES, Decoder

__all__ = ["LANE_COLUMN", "LaneTable", "lane_order"]

#: Codes per lane-order decode (one 64-byte load; ``nv = 4`` vectors).
CODES = 64

#: The column (of 64) each (vector, lane) of :meth:`LaneTable.decode_pairs` holds.
LANE_COLUMN = [
    [16 * (lane // 4) + 8 * (v // 2) + 2 * (lane % 4) + v % 2 for lane in range(LANES)]
    for v in range(4)
]


@dataclass(frozen=True)
class LaneTable(Decoder):
    """The table widening of 64 one-byte codes without the reorder:
    :meth:`decode_pairs` in lane order, :meth:`in_order` back to columns."""

    @property
    def pairs(self) -> bool:
        return True

    def decode_pairs(self, kb: KernelBuilder, raw: ir.Value) -> list[ir.Value]:
        """64 codes (``vector<64xi8>``) -> 4 f32 vectors in :data:`LANE_COLUMN` order."""
        assert ir.VectorType(raw.type).shape[0] == CODES
        return self._table_decode(kb, raw, ordered=False)

    def in_order(self, kb: KernelBuilder, vecs: list[ir.Value]) -> list[ir.Value]:
        """4 vectors in lane order (values or partial sums) -> columns 0-15, ..., 48-63:
        column ``16 V + 8h + 2d + e`` is lane ``4V + d`` of vector ``2h + e``."""
        assert len(vecs) == 4
        out = []
        for col in range(4):
            halves = [
                kb.shuffle(
                    vecs[2 * h],
                    vecs[2 * h + 1],
                    [LANES * e + 4 * col + d for d in range(4) for e in range(2)],
                )
                for h in range(2)
            ]
            out.append(kb.shuffle(halves[0], halves[1], list(range(LANES))))
        return out


def lane_order(dec: Decoder | None, nv: int) -> tuple[Decoder | None, bool]:
    """``(decoder, True)``: ``dec`` as a :class:`LaneTable` where the stream
    kernel's tiles of ``16 nv`` columns are 64 one-byte codes that ``dec``
    widens by the VBMI tables (E4M3, E5M2 with AVX512-VBMI); else ``(dec, False)``."""
    if dec is None or not dec.table or LANES * nv != CODES:
        return dec, False
    if dec.fmt.is_sub_byte or dec.fmt.is_int:
        return dec, False
    fields = {f.name: getattr(dec, f.name) for f in dataclasses.fields(dec)}
    return LaneTable(**fields), True
