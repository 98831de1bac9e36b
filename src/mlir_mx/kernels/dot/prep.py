"""A for the dot kernels: widened (or quantized) once per call into dot-unit words.

Each row of A becomes ``K / g`` 32-bit words (:class:`~.units.DotKind`
``group`` g), the operand one dot instruction broadcasts:

* ``i8``: four int8 ``a = value * 2^fa``, and per block the compensation
  ``-128 * sum a`` of B's ``+128`` offset (:mod:`.units`), the
  accumulator's start;
* ``i16``: two int16 ``value * 2^fa``;
* ``bf16``: two bf16 values, element ``2i + 1`` in the low half and ``2i`` in
  the high half ("swapped pairs", so that ``vdpbf16ps`` adds ``2i`` first).

bf16 activations (``Problem.a_quant`` ``"bf16"``): an f32 A rounded to bf16
(nearest even), scales 1, and a flag set where some nonzero value lies
below :func:`~.units.bf16_floor` (the kernel then takes its FMA form,
:func:`~.isa.routed`).

and its scales become f32 (E8M0 decoded by :mod:`.codec`; rows past M are zero).

An MX A is decoded exactly (:mod:`.widen`).  An f32 A with
``Problem.a_quant`` is quantized here, 16 blocks at a time
(:mod:`.prep_groups`, then block by block), exactly as
:func:`mlir_mx.oracle.quantize` does (the FLOOR scale rule, RNE rounding
with saturation, NaN/Inf blocks to scale NaN and zero elements), so the
kernel's result equals the one for the oracle-quantized MX A bit for bit:

    amax = max |x| (NaN if any)    shared = max(floor(log2 amax) - emax, -127)
    p    = x * 2^-shared           (two power-of-two multiplies: exact unless
                                    |p| < 2^-126, where every format rounds to 0)
    INT8:  q = clamp(rne(p * 64), -127, 127) / 64
    float: p = clamp(p, +-max_normal);  u = max(floor(log2 |p|), emin) - mbits
           q = rne(p / 2^u) * 2^u
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir
from mlir.dialects import math, vector

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.codec import abs_bits, e8m0_code, e8m0_to_f32, round_bf16
from mlir_mx.kernels.common.problem import BF16, CodeRows, Operands, Problem, vector_loop
from mlir_mx.kernels.common.widen import LANES, decode_scales, decoder
from mlir_mx.kernels.dot.biased import LIFT
from mlir_mx.kernels.dot.prep_groups import (
    GROUP,
    MAX_GROUPED_BLOCK,
    Targets,
    factors_buffer,
    quantize_groups,
)
from mlir_mx.kernels.dot.units import DotKind, bf16_floor, int_factor
from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx.numerics.formats import SCALE_BIAS, SCALE_NAN_CODE

__all__ = ["DotA", "prepare_dot_a", "quantize_block"]


@dataclass(frozen=True)
class DotA:
    words: ir.Value  # (Mp, K/g) i32: the dot operand words; rows >= M hold value 0
    scales: ir.Value  # (Mp, K/B) f32; rows >= M are 0
    comp: ir.Value | None  # (Mp, K/B) i32: -128 * the block's sum of A (i8 only)
    tiny: ir.Value | None  # (16,) i32, bf16 activations: nonzero where some |a| < 2^floor
    m: ir.Value  # M (index)
    mp: ir.Value  # M rounded up to the row group
    lift: ir.Value | None = None  # (Mp, K/B) f32: LIFT * scale (the lifted step, .biased)
    huge: ir.Value | None = None  # (16,) i32: nonzero where some LIFT * scale is +Inf
    #: (32,) i32, bf16 activations: lanes 0..15 the largest ``|a|``'s bits,
    #: 16..31 the smallest ``|a| - 1`` (unsigned: a zero's is the largest);
    #: what :mod:`.prescale` bounds B's scales by.
    span: ir.Value | None = None


def prepare_dot_a(
    kb: KernelBuilder,
    prob: Problem,
    ops: Operands,
    kind: DotKind,
    group: int,
    compensate: bool = True,
    offset: bool = False,
    bias: int = 0,
    lift: bool = False,
) -> DotA:
    """Fill A's words and scales (rows padded to a multiple of ``group``), and
    the compensation where ``compensate`` and the unit offsets B (not with the
    sign trick of :mod:`.isa`, which needs none).  ``offset``: each int8 of
    the words is stored as ``a + 128`` (``a ^ 0x80``, the unsigned operand
    of the A-offset mode of :mod:`.isa`).  ``bias``: added to the
    compensation (the biased accumulator's start, :mod:`.biased`).
    ``lift``: also ``LIFT * scale`` per block (the lifted step's start and
    subtrahend, :mod:`.biased`) and the flag of a scale ``2^127``, whose
    lift overflows (the kernel's other form then, :func:`~.isa.routed`)."""
    if prob.m is None:
        m = kb.dim(ops.a, 0)
        mp = kb.mul(kb.ceildivu(m, group), group)
        rows, dyn = -1, [mp]
    else:
        m = kb.idx(prob.m)
        rows = -(-prob.m // group) * group
        mp, dyn = kb.idx(rows), []
    # Rows a multiple of 4 KiB apart would share L1 sets (the microkernel
    # reads mr rows at once): pad each row by a cache line.
    width = prob.k // kind.group
    words = kb.alloc([rows, width + (LANES if width % 1024 == 0 else 0)], kb.i32, dyn)
    scales = kb.alloc([rows, prob.kblocks], kb.f32, dyn)
    comp = kb.alloc([rows, prob.kblocks], kb.i32, dyn) if kind.comp and compensate else None
    conv = _Words(kb, kind, prob.a_element or prob.a_quant, words, offset)
    tiny = kb.alloc([LANES], kb.i32) if prob.a_quant == BF16 else None
    span = kb.alloc([2 * LANES], kb.i32) if prob.a_quant == BF16 else None
    if tiny is not None:
        kb.vstore(kb.const(0, kb.vec(LANES, kb.i32)), tiny, [0])
        kb.vstore(kb.const(0, kb.vec(LANES, kb.i32)), span, [0])
        kb.vstore(kb.const(-1, kb.vec(LANES, kb.i32)), span, [LANES])
    groups = None  # A quantized 16 blocks at a time (.prep_groups)
    if not prob.a_is_mx and tiny is None and prob.block <= MAX_GROUPED_BLOCK:
        if conv.takes_steps(prob.a_quant):  # INT8: the rounded steps, not the values
            groups = Targets(conv.store_steps, scales, factors_buffer(kb), _round_steps)
        else:
            groups = Targets(conv.store, scales, factors_buffer(kb), _round)
    with kb.loop(0, m, 1) as row:
        if prob.a_is_mx:
            _decode_row(kb, prob, ops, conv, scales, row.iv)
        elif tiny is not None:
            _round_row(kb, prob, ops, conv, scales, tiny, span, row.iv)
        else:
            _quantize_row(kb, prob, ops, conv, scales, row.iv, groups)
        if comp is not None:
            _compensation(kb, prob, words, comp, row.iv, bias)
    if groups is not None:
        kb.dealloc(groups.factors)
    zero_word = kb.const(0, kb.vec(LANES, kb.i32))
    zero = kb.const(0.0, kb.vec(LANES, kb.f32))
    with kb.loop(m, mp, 1) as row:  # padding rows: value 0, scale 0
        r = row.iv
        vector_loop(
            kb,
            prob.k // kind.group,
            LANES,
            lambda o, v: kb.store_lanes(zero_word, words, [r, o], v),
        )
        vector_loop(kb, prob.kblocks, LANES, lambda o, v: kb.store_lanes(zero, scales, [r, o], v))
        if comp is not None:
            vector_loop(
                kb, prob.kblocks, LANES, lambda o, v: kb.store_lanes(zero_word, comp, [r, o], v)
            )
    lifts, huge = _lifts(kb, prob, scales, comp, rows, dyn, mp) if lift else (None, None)
    return DotA(words, scales, comp, tiny, m, mp, lifts, huge, span)


def _lifts(kb: KernelBuilder, prob: Problem, scales, comp, rows: int, dyn, mp):
    """``LIFT * scale`` of every (row, block) (exact: E8M0 scales; padding
    rows 0), its bits added to the compensation ``comp`` if any (the lifted
    accumulators' start), and a flag whose lanes are set where one is +Inf
    (``2^127``)."""
    lifts = kb.alloc([rows, prob.kblocks], kb.f32, dyn)
    huge = kb.alloc([LANES], kb.i32)
    v16i = kb.vec(LANES, kb.i32)
    kb.vstore(kb.const(0, v16i), huge, [0])
    factor = kb.const(LIFT, kb.vec(LANES, kb.f32))
    inf = kb.const(float("inf"), kb.vec(LANES, kb.f32))
    with kb.loop(0, mp, 1) as row:
        r = row.iv

        def put(o, v):
            x = kb.fmul(kb.load_lanes(scales, [r, o], LANES, v), factor)
            kb.store_lanes(x, lifts, [r, o], v)
            if comp is not None:
                start = kb.addi(kb.load_lanes(comp, [r, o], LANES, v), kb.bitcast(x, v16i))
                kb.store_lanes(start, comp, [r, o], v)
            over = kb.extui(kb.cmpf("oeq", x, inf), v16i)
            kb.vstore(kb.ori(kb.vload(huge, [0], LANES), over), huge, [0])

        vector_loop(kb, prob.kblocks, LANES, put)
    return lifts, huge


def _compensation(kb: KernelBuilder, prob: Problem, words, comp, r, bias: int = 0) -> None:
    """``comp[r, kb] = -128 * sum + bias`` of the block's int8 values (from ``words``)."""
    v16i = kb.vec(LANES, kb.i32)
    with kb.loop(0, prob.kblocks, 1) as blk:
        w0 = kb.mul(blk.iv, prob.block // 4)
        total = None
        for off in range(0, prob.block // 4, 4):  # 16 values = 4 words
            q = kb.vbitcast(kb.vload(words, [r, kb.add(w0, off)], 4), LANES, kb.i8)
            ints = kb.extsi(q, v16i)
            total = ints if total is None else kb.add(total, ints)
        s = vector.ReductionOp(kb.i32, vector.CombiningKind.ADD, total).result
        s = kb.mul(s, kb.const(-128, kb.i32))
        kb.store(kb.add(s, kb.const(bias, kb.i32)) if bias else s, comp, [r, blk.iv])


class _Words:
    """f32 element values (16 lanes, exact) -> dot words, stored into ``words``."""

    def __init__(
        self, kb: KernelBuilder, kind: DotKind, element: str, words: ir.Value, offset: bool
    ):
        self.kb, self.kind, self.words, self.offset = kb, kind, words, offset
        f = int_factor(element)
        self.factor = None if f is None else kb.const(2.0**f, kb.vec(LANES, kb.f32))

    def store(self, values: ir.Value, row, col) -> None:
        """Store 16 element values of columns ``col .. col + 16`` of ``row``."""
        kb, kind = self.kb, self.kind
        v16i = kb.vec(LANES, kb.i32)
        if kind.name == "bf16":
            bits = kb.shrui(kb.bitcast(values, v16i), kb.const(16, v16i))
            h = kb.trunci(bits, kb.vec(LANES, kb.i16))
            h = kb.shuffle(h, h, [i ^ 1 for i in range(LANES)])  # swapped pairs
            kb.vstore(kb.vbitcast(h, LANES // 2, kb.i32), self.words, [row, kb.divu(col, 2)])
            return
        self.store_steps(kb.fmul(values, self.factor), row, col)

    def takes_steps(self, element: str | None) -> bool:
        """Whether :meth:`store_steps` serves ``element``'s quantized values:
        an integer format (``value * 2^int_exp2`` is the integer that
        :func:`_round_steps` rounds to) on an integer unit. Never on the
        ``bf16`` unit (FP8 weights): it takes the values' bf16 bits
        (:meth:`store`), whatever the activations' format."""
        fmt = ELEMENT_FORMATS.get(element) if element else None
        integer_unit = self.kind.name != "bf16"
        return integer_unit and self.factor is not None and fmt is not None and fmt.is_int

    def store_steps(self, steps: ir.Value, row, col) -> None:
        """Store 16 values given as ``value * 2^int_exp2`` (integers in f32,
        exact: what :meth:`store` computes from the element values)."""
        kb, kind = self.kb, self.kind
        v16i = kb.vec(LANES, kb.i32)
        ints = kb.fptosi(steps, v16i)
        if kind.name == "i16":
            h = kb.trunci(ints, kb.vec(LANES, kb.i16))
            kb.vstore(kb.vbitcast(h, LANES // 2, kb.i32), self.words, [row, kb.divu(col, 2)])
            return
        b = kb.trunci(ints, kb.vec(LANES, kb.i8))
        if self.offset:  # a + 128 as an unsigned byte
            b = kb.xori(b, kb.const(0x80, kb.vec(LANES, kb.i8)))
        kb.vstore(kb.vbitcast(b, LANES // 4, kb.i32), self.words, [row, kb.divu(col, 4)])


def _decode_row(kb, prob: Problem, ops: Operands, conv: _Words, scales, r) -> None:
    rows_a = CodeRows(kb, ops.a, prob.a_element, prob.a_packed)
    dec = decoder(prob.a_element, vbmi=False)
    sa8 = kb.as_bytes(ops.sa)

    def widen(off, valid):
        (v,) = dec.decode(kb, rows_a.load(r, off, LANES, valid))
        conv.store(v, r, off)

    def scale(off, valid):
        v = decode_scales(kb, kb.load_lanes(sa8, [r, off], LANES, valid))
        kb.store_lanes(v, scales, [r, off], valid)

    vector_loop(kb, prob.k, LANES, widen)
    vector_loop(kb, prob.kblocks, LANES, scale)


def _round_row(kb, prob: Problem, ops: Operands, conv: _Words, scales, tiny, span, r) -> None:
    """Row ``r`` of an f32 A rounded to bf16 into words, scales 1, the
    lanes of ``tiny`` or-ed with ``|a| < 2^floor`` for nonzero ``a``, and
    ``span``'s lanes with the largest ``|a|`` and smallest ``|a| - 1`` (bits)."""
    v16i = kb.vec(LANES, kb.i32)
    floor = kb.const(((bf16_floor(prob.b_element) + 127) << 23) - 1, v16i)
    one = kb.const(1, v16i)

    def widen(off, valid):
        v = round_bf16(kb, kb.load_lanes(ops.a, [r, off], LANES, valid))
        mag = abs_bits(kb, v)
        below = kb.subi(mag, one)  # a zero's wraps to the largest
        small = kb.cmpi("ult", below, floor)  # 0 < |a| < 2^floor
        kb.vstore(kb.ori(kb.vload(tiny, [0], LANES), kb.extui(small, v16i)), tiny, [0])
        kb.vstore(kb.maxui(kb.vload(span, [0], LANES), mag), span, [0])
        kb.vstore(kb.minui(kb.vload(span, [LANES], LANES), below), span, [LANES])
        conv.store(v, r, off)

    vector_loop(kb, prob.k, LANES, widen)
    ones = kb.const(1.0, kb.vec(LANES, kb.f32))
    vector_loop(kb, prob.kblocks, LANES, lambda o, v: kb.store_lanes(ones, scales, [r, o], v))


def _quantize_row(kb, prob: Problem, ops: Operands, conv: _Words, scales, r, groups) -> None:
    bs, nb = prob.block, prob.kblocks
    # 16 blocks at a time (.prep_groups), then one by one; larger blocks
    # amortize their reduction (and would unroll 16 x bs / 16 vectors).
    grouped = nb - nb % GROUP if groups is not None else 0
    if grouped:
        quantize_groups(kb, ops.a, prob.a_quant, bs, groups, r, grouped)
    if grouped == nb:
        return
    with kb.loop(grouped, nb, 1) as blk:
        k0 = kb.mul(blk.iv, bs)
        xs = [kb.vload(ops.a, [r, kb.add(k0, i)], LANES) for i in range(0, bs, LANES)]
        qs, s = quantize_block(kb, xs, prob.a_quant)
        for i, q in enumerate(qs):
            conv.store(q, r, kb.add(k0, LANES * i))
        kb.store(s, scales, [r, blk.iv])


def quantize_block(kb: KernelBuilder, xs: list[ir.Value], element: str) -> tuple[list, ir.Value]:
    """One MX block of f32 values (vectors of 16) -> (element values, f32 scale),
    as :func:`mlir_mx.oracle.quantize` (module docstring)."""
    fmt = ELEMENT_FORMATS[element]
    i32, f32 = kb.i32, kb.f32
    v16f = kb.vec(LANES, f32)
    # |x| as integers keeps the order of the magnitudes, and NaN bits lie
    # above Inf's: an integer max finds amax, Inf and NaN at once.
    mags = [abs_bits(kb, x) for x in xs]
    top = mags[0]
    for v in mags[1:]:
        top = kb.maxui(top, v)
    bits_max = vector.ReductionOp(i32, vector.CombiningKind.MAXUI, top).result
    code = e8m0_code(kb, bits_max, fmt.emax)
    finite = kb.cmpi("ne", code, kb.const(SCALE_NAN_CODE, i32))
    scale = e8m0_to_f32(kb, code)
    shared = kb.sub(code, kb.const(SCALE_BIAS, i32))
    # x * 2^-shared as two multiplies by normal powers of two (2^-127 is not normal).
    e = kb.sub(kb.const(0, i32), kb.select(finite, shared, kb.const(0, i32)))
    e1 = kb.shrsi(e, kb.const(1, i32))
    f1, f2 = (_pow2(kb, x) for x in (e1, kb.sub(e, e1)))
    zero = kb.const(0.0, v16f)
    out = []
    for x in xs:
        x = kb.select(kb.broadcast(finite, LANES), x, zero)
        p = kb.fmul(kb.fmul(x, kb.broadcast(f1, LANES)), kb.broadcast(f2, LANES))
        out.append(_round(kb, p, fmt))
    return out, scale


def _pow2(kb: KernelBuilder, e: ir.Value) -> ir.Value:
    """2^e (f32) for an i32 scalar or vector ``e`` in the normal range."""
    t = e.type
    return kb.bitcast(
        kb.shli(kb.add(e, kb.const(127, t)), kb.const(23, t)),
        kb.f32 if isinstance(t, ir.IntegerType) else kb.vec(LANES, kb.f32),
    )


def _round_steps(kb: KernelBuilder, p: ir.Value, fmt) -> ir.Value:
    """Scaled values -> INT8's steps ``q = clamp(rne(p * 64), -127, 127)``:
    the element value ``q / 64`` times ``2^int_exp2`` (``64``), exactly what
    :meth:`_Words.store` makes of :func:`_round`'s value (``fptosi`` gives
    ``-0`` and ``+0`` the same ``0``), without the two multiplies and the
    ``+ 0`` (issue 54: INT8 activations went through the element value)."""
    if not fmt.is_int or fmt.int_exp2 != 6:
        raise ValueError(f"_round_steps: INT8 activations only, not {fmt.name}")
    v16f = kb.vec(LANES, kb.f32)
    q = math.RoundEvenOp(kb.fmul(p, kb.const(64.0, v16f))).result
    return kb.minimumf(kb.maximumf(q, kb.const(-127.0, v16f)), kb.const(127.0, v16f))


def _round(kb: KernelBuilder, p: ir.Value, fmt) -> ir.Value:
    """Scaled values -> the element values they round to (RNE, saturating)."""
    v16f, v16i = kb.vec(LANES, kb.f32), kb.vec(LANES, kb.i32)
    if fmt.is_int:
        q = _round_steps(kb, p, fmt)
        # + 0.0 turns -0 into +0 (an integer code has no -0).
        return kb.fmul(kb.fadd(q, kb.const(0.0, v16f)), kb.const(2.0**-6, v16f))
    top = kb.const(fmt.max_normal, v16f)
    p = kb.minimumf(kb.maximumf(p, kb.fneg(top)), top)
    ex = kb.sub(
        kb.andi(kb.shrui(kb.bitcast(p, v16i), kb.const(23, v16i)), kb.const(0xFF, v16i)),
        kb.const(127, v16i),
    )
    u = kb.sub(kb.max(ex, kb.const(1 - fmt.bias, v16i)), kb.const(fmt.mbits, v16i))
    steps = math.RoundEvenOp(kb.fmul(p, _pow2(kb, kb.sub(kb.const(0, v16i), u)))).result
    return kb.fmul(steps, _pow2(kb, u))
