"""A's per-call preparation for the guarded AMX-BF16 matmul, compiled
(issue 51): the kernel :mod:`mlir_mx.kernels.amx.prepare` decides the guard
per (row, block) (exactly :func:`mlir_mx.oracle.amx_plan`'s booleans), packs
A in tile layout with the failing (row, block)s zeroed and lists them; the
by-block lists the matmul kernel also takes are made by the serial E8M0
kernel itself (``prepare_module(lists=True)``), and here in numpy from its
list for NVFP4 and the team's kernel (:func:`by_block`, without a sort).

:func:`prepare_activations` gives the matmul kernel's per-call arguments
``(a_tiles, ptr, rows, bptr, bidx, fa)``, for NVFP4 then the tile route's
``(tptr, tidx, ta)`` (the failing (row, block)s that fail only because of
the scales' odd part, taken out of ``bptr``/``bidx``; their A blocks in
bf16; :mod:`mlir_mx.kernels.amx.fallback`) (the order of
:meth:`mlir_mx.linear.amx_matmul.AMXMatmul.run`), the same arrays as the
numpy model in :mod:`mlir_mx.linear.amx_matmul` (:func:`prepare_model`)
gives, or None where the call runs on the exact path.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import numpy as np

from mlir_mx.errors import MXValueError
from mlir_mx.host import host_features
from mlir_mx.kernels.amx.order import RING_TILES
from mlir_mx.kernels.amx.prepare import prepare_module
from mlir_mx.kernels.amx.tile import TILE_M
from mlir_mx.numerics.amx_guard import AMXWeight, amx_bounds

__all__ = ["SPLIT_ENV", "SPLIT_MIN", "TILES_ENV", "GuardParams", "Prepared", "block_major",
           "by_block", "guard_params", "prepare_activations", "prepare_runner", "route_on",
           "split_min", "split_threads", "tile_route"]  # fmt: skip


@dataclass(frozen=True)
class GuardParams:
    """The prepare kernel's per-weight arguments (:func:`guard_params`)."""

    lim: np.ndarray  # i32 (K/bs): -126 - log2 q - log2 sb_min[j] (sb_min: the scale unit)
    cap: np.ndarray  # f64 (K/bs): 2^128 / max(1, sb_max[j])
    par: np.ndarray  # f64 (4): bmax, 2^24 q, -126 - log2 q, 0
    tq: np.ndarray | None = None  # f64 (K/bs): 2^24 q / m_max[j] (NVFP4); None: 2^24 q
    block: int = 32  # the weight's block size (32, or NVFP4's 16)

    def bounds(self) -> np.ndarray:
        """``tq``, or ``2^24 q`` per block where it is None."""
        return self.tq if self.tq is not None else np.full(len(self.lim), self.par[1])


def guard_params(w: AMXWeight) -> GuardParams | None:
    """The per-weight arguments of the prepare kernel, or None where the
    weight has a flagged block (the call runs on the exact path: an E8M0
    scale out of f32's range, an NVFP4 zero or NaN scale) or is not E8M0
    in blocks of 32 or NVFP4 in blocks of 16."""
    if w.flagged.any() or w.block_size != (16 if w.e4m3 else 32):
        return None
    q, bmax = amx_bounds(w.element)
    lq = -126 - math.log2(q)
    if lq != int(lq):
        raise MXValueError(f"{w.element}: q = {q} is not a power of two")
    lim = lq - np.log2(w.sb_min)  # exact: powers of two
    cap = 2.0**128 / np.maximum(1.0, w.sb_max)
    par = np.array([bmax, 2.0**24 * q, lq, 0.0])
    tq = None if w.m_max is None else 2.0**24 * q / w.m_max
    return GuardParams(lim.astype(np.int32), cap.astype(np.float64), par, tq, w.block_size)


@functools.lru_cache(maxsize=8)
def _runner(_features: frozenset[str], block: int = 32, threads: int = 1):
    from mlir import ir

    from mlir_mx.execution import CompileOptions, Runner
    from mlir_mx.execution.options import default_cache_dir
    from mlir_mx.passes.pipeline import Pipeline, PipelineElement
    from mlir_mx.pipelines.amx import amx_library_pipeline

    with ir.Context(), ir.Location.unknown():
        text = str(prepare_module("amx_prepare", block, threads > 1, lists=_lists(block, threads)))
    pipeline = amx_library_pipeline()
    if threads > 1:
        tasks = PipelineElement.of("mx-parallel-tasks", threads=threads)
        pipeline = Pipeline((tasks, *pipeline))
    return Runner(text, options=CompileOptions(pipeline, cache_dir=default_cache_dir()))


