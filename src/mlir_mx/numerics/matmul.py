"""The matmul's claim, as a checkable condition: the reference of ``mx.block_matmul``.

``C = acc + A x B`` (A MX blocked along K, or f32: the library's
activations; B MX blocked along K, or f32) is computed by every compiled
path that claims it in **the blocked order** (``docs/numerics.md``): per
output, per block ``j``, the in-block partial ``p_j = sum_k a_k b_k`` of
exact element values (f32 FMAs), then ``t_j = p_j * sb_j`` (one f32
multiply) and ``c = fma(t_j, sa_j, c)`` (``sa = 1`` for an f32 A, ``sb = 1``
for an f32 B).  :func:`blocked_order` is that order, emulated bit for bit.

:func:`matmul_reference` returns, per output element, the exact result (f64),
the error bound and whether the output lies inside the claim:

* **Inside the claim** when (all conditions are on the operands, exactly):

  1. no operand element whose dequantized value overflows f32 from a finite
     code (a scale above the canonical range; ``quantize`` never makes one);
  2. ``T = |acc| + sum_k |a_k sa b_k sb| < 2^126`` (the order of f32
     additions decides whether a larger sum overflows);
  3. for every block ``j``: ``U_j = sum_{k in j} |a_k b_k| < 2^126`` and
     ``U_j * sb_j < 2^126`` (neither the unscaled partial nor the partial
     scaled by B's scale alone can overflow).

* **The bound** there, with ``n = K + K/B + 2`` roundings, ``u = 2^-24`` and
  ``gamma_n = n u / (1 - n u)``::

      |C - exact| <= gamma_n * T + 2^-150 * (1 + gamma_n) * sum_j E_j

  The first term is the classical bound of a dot product evaluated in any
  order.  The second bounds the roundings that land in the f32 subnormal
  range: each is off by at most 2^-150 (half the spacing 2^-149), times the
  scales applied after it, times at most ``1 + gamma_n`` for the roundings
  after it.  A rounding whose exact result is a multiple of 2^-149 is exact
  there, and every f32 value is one, so with ``pi_k = a_k b_k`` (unscaled)
  and ``off(v)``: ``v`` is not a multiple of 2^-149, ``E_j`` counts:

  - ``sa_j sb_j`` for each ``k`` with ``off(pi_k)``: an in-block product
    (FMA, or multiply then add) that may round below 2^-126, scaled after;
  - ``1`` for each ``k`` with ``off(pi_k sa_j sb_j)``: the same product in
    the lowerings that dequantize first (``fused``), scaled before;
  - ``sa_j`` when ``sb_j < 1`` and some ``off(pi_k sb_j)``: ``t_j = p_j sb_j``
    (``p_j`` is a multiple of the smallest power of two dividing its
    products, and ``t_j`` has at most 24 bits: it is exact otherwise);
  - ``1`` when ``sa_j < 1`` and some ``off(pi_k sa_j sb_j)``: ``fma(t_j,
    sa_j, c)``, ``c`` being an f32 value.

  A block whose products are all zero (``U_j = 0``) counts nothing: it
  contributes exactly nothing, whatever its scales.  For mx x mx every
  ``pi_k`` is a multiple of ``q_a q_b >= 2^-32`` (the formats' smallest
  subnormals, E5M2's 2^-16 the smallest), so the in-block products never
  count; but ``t_j`` can be subnormal and inexact, where ``sb_j < 2^-149 /
  (q_a q_b)`` (below 2^-117 for E5M2 x E5M2, 2^-124 for E5M2 x E4M3; for
  the other pairs that bound lies below the smallest scale 2^-127), and
  the final FMA for every pair where ``sa_j sb_j`` is below the same bound.
  For an f32 activation ``x`` (A f32, ``sa = 1``), the final FMA is an f32
  addition, exact in the subnormal range, and a product counts only when
  ``x a_k`` is not a multiple of 2^-149 (``x = 2^-149`` against an element
  of 0.0625 does; against 1.0 it does not, so the result there is exact
  within ``gamma_n T``).

NaN/Inf: where the exact sum is NaN the result must be NaN; where it is
infinite, the same infinity.

**NVFP4 B** (E4M3 block scales ``s_j`` and a global scale ``g``, a divisor:
``numerics.nvfp4``): the blocked order runs with ``sb_j = s_j`` (the E4M3
values, exact in f32), from zero, and the global scale is applied **once per
output, at the end**: ``C = acc + f32(c / g)`` (one f32 division, then one f32
addition; ``acc = 0`` in ``mlir_mx.Linear``, where the addition is exact).
Its exact value is ``acc + sum_k a_k b_k s_j / g`` and its bound the blocked
order's, divided by ``g``, plus the division's and the addition's roundings
(:func:`_nvfp4_claim`).  An NVFP4 A is refused.
"""

