"""The matmul's claim, as a checkable condition: the reference of ``mx.block_matmul``.

``C = acc + A x B`` (A MX blocked along K; B MX blocked along K, or f32) is
computed by every compiled path that claims it in **the blocked order**
(``docs/numerics.md``): per output, per block ``j``, the in-block partial
``p_j = sum_k a_k b_k`` of exact element values (f32 FMAs), then
``t_j = p_j * sb_j`` (one f32 multiply) and ``c = fma(t_j, sa_j, c)``.

:func:`matmul_reference` returns, per output element, the exact result (f64),
the error bound and whether the output lies inside the claim:

* **Inside the claim** when (all conditions are on the operands, exactly):

  1. no operand element whose dequantized value overflows f32 from a finite
     code (a scale above the canonical range; ``quantize`` never makes one);
  2. ``T = |acc| + sum_k |a_k sa b_k sb| < 2^126`` (the order of f32
     additions decides whether a larger sum overflows);
  3. for every block ``j``: ``U_j = sum_{k in j} |a_k b_k| < 2^126`` and
     ``U_j * sb_j < 2^126`` (neither the unscaled partial nor the partial
     scaled by B's scale alone can overflow; ``sb = 1`` for an f32 B).

* **The bound** there, with ``n = K + K/B + 2`` roundings, ``u = 2^-24`` and
  ``gamma_n = n u / (1 - n u)``::

      |C - exact| <= gamma_n * T + 2^-149 * sum_j (B * sa_j * sb_j + sa_j + 1)

  The first term is the classical bound of a dot product evaluated in any
  order; the second bounds the roundings that fall below the f32 normal
  range (an unscaled product or partial that underflows, then is scaled
  up by ``sa_j sb_j``; a ``t_j`` that underflows, then is scaled by ``sa_j``;
  the final sum).  It vanishes in effect when no product, partial or ``t_j``
  is subnormal, which holds for every mx x mx pair (element products are
  at least 2^-32) and for f32 activations whose nonzero products with the
  element values are f32 normals.

NaN/Inf: where the exact sum is NaN the result must be NaN; where it is
infinite, the same infinity.
"""

from __future__ import annotations

import numpy as np

from .mx import MXArray

__all__ = ["U", "matmul_bound", "matmul_reference"]

#: The unit roundoff of f32.
U = 2.0**-24
_F32_MAX = float(np.finfo(np.float32).max)


def matmul_bound(terms: np.ndarray, k: int, block_size: int, underflow: np.ndarray | float = 0.0):
    """``gamma_n * terms + 2^-149 * underflow`` (``underflow``: the
    ``sum_j (B sa_j sb_j + sa_j + 1)`` of each output, :func:`matmul_reference`)."""
    n = k + k // block_size + 2
    gamma = n * U / (1 - n * U)
    return gamma * terms + 2.0**-149 * underflow


def _operand(x, bs: int, axis: int):
    """``(element values, scales, exact values, overflow mask)`` of one operand
    (an MXArray blocked along ``axis``, or an f32 array: scales 1)."""
    if isinstance(x, MXArray):
        e, s = x.element_values(), x.scale_values()
        v = e * np.repeat(s, bs, axis=axis)  # exact (f64)
        return e, s, v, ~(np.abs(v) <= _F32_MAX) & np.isfinite(e) & ~np.isnan(v)
    e = np.asarray(x, np.float64)
    shape = list(e.shape)
    shape[axis] //= bs
    return e, np.ones(shape), e, np.zeros(e.shape, bool)


def matmul_reference(a, b, acc: np.ndarray):
    """``(exact, bound, inside)`` of ``acc + A x B`` (f64, f64, bool; shape (M, N)).

    ``a``: an MXArray (M, K) blocked along axis 1, or an f32 (M, K) array (the
    library's activations); ``b``: an MXArray (K, N) blocked along axis 0 or
    an f32 (K, N) array (at least one of them MX); ``acc``: f32 (M, N).
    """
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
        sa_f = np.where(np.isfinite(sa), sa, 0.0)[:, :, None]
        sb_f = np.where(np.isfinite(sb), sb, 0.0)[None]
        underflow = (bs * sa_f * sb_f + sa_f + 1.0).sum(axis=1)
    overflow_a = ~(np.abs(av) <= _F32_MAX) & np.isfinite(ea) & ~np.isnan(av)
    bad = overflow_a.any(axis=1)[:, None] | overflow_b.any(axis=0)[None, :]
    big = (part >= 2.0**126).any(axis=1) | (part_b >= 2.0**126).any(axis=1)
    inside = ~bad & (terms < 2.0**126) & ~big
    return exact, matmul_bound(terms, k, bs, underflow), inside
