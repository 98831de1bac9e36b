"""The NEON ``smmla`` (``i8mm``) block step of the dot kernels that expand B's chunks.

``smmla vd.4s, vn.16b, vm.16b`` multiplies a 2 x 8 matrix of signed bytes
(``vn``: two rows of A, 8 K each) by an 8 x 2 one (``vm``: two columns of B,
stored as 2 x 8, K innermost) and adds the 2 x 2 int32 product to ``vd``
(row-major: ``r0c0 r0c1 r1c0 r1c1``): 32 products per instruction where
``sdot`` does 16, at the same issue rate on the cores LLVM models
(``llvm-mca``: 4 a cycle on Neoverse V1/V2, 2 on N2, 3 on Apple M2; the
counts in docs/portability.md).

The records stay the same bytes on every CPU (:mod:`.units`: K groups of 4
bytes per column).  The **smmla layout** is the expanding kernels' scratch
(:meth:`store_chunk`, once per chunk, shared by every row group): for each
pair of K groups ``2s, 2s + 1`` and 16 columns, 8 column pairs of 16 bytes,
``c0 k0..7, c1 k0..7`` (a ``zip1``/``zip2`` of 32-bit words of the two
groups), B signed (the records' ``b + 128`` turned into ``b``; FP4 through
its signed table), a scratch row per 16-column sub-tile and block
(:mod:`.neon_scratch`).  A's pair ``r0 k0..7, r1 k0..7`` comes from the two rows'
words of the block (a ``zip`` of 64-bit halves).  Rows go in pairs (a tile
of 2 rows x 16 columns, :func:`mmla_tile`); an odd last row is paired
with itself and its copy dropped.

Exactness: every product and every block partial is an exact int32 (at most
32 x 128 x 128 = 2^19), as with ``sdot``; the partials are put back in rows
(``zip`` of 64-bit halves) and take the f32 block step ``t = p * sb;
c = fma(t, sa, c)`` of the other kernels: the same bits as x86.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.widen import LANES
from mlir_mx.kernels.dot.neon_scratch import scratch_at

__all__ = ["NEON_SMMLA", "MMLA_ROWS", "mmla_block", "mmla_tile", "store_chunk"]

#: ``smmla`` (s8 x s8, ``i8mm``; ``cpu_features.INTRINSICS`` knows its feature).
NEON_SMMLA = "llvm.aarch64.neon.smmla.v4i32.v16i8"

#: Rows of the ``smmla`` register tile (one row pair) of one vector of 16
#: columns: 8 accumulators, 8 C registers, 8 B operands of a K step and A's
#: pair.  ``llc -mcpu=neoverse-v1`` (``bench/probes/neon_counts.py``): 106
#: instructions per block step of 32 ``smmla``, no stack access, 0.54
#: llvm-mca cycles per column-block; 4 rows (16 accumulators and 16 C
#: registers) had 228 with 31 stack accesses and 0.57 cycles.  No shape is
#: half ``smmla``: each 2 x 2 tile's block step (``movi``, ``scvtf``,
#: ``fmul``, ``fmla``) takes as many instructions as its 4 ``smmla``
#: (docs/portability.md counts the shapes).  Not measured on a CPU.
MMLA_ROWS = 2


def mmla_tile(mr: int) -> dict[str, int]:
    """The tile of an expanding dot schedule of ``mr`` rows on ``smmla``."""
    return {"mr": min(mr, MMLA_ROWS), "nv": 1}


def _zip_words(kb: KernelBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Two 64-byte B vectors of K groups ``2s`` and ``2s + 1`` (16 columns x
    4 bytes each) -> 128 bytes: per column pair ``c0 k0..7, c1 k0..7``."""
    xw, yw = kb.vbitcast(x, LANES, kb.i32), kb.vbitcast(y, LANES, kb.i32)
    z = kb.shuffle(xw, yw, [i for c in range(LANES) for i in (c, LANES + c)])
    return kb.vbitcast(z, 8 * LANES, kb.i8)