from __future__ import annotations

import numpy as np

from mlir_mx.errors import MXArgTypeError, MXValueError

from .mx import MXArray

__all__ = [
    "U",
    "amx_nan_open",
    "amx_pair_layout",
    "amx_tdpbf16ps",
    "blocked_order",
    "matmul_bound",
    "matmul_reference",
]

#: The unit roundoff of f32.
U = 2.0**-24
_F32_MAX = float(np.finfo(np.float32).max)


def matmul_bound(terms: np.ndarray, k: int, block_size: int, underflow: np.ndarray | float = 0.0):
    """``gamma_n * terms + 2^-150 * (1 + gamma_n) * underflow`` (``underflow``:
    the ``sum_j E_j`` of each output, :func:`matmul_reference`)."""
    n = k + k // block_size + 2
    gamma = n * U / (1 - n * U)
    return gamma * terms + 2.0**-150 * (1 + gamma) * underflow


def _operand(x, bs: int, axis: int):
    """``(element values, scales, exact values, overflow mask)`` of one operand
    (an MXArray blocked along ``axis``, or an f32 array: scales 1)."""
    if isinstance(x, MXArray):
        if x.global_scale is not None and axis == 1:
            raise MXValueError(
                f"a: the oracle's matmul takes an E8M0-scaled (OCP MX) or f32 A, "
                f"not an {x.format_name} MXArray (NVFP4 weights go in B)"
            )
        e, s = x.element_values(), x.scale_values()
        v = e * np.repeat(s, bs, axis=axis)  # exact (f64)
        return e, s, v, ~(np.abs(v) <= _F32_MAX) & np.isfinite(e) & ~np.isnan(v)
    e = np.asarray(x, np.float64)
    shape = list(e.shape)
    shape[axis] //= bs
    return e, np.ones(shape), e, np.zeros(e.shape, bool)


def _off(v: np.ndarray) -> np.ndarray:
    """``v`` (f64, exact) is finite and not a multiple of 2^-149."""
    w = np.ldexp(v, 149)
    return np.isfinite(w) & (w != np.floor(w))


def _underflow(ea, eb, sa, sb, bs: int) -> np.ndarray:
    """``sum_j E_j`` (M, N): the roundings that may land below 2^-126 (module doc)."""
    m, k = ea.shape
    nb = k // bs
    sa_f = np.where(np.isfinite(sa), sa, 0.0)[:, :, None]  # (M, nb, 1)
    sb_f = np.where(np.isfinite(sb), sb, 0.0)[None]  # (1, nb, N)
    eb_f = np.where(np.isfinite(eb), eb, 0.0)
    with np.errstate(all="ignore"):
        pi = (ea[:, :, None] * eb_f[None]).reshape(m, nb, bs, -1)  # unscaled, exact
        pb = pi * sb_f[:, :, None]  # pi_k sb_j
        ps = pb * sa_f[:, :, None]  # pi_k sa_j sb_j
        e = _off(pi).sum(axis=2) * sa_f * sb_f  # in-block roundings, scaled after
        e += _off(ps).sum(axis=2)  # the dequantize-first lowerings' products
        e += (_off(pb).any(axis=2) & (sb_f < 1)) * sa_f  # t_j
        e += _off(ps).any(axis=2) & (sa_f < 1)  # fma(t_j, sa_j, c)
    return e.sum(axis=1)


