"""The guarded AMX-BF16 matmul's argument checks (:mod:`mlir_mx.linear.
amx_matmul`): what a call passes to native code, checked first, each
failure an :class:`~mlir_mx.errors.MXValueError` naming the argument; the
prepared arrays (:func:`check_prepared`) are passed by address unchecked
after these checks (``AMXMatmul.run``), so every index the kernel follows
is bounded here."""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXValueError
from mlir_mx.kernels.amx.order import RING_TILES

__all__ = ["check_activations", "check_out", "check_prepared"]


def check_activations(a, k: int, block_size: int = 32) -> np.ndarray:
    """``a`` as the kernels take it (f32 (M, K), C-contiguous), or
    :class:`~mlir_mx.errors.MXValueError` naming it (its bf16-ness is checked
    by the prepare kernel)."""
    a = np.asarray(a)
    if a.dtype != np.float32 or a.ndim != 2:
        raise MXValueError(f"a: an f32 (M, K) array of bf16 values, not {a.dtype} {a.shape}")
    if a.shape[1] != k:
        raise MXValueError(f"a: K = {a.shape[1]}, the weight's K is {k}")
    return np.require(a, np.float32, ["C_CONTIGUOUS", "ALIGNED"])


def check_out(out, shape: tuple[int, int]) -> None:
    """``out`` as :meth:`AMXMatmul.run` writes it, or
    :class:`~mlir_mx.errors.MXValueError` naming it."""
    ok = isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == shape
    if not (ok and out.flags.c_contiguous and out.flags.writeable and out.flags.aligned):
        what = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise MXValueError(f"out: a writeable, aligned, C-contiguous f32 {shape} array, not {what}")


def check_prepared(prepared, nb: int, bs: int, tiles: bool = False) -> tuple:
    """:meth:`AMXMatmul.prepare`'s ``(a_tiles, ptr, rows, bptr, bidx, fa)``
    (``tiles``, NVFP4: and ``(tptr, tidx, ta)``) for a weight of ``nb``
    blocks of ``bs``, every index the kernel follows in bounds, or
    :class:`~mlir_mx.errors.MXValueError` naming ``prepared`` (another
    weight's, or edited, arguments would read out of bounds)."""
    import ml_dtypes

    def bad(why: str):
        return MXValueError(f"prepared: {why} (pass AMXMatmul.prepare's result for this weight)")

    count = 9 if tiles else 6
    if not isinstance(prepared, tuple) or len(prepared) != count:
        raise bad(f"not the {count} arrays of AMXMatmul.prepare")
    a_tiles, ptr, rows, bptr, bidx, fa = prepared[:6]
    arrays = dict(ptr=ptr, rows=rows, bptr=bptr, bidx=bidx)
    if tiles:
        arrays.update(tptr=prepared[6], tidx=prepared[7])
    for name, x in arrays.items():
        if not (isinstance(x, np.ndarray) and x.dtype == np.int32 and x.ndim == 1 and len(x)
                and x.flags.c_contiguous):  # fmt: skip
            raise bad(f"{name} is not a non-empty, contiguous 1-D int32 array")
    t = a_tiles
    if not (isinstance(t, np.ndarray) and t.dtype == ml_dtypes.bfloat16 and t.ndim == 4
            and t.shape[1:] == (nb, 16, bs) and t.flags.c_contiguous):  # fmt: skip
        raise bad(f"a_tiles is not a C-contiguous bf16 (M/16, {nb}, 16, {bs}) array")
    _check_blocks("fa", fa, np.float32, bs, bad)
    for p, x, n in ((ptr, rows, t.shape[0] * nb + 1), (bptr, bidx, nb + 1)):
        if len(p) != n or p[0] != 0 or (np.diff(p) < 0).any() or p[-1] > len(x):
            raise bad("ptr/bptr do not index rows/bidx")
    used_rows, used_bidx = rows[: ptr[-1]], bidx[: bptr[-1]]  # what the kernel reads
    if len(fa) < bptr[-1] or ((used_rows < 0) | (used_rows > 15)).any():
        raise bad("fa is shorter than bidx's entries, or a row is outside its tile")
    if ((used_bidx < 0) | (used_bidx >= len(rows))).any():
        raise bad("bidx indexes outside rows")
    if (np.diff(bptr) % 4).any():  # the chains read four entries at a time
        raise bad("bptr is not in steps of 4")
    if tiles:
        _check_route(prepared[6:], nb, bs, len(rows), t.shape[0], bad)
    return prepared


def _check_blocks(name: str, x, dtype, bs: int, bad) -> None:
    if not (isinstance(x, np.ndarray) and x.dtype == dtype and x.ndim == 2
            and x.shape[1] == bs and x.flags.c_contiguous):  # fmt: skip
        raise bad(f"{name} is not a C-contiguous {np.dtype(dtype).name} (entries, {bs}) array")


def _check_route(route: tuple, nb: int, bs: int, nrows: int, mtiles: int, bad) -> None:
    """The tile route's ``(tptr, tidx, ta)``: each block's entries a run of
    whole A tiles (16), at most ``mtiles`` of them (the kernel's ``pbuf``),
    within ``tidx`` and ``ta``, each an index into ``rows`` (``nrows``)."""
    import ml_dtypes

    tptr, tidx, ta = route
    _check_blocks("ta", ta, ml_dtypes.bfloat16, bs, bad)
    steps = np.diff(tptr)
    if (len(tptr) != nb + 1 or tptr[0] != 0 or (steps < 0).any() or (steps % 16).any()
            or (steps > 16 * mtiles).any()):  # fmt: skip
        raise bad("tptr is not (blocks + 1) offsets in steps of 16, at most one per A row")
    if mtiles <= RING_TILES and tptr[-1]:  # the kernel's ring has no tile route
        raise bad(f"tile-route entries for A of at most {RING_TILES} row tiles")
    used = tidx[: tptr[-1]]
    if tptr[-1] > min(len(tidx), len(ta)) or ((used < 0) | (used >= nrows)).any():
        raise bad("tptr/tidx do not index tidx/ta/rows")