def store_chunk(kb: KernelBuilder, ds, at, base, groups: list[list[ir.Value]], kcb: int) -> None:
    """Store one block's B vectors (``groups[g][v]``, 64 bytes of K group
    ``g`` and columns ``16v ..``, already signed) in the smmla layout at block
    ``at`` of the scratch ``ds`` of a chunk of ``kcb`` blocks (sub-tile major,
    :mod:`.neon_scratch`), K groups from ``base / 256`` (``base``: an int or
    an index, 256 bytes per K group of the 4 sub-tiles); ``groups`` holds an
    even number of consecutive K groups, starting at an even one."""
    col0 = base // 4 if isinstance(base, int) else kb.divu(base, 4)
    for s in range(len(groups) // 2):
        for v in range(len(groups[0])):
            z = _zip_words(kb, groups[2 * s][v], groups[2 * s + 1][v])
            col = col0 + 128 * s if isinstance(col0, int) else kb.add(col0, 128 * s)
            kb.vstore(z, ds, scratch_at(kb, kcb, at, v, col))


def mmla_block(k, blk, local, rows, vs, c) -> list[ir.Value]:
    """One block of the register tile of the expanding dot kernel ``k`` (its
    ``_Dot``: the builder, A's words and scales, B's scratch ``k.ds`` in the
    smmla layout and its scales in ``k.hs``): the partials by ``smmla``, then
    the f32 block step into ``c`` (``rows`` x ``vs``, row-major, as
    ``_Dot.block`` returns them)."""
    kb, pa, groups = k.kb, k.pa, k.stored.groups
    v4i = kb.vec(4, kb.i32)
    scales = [k.scale(None, v, False, local) for v in vs]
    first = kb.mul(blk, groups)
    words = [kb.vload(pa.words, [m, first], groups) for m in rows]
    pairs = [(r, min(r + 1, len(rows) - 1)) for r in range(0, len(rows), 2)]
    zero = kb.const(0, v4i)
    acc = {(p, v, q): zero for p in range(len(pairs)) for v in vs for q in range(8)}
    for s in range(groups // 2):
        a = []
        for r0, r1 in pairs:  # rows r0, r1: words 2s, 2s + 1 of each (K 8s .. 8s + 7)
            mask = [2 * s, 2 * s + 1, groups + 2 * s, groups + 2 * s + 1]
            a.append(kb.vbitcast(kb.shuffle(words[r0], words[r1], mask), 16, kb.i8))
        for v in vs:
            bq = [kb.vload(k.ds, scratch_at(kb, k.units.kcb, local, v, 128 * s + 16 * q), 16)
                  for q in range(8)]  # fmt: skip
            for p, ap in enumerate(a):
                for q in range(8):
                    acc[p, v, q] = kb.intrinsic(NEON_SMMLA, v4i, [acc[p, v, q], ap, bq[q]])
    out = []
    for r, m in enumerate(rows):
        p, half = divmod(r, 2)
        sa = kb.broadcast(kb.load(pa.scales, [m, blk]), LANES)
        for i, v in enumerate(vs):
            quads = [  # columns 4t .. 4t + 3 of row r: the halves of two 2 x 2 tiles
                kb.shuffle(acc[p, v, 2 * t], acc[p, v, 2 * t + 1], _ROW[half]) for t in range(4)
            ]
            lo = kb.shuffle(quads[0], quads[1], list(range(8)))
            hi = kb.shuffle(quads[2], quads[3], list(range(8)))
            part = kb.sitofp(kb.shuffle(lo, hi, list(range(16))), kb.vec(LANES, kb.f32))
            t = kb.fmul(part, scales[i])  # t = p * sb: one rounding
            out.append(kb.fma(t, sa, c[r * len(vs) + i]))
    return out


#: The lanes of row 0 (1) of two ``smmla`` accumulators ``r0c0 r0c1 r1c0 r1c1``.
_ROW = ([0, 1, 4, 5], [2, 3, 6, 7])