def _check_operands(a, b, acc) -> None:
    """The oracle matmul's operands: ``a`` (M, K) and ``b`` (K, N), each an
    MXArray or a float array, one at least MX (``a`` blocked along 1, ``b``
    along 0), ``acc`` a float (M, N) array; ``MXArgTypeError`` / ``MXValueError``
    naming the argument otherwise."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, (MXArray, np.ndarray)):
            raise MXArgTypeError(
                f"{name}: expected an MXArray or a float numpy array, got {type(x).__name__}"
            )
        if isinstance(x, np.ndarray) and x.dtype.kind != "f":
            raise MXArgTypeError(f"{name}: expected a float array, got dtype {x.dtype}")
        if x.ndim != 2:
            raise MXValueError(f"{name}: expected a 2-D operand, got shape {tuple(x.shape)}")
    if not isinstance(a, MXArray) and not isinstance(b, MXArray):
        raise MXArgTypeError("a, b: expected at least one MXArray, got two float arrays")
    for name, x, axis in (("a", a, 1), ("b", b, 0)):
        if isinstance(x, MXArray) and x.axis != axis:
            raise MXValueError(f"{name}: expected an MXArray blocked along axis {axis}, got {x.axis}")
    if isinstance(a, MXArray) and isinstance(b, MXArray) and a.block_size != b.block_size:
        raise MXValueError(f"a, b: block sizes differ ({a.block_size} and {b.block_size})")
    if a.shape[1] != b.shape[0]:
        raise MXValueError(f"a, b: inner sizes differ, {tuple(a.shape)} x {tuple(b.shape)}")
    if not isinstance(acc, np.ndarray) or acc.dtype.kind != "f":
        raise MXArgTypeError(f"acc: expected a float numpy array, got {type(acc).__name__}")
    if acc.shape != (a.shape[0], b.shape[1]):
        raise MXValueError(
            f"acc: expected shape {(a.shape[0], b.shape[1])}, got {tuple(acc.shape)}"
        )


def _global(b) -> np.float32 | None:
    """B's global scale (an NVFP4 B), else None."""
    return b.global_scale if isinstance(b, MXArray) else None


def matmul_reference(a, b, acc: np.ndarray):
    """``(exact, bound, inside)`` of ``acc + A x B`` (f64, f64, bool; shape (M, N)).

    ``a``: an MXArray (M, K) blocked along axis 1, or an f32 (M, K) array (the
    library's activations); ``b``: an MXArray (K, N) blocked along axis 0 (an
    NVFP4 one included: module doc) or an f32 (K, N) array (at least one of
    them MX); ``acc``: f32 (M, N).
    """
    _check_operands(a, b, acc)
    g = _global(b)
    if g is not None:
        return _nvfp4_claim(a, b, acc, float(g))
    exact, bound, inside, _terms = _claim(a, b, acc)
    return exact, bound, inside


def _nvfp4_claim(a, b, acc: np.ndarray, g: float):
    """:func:`matmul_reference` of an NVFP4 B: ``c`` (the blocked order from
    zero, ``sb = s_j``) within ``b0`` of ``e0``; ``d = f32(c / g)`` within
    ``b1 = (b0 + u (|e0| + b0)) / g + 2^-150`` of ``e0 / g`` (a relative
    rounding, or half the subnormal spacing); ``f32(acc + d)`` within
    ``b1 + u (|acc| + |e0| / g + b1)`` of ``acc + e0 / g``.  Inside where
    ``c``'s claim holds and ``(T + b0) / g + |acc| < 2^126``."""
    e0, b0, inside, terms = _claim(a, b, np.zeros(acc.shape, np.float32))
    acc64 = acc.astype(np.float64)
    with np.errstate(all="ignore"):
        b1 = (b0 + U * (np.abs(e0) + b0)) / g + 2.0**-150
        finite_acc = np.where(np.isfinite(acc64), np.abs(acc64), 0.0)
        bound = b1 + U * (finite_acc + np.abs(e0) / g + b1)
        inside = inside & ((terms + b0) / g + finite_acc < 2.0**126)
        exact = acc64 + e0 / g
    return exact, bound, inside


def _claim(a, b, acc: np.ndarray):
    """``(exact, bound, inside, T)`` of the blocked order (``sb``: B's scale
    values, E4M3 ones for an NVFP4 B; no global scale)."""
    bs = (a if isinstance(a, MXArray) else b).block_size
    ea, sa, av, overflow_a = _operand(a, bs, 1)
    eb, sb, bv, overflow_b = _operand(b, bs, 0)
    acc64 = acc.astype(np.float64)
    m, k = ea.shape
    nb = k // bs
    with np.errstate(all="ignore"):
        prods = av[:, :, None] * bv[None, :, :]  # exact in f64; no BLAS shortcuts on 0 * inf
        exact = acc64 + prods.sum(axis=1)
        terms = np.where(np.isfinite(acc64), np.abs(acc64), 0.0)
        terms = terms + np.where(np.isfinite(prods), np.abs(prods), 0.0).sum(axis=1)
        # Unscaled block partials U_j (M, K/B, N) and U_j * sb_j.
        unscaled = np.abs(ea)[:, :, None] * np.where(np.isfinite(eb), np.abs(eb), 0.0)[None]
        part = unscaled.reshape(m, nb, bs, -1).sum(axis=2)
        part_b = part * np.where(np.isfinite(sb), sb, 0.0)[None]
    bad = overflow_a.any(axis=1)[:, None] | overflow_b.any(axis=0)[None, :]
    big = (part >= 2.0**126).any(axis=1) | (part_b >= 2.0**126).any(axis=1)
    inside = ~bad & (terms < 2.0**126) & ~big
    underflow = _underflow(ea, eb, sa, sb, bs)
    return exact, matmul_bound(terms, k, bs, underflow), inside, terms


