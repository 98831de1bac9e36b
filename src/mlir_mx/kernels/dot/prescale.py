"""B's E8M0 scales folded into its bf16 pairs: the block step without its multiply.

The bf16 dot kernels (``vdpbf16ps``) compute, per block and output, the
blocked order's ``p = fma(a, b, p)`` chain, then ``t = p * sb`` and
``c = c + t`` (bf16 activations, ``sa = 1``).  The multiply shares the dot
instruction's two pipes, one beside every 16 ``vdpbf16ps`` of a 7 x 2 tile
(``docs/passes/mx-matmul-kernels.md``, "The bf16-prefill tile on Zen 5").

An E8M0 scale is a power of two, ``sb = 2^E``.  Where a chunk's expansion
(:meth:`~.codes.CodesSource.expand`) stores ``b' = b 2^E`` instead of ``b``
(``E`` added to the exponent field of each finite nonzero bf16; an exact
value, every element value having at most 4 significant bits), the chain on
``b'`` computes ``p 2^E`` exactly, and so ``t`` itself, when:

* **R1** every nonzero ``b'`` is a normal bf16: ``q 2^E >= 2^-126`` (``q``
  the format's smallest positive value) and ``bmax 2^E`` finite;
* **R2** every nonzero product and partial sum of the scaled chain is at
  least ``2^-126`` (so ``vdpbf16ps``'s flush never fires and scaling by
  ``2^E`` commutes with each rounding): with every nonzero ``|a| >=
  2^amin``, each product is a multiple of ``2^(amin - 7) q 2^E``
  (:func:`~.units.bf16_floor`'s grid argument), so ``E >= -119 - log2 q -
  amin`` suffices;
* **R3** nothing overflows: each partial is below ``32 * 2^(amax + 1) *
  2^(eb + 1) * 2^E`` (``|a| < 2^(amax + 1)``, ``|b| < 2^(eb + 1)``), at most
  ``2^(amax + eb + E + 8)`` once rounded, so ``E <= 119 - eb - amax``.

Then ``c + t`` has the same operands, and the bits are the exact path's.
Taking ``amin <= 7`` and ``amax >= 7`` also covers R1, so a call's bound on
the scale codes (``E + 127``) is::

    lo = 135 - log2 q - min(F, 134)     F: biased exponent of min |a| - 1
    hi = 373 - eb - max(X, 134)         X: biased exponent of max |a|

(:func:`scale_bounds`, from :mod:`.prep`'s ``span``; ``lo >= 1`` excludes
code 0, ``2^-127``; ``hi <= 254`` the NaN code; an Inf or NaN in A gives
``hi = 0``).  A chunk (``kcb`` blocks of a 64-column panel) whose scale
codes all lie in ``[lo, hi]`` is expanded prescaled and runs the microkernel
without the multiply; any other chunk (an all-zero block's code 0, an
extreme scale, or activations far outside the usual range), and every
chunk of a call of fewer than :data:`MIN_ROWS` rows, runs as before.
So the choice changes speed, never bits.  Only E8M0 scales (NVFP4's E4M3
scales are not powers of two), bf16 activations, and B from codes.
"""

from __future__ import annotations

import functools

import numpy as np
from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.widen import LANES
from mlir_mx.kernels.dot.units import bf16_floor
from mlir_mx.numerics import ELEMENT_FORMATS, decode_elements
from mlir_mx.numerics.formats import SCALE_TYPE

__all__ = [
    "MIN_ROWS",
    "both_ways",
    "call_bounds",
    "chunk_prescaled",
    "exponent_adds",
    "has_specials",
    "prescale",
    "scale_bounds",
    "scale_limits",
]

#: Fewer rows than this keep the plain chunks.  The prescaling adds 2
#: instructions per 64 bytes of pairs to the expansion (4 with FP8's
#: Inf/NaN codes): about 1/64 cycle a weight at 4 a cycle, once per call;
#: it saves one multiply per 16 ``vdpbf16ps`` (2 a cycle), M/1024 cycle a
#: weight: even at M = 16.  Measured (``Linear`` 2880 -> 5760 MXFP4, Zen 5,
#: 1 thread, one process, prescaling at every M): M = 2 0.92x, 4 0.95x, 8
#: 1.01x, 16 1.02-1.04x, 24 1.04x, 128 1.05x, 256 1.07-1.08x.
MIN_ROWS = 16

#: A bf16 whose magnitude bits less one lie below this is finite and nonzero.
FINITE_NONZERO = 0x7F7F


@functools.cache
def _magnitudes(b_element: str) -> np.ndarray:
    """``|value|`` of every code of ``b_element`` (float64)."""
    fmt = ELEMENT_FORMATS[b_element]
    codes = np.arange(fmt.num_codes, dtype=np.uint8).view(fmt.dtype)
    return np.abs(decode_elements(codes, fmt.name).astype(np.float64))


