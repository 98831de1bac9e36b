"""A's quantization in the dot kernels, 16 blocks at a time (issue 54).

:func:`~.prep.quantize_block` finds each block's largest magnitude with a
horizontal reduction and computes its E8M0 code on scalars: about 50
instructions per block, whatever the block's size, so NVFP4's activations
in blocks of 16 cost nearly twice MXFP4's per value (and A is prepared on
one thread before the parallel part).  Here 16 blocks share that work:

* each block's vectors are max-ed into one vector of magnitudes (``|x|``'s
  bits as integers: NaN above Inf above every finite value, as before);
* the 16 vectors are reduced **transposed** into one vector whose lane ``j``
  is block ``j``'s maximum: 4 stages of pairs, each output two shuffles and
  one max (15 outputs, 45 operations for 16 blocks);
* the E8M0 codes, the two power-of-two factors and the finite flags are
  computed once for the 16 lanes (the same functions, on vectors), and the
  16 scales stored as one vector;
* each block's values are loaded again (from L1) and quantized with its
  lane of the factors broadcast (stored to a small scratch, read back as
  broadcasts in a loop over the 16 blocks: an unrolled form took 50 % longer
  to compile): the same operations as ``quantize_block``,
  so the same bits (``x`` of a NaN/Inf block is zeroed by an ``and`` with
  its flag instead of a select: ``+0`` either way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlir import ir

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import abs_bits, e8m0_code, e8m0_to_f32
from mlir_mx.kernels.common.widen import LANES
from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx.numerics.formats import SCALE_BIAS, SCALE_NAN_CODE

__all__ = [
    "GROUP",
    "MAX_GROUPED_BLOCK",
    "Targets",
    "factors_buffer",
    "quantize_groups",
    "transposed_max",
]

#: Blocks quantized together: one lane of a vector each.
GROUP = LANES
#: The largest block quantized in groups (a group's 16 blocks are unrolled:
#: 32 vectors at blocks of 32); larger blocks go one by one, where one
#: horizontal reduction per block costs little per value.
MAX_GROUPED_BLOCK = 32


def transposed_max(kb: KernelBuilder, tops: list[ir.Value]) -> ir.Value:
    """``out[j] = max over the lanes of tops[j]`` (16 vectors of 16 unsigned
    ``i32``): pairs of vectors whose lanes hold ``s`` segments of ``w``
    lanes each (segment ``t`` of a partial maximum of one source) become one
    vector of ``2 s`` segments of ``w / 2``: the first halves of both
    operands' segments against their second halves, max-ed."""
    vs, w = list(tops), LANES
    while len(vs) > 1:
        half, segs = w // 2, LANES // w
        lo, hi = [], []
        for src in range(2):  # a's segments, then b's (shuffle indices 0.. and 16..)
            for t in range(segs):
                base = src * LANES + t * w
                lo += range(base, base + half)
                hi += range(base + half, base + w)
        vs = [
            kb.maxui(kb.shuffle(a, b, lo), kb.shuffle(a, b, hi))
            for a, b in zip(vs[::2], vs[1::2], strict=True)
        ]
        w = half
    return vs[0]


@dataclass(frozen=True)
class Targets:
    """Where :func:`quantize_groups` puts a row's blocks."""

    store: Callable  # (16 element values, row, col): .prep's dot words
    scales: ir.Value  # (rows, K / block) f32
    factors: ir.Value  # (3, 16) i32 scratch: a group's factors and flags (factors_buffer)
    round: Callable  # (kb, p, fmt) -> element values: .prep._round


def quantize_groups(kb: KernelBuilder, a, element: str, block: int, out: Targets, r, blocks):
    """Blocks ``0 .. blocks`` (a multiple of :data:`GROUP`) of row ``r`` of
    the f32 buffer ``a`` quantized to ``element`` in blocks of ``block``
    into ``out``."""
    fmt = ELEMENT_FORMATS[element]
    bs, v16i = block, kb.vec(LANES, kb.i32)
    with kb.loop(0, blocks, GROUP) as grp:
        k0 = kb.mul(grp.iv, bs)
        tops = []
        for j in range(GROUP):
            mags = [
                abs_bits(kb, kb.vload(a, [r, kb.add(k0, j * bs + i)], LANES))
                for i in range(0, bs, LANES)
            ]
            top = mags[0]
            for v in mags[1:]:
                top = kb.maxui(top, v)
            tops.append(top)
        code = e8m0_code(kb, transposed_max(kb, tops), fmt.emax)
        finite = kb.cmpi("ne", code, kb.const(SCALE_NAN_CODE, v16i))
        kb.vstore(e8m0_to_f32(kb, code), out.scales, [r, grp.iv])
        shared = kb.sub(code, kb.const(SCALE_BIAS, v16i))
        e = kb.sub(kb.const(0, v16i), kb.select(finite, shared, kb.const(0, v16i)))
        e1 = kb.shrsi(e, kb.const(1, v16i))
        f1, f2 = (_pow2(kb, x) for x in (e1, kb.sub(e, e1)))  # f32 bits
        keep = kb.extsi(finite, v16i)  # -1: finite, 0: the block is zeroed
        for i, v in enumerate((f1, f2, keep)):  # lane j: block j's, broadcast below
            kb.vstore(v, out.factors, [i, 0])
        with kb.loop(0, GROUP, 1) as blk:  # a loop, not unrolled: the kernel stays small
            g1, g2, kj = (kb.broadcast(kb.load(out.factors, [i, blk.iv]), LANES) for i in range(3))
            g1, g2 = (kb.bitcast(g, kb.vec(LANES, kb.f32)) for g in (g1, g2))
            j0 = kb.add(k0, kb.mul(blk.iv, bs))
            for i in range(0, bs, LANES):
                col = kb.add(j0, i)
                x = kb.vload(a, [r, col], LANES)
                x = kb.bitcast(kb.andi(kb.bitcast(x, v16i), kj), x.type)
                out.store(out.round(kb, kb.fmul(kb.fmul(x, g1), g2), fmt), r, col)


def factors_buffer(kb: KernelBuilder) -> ir.Value:
    """The scratch of :func:`quantize_groups` (``3 x 16`` i32: each group's
    two power-of-two factors' bits and its finite flags, one lane a block),
    allocated once per kernel call by the caller (who frees it)."""
    return kb.alloc([3, LANES], kb.i32)


def _pow2(kb: KernelBuilder, e: ir.Value) -> ir.Value:
    """The f32 bits (i32 x 16) of 2^e for i32 lanes ``e`` in the normal range."""
    t = e.type
    return kb.shli(kb.add(e, kb.const(127, t)), kb.const(23, t))