def _fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """f32 ``fma(x, y, z)``, rounded once, where ``x * y`` is exact in f64
    (at most 53 significant bits: an f32 value times an MX element value or a
    power of two). ``s = x*y + z`` in f64 is correct except on f32 midpoints,
    where the f64 error ``e`` (TwoSum, exact) decides the direction."""
    with np.errstate(all="ignore"):
        xy = x.astype(np.float64) * y
        z64 = z.astype(np.float64)
        s = xy + z64
        bp = s - xy
        e = (xy - (s - bp)) + (z64 - bp)  # s + e == xy + z exactly (finite values)
        r = s.astype(np.float32)
        other = np.nextafter(r, np.where(s > r, np.float32(np.inf), np.float32(-np.inf)))
        mid = (r.astype(np.float64) + other.astype(np.float64)) / 2
        fix = np.isfinite(s) & (s != r) & (s == mid) & (e != 0) & ((e > 0) == (other > r))
    return np.where(fix, other, r)


def blocked_order(a, b, acc: np.ndarray) -> np.ndarray:
    """``acc + A x B`` in the blocked order, bit for bit as the kernels compute it
    (f32 (M, N)): operands as for :func:`matmul_reference` (either may be
    f32, not both).  Per block: ``p = fma(a_k, b_k, p)`` over the block in
    order, ``t = p * sb`` (f32), ``c = fma(t, sa, c)``.  An NVFP4 B: ``c``
    from zero with ``sb`` its E4M3 scales, then ``acc + f32(c / g)``."""
    _check_operands(a, b, acc)
    g = _global(b)
    if g is None:
        return _blocked(a, b, acc)
    c = _blocked(a, b, np.zeros(acc.shape, np.float32))
    with np.errstate(all="ignore"):
        return acc.astype(np.float32) + c / np.float32(g)