def _lists(block: int, threads: int) -> bool:
    """Whether the kernel builds the by-block lists itself: the serial E8M0
    one (``prepare_module(lists=True)``); NVFP4's two lists and the team's
    slots are built in numpy (:func:`_split_lists`)."""
    return block == 32 and threads == 1


def prepare_runner(block: int = 32, threads: int = 1):
    """The Runner of the prepare kernel (``@amx_prepare``) for weight blocks
    of ``block`` (32, or NVFP4's 16), compiled once per CPU feature set (no
    tile instruction: it runs on any AVX-512 or AVX2 CPU), or loaded from
    the persistent compile cache (``MLIR_MX_CACHE_DIR``).  ``threads > 1``:
    the row tiles on a team of ``threads`` (``prepare_module(tiles=True)``,
    ``mx-parallel-tasks``).  The serial kernel for blocks of 32 also takes
    ``bptr``, ``bidx`` and ``fa`` (:func:`_outputs`) and writes the by-block
    lists (``prepare_module(lists=True)``)."""
    return _runner(host_features(), block, int(threads))


#: The environment variable that sets the least ``M K`` whose A the call's
#: team prepares (``0``: every A of two row tiles or more; ``off``: A on one
#: thread at every size).  Unset: :data:`SPLIT_MIN`.  Quiet, 2 threads
#: (session 56, ``bench/probes/amx_prepare_team_ab.py``, the development
#: Xeon): the team took 0.77-0.92x the one thread's time from M K = 2^19 up
#: (our pool; 0.70-0.77x on torch's team) and 1.00x at 128 x 2048 (0.81x on
#: torch's); loaded, it measured slower (issue 51; ``docs/library.md``,
#: "Threads").  A busy machine's calls run on one thread anyway (the load
#: check).
SPLIT_ENV = "MLIR_MX_AMX_PREPARE_SPLIT"
#: The default least ``M K`` for the team's preparation (:data:`SPLIT_ENV`).
SPLIT_MIN = 1 << 19


def split_min() -> int | None:
    """:data:`SPLIT_ENV`'s least ``M K``: :data:`SPLIT_MIN` where unset,
    None (one thread) where it is not an integer (``off``)."""
    value = os.environ.get(SPLIT_ENV, "").strip()
    if not value:
        return SPLIT_MIN
    return int(value) if value.isdigit() else None


def split_threads(m: int, k: int, threads: int) -> int:
    """The team that prepares an (``m``, ``k``) A for a call on ``threads``:
    ``threads`` where A has two row tiles or more and ``m k`` reaches
    :func:`split_min` (not None), else 1."""
    least = split_min() if threads > 1 and m > TILE_M else None
    return threads if least is not None and m * k >= least else 1


@dataclass
class Prepared:
    """One call's prepared A: ``args`` the matmul kernel's ``(a_tiles, ptr,
    rows, bptr, bidx, fa)`` (NVFP4: and ``(tptr, tidx, ta)``; None where
    the call runs on the exact path),
    ``failing`` the failing (row, block)s, ``breaks`` those breaking the
    per-call condition, ``nonbf16`` blocks holding a value that is not bf16
    (it was rounded)."""

    args: tuple | None
    failing: int
    breaks: int
    nonbf16: int


def block_major(ptr: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, last)`` of the CSR list ``ptr`` (by ``s = row_tile nb +
    block``): its entries by block (row tiles in turn within a block: a
    stable sort by block), and each block's end in ``order``."""
    p = ptr.astype(np.intp)
    seg = np.diff(p).reshape(-1, nb).T.ravel()  # each (block, row tile)'s count, by block
    ends = seg.cumsum()
    order = np.arange(int(p[-1]))
    if len(order):
        order += np.repeat(p[:-1].reshape(-1, nb).T.ravel() - (ends - seg), seg)
    mt = len(seg) // nb
    return order, ends[mt - 1 :: mt] if mt else np.zeros(nb, np.intp)