def scale_limits(b_element: str) -> tuple[int, int]:
    """``(log2 q, eb)`` of ``b_element``: its smallest positive value ``2^log2q``
    and the exponent ``eb`` of its largest finite magnitude (``|b| < 2^(eb+1)``)."""
    values = _magnitudes(b_element)
    bmax = values[np.isfinite(values)].max()
    return -119 - bf16_floor(b_element), int(np.floor(np.log2(bmax)))


def scale_bounds(kb: KernelBuilder, b_element: str, span) -> tuple[ir.Value, ir.Value]:
    """The call's ``(lo, hi)`` scale codes (``i8`` scalars, unsigned) from
    :mod:`.prep`'s ``span`` (the module's formulas)."""
    log2q, eb = scale_limits(b_element)
    i32 = kb.i32
    c = lambda v: kb.const(v, i32)  # noqa: E731
    x = kb.shrui(kb.reduce("maxui", kb.vload(span, [0], LANES)), c(23))
    f = kb.shrui(kb.reduce("minui", kb.vload(span, [LANES], LANES)), c(23))
    lo = kb.maxsi(kb.subi(c(135 - log2q), kb.minui(f, c(134))), c(1))
    hi = kb.minsi(kb.subi(c(373 - eb), kb.maxui(x, c(134))), c(254))
    hi = kb.select(kb.cmpi("eq", x, c(255)), c(0), kb.maxsi(hi, c(0)))
    return kb.trunci(lo, kb.i8), kb.trunci(hi, kb.i8)


def both_ways(kb: KernelBuilder, on, emit) -> None:
    """``emit(True)`` under ``scf.if on`` and ``emit(False)`` under its
    negation (``on`` an ``i1``); ``on`` None: ``emit(False)`` alone."""
    if on is None:
        emit(False)
        return
    with kb.if_(on):
        emit(True)
    with kb.if_(kb.cmpi("eq", on, kb.const(0, kb.i1))):
        emit(False)


def call_bounds(kb: KernelBuilder, prob, pa, expands_codes: bool, isa):
    """The call's :func:`scale_bounds` where a kernel can prescale: bf16
    activations (:mod:`.prep`'s ``span``), B from codes expanded per chunk,
    E8M0 scales, AVX-512; else None."""
    if pa.span is None or not expands_codes or not isa.wide or prob.b_scale_type != SCALE_TYPE:
        return None
    return scale_bounds(kb, prob.b_element, pa.span)


def chunk_prescaled(kb: KernelBuilder, bounds, codes, m, j, c0, nblk: int) -> ir.Value:
    """Whether chunk ``c0 .. c0 + nblk`` of panel ``j`` runs prescaled (an
    ``i1``): its scale codes (``codes``: the kernel's
    :class:`~.codes.CodesSource`) inside ``bounds``, and M (an index) at
    least :data:`MIN_ROWS`."""
    lo, hi = bounds
    least, most = codes.scale_span(j, c0, nblk, lo)
    inside = kb.andi(kb.cmpi("uge", least, lo), kb.cmpi("ule", most, hi))
    return kb.andi(inside, kb.icmp("uge", m, MIN_ROWS))


def exponent_adds(kb: KernelBuilder, scales: list[ir.Value]) -> list[ir.Value]:
    """Per vector of 16 columns, the ``E << 7`` to add to each of its bf16
    halves (``vector<32xi16>``) of the f32 scales ``2^E`` (normal)."""
    v16i = kb.vec(LANES, kb.i32)
    out = []
    for s in scales:
        e = kb.subi(kb.shrui(kb.bitcast(s, v16i), kb.const(23, v16i)), kb.const(127, v16i))
        low = kb.andi(kb.shli(e, kb.const(7, v16i)), kb.const(0xFFFF, v16i))
        both = kb.ori(low, kb.shli(low, kb.const(16, v16i)))
        out.append(kb.vbitcast(both, 2 * LANES, kb.i16))
    return out


def has_specials(b_element: str) -> bool:
    """Whether some code of ``b_element`` is Inf or NaN (the FP8 formats)."""
    return not np.isfinite(_magnitudes(b_element)).all()


def prescale(kb: KernelBuilder, b_bytes: ir.Value, add: ir.Value, specials: bool) -> ir.Value:
    """``b_bytes`` (64 bytes of bf16 pairs) with ``add`` (:func:`exponent_adds`)
    added to each finite nonzero bf16: times ``2^E``, exactly where the
    chunk's bounds hold; zeros, Inf and NaN as they are.  Without
    ``specials`` (no Inf or NaN code) a nonzero exponent field is the test
    (no element value is a bf16 denormal): one ``vptestmw``."""
    v32 = kb.vec(2 * LANES, kb.i16)
    w = kb.vbitcast(b_bytes, 2 * LANES, kb.i16)
    zero = kb.const(0, v32)
    if specials:
        mag = kb.andi(w, kb.const(0x7FFF, v32))
        live = kb.cmpi("ult", kb.subi(mag, kb.const(1, v32)), kb.const(FINITE_NONZERO, v32))
    else:
        live = kb.cmpi("ne", kb.andi(w, kb.const(0x7F80, v32)), zero)
    return kb.vbitcast(kb.select(live, kb.addi(w, add), w), 64, kb.i8)
