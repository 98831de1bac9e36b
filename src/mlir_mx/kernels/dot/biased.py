"""The integer block partial to f32 in one FMA: a biased or lifted accumulator.

The dot kernels' block step (:mod:`.kernel`) turns the exact int32 partial
``P`` into ``t = f32(P) * sb`` (``vcvtdq2ps`` + ``vmulps``), then
``c = fma(t, sa, c)``.  With NVFP4's block of 16 that is twice per 32
codes, and on AVX-512 the step's three instructions per accumulator share
the vector ports with the dot instructions: 8 ``vpdpbusd`` + 6 against
MXFP4's 8 + 3 per 32 codes and accumulator (issue 54: the 1.29x of int8
prefill).  Here the accumulator starts at ``BIAS = 0x4B400000`` (the f32
``1.5 * 2^23``) instead of 0 (or A's compensation plus it), so after the
block's dots its bits, read as an f32, are exactly ``1.5 * 2^23 + P``
(every integer of ``[2^23, 2^24)`` is an f32 with those low bits, for
``|P| < 2^22``), and::

    t = fma(bits(acc), sb, -1.5 * 2^23 * sb)
      = RN((1.5 * 2^23 + P) * sb - 1.5 * 2^23 * sb) = RN(P * sb)

one FMA (the product and the sum exact inside it, one rounding) where the
plain step has ``RN(f32(P) * sb)``, ``f32(P)`` exact: the same ``t``, but
for the sign of a zero ``t`` (``P * sb = 0``: the FMA gives ``+0`` where
the product of a negative ``P`` and a ``+0`` scale gives ``-0``).  That
sign never reaches C: ``c + (+-0) = c`` unless ``c = -0``, and ``c``
starts at ``+0`` (``mlir_mx.Linear``, the only caller with E4M3 scales:
the Runner refuses NVFP4) and never becomes ``-0``, since every term
``t * sa`` is a multiple of ``2^-143`` (E4M3 values are multiples of
``2^-9``, ``2^-(fa+fb) >= 2^-7``, E8M0 ``sa >= 2^-127``), so each exact sum
is zero (``+0``) or at least ``2^-143`` in magnitude (never rounded to a
zero).  ``-1.5 * 2^23 * sb`` is exact (E4M3's 4-bit significands times 3,
far from the f32 range's ends); a NaN scale gives the same NaN either way.

Taken only where all of this holds (:func:`biased`): E4M3 block scales
(NVFP4), an integer unit, B as records (``Linear``), and the partial's
bound ``block * max|a| * max|b|`` below ``2^22``.  E8M0 scales up to
``2^127`` would overflow ``1.5 * 2^23 * sb`` (MXFP4 keeps the plain step).

**The lifted step** (:func:`lifted`: the kernels that expand B's chunks,
``int-small`` and ``int-prefill``, on x86).  The biased step's two FMAs
share the two FMA pipes with the dots; on AMD Zen 5 ``vsubps`` and
``vcvtdq2ps`` issue on two other pipes (``bench/probes/vector_pipes.py``),
and the block step can be one FMA and one subtraction.  A's scale ``sa =
2^ea`` (E8M0, or NaN) goes into the accumulator's start instead of a
constant: ``lift = LIFT * sa = 1.5 * 2^(ea + 1)`` (:data:`LIFT` ``= 3``,
exact), whose binade's ulp is ``2^(ea - 22)``.  The start is the bits of
``lift`` plus A's compensation (:mod:`.prep` stores that sum), so after the
block's dots ``bits(acc) = bits(lift) + P``, read as an f32 ``lift + P *
2^(ea - 22)`` (``|P| < 2^22`` keeps it in the binade), and::

    u = bits(acc) - lift  = P * sa * 2^-22         (exact: same binade)
    c = fma(u, sb * 2^22, c) = RN(c + P * sb * sa)

B's scales carry the ``2^22`` (the chunk's header holds ``sb * 2^(22 -
fa - fb)``, no offsets).  The blocked order's step is ``RN(c + RN(P * sb)
* sa)``: the same bits where ``P * sb`` is exact, which the
``block * max|a| * max|b| < 2^20`` bound gives (E4M3's significands have 4
bits; 16 x 128 x 12 for NVFP4 against INT8).  ``u`` is exact down to
E8M0's ``2^-127`` (``lift`` is the normal ``1.5 * 2^-126`` there, ``u`` a
multiple of ``2^-149``, a denormal: under the default MXCSR, as the f32
kernels assume), zero blocks give ``u = +0``, a NaN ``sa`` a NaN ``lift``
and ``u``.  ``sa = 2^127`` is the one scale whose lift overflows (``1.5 *
2^128``): :mod:`.prep` flags it (``huge``) and the call takes the biased
step instead (:func:`~.isa.routed`: the kernel holds both forms).  NEON
and the decode kernels keep the biased step.

E8M0 block scales (MXFP4, MXFP6, MXINT8 against INT8 activations) take
the lifted step too where ``Problem.b_lift`` says every scale of B is at
most ``2^105`` (``mlir_mx.Linear`` reads its records' scale codes once per
kernel), so that ``sb * 2^(22 - fa - fb)`` is finite; ``P * sb`` is then
exact (a power of two times ``|P| < 2^22``, down to ``2^-149``), and the
step replaces the plain ``vcvtdq2ps`` + ``vmulps`` + FMA by a subtraction
and an FMA.  Their route's other form is the plain step.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.problem import Problem
from mlir_mx.kernels.common.widen import LANES
from mlir_mx.kernels.dot.units import DotKind, int_max
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE

__all__ = [
    "BIAS",
    "biased",
    "block_partial",
    "chunk_blocks",
    "lifted",
    "lifted_start",
    "lifted_step",
    "offsets",
    "start_value",
    "store_scale",
]

#: The accumulator's start: the bits of the f32 1.5 * 2^23.
BIAS = 0x4B400000
#: Its value as an f32.
BIAS_F32 = 1.5 * 2**23
#: Largest |P| the biased accumulator reads exactly.
P_LIMIT = 2**22
#: The lifted step: A's scale ``sa = 2^ea`` times ``LIFT = 1.5 * 2^(23 -
#: LIFT_SHIFT)`` is the accumulator's start (its bits) and what the step
#: subtracts; B's scales carry ``2^LIFT_SHIFT``.  22 keeps ``LIFT * sa``
#: a normal f32 for every E8M0 ``sa`` but ``2^127`` (the route's other form).
LIFT_SHIFT = 22
LIFT = 1.5 * 2.0 ** (23 - LIFT_SHIFT)
#: Largest ``|P|`` for which ``P * sb`` is exact (E4M3: 4-bit significands).
LIFT_LIMIT = 2**20
#: The largest E8M0 code (``2^105``) the lifted step takes for B: ``sb *
#: 2^(22 - fa - fb)`` stays finite (``Problem.b_lift``).
LIFT_E8M0_MAX = 127 + 105


def biased(prob: Problem, kind: DotKind) -> int:
    """:data:`BIAS` where the kernel for ``prob`` on ``kind`` takes the biased
    block step (its accumulators' start), else 0."""
    if kind.name == "bf16" or prob.b_scale_type != E4M3_SCALE_TYPE or prob.b_dot is None:
        return 0
    a_element = prob.a_element or prob.a_quant
    bound = prob.block * int_max(a_element) * int_max(prob.b_element)
    return BIAS if bound < P_LIMIT else 0


def lifted(prob: Problem, kind: DotKind, isa, expand: bool) -> bool:
    """Whether the kernel takes the lifted step (module docstring): an
    integer unit, B as records, in the kernels that expand B's chunks (the
    compute-bound ``int-small`` / ``int-prefill``) on x86, where ``t = P *
    sb`` is exact and ``sb * 2^22`` finite: E4M3 scales with ``block *
    max|a| * max|b| < 2^20`` (4-bit significands keep ``P * sb`` within
    f32's 24 bits), or E8M0 scales (powers of two) up to ``2^105``
    (``Problem.b_lift``) with the partial below ``2^22``."""
    if not expand or isa.neon or kind.name == "bf16" or prob.b_dot is None:
        return False
    bound = prob.block * int_max(prob.a_element or prob.a_quant) * int_max(prob.b_element)
    if prob.b_scale_type == E4M3_SCALE_TYPE:
        return bound < LIFT_LIMIT
    return prob.b_lift and bound < P_LIMIT


#: Blocks per K chunk of the L2-chunk kernels (``int-prefill``) count blocks
#: of this size: NVFP4's 16 takes twice the blocks, one chunk for K = 4096
#: as MXFP4's 128 blocks of 32 (one tile pass per row group and panel, not two).
CHUNK_BLOCK = 32
#: Chunks at least this many blocks are L2 chunks (``int-small``'s 8 stay).
L2_CHUNK = 64


def chunk_blocks(prob: Problem, kind: DotKind, kcb: int, expand: bool) -> int:
    """``kcb`` blocks of :data:`CHUNK_BLOCK` K values as blocks of
    ``prob.block``, for the expanding L2-chunk kernels with the biased step;
    else ``kcb``."""
    if not (expand and kcb >= L2_CHUNK and biased(prob, kind)) or prob.block >= CHUNK_BLOCK:
        return kcb
    return kcb * CHUNK_BLOCK // prob.block


def start_value(kb: KernelBuilder, kind: DotKind, bias: bool) -> ir.Value:
    """The accumulators' start without A's compensation: 0, 0.0 (bf16) or BIAS."""
    if kind.name == "bf16":
        return kb.const(0.0, kb.vec(LANES, kb.f32))
    return kb.const(BIAS if bias else 0, kb.vec(LANES, kb.i32))


def block_partial(kb: KernelBuilder, kind: DotKind, acc, scale, offset) -> ir.Value:
    """``t = p * sb`` of a block's accumulator ``acc``: ``acc * scale`` (bf16),
    ``f32(acc) * scale``, or with ``offset`` (``-BIAS_F32 * scale``, the
    biased step) one FMA of ``acc``'s bits."""
    if kind.name == "bf16":
        return kb.fmul(acc, scale)
    if offset is not None:
        return kb.fma(kb.bitcast(acc, kb.vec(LANES, kb.f32)), scale, offset)
    return kb.fmul(kb.sitofp(acc, kb.vec(LANES, kb.f32)), scale)


def lifted_start(kb: KernelBuilder, pa, m, blk, on: bool, bias: int) -> ir.Value:
    """A lifted kernel's accumulator start for row ``m``, block ``blk`` (an
    i32 scalar): the bits of ``LIFT * sa`` plus A's compensation if any
    (``on``: the lifted step; :mod:`.prep` stored that sum as the
    compensation), or ``bias`` (:data:`BIAS`, or 0 for E8M0's plain step)
    plus A's compensation (the route's other form: the lift's bits taken
    off again)."""
    i32 = kb.i32
    bits = kb.bitcast(kb.load(pa.lift, [m, blk]), i32)
    if pa.comp is None:
        return bits if on else kb.const(bias, i32)
    comp = kb.load(pa.comp, [m, blk])
    return comp if on else kb.addi(kb.subi(comp, bits), kb.const(bias, i32))


def lifted_step(kb: KernelBuilder, acc, lift, scale, c) -> ir.Value:
    """The lifted step: ``c = fma(bits(acc) - lift, sb * 2^22, c)``.  ``acc``
    started at the bits of ``lift = LIFT * sa`` (plus A's compensation) and
    holds ``bits(lift) + P``: read as an f32 it is ``lift + P * sa * 2^-22``
    (the ulp of ``lift``'s binade), so the subtraction is exact and the FMA's
    product is ``P * sb * sa`` exactly."""
    u = kb.fsub(kb.bitcast(acc, kb.vec(LANES, kb.f32)), lift)
    return kb.fma(u, scale, c)


def offsets(kb: KernelBuilder, scales: list, bias: bool, at=None) -> list:
    """``-BIAS_F32 * sb`` of each scale vector (exact), or Nones (no bias):
    computed, or where ``at = (scratch, row, byte columns)`` read from an
    expanded chunk's header (:func:`store_scale` put them there)."""
    if not bias:
        return [None] * len(scales)
    if at is not None:
        hs, row, cols = at
        return [kb.vbitcast(kb.vload(hs, [row, c], 64), LANES, kb.f32) for c in cols]
    minus = kb.const(-BIAS_F32, kb.vec(LANES, kb.f32))
    return [kb.fmul(s, minus) for s in scales]


def store_scale(kb: KernelBuilder, hs, at: list, scale, offset_bytes: int) -> None:
    """A chunk's header: ``scale`` (f32 x 16) at ``at`` in the scratch ``hs``
    and, where ``offset_bytes`` (the biased step), its offset that many
    bytes further (once per chunk, not per row group): ``-BIAS_F32 * scale``."""
    kb.vstore(kb.vbitcast(scale, 64, kb.i8), hs, at)
    if offset_bytes:
        (off,) = offsets(kb, [scale], True)
        kb.vstore(kb.vbitcast(off, 64, kb.i8), hs, [at[0], kb.add(at[1], offset_bytes)])