def by_block(ptr: np.ndarray, nb: int, keep: np.ndarray | None = None, pad: int = 4,
             major: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(bptr, bidx)`` of the CSR list ``ptr`` (by ``s = row_tile nb +
    block``): the entries (those where ``keep``, a bool per entry, where
    given) by block, as indices into ``rows``, each block's list padded to
    a multiple of ``pad`` (4: the chains; 16: the tile route's A tiles) by
    repeating its entries in turn (``np.resize``'s order), at least ``pad``
    entries; :func:`mlir_mx.linear.amx_matmul.failing_rows`' lists (its
    numpy model).  ``major``: :func:`block_major` of ``ptr``, where the
    caller has it."""
    order, last = major if major is not None else block_major(ptr, nb)
    if keep is not None:
        kept = keep[order]
        order = order[kept]
        upto = np.zeros(len(kept) + 1, np.intp)
        kept.cumsum(out=upto[1:])
        last = upto[last]
    counts = last.copy()
    counts[1:] -= last[:-1]
    padded = -(-counts // pad) * pad
    ends = padded.cumsum()
    size = int(ends[-1])
    bptr = np.zeros(nb + 1, np.int32)
    bptr[1:] = ends
    bidx = np.zeros(max(size, pad), np.int32)
    if size:
        owner = np.repeat(np.arange(nb), padded)  # the block of each slot
        within = np.arange(size) - (ends - padded)[owner]
        within %= counts[owner]  # repeats in turn
        within += (last - counts)[owner]
        bidx[:size] = order[within]
    return bptr, bidx


#: The environment variable that turns NVFP4's tile route off (``0``: every
#: failing (row, block) on the FMA chains, as before session 57; for A/B
#: measurements: the same bits either way).  Read per call.
TILES_ENV = "MLIR_MX_AMX_NVFP4_TILES"


def tile_route(rows: np.ndarray, mtiles: int | None = None) -> np.ndarray | None:
    """The prepare kernel's NVFP4 ``rows`` (the failing entries; row + 16
    where the entry takes the tile route) made the matmul kernel's, in
    place: returns the tile route's mask, or None where :data:`TILES_ENV`
    is ``0`` or A has at most :data:`~mlir_mx.kernels.amx.order.RING_TILES`
    row tiles (``mtiles``: the kernel's ring, which has no tile route;
    every entry then on the chains)."""
    route = rows >= 16
    rows &= 15
    return None if not route_on(mtiles) else route


def route_on(mtiles: int | None) -> bool:
    """Whether NVFP4's tile route runs for A of ``mtiles`` row tiles: not
    with :data:`TILES_ENV` ``0``, nor in the kernel's ring (at most
    :data:`~mlir_mx.kernels.amx.order.RING_TILES` row tiles)."""
    small = mtiles is not None and mtiles <= RING_TILES
    return not small and os.environ.get(TILES_ENV, "").strip() != "0"


def _split_lists(ptr, rows, fblk, nb: int, bs: int, slot=None):
    """The by-block lists and A blocks of the failing entries (``rows`` the
    kernel's, made the matmul kernel's here; ``slot``: the team kernel's
    slots): ``(rows, bptr, bidx, fa)`` and, for NVFP4 (``bs`` 16), the tile
    route's ``(tptr, tidx, ta)``."""
    import ml_dtypes

    failing = int(ptr[-1])
    rows = rows[slot] if slot is not None else rows[:failing]
    route = tile_route(rows, (len(ptr) - 1) // nb) if bs == 16 else None
    major = block_major(ptr, nb)
    bptr, bidx = by_block(ptr, nb, None if route is None else ~route, major=major)
    at = (lambda idx: idx) if slot is None else (lambda idx: slot[idx])  # noqa: E731
    fa = fblk.take(at(bidx), axis=0) if bptr[-1] else np.zeros((len(bidx), bs), np.float32)
    if not failing:
        rows = np.zeros(1, np.int32)
    if bs != 16:
        return rows, bptr, bidx, fa
    keep = route if route is not None else np.zeros(failing, bool)
    tptr, tidx = by_block(ptr, nb, keep, 16, major)
    bf16 = ml_dtypes.bfloat16
    ta = _high_halves(fblk.take(at(tidx), axis=0)) if tptr[-1] else np.zeros((len(tidx), bs), bf16)
    return rows, bptr, bidx, fa, tptr, tidx, ta


def _kernel_lists(rows, size: int, bptr, bidx, fa):
    """``(rows, bptr, bidx, fa)`` from the serial kernel's lists
    (``prepare_module(lists=True)``, ``size`` entries written); where
    nothing fails, the dummies :func:`_split_lists` gives."""
    if not size:
        return (
            np.zeros(1, np.int32),
            bptr,
            np.zeros(4, np.int32),
            np.zeros((4, fa.shape[1]), fa.dtype),
        )
    return rows, bptr, bidx[:size], fa[:size]


def _high_halves(blocks: np.ndarray) -> np.ndarray:
    """f32 ``blocks`` of bf16 values (the kernel's rounded A; the tile
    route's are finite) in bf16: their high 16 bits, as ``astype`` gives."""
    import ml_dtypes

    high = (blocks.view(np.uint32) >> 16).astype(np.uint16)
    return high.view(ml_dtypes.bfloat16)


def _outputs(m: int, nb: int, buffers: dict | None, bs: int = 32):
    """The prepare kernel's output arrays for ``m`` rows and ``nb`` blocks
    of ``bs`` (``tiles, ptr, rows, fblk, cnt``, for ``bs`` 32 then the
    serial kernel's ``bptr, bidx, fa``): new, or the ones kept in
    ``buffers`` for that shape (made there once)."""
    key = (m, nb, bs)
    if buffers is not None and key in buffers:
        return buffers[key]
    mt = -(-m // TILE_M)
    out = (
        np.empty((mt, nb, TILE_M, bs), np.int16),
        np.empty(mt * nb + 1, np.int32),
        np.empty(max(m * nb, 1), np.int32),
        np.empty((max(m * nb, 1), bs), np.float32),
        np.zeros(4 * max(mt, 1), np.int32),
    )
    if bs == 32:  # the serial kernel's by-block lists: at most 3 padding entries a block
        cap = max(m * nb, 1) + 3 * nb + 4
        out += (
            np.empty(nb + 1, np.int32),
            np.empty(cap, np.int32),
            np.empty((cap, bs), np.float32),
        )
    if buffers is not None:
        if len(buffers) >= 4:  # a layer's shapes (hidden and intermediate K) alternate
            del buffers[next(iter(buffers))]  # the oldest
        buffers[key] = out
    return out


def _pack_tiles(ptr, cnt, nb: int):
    """The parallel kernel's per-tile output (:func:`prepare_runner` with
    threads) made the serial kernel's: ``ptr`` rebased in place, the
    counters summed; returns ``(slot, counters)``, ``slot[i]`` the slot of
    ``rows``/``fblk`` holding the serial kernel's entry ``i``."""
    per = cnt.reshape(-1, 4)
    counts = per[:, 0].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    ptr[0] = 0
    ptr[1:] += np.repeat(starts[:-1], nb).astype(np.int32)
    tile_slot = np.arange(len(counts), dtype=np.int64) * (TILE_M * nb)
    slot = np.arange(int(starts[-1]), dtype=np.int64) + np.repeat(tile_slot - starts[:-1], counts)
    return slot, per[:, :3].sum(axis=0)


def prepare_activations(
    a: np.ndarray,
    params: GuardParams,
    max_share: float,
    buffers: dict | None = None,
    threads: int = 1,
) -> Prepared:
    """The prepare kernel on ``a`` (f32 (M, K), C-contiguous; rounded to bf16
    in the kernel), then the by-block lists: :class:`Prepared`, whose
    ``args`` is None where the per-call condition fails or more than
    ``max_share`` of the (row, block)s fail.  ``buffers``: a dict the
    caller keeps to reuse the kernel's output arrays from call to call (the
    returned ``args`` then hold them until the next call with the same
    dict: for a caller that runs them at once, one thread per dict).
    ``threads``: the call's team (the load check applied), which prepares A
    by row tiles where :func:`split_threads` says so; the same arrays."""
    m, k = a.shape
    bs = params.block
    nb = k // bs
    tiles, ptr, rows, fblk, cnt, *made = _outputs(m, nb, buffers, bs)
    team = split_threads(m, k, threads)
    made = made if _lists(bs, team) else []
    run = prepare_runner(bs, team).amx_prepare
    run(a, params.lim, params.cap, params.bounds(), params.par, tiles, ptr, rows, fblk,
        cnt if team > 1 else cnt[:4], *made)  # fmt: skip
    slot = None
    if team > 1:
        slot, sums = _pack_tiles(ptr, cnt, nb)
        failing, breaks, nonbf16 = (int(v) for v in sums)
    else:
        failing, breaks, nonbf16 = (int(v) for v in cnt[:3])
    if breaks or failing > max_share * m * nb:
        return Prepared(None, failing, breaks, nonbf16)
    import ml_dtypes

    if made:
        rows, *lists = _kernel_lists(rows[:failing], int(cnt[3]), *made)
    else:
        rows, *lists = _split_lists(ptr, rows, fblk, nb, bs, slot if failing else None)
    args = (tiles.view(ml_dtypes.bfloat16), ptr, rows, *lists)
    return Prepared(args, failing, breaks, nonbf16)