def _blocked(a, b, acc: np.ndarray) -> np.ndarray:
    """The blocked order with B's scale values as ``sb`` (no global scale)."""
    bs = (a if isinstance(a, MXArray) else b).block_size
    ea, sa, _, _ = _operand(a, bs, 1)
    eb, sb, _, _ = _operand(b, bs, 0)
    c = acc.astype(np.float32).copy()
    with np.errstate(all="ignore"):
        for j in range(ea.shape[1] // bs):
            p = np.zeros(c.shape, np.float32)
            for kk in range(j * bs, (j + 1) * bs):
                p = _fma(
                    np.broadcast_to(ea[:, kk, None], c.shape).astype(np.float32), eb[kk][None], p
                )
            t = (p.astype(np.float64) * sb[j][None]).astype(np.float32)
            c = _fma(t, np.broadcast_to(sa[:, j, None], c.shape), c)
    return c


#: x86's default NaN (an invalid operation's result, e.g. ``Inf * 0``).
_DEFAULT_NAN = 0xFFC00000


def _ftz(x: np.ndarray) -> np.ndarray:
    """f32 values below 2^-126 in magnitude as zeros of their sign (DAZ/FTZ)."""
    return np.where(np.abs(x) < np.float32(2.0**-126), np.copysign(np.float32(0), x), x)


def amx_pair_layout(b: np.ndarray) -> np.ndarray:
    """B (K x N) in AMX's pair layout (K/2 x 2N): ``b[k][n]`` at row ``k // 2``,
    column ``2 n + k % 2`` (what ``TDPBF16PS`` reads as its B tile)."""
    if not isinstance(b, np.ndarray) or b.ndim != 2 or b.shape[0] % 2:
        raise MXValueError(
            f"b: expected a 2-D numpy array with an even row count, got "
            f"{tuple(b.shape) if isinstance(b, np.ndarray) else type(b).__name__}"
        )
    k, n = b.shape
    return np.ascontiguousarray(b.reshape(k // 2, 2, n).transpose(0, 2, 1).reshape(k // 2, 2 * n))


def amx_tdpbf16ps(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """What AMX-BF16's ``TDPBF16PS`` computes (measured, ``docs/numerics.md``,
    "AMX-BF16"): ``a`` (M x K, bf16 values), ``b`` (K x N, bf16 values, the
    logical matrix, not the pair layout), ``c`` (M x N f32); f32 (M x N).
    Per element, with DAZ/FTZ (``_ftz``) at every step::

        E = +0;  for k = 0, 2, ...:  E = FTZ(fma(DAZ(a[k]), DAZ(b[k]), E))
        O = +0;  for k = 1, 3, ...:  O = FTZ(fma(DAZ(a[k]), DAZ(b[k]), O))
        c = FTZ(FTZ(E + O) + DAZ(c))

    NaN results: x86's default NaN ``0xffc00000`` where no operand of the
    element is a NaN (an invalid operation made it); the operand's payload,
    made quiet, where exactly one is and nothing else in the element
    overflows or is invalid; elsewhere the payload is left open
    (:func:`amx_nan_open`)."""
    a32, b32, c32 = _amx_operands(a, b, c)
    out, _ = _amx_chains(a32, b32, c32)
    nan = np.isnan(out)
    if not nan.any():
        return out
    count = _amx_nan_count(a32, b32, c32)
    bits = out.view(np.uint32).copy()
    bits[nan & (count == 0)] = _DEFAULT_NAN
    one = nan & (count == 1)
    if one.any():
        na, nb, nc = np.isnan(a32), np.isnan(b32), np.isnan(c32)
        a_bits = np.max(np.where(na, a32.view(np.uint32), 0), axis=1)[:, None]
        b_bits = np.max(np.where(nb, b32.view(np.uint32), 0), axis=0)[None, :]
        src = np.where(nc, c32.view(np.uint32), np.maximum(a_bits, b_bits))
        bits[one] = src[one] | np.uint32(0x00400000)
    return bits.view(np.float32)


def amx_nan_open(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Where :func:`amx_tdpbf16ps` leaves a NaN result's payload open
    (bool, M x N): an element with two or more NaN operands, or with one
    and an overflow or invalid operation elsewhere (which NaN x86 keeps
    then depends on operand order, not measured)."""
    a32, b32, c32 = _amx_operands(a, b, c)
    count = _amx_nan_count(a32, b32, c32)
    zero = np.float32(0)
    _, clean = _amx_chains(*(np.where(np.isnan(x), zero, x) for x in (a32, b32, c32)))
    return (count > 1) | ((count == 1) & ~clean)


def _amx_operands(a, b, c):
    """DAZ ``a`` and ``b`` (f32 copies), ``c`` as f32: ``a`` (M, K), ``b``
    (K, N) and ``c`` (M, N) real arrays, else ``MXArgTypeError`` / ``MXValueError``."""
    arrays = {}
    for name, x in (("a", a), ("b", b), ("c", c)):
        x = np.asarray(x)
        if x.dtype.kind not in "fiu" or x.ndim != 2:
            raise MXArgTypeError(f"{name}: expected a 2-D real array, got {x.dtype} {x.shape}")
        arrays[name] = x
    a, b, c = arrays["a"], arrays["b"], arrays["c"]
    if a.shape[1] != b.shape[0] or c.shape != (a.shape[0], b.shape[1]):
        raise MXValueError(f"a, b, c: shapes {a.shape} x {b.shape} + {c.shape} do not match")
    return (
        _ftz(np.asarray(a, np.float32)),
        _ftz(np.asarray(b, np.float32)),
        np.asarray(c, np.float32),
    )


def _amx_nan_count(a32, b32, c32) -> np.ndarray:
    """The NaN operands of each output element."""
    return np.isnan(a32).sum(1)[:, None] + np.isnan(b32).sum(0)[None, :] + np.isnan(c32)


def _amx_chains(a32, b32, c32) -> tuple[np.ndarray, np.ndarray]:
    """The model's result (NaN payloads as numpy leaves them) and where
    every chain step, ``E + O`` and the result are finite."""
    shape = (a32.shape[0], b32.shape[1])
    finite = np.ones(shape, bool)
    chains = []
    with np.errstate(all="ignore"):
        for first in (0, 1):
            p = np.zeros(shape, np.float32)
            for k in range(first, a32.shape[1], 2):
                p = _ftz(_fma(np.broadcast_to(a32[:, k, None], shape), b32[k][None], p))
                finite &= np.isfinite(p)
            chains.append(p)
        both = _ftz(chains[0] + chains[1])
        out = _ftz(both + _ftz(c32))
    return out, finite & np.isfinite(both) & np.isfinite(out)
