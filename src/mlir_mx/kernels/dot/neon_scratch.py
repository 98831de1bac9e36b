"""Where the NEON expanding dot kernels keep B's chunk: sub-tile major.

The expanding kernels (:mod:`.kernel`: several row groups share each chunk
of B) store a chunk's data in a scratch.  On x86 it is one row per block of
the chunk, 256 bytes per K group, 64 per vector of 16 columns::

    ds[b, 256 g + 64 v + x]          (kcb rows of 2048 bytes)

The NEON tile is one vector of 16 columns wide, so its inner loop (over the
chunk's blocks, for one sub-tile ``v``) read 8 lines 2048 bytes apart per
block.  LLVM's ``LoopDataPrefetch`` pass prefetches every load whose stride
is at least the core's ``MinPrefetchStride``: 2048 on the Apple cores
(``AArch64Subtarget``: prefetch distance 280 instructions, 3 iterations
ahead at most; 0, i.e. off, on the Neoverse cores).  With ``-mcpu=apple-m1``
the ``sdot`` prefill loop so got 8 ``prfm`` of a chunk that is in L1/L2
anyway (it was just expanded, and ``kcb`` is chosen for it to stay there),
and the changed schedule 10-14 stack accesses: 204 instructions per 96
``sdot`` (47 %) against 179 (54 %) without them, and ``llvm-mca
-mcpu=apple-m1`` no fewer cycles with them (1.01 against 1.01 per
column-block, ``bench/probes/neon_counts.py``).  A cache miss is beyond
``llvm-mca``; the chunk's reuse is the reason they cannot pay.

So on NEON the scratch is sub-tile major: a row per (sub-tile, block), 512
bytes, 64 per K group (``sdot``) or 128 per pair of K groups and column
pair (``smmla``, :mod:`.neon_mmla`)::

    ds[v kcb + b, 64 g + x]          (4 kcb rows of 512 bytes)

The inner loop's loads then step 512 bytes per block (below every core's
minimum stride: no ``prfm``) and a sub-tile's block is 8 consecutive lines.
Only addresses change: the bytes, and so the bits, are the same.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.dot.units import PANEL

__all__ = ["SUBTILES", "scratch_at", "scratch_col", "scratch_shape"]

#: Vectors of 16 columns per panel: the scratch rows per block.
SUBTILES = PANEL // 16


def scratch_shape(kcb: int, nbytes: int) -> list[int]:
    """The NEON scratch of a chunk of ``kcb`` blocks of ``nbytes`` each."""
    return [SUBTILES * kcb, nbytes // SUBTILES]


def scratch_at(kb: KernelBuilder, kcb: int, b, v: int, col) -> list[ir.Value]:
    """The index of byte ``col`` (an int or an index, within the sub-tile's
    512 bytes) of sub-tile ``v`` of block ``b`` (an index) of the chunk."""
    return [kb.add(b, v * kcb) if v else b, col]


def scratch_col(kb: KernelBuilder, base, off: int):
    """The byte within a sub-tile's row of the K groups that start at byte
    ``base`` (an int or an index) of a block in x86's row (256 per K group
    of the 4 sub-tiles; :meth:`~.isa.DotOps.store_block`'s ``base``), plus
    ``off``."""
    if isinstance(base, int):
        return base // SUBTILES + off
    return kb.add(kb.divu(base, SUBTILES), off)
