"""The guarded AMX-BF16 matmul, driven from Python (issue 51; standalone:
not in ``Linear`` or the schedule registry yet).

``AMXMatmul(b)(a)`` gives ``A x B`` (f32 (M, N)) for bf16 activations ``a``
(an f32 (M, K) array of bf16 values) and an MX weight ``b`` (an E8M0-scaled
``MXArray`` (K, N) blocked along K in blocks of 32, or an NVFP4 one in blocks
of 16: one tile K step per block, the global scale divided after the
kernel), bit for bit the exact path's
(``Linear(b, activations="bf16")``, the oracle's blocked order), as the
numpy model :func:`mlir_mx.oracle.amx_guarded_matmul` computes it
(``docs/numerics.md``, "AMX-BF16"):

1. the call runs on the exact path (``Linear(b, activations="bf16")``)
   where :func:`~mlir_mx.oracle.amx_guard_call` fails, the weight has a
   block that ``amx_prepare`` flagged, or too many (row, block)s fail the
   guard (``max_fallback_share``);
2. otherwise the (row, block)s that fail :func:`~mlir_mx.oracle.amx_pass`
   are zeroed in A (tile layout) and listed, by the compiled prepare kernel
   (:mod:`mlir_mx.linear.amx_prepare`; :func:`prepare_model` is its numpy
   model: :func:`pack_activations`, :func:`failing_rows`), and the kernel (:mod:`mlir_mx.kernels.amx.matmul`)
   accumulates C in the tiles and adds each one's ``t`` (the in-order f32
   FMA chain of its block, from +0, computed in the kernel; for NVFP4's
   (row, block)s that fail only because of the scales' odd part,
   :func:`mlir_mx.oracle.amx_tile_route`, ``TDPBF16PS`` against B's
   unscaled codes from a zero tile, times ``s``: the same ``t``) at its
   block.

Refused (:class:`~mlir_mx.errors.MXUnsupportedHostError`, before any tile
instruction runs) where :func:`mlir_mx.linear.amx.amx_bf16_usable` is false.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from typing import NamedTuple

import numpy as np

from mlir_mx import oracle
from mlir_mx.errors import MXUnsupportedHostError, MXValueError
from mlir_mx.execution.threads import call_threads
from mlir_mx.host import check_threads, host_features
from mlir_mx.linear.amx import amx_bf16_status
from mlir_mx.linear.amx_checks import check_activations, check_out, check_prepared
from mlir_mx.numerics import MXArray

__all__ = [
    "EXACT_LINEARS",
    "GROUP",
    "MAX_FALLBACK_SHARE",
    "AMXMatmul",
    "WeightShape",
    "amx_matmul_runner",
    "check_activations",
    "check_prepared",
    "failing_blocks",
    "failing_rows",
    "pack_activations",
    "pack_scales",
    "pack_weight",
    "prepare_model",
]

#: The Linears :meth:`AMXMatmul.exact` runs: ``Linear``'s AMX hook
#: (:mod:`mlir_mx.linear.amx_linear`) keeps them on the exact path.
EXACT_LINEARS: weakref.WeakSet = weakref.WeakSet()

#: C tile groups of the kernel: 2 x 2 tiles of 16 x 16 (4 accumulators).
GROUP = (2, 2)

#: The largest share of failing (row, block)s a call runs on the tiles with.
#: Measured with B widened from the codes (``bench/probes/amx_linear_rows.py
#: --fail``, E2M1 4096 x 4096, 1 thread, thread CPU time;
#: bench/results/amx-linear-rows-2026-12-05-s54.txt, quiet): against the
#: exact path 2.46x with N(0,1)'s own ~6 %, then, with a share forced to
#: fail, 1.81x at 10 %, 1.51x at 20 %, 1.20x at 30 %, 1.07x at 40 %, 0.84x at
#: 60 % (M = 256); at M = 32 1.12x at 30 % and 0.90x at 40 %.  So 30 %: at
#: or below the break-even at every row count the hook takes.
MAX_FALLBACK_SHARE = 0.3


def _pad(n: int) -> int:
    return -(-n // 16) * 16


def pack_weight(b: MXArray) -> np.ndarray:
    """The kernel's B: the weight's codes (an MXArray (K, N) blocked along K
    in blocks of ``bs`` = 32, or NVFP4's 16) as (N/16, K/bs, bs/2, R) bytes
    (``int8``), N padded to 16 with code 0: tile row
    ``r`` of column tile ``t`` and block ``j`` holds the codes of rows ``bs j
    + 2 r + p`` and columns ``16 t + n`` in the pair order ``2 n + p``,
    packed as the format packs a row (FP4 16 bytes, FP6 24, 8-bit formats
    32: :mod:`mlir_mx.kernels.amx.panel`).  The same bytes as the packed
    codes (N padded), widened to bf16 inside the kernel."""
    from mlir_mx.numerics.packing import is_packed_storage, pack_codes

    k, n = b.shape
    fmt, bs = b.format, b.block_size
    raw = np.asarray(b.codes).view(np.uint8)
    codes = np.zeros((k, _pad(n)), np.uint8)
    codes[:, :n] = raw
    # (K/bs, bs/2 r, 2 p, N/16 t, 16 n) -> (t, K/bs, r, n, p)
    pair = codes.reshape(k // bs, bs // 2, 2, -1, 16).transpose(3, 0, 1, 4, 2)
    pair = np.ascontiguousarray(pair.reshape(-1, k // bs, bs // 2, 32))
    if is_packed_storage(pair.shape, fmt):
        pair = pack_codes(pair, fmt)
    return pair.view(np.int8)  # the kernel's i8 memref


def pack_activations(a: np.ndarray, ok: np.ndarray, block_size: int = 32) -> np.ndarray:
    """A (f32 (M, K), bf16 values) with the (row, block)s where ``ok`` (M,
    K/32) is false zeroed, as the kernel's A: (M/16, K/32, 16, 32) bf16, M
    padded to 16 with zero rows."""
    import ml_dtypes

    m, k = a.shape
    nb = k // block_size
    out = np.zeros((_pad(m), nb, block_size), ml_dtypes.bfloat16)
    out[:m] = np.where(ok[:, :, None], a.reshape(m, nb, block_size), np.float32(0))
    return np.ascontiguousarray(out.reshape(-1, 16, nb, block_size).transpose(0, 2, 1, 3))


def failing_rows(ok: np.ndarray, route: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """The (row, block)s where ``ok`` (M, K/bs) is false, for the kernel:
    ``ptr`` (i32, (M/16) K/bs + 1) and ``rows`` (i32: the row within its
    tile), CSR by ``s = row_tile K/bs + block``; ``bptr`` (K/bs + 1) and
    ``bidx`` (indices into ``rows``), the same by block, each block's list
    padded to a multiple of four by repeating its entries in turn; ``grow``
    (each one's row in A).  ``route`` (NVFP4, :func:`mlir_mx.oracle.
    amx_tile_route`): those (row, block)s go to the tile route's ``tptr``,
    ``tidx`` instead (padded to a multiple of 16; returned after ``grow``).
    No array is empty (a dummy entry where nothing fails)."""
    m, nb = ok.shape
    fail = np.zeros((_pad(m), nb), bool)
    fail[:m] = ~ok
    tiled = np.zeros((_pad(m), nb), bool)
    tiled[:m] = False if route is None else route
    per = fail.reshape(-1, 16, nb).transpose(0, 2, 1)  # (row tile, block, row)
    tile, block, row = np.nonzero(per)
    on_tiles = tiled.reshape(-1, 16, nb).transpose(0, 2, 1)[tile, block, row]
    ptr = np.concatenate([[0], np.cumsum(per.sum(axis=2).reshape(-1))]).astype(np.int32)
    bptr, bidx = _by_block(block, ~on_tiles, nb, 4)
    grow = (tile * 16 + row).astype(np.int32)
    if not len(row):
        row = grow = np.zeros(1, np.int32)
    if route is None:
        return ptr, row.astype(np.int32), bptr, bidx, grow
    return (ptr, row.astype(np.int32), bptr, bidx, grow, *_by_block(block, on_tiles, nb, 16))


def _by_block(block: np.ndarray, keep: np.ndarray, nb: int, pad: int):
    """``(bptr, bidx)``: the entries ``f`` where ``keep`` grouped by
    ``block[f]`` (in ``f`` order), each block's list padded to a multiple of
    ``pad`` by repeating its entries in turn (``np.resize``; the same ``t``
    twice), at least ``pad`` entries."""
    order = np.argsort(block, kind="stable")
    order = order[keep[order]]
    counts = np.bincount(block[keep], minlength=nb)
    padded = -(-counts // pad) * pad
    bptr = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
    bidx = np.zeros(max(int(bptr[-1]), pad), np.int32)
    starts = np.concatenate([[0], np.cumsum(counts)])
    for j in np.flatnonzero(counts):
        mine = order[starts[j] : starts[j + 1]]
        bidx[bptr[j] : bptr[j + 1]] = np.resize(mine, padded[j])  # repeats: same t twice
    return bptr, bidx


def failing_blocks(a, bptr, bidx, grow, block_size: int = 32) -> np.ndarray:
    """The A blocks (f32, as given) of :func:`failing_rows`'s by-block list
    (the chains', or the tile route's with its ``tptr``, ``tidx``), packed
    in its order: (len(bidx), bs), the fallback's input."""
    nb = len(bptr) - 1
    block = np.repeat(np.arange(nb), np.diff(bptr))
    out = np.zeros((len(bidx), block_size), np.float32)
    if len(block):
        cols = block[:, None] * block_size + np.arange(block_size)
        out[: len(block)] = a[grow[bidx[: len(block)]][:, None], cols]
    return out


def pack_scales(w) -> np.ndarray:
    """The weight's scale codes (E8M0, or NVFP4's E4M3) as the kernel's
    bytes (K/bs, N padded to 16), the code of 1 (E8M0 127, E4M3 0x38) in
    the padding and in the blocks that ``amx_prepare`` flagged (a weight
    with any runs on the exact path)."""
    nb, n = w.flagged.shape
    one = 0x38 if w.e4m3 else 127
    raw = np.asarray(w.source.scales).view(np.uint8)
    codes = np.full((nb, _pad(n)), one, np.uint8)
    codes[:, :n] = np.where(w.flagged, one, raw)
    return codes.view(np.int8)  # the kernel's i8 memref


def prepare_model(a: np.ndarray, w, max_share: float = MAX_FALLBACK_SHARE):
    """The numpy model of :meth:`AMXMatmul.prepare` (the reference its
    compiled kernel is tested against): ``(a_tiles, ptr, rows, bptr, bidx,
    fa)`` for ``a`` (bf16 values) and an :class:`~mlir_mx.oracle.AMXWeight`,
    and for NVFP4 the tile route's ``(tptr, tidx, ta)`` after them (``ta``:
    its entries' A blocks in bf16, (len(tidx), 16)); or None where the call
    runs on the exact path."""
    import ml_dtypes

    if w.flagged.any():
        return None
    ok = oracle.amx_plan(a, w)
    if ok is None or 1.0 - ok.mean() > max_share:
        return None
    from mlir_mx.linear.amx_prepare import route_on

    route = None
    if w.e4m3:  # NVFP4: the route's lists, empty where it is off (the ring's sizes)
        route = oracle.amx_tile_route(a, w)
        route &= route_on(-(-a.shape[0] // 16))
    ptr, rows, bptr, bidx, grow, *tiled = failing_rows(ok, route)
    fa = failing_blocks(a, bptr, bidx, grow, w.block_size)
    out = (pack_activations(a, ok, w.block_size), ptr, rows, bptr, bidx, fa)
    if not tiled:
        return out
    ta = failing_blocks(a, *tiled, grow, w.block_size).astype(ml_dtypes.bfloat16)
    return (*out, *tiled, ta)


class WeightShape(NamedTuple):
    """What an :class:`AMXMatmul` made with ``keep_source=False`` keeps of its
    weight besides the kernel's codes: the AMXWeight's ``source`` stand-in."""

    shape: tuple[int, int]
    format_name: str
    block_size: int


@functools.lru_cache(maxsize=16)
def _runner(_features: frozenset[str], group: tuple[int, int], element: str, threads: int,
            block: int = 32):  # fmt: skip
    from mlir import ir

    from mlir_mx.execution import CompileOptions, Runner
    from mlir_mx.execution.options import default_cache_dir
    from mlir_mx.kernels.amx.matmul import matmul_module
    from mlir_mx.numerics.formats import E4M3_SCALE_TYPE, SCALE_TYPE
    from mlir_mx.passes.pipeline import Pipeline, PipelineElement
    from mlir_mx.pipelines.amx import amx_library_pipeline

    with ir.Context(), ir.Location.unknown():
        scale_type = E4M3_SCALE_TYPE if block == 16 else SCALE_TYPE  # NVFP4: blocks of 16
        text = str(matmul_module("amx_matmul", group, element, block=block, scale_type=scale_type))
    tasks = PipelineElement.of("mx-parallel-tasks", threads=threads)
    pipeline = Pipeline((tasks, *amx_library_pipeline()))
    return Runner(text, options=CompileOptions(pipeline, cache_dir=default_cache_dir()))


def _refuse_unless_usable() -> None:
    status = amx_bf16_status()
    if not status:
        raise MXUnsupportedHostError(f"AMX-BF16 matmul refused here: {status.reason}")


def amx_matmul_runner(
    group: tuple[int, int] = GROUP, element: str = "f4E2M1FN", threads: int = 1, block: int = 32
):
    """The Runner of the kernel (``@amx_matmul``) for weights in ``element``
    (``block`` 32: E8M0 scales; 16: NVFP4's E4M3 scales)
    on a team of ``threads`` (its column groups claimed one at a time:
    ``mx-parallel-tasks``), compiled once per CPU feature set; refused
    (``MXUnsupportedHostError``) unless AMX-BF16 is usable here."""
    _refuse_unless_usable()
    return _runner(host_features(), tuple(group), element, int(threads), int(block))


class AMXMatmul:
    """``A x B`` on AMX-BF16 with the exact path's bits (the module doc).

    ``AMXMatmul(b, threads=1)``: ``b`` an E8M0-scaled ``MXArray`` (K, N)
    blocked along K, held as its codes (:func:`pack_weight`, widened to bf16
    inside the kernel) and E8M0 scales (:func:`pack_scales`; ``held_bytes``);
    ``threads``: the kernel's team (column groups claimed dynamically, on
    ``threads.set_team``'s team: torch's OpenMP runtime where one is loaded,
    else the caller alone, or our pool; on an oversubscribed machine the
    1-thread kernel, ``threads.call_threads``; the same bits on any count)
    and the exact path's.  E8M0 scales in blocks of 32, NVFP4 in blocks of
    16 (one tile K step per block).  Calling it with ``a`` (f32 (M, K), bf16 values)
    returns C (f32 (M, N)); ``last_path`` says which path the last call took
    (``"amx"`` or ``"exact"``).  A call whose share of failing (row,
    block)s is above ``max_fallback_share`` runs on the exact path (every
    failing one costs an f32 FMA chain and a store and reload of its row
    tile: FP8 weights fail every nonzero block)."""

    def __init__(
        self,
        b: MXArray,
        *,
        threads: int = 1,
        group: tuple[int, int] = GROUP,
        max_fallback_share: float = MAX_FALLBACK_SHARE,
        keep_source: bool = True,
    ):
        _refuse_unless_usable()
        self.weight = oracle.amx_prepare(b)  # scales and flags (no bf16 tiles)
        if b.block_size != (16 if self.weight.e4m3 else 32):
            raise MXValueError(f"b: block_size {b.block_size}; the AMX kernel takes E8M0 scales "
                               "in blocks of 32 and NVFP4 in blocks of 16")  # fmt: skip
        self.b_codes = pack_weight(b)
        self.b_scales = pack_scales(self.weight)
        if not keep_source:  # the caller holds the weight (Linear's hook): not a second copy
            shape = WeightShape(tuple(b.shape), b.format_name, b.block_size)
            self.weight = dataclasses.replace(self.weight, source=shape)
        self.threads = check_threads(threads)
        self.group = tuple(group)
        self.max_fallback_share = max_fallback_share
        self.last_path: str | None = None
        self._exact = None
        self._guard = None  # (GuardParams or None,), made by the first prepare()
        self._bound_fns: dict = {}  # Runner -> its BoundFunction (:meth:`_bound`)

    @property
    def held_bytes(self) -> int:
        """Bytes of the arrays this object keeps for the kernel: the codes
        (the packed codes' size, N padded to 16), the scale codes, the
        per-block flags, scale bounds and ``m_max``; the MXArray
        ``b`` is the caller's."""
        w = self.weight
        extra = w.flagged.nbytes + w.sb_min.nbytes + w.sb_max.nbytes
        extra += 0 if w.m_max is None else w.m_max.nbytes
        held = vars(w)  # what the prepared weight has computed and kept (cached properties)
        return (
            self.b_codes.nbytes
            + self.b_scales.nbytes
            + extra
            + sum(held[k].nbytes for k in ("scales", "tiles") if k in held)
        )

    def exact(self, a: np.ndarray) -> np.ndarray:
        """The exact path: ``Linear(b, activations="bf16")`` (built once)."""
        if not isinstance(self.weight.source, MXArray):
            raise MXValueError("AMXMatmul(keep_source=False) keeps no weight for an exact path")
        if self._exact is None:
            import mlir_mx  # its lazy Linear: linear.layer's AMX hook imports this module

            self._exact = mlir_mx.Linear(self.weight.source, activations="bf16",
                                         threads=self.threads)  # fmt: skip
            EXACT_LINEARS.add(self._exact)
        self.last_path = "exact"
        return self._exact(a)

    def prepare(self, a: np.ndarray):
        """The kernel's per-call arguments for ``a`` (A packed, the failing
        rows and their A blocks), or None where the call runs on the exact
        path: from the compiled prepare kernel
        (:func:`mlir_mx.linear.amx_prepare.prepare_activations`; the same
        arrays as :func:`prepare_model`).  ``a`` must hold bf16 values."""
        from mlir_mx.linear.amx_prepare import guard_params, prepare_activations

        a = check_activations(a, self.weight.source.shape[0], self.weight.block_size)
        if self._guard is None:
            self._guard = (guard_params(self.weight),)
        if self._guard[0] is None:
            return None
        done = prepare_activations(a, self._guard[0], self.max_fallback_share)
        if done.nonbf16:
            raise MXValueError("a: holds values that are not bf16 (round to bf16 first)")
        return done.args

    def run(
        self, prepared, m: int, team: int | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """The kernel on :meth:`prepare`'s arguments: C (f32 (m, N)), on a
        team of ``team`` threads (a caller's thread count, the load check
        already applied), by default ``call_threads(self.threads)``.
        ``out`` (f32 (m, N), C-contiguous): C is written there and returned,
        by the kernel itself where ``m`` and N are multiples of 16 (no copy),
        else copied once from the kernel's padded C."""
        bs = self.weight.block_size
        nb = self.weight.source.shape[0] // bs
        a_tiles, ptr, rows, bptr, bidx, fa, *route = check_prepared(
            prepared, nb, bs, self.weight.e4m3
        )
        n = self.weight.source.shape[1]
        shape = (a_tiles.shape[0] * 16, self.b_codes.shape[0] * 16)
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)):
            raise MXValueError(f"m: an int, not {type(m).__name__}")
        if not shape[0] - 16 < m <= shape[0]:
            raise MXValueError(f"m: the prepared activations hold {shape[0]} rows padded to 16, not {m}")
        if out is not None:
            check_out(out, (m, n))
        c = out if out is not None and out.shape == shape else np.empty(shape, np.float32)
        team = call_threads(self.threads) if team is None else check_threads(team)
        free = (a_tiles, c, ptr, rows, bptr, bidx, fa, *route)  # checked above: C-contiguous, typed
        self._bound(team).call_unchecked(*((x.ctypes.data, x.shape) for x in free))
        self.last_path = "amx"
        if c is out:
            return out
        if out is not None:
            out[...] = c[:m, :n]
            return out
        return np.ascontiguousarray(c[:m, :n])

    def _bound(self, team: int):
        """The kernel on ``team`` threads with this weight's codes and scales
        bound (``Runner.bind``, made once per runner): a call then passes its
        own 7 arrays (10 for NVFP4: the tile route's too) unchecked, by address (about 12 us a call against 68
        through ``Runner.invoke``'s checks; session 57).  Calls of one
        object on one team are serialized."""
        runner = amx_matmul_runner(self.group, self.weight.element, team, self.weight.block_size)
        bound = self._bound_fns.get(runner)
        if bound is None:
            from mlir_mx.execution import FREE

            fixed = (FREE, self.b_codes, FREE, FREE, FREE, self.b_scales, FREE, FREE, FREE)
            fixed += (FREE,) * (3 if self.weight.e4m3 else 0)  # NVFP4: tptr, tidx, ta
            bound = self._bound_fns[runner] = runner.bind("amx_matmul", *fixed)
        return bound

    def __call__(self, a) -> np.ndarray:
        """C for ``a``; an NVFP4 weight's global scale applied last, as
        ``Linear`` does (one f32 division per output, in place:
        :meth:`run` gives C before it)."""
        prepared = self.prepare(a)
        if prepared is None:
            return self.exact(a)
        c = self.run(prepared, a.shape[0])
        if self.weight.global_scale is not None:
            np.divide(c, np.float32(self.weight.global_scale), out=c)
        return c
