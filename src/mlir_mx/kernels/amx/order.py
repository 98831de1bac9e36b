"""The guarded AMX matmul's loop order (issue 51; :mod:`mlir_mx.kernels.amx.matmul`):
the column groups' items, the K chunks, and B's ring for M of one row group.

- Items and chunks: the column groups come in items of up to
  :data:`ITEM_GROUPS`, K in chunks of :data:`CHUNK` blocks where A is large
  (:func:`k_chunk`), so a chunk's A is read from L2 by every group of an item.
- The ring: where M is one row group (at most ``tm`` row tiles: 32 rows at the
  2 x 2 group; an MoE expert's 7-25 rows), each block of B is read by one
  row group only, so the kernel widens block ``j + AHEAD`` into a ring of
  :data:`RING` panel slots (2 KiB a block at 2 column tiles: L1) while the
  tiles multiply block ``j``, instead of widening the group's whole K panel
  first (180 KiB at K = 2880: written to L2 and read back; the widening and
  the tiles then overlap).  Session 57 (``bench/probes/amx_kernel_ab.py 16
  2880 5760 --acts pass``, loaded): 1.47 -> 1.14 ms a call.
"""

from __future__ import annotations

from typing import NamedTuple

from mlir import ir
from mlir.dialects import arith

from mlir_mx.kernels.common.builder import KernelBuilder

__all__ = [
    "AHEAD",
    "CHUNK",
    "FIT_TILES",
    "ITEM_GROUPS",
    "MIN_ITEMS",
    "RING",
    "RING_TILES",
    "WHOLE_K_TILES",
    "Span",
    "alloc_panel",
    "k_chunk",
    "ring_slot",
]


class Span(NamedTuple):
    """A K chunk (blocks ``j0 <= j < j1``) of one column group, and the
    group's first column tile in its item's ``cacc``."""

    j0: ir.Value
    j1: ir.Value
    slot: ir.Value


#: Column groups per parallel item, at most, and at least this many items
#: where there are enough groups (``matmul._groups``).
ITEM_GROUPS, MIN_ITEMS = 8, 8

#: K blocks per chunk (``matmul_module``'s default ``chunk``), where A has
#: more than ``WHOLE_K_TILES`` tiles (1 KiB each: half of L2) and a chunk of
#: A with an item's ``cacc`` (``FIT_TILES``: M/16 x (``CHUNK`` + 2
#: ``ITEM_GROUPS``) tiles) stay in L2 together: M from 1,024 rows up runs K
#: whole (items narrowed to fit took longer: at 2048 x 2048 x 2048, items
#: of 2 groups 1.10x the whole-K nest's time; 1536 x 2048 x 4096 with 4
#: groups 1.09x; loaded).  With K whole, C stays in the tiles.
CHUNK, WHOLE_K_TILES, FIT_TILES = 8, 1024, 1536

#: B's ring at M of one row group: slots (a power of two) and how many blocks
#: ahead of the tiles the widening runs (``AHEAD < RING``: the slot widened
#: is never the one the tiles read; at 16 x 2880 x 5760, 1, 2 and 4 ahead
#: (rings of 2, 4, 8) and a software prefetch of the codes 6 blocks ahead
#: measured within 3 % of each other, loaded).
#: The ring runs where A has at most this many row tiles (the largest C
#: tile group's rows: 32 rows).  NVFP4's tile route stays off there (the
#: preparation puts every failing entry on the chains): its tile products
#: inside the K loop, beside the 4 carried C tiles, made LLVM spill tile
#: registers, 1.2-1.35x the chains' time at 17-32 rows (session 57's review,
#: loaded).
RING_TILES = 2

RING, AHEAD = 4, 2


def k_chunk(kb: KernelBuilder, mtiles, nb, tn: int, chunk: int, whole_k_tiles: int, block: int):
    """The K chunk's blocks (``nb``: K whole) for A of ``mtiles`` x ``nb``
    tiles of ``block`` columns (``matmul._groups``; the 1 KiB tiles' bounds,
    in blocks of 32: a chunk of ``chunk`` blocks of 16 is ``chunk / 2`` of them)."""
    fits = kb.icmp("sle", kb.mul(mtiles, chunk * block // 32 + ITEM_GROUPS * tn), FIT_TILES)
    chunked = arith.AndIOp(kb.icmp("sgt", kb.mul(mtiles, nb), whole_k_tiles), fits).result
    return arith.SelectOp(chunked, kb.min(chunk, nb), nb).result


def alloc_panel(kb: KernelBuilder, mtiles, group: tuple[int, int], kc, block: int) -> ir.Value:
    """Each thread's panel (blocks x ``tn`` x ``block / 2`` x 32 bf16): the K
    chunk's ``kc`` blocks, at least :data:`RING` where M is one row group
    (``mtiles <= tm``: the ring, in its first slots; the last group's odd
    tile takes the panel)."""
    tm, tn = group
    blocks = arith.SelectOp(kb.icmp("ule", mtiles, tm), kb.max(kc, RING), kc).result
    return kb.alloc([-1, tn, block // 2, 32], ir.BF16Type.get(), [blocks])


def ring_slot(kb: KernelBuilder, j, j0) -> ir.Value:
    """Block ``j``'s slot in the ring of a chunk starting at ``j0``."""
    return arith.AndIOp(kb.sub(j, j0), kb.idx(RING - 1)).result
