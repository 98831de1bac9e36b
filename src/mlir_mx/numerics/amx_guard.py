"""The guard under which AMX-BF16 gives the exact path's bits, the prepared
weight, and a numpy model of the guarded AMX matmul (issue 51;
``docs/numerics.md``, "AMX-BF16": "The guard" and "Accumulating in the
tiles across blocks").

For bf16 activations ``A`` (M x K) and an MX weight ``B`` (K x N, blocked
along K) with grid ``q`` (the format's smallest positive value) and largest
magnitude ``bmax``, per (row, block) of A with ``g`` the largest power of two
dividing every nonzero ``a_k`` and ``S = sum |a_k|``, the row's block
**passes** (:func:`amx_guard`) when every ``a_k`` is finite,
``g q >= 2^-126``, ``S / g <= T = 2^24 q / bmax`` and ``S bmax < 2^127``.
Then every product is a multiple of ``g q``, every partial sum of any subset
has at most 24 significant bits and is zero or normal, so ``TDPBF16PS``'s two
chains (:func:`~mlir_mx.numerics.matmul.amx_tdpbf16ps`) and the in-order
chain both give the exact sum.

:func:`amx_guarded_matmul` is the whole design in numpy: B stored as
``b * sb`` in bf16 in the pair layout (:func:`amx_prepare`), C accumulated in
the tiles across blocks, failing (row, block)s zeroed in A and their ``t``
added by the in-order f32 chain at their block, and the whole call on the
exact path where :func:`amx_guard_call` fails.  An NVFP4 weight (E4M3
scales ``s = m 2^e``, ``m`` odd, in blocks of 16; ``docs/numerics.md``,
"NVFP4 on AMX") is prepared the same way: its guard bound is ``S/g <= T /
m_max`` per block, its per-call condition reads the scales' units ``2^e``,
its zero and NaN scales are flagged, and the model divides by its global
scale once at the end, as ``blocked_order``; its (row, block)s that fail
only because of ``m_max`` (:func:`amx_tile_route`) get ``t`` from
``TDPBF16PS`` against B unscaled, times ``s``.  Its result equals
:func:`~mlir_mx.numerics.matmul.blocked_order`'s bit for bit (the tests say
where this was checked).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError

from .formats import E4M3_SCALE_TYPE, block_scaling, decode_elements, element_format
from .matmul import amx_pair_layout, amx_tdpbf16ps, blocked_order
from .mxarray import MXArray

__all__ = [
    "AMXWeight",
    "amx_bounds",
    "amx_guard",
    "amx_guard_call",
    "amx_guarded_matmul",
    "amx_pass",
    "amx_plan",
    "amx_prepare",
    "amx_tile_route",
    "scale_units",
]

_TINY = 2.0**-126


def amx_bounds(element) -> tuple[float, float]:
    """``(q, bmax)`` of an element format, from the format table: the smallest
    positive value and the largest finite magnitude of any code (INT8's code
    -128, -2.0, included: ``bmax = 2``)."""
    fmt = element_format(element)
    codes = np.arange(fmt.num_codes, dtype=np.uint8).view(fmt.dtype)
    v = np.abs(np.asarray(decode_elements(codes, fmt), np.float64))
    v = v[np.isfinite(v)]
    return float(v[v > 0].min()), float(v.max())


@functools.cache
def _lsb_table() -> np.ndarray:
    """log2 of the lowest set significand bit's value of every bf16 bit
    pattern (int16); ``_NO_LSB`` for ±0, Inf and NaN."""
    bits = np.arange(1 << 16, dtype=np.uint32)
    exp = ((bits >> 7) & 0xFF).astype(np.int32)
    sig = np.where(exp > 0, (bits & 0x7F) | 0x80, bits & 0x7F)
    tz = np.zeros(len(bits), np.int32)
    for i in range(7, -1, -1):
        tz = np.where(sig & (1 << i), i, tz)
    lsb = np.maximum(exp, 1) - 134 + tz  # a bf16 value is sig 2^(max(exp, 1) - 134)
    return np.where((sig == 0) | (exp == 255), _NO_LSB, lsb).astype(np.int16)


_NO_LSB = 1 << 14


def _stats(a: np.ndarray, block_size: int):
    """Per (row, block) of A (M x K, f32 of bf16 values): ``(finite, g, S)``;
    ``g`` over the finite nonzero elements (``inf`` where there is none),
    from the bits (a table over the bf16 patterns); ``S`` summed in f64
    (exact wherever the guard can pass, whatever the order; Inf or NaN
    where the block is not finite, which fails the guard anyway)."""
    m, k = a.shape
    half = 1 if sys.byteorder == "little" else 0
    hi = a.view(np.uint16).reshape(m, k // block_size, block_size, 2)[..., half]
    finite = (hi & np.uint16(0x7F80)).max(axis=2) != np.uint16(0x7F80)
    lsb = np.take(_lsb_table(), hi).min(axis=2)
    g = np.where(lsb < _NO_LSB, np.ldexp(1.0, np.minimum(lsb, 200).astype(np.int32)), np.inf)
    s = np.abs(a).reshape(-1, block_size).sum(axis=1, dtype=np.float64)
    return finite, g, s.reshape(m, -1)


def _check_aw(a, w) -> np.ndarray:
    """``a`` checked against the :class:`AMXWeight` ``w`` (itself checked first)."""
    return _check_a(a, _check_w(w).source.shape[0], w.block_size)


def _check_w(w) -> AMXWeight:
    """``w``, checked an :class:`AMXWeight` (``amx_prepare``'s result)."""
    if not isinstance(w, AMXWeight):
        raise MXArgTypeError(f"w: expected an AMXWeight (oracle.amx_prepare), got {type(w).__name__}")
    return w


def _check_a(a, k: int | None = None, block_size: int = 32) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.float32 or a.ndim != 2:
        raise MXValueError(f"a: an f32 (M, K) array of bf16 values, not {a.dtype} {a.shape}")
    if k is not None and a.shape[1] != k:
        raise MXValueError(f"a: K = {a.shape[1]}, the weight's K is {k}")
    if a.shape[1] % block_size:
        raise MXValueError(f"a: K = {a.shape[1]} is not a multiple of block_size {block_size}")
    bits = a.view(np.uint32)
    if ((bits & 0xFFFF) != 0).any():
        raise MXValueError("a: holds values that are not bf16 (round to bf16 first)")
    return a


def amx_guard(a, element, block_size: int = 32) -> np.ndarray:
    """The pass mask (bool, M x K/block_size) of bf16 activations ``a`` (f32
    values, bf16-exact) against weights in ``element``: per (row, block),
    every element finite, ``g q >= 2^-126``, ``S/g <= T = 2^24 q / bmax``
    (checked as ``(S/g) bmax <= 2^24 q``, exact) and ``S bmax < 2^127``
    (module doc).  An all-zero block passes.

    FP8 weights never pass on a nonzero block: E4M3's ``T`` is 73 and E5M2's
    below 1, so the formula itself fails them (``S/g >= 1``); they have no
    special case.  Where ``S/g <= T`` holds, ``S`` is exact in f64 (a sum of
    multiples of ``g`` below ``2^24 g``); where it does not, ``S/g`` rounds
    (above 2^53) too little to pass."""
    a = _check_a(a, block_size=block_size)
    return _guard(*_stats(a, block_size), element)


def _guard(finite, g, s, element, m_max=1.0) -> np.ndarray:
    """The guard's mask; ``m_max`` (per block, or 1): the largest odd part of
    the block's scale significands (NVFP4: ``S/g <= T / m_max``)."""
    q, bmax = amx_bounds(element)
    with np.errstate(all="ignore"):
        ratio = np.where(np.isinf(g), 0.0, s / g)
        bound = ratio * bmax * m_max <= 2.0**24 * q  # exact: m_max an integer below 16
        return finite & (g * q >= _TINY) & bound & (s * bmax < 2.0**127)


@dataclass(frozen=True)
class AMXWeight:
    """A weight prepared for the guarded AMX matmul (:func:`amx_prepare`).

    ``flagged``: (K/bs, N) the weight blocks whose ``sb`` breaks ``q sb >=
    2^-126`` or ``bmax sb < 2^128`` (or is NaN; an NVFP4 zero scale breaks
    the first): they keep the unscaled form
    and the per-block store; ``sb_min``, ``sb_max``: (K/bs,) each block's
    smallest scale unit and largest scale (a NaN scale as +Inf: what the
    guard reads), the unit of a scale ``s = m 2^e`` (``m`` odd) being
    ``2^e``: the scale itself for E8M0; ``m_max``: (K/bs,) each block's
    largest ``m`` (1 for E8M0, 1 to 15 for E4M3; a flagged scale as 1);
    ``global_scale``: NVFP4's (None for E8M0);
    ``source``: the MXArray (the fallback chain reads its codes).  Computed
    on first use, then kept: ``scales``, (K/bs, N) ``sb`` (f64), and
    ``tiles`` (4x an FP4 weight's codes): (K/bs, bs/2, 2N)
    ``bfloat16``, each block's B in the pair layout
    (:func:`~mlir_mx.numerics.matmul.amx_pair_layout`), ``b * sb`` (exact) or
    ``b`` in a ``flagged`` column."""

    source: MXArray
    flagged: np.ndarray
    sb_min: np.ndarray
    sb_max: np.ndarray
    m_max: np.ndarray | None = None
    global_scale: float | None = None

    @property
    def element(self) -> str:
        """The element format's name (``f4E2M1FN`` for NVFP4 too)."""
        return block_scaling(self.source.format_name)[0].name

    @property
    def e4m3(self) -> bool:
        """Whether the scales are E4M3 (NVFP4), not E8M0."""
        return block_scaling(self.source.format_name)[1] == E4M3_SCALE_TYPE

    @property
    def block_size(self) -> int:
        return self.source.block_size

    @functools.cached_property
    def scales(self) -> np.ndarray:
        return self.source.scale_values()

    @functools.cached_property
    def tiles(self) -> np.ndarray:
        import ml_dtypes

        bs, e = self.block_size, self.source.element_values()
        scaled = e * np.repeat(np.where(self.flagged, 1.0, self.scales), bs, axis=0)  # exact
        nb = e.shape[0] // bs
        tiles = np.stack([amx_pair_layout(scaled[j * bs : (j + 1) * bs]) for j in range(nb)])
        return tiles.astype(ml_dtypes.bfloat16)

    def values(self, j: int) -> np.ndarray:
        """Block ``j``'s tile as the logical (bs x N) f32 values."""
        t = self.tiles[j].astype(np.float32)
        half, n2 = t.shape
        return t.reshape(half, n2 // 2, 2).transpose(0, 2, 1).reshape(2 * half, n2 // 2)


def scale_units(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(2^e, m)`` of positive finite scales ``s = m 2^e``, ``m`` odd (f64
    each, exact); ``(s, 1)`` for a power of two.  Elsewhere (0, NaN, Inf)
    ``(s, 1)``: those are flagged."""
    ok = np.isfinite(s) & (s > 0)
    f, e = np.frexp(np.where(ok, s, 1.0))
    sig = (f * 2.0**53).astype(np.int64)  # the significand, exact
    low = (sig & -sig).astype(np.float64)  # its lowest set bit
    unit = np.ldexp(low, e - 53)
    return np.where(ok, unit, s), np.where(ok, s / unit, 1.0)


def amx_prepare(b: MXArray) -> AMXWeight:
    """B (an MXArray (K, N) blocked along axis 0, as ``blocked_order``'s
    ``b``: E8M0 scales, or NVFP4's E4M3 scales in blocks of 16 with its
    global scale) as :class:`AMXWeight` (its scales and flags; the bf16
    tiles on first use)."""
    if not isinstance(b, MXArray) or b.axis != 0 or b.ndim != 2:
        raise MXValueError("b: an MXArray (K, N) blocked along axis 0 (E8M0 or NVFP4)")
    if b.block_size % 2:
        raise MXValueError(f"b: block_size {b.block_size} is odd (AMX reads K in pairs)")
    q, bmax = amx_bounds(b.element)
    sb = b.scale_values()
    with np.errstate(invalid="ignore"):
        flagged = ~((q * sb >= _TINY) & (bmax * sb < 2.0**128))
    unit, m = scale_units(np.where(flagged, 1.0, sb))
    guarded = np.where(np.isnan(sb), np.inf, np.where(flagged, sb, unit))
    g = None if b.global_scale is None else float(b.global_scale)
    return AMXWeight(
        b, flagged, guarded.min(axis=1, initial=np.inf),
        np.where(np.isnan(sb), np.inf, sb).max(axis=1, initial=-np.inf),
        m.max(axis=1, initial=1.0), g,
    )  # fmt: skip


def amx_guard_call(a, w: AMXWeight) -> bool:
    """The per-call condition: ``g q sb_min >= 2^-126`` for every (row, block)
    with a finite nonzero element, ``sb_min`` the smallest scale of that
    block of the weight (every column; the design's per-weight minimum is
    never larger, so this is as sound).  It keeps every ``t`` and every
    partial of C a multiple of 2^-126, so the tiles' DAZ/FTZ never fires;
    where it fails the call runs on the exact path."""
    a = _check_aw(a, w)
    return _call_ok(_stats(a, w.block_size)[1], w)


def _call_ok(g, w: AMXWeight) -> bool:
    q, _ = amx_bounds(w.element)
    with np.errstate(invalid="ignore"):
        return bool((g * q * w.sb_min[None, :] >= _TINY).all())


def amx_pass(a, w: AMXWeight) -> np.ndarray:
    """:func:`amx_guard` and no overflow inside the chains of the scaled
    tile: ``S bmax max(1, sb_max) < 2^128`` per (row, block), ``sb_max`` the
    block's largest scale (every partial of ``b sb`` products is at most
    ``S bmax sb`` and, under the guard, has at most 24 bits, so it is then
    an f32 value)."""
    a = _check_aw(a, w)
    return _pass(_stats(a, w.block_size), w)


def _pass(stats, w: AMXWeight, unscaled: bool = False) -> np.ndarray:
    _, bmax = amx_bounds(w.element)
    s = stats[2]
    with np.errstate(all="ignore"):
        fits = s * bmax * np.maximum(1.0, w.sb_max)[None, :] < 2.0**128
    m_max = 1.0 if w.m_max is None or unscaled else w.m_max[None, :]
    return _guard(*stats, w.element, m_max) & fits


def amx_tile_route(a, w: AMXWeight) -> np.ndarray:
    """The (row, block)s (bool, M x K/bs) that fail :func:`amx_pass` only
    because of the scales' odd part: they pass it with ``m_max`` taken as 1
    (``T / m_max < S/g <= T``, every other condition met; none for E8M0,
    whose ``m`` is 1).  Their ``p`` (the block's sum of ``a_k b_k`` against
    B's unscaled values) is exact on the tiles from a zero tile, so ``t =
    f32(p s)`` is one multiply (NVFP4's tile route; ``docs/numerics.md``,
    "NVFP4 on AMX")."""
    a = _check_aw(a, w)
    stats = _stats(a, w.block_size)
    return _pass(stats, w, unscaled=True) & ~_pass(stats, w)


def amx_plan(a, w: AMXWeight) -> np.ndarray | None:
    """:func:`amx_pass`'s mask, or None where :func:`amx_guard_call` fails
    (the call then runs on the exact path): both from one scan of A."""
    a = _check_aw(a, w)
    stats = _stats(a, w.block_size)
    return _pass(stats, w) if _call_ok(stats[1], w) else None


def _fallback_t(a_rows: np.ndarray, w: AMXWeight, j: int) -> np.ndarray:
    """``t = p sb`` of block ``j`` for some rows, by the in-order f32 chain
    (the exact path's, ``blocked_order`` on that block from +0)."""
    bs, src = w.block_size, w.source
    one = 1.0 if w.e4m3 else None  # t before the global scale
    block = MXArray(src.codes[j * bs : (j + 1) * bs], src.scales[j : j + 1], src.format_name, bs,
                    0, global_scale=one)  # fmt: skip
    zero = np.zeros((a_rows.shape[0], src.shape[1]), np.float32)
    return blocked_order(a_rows, block, zero)


def amx_guarded_matmul(a, w: AMXWeight, product=amx_tdpbf16ps) -> np.ndarray:
    """``A x B`` (f32 (M, N)) as the guarded AMX kernel computes it, in numpy.

    ``product(a, b, c)``: ``TDPBF16PS`` on any (M x bs) A, (bs x N) B and
    (M x N) C, the measured model by default (a test passes the hardware's
    one-tile kernel, tiled, to check the design on AMX itself).

    If :func:`amx_guard_call` fails, the exact path (``blocked_order``).
    Otherwise C starts as a zero tile and, per block ``j``:

    1. one ``TDPBF16PS`` (the measured model) of A's block, with the rows
       that fail :func:`amx_pass` zeroed, against the scaled tile (flagged
       columns zero) into the running C;
    2. flagged columns: ``TDPBF16PS`` against the unscaled tile from a zero
       tile, stored, ``t = p sb`` and ``c + t`` in f32, reloaded;
    3. each failing row's ``t``, ``c + t`` in f32: from the in-order f32
       chain, or, where it fails only because of ``m`` (NVFP4,
       :func:`amx_tile_route`), ``TDPBF16PS`` of its A block against B's
       unscaled values from a zero tile, times ``s`` in f32.
    """
    a = _check_aw(a, w)
    bs = w.block_size
    if not amx_guard_call(a, w):
        return blocked_order(a, w.source, np.zeros((a.shape[0], w.source.shape[1]), np.float32))
    ok, route = amx_pass(a, w), amx_tile_route(a, w)
    values = w.source.element_values() if route.any() else None  # B unscaled
    c = np.zeros((a.shape[0], w.source.shape[1]), np.float32)
    with np.errstate(all="ignore"):
        for j in range(ok.shape[1]):
            blk = np.where(ok[:, j, None], a[:, j * bs : (j + 1) * bs], np.float32(0))
            bj, fl = w.values(j), w.flagged[j]
            c = product(blk, np.where(fl[None, :], np.float32(0), bj), c)
            if fl.any():
                p = product(blk, bj[:, fl], np.zeros((a.shape[0], int(fl.sum())), np.float32))
                c[:, fl] += (p.astype(np.float64) * w.scales[j, fl]).astype(np.float32)
            rows, tiled = ~ok[:, j], route[:, j]
            if tiled.any():  # NVFP4's tile route: p on the tiles against b, then t = p s
                raw = np.asarray(values[j * bs : (j + 1) * bs], np.float32)
                p = product(a[tiled, j * bs : (j + 1) * bs], raw,
                            np.zeros((int(tiled.sum()), raw.shape[1]), np.float32))  # fmt: skip
                c[tiled] += p * w.scales[j].astype(np.float32)[None, :]
            rows &= ~tiled
            if rows.any():
                c[rows] += _fallback_t(a[rows, j * bs : (j + 1) * bs], w, j)
        if w.global_scale is not None:  # NVFP4: once per output, as blocked_order
            c = np.zeros(c.shape, np.float32) + c / np.float32(w.global_scale)
    return c
