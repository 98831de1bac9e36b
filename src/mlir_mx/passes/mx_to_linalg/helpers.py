"""IR builders shared by the ``mx-to-linalg`` lowerings.

Everything here builds upstream IR (``linalg``, ``tensor``, ``arith``,
``math``) at the current insertion point and location: affine maps with a
``floordiv`` at the block axis, ``linalg.generic`` ops with a payload built by
a Python callback, and the scalar payloads of the MX numerics (widening an
element and a scale, computing an E8M0 code from a block maximum, scaling and
rounding an element).  All scale arithmetic is integer arithmetic on the f32
and E8M0 bits: there is no ``log2``/``exp2`` approximation anywhere.

The semantics reproduce :mod:`mlir_mx.numerics` bit for bit (see
``docs/numerics.md`` and ``docs/passes/mx-to-linalg.md``).
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, tensor

from mlir_mx.dialect.types import MXTensorType
from mlir_mx.kernels.common.builder import ArithBuilder
from mlir_mx.kernels.common.codec import abs_bits, e8m0_code, e8m0_inverse, int_widen
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_NAN_CODE, SCALE_TYPE

__all__ = [
    "linalg_dialect",
    "block_map",
    "identity_map",
    "drop_dim_map",
    "generic",
    "empty",
    "f32",
    "i32",
    "element_to_f32",
    "scale_to_f32",
    "contracted_fma",
    "scale_code",
    "code_to_scale",
    "amax_to_code",
    "pow2_neg_shared_exp",
    "scaled_to_element",
    "block_amax",
    "expand_axis",
    "power_of_two",
    "pow2_exponent",
    "exponent_add",
    "PARALLEL",
    "REDUCTION",
]


def linalg_dialect():
    """``mlir.dialects.linalg``, imported on first use: importing it builds
    upstream's opdsl named ops (0.15 s), which every ``mx-opt`` run would pay,
    lowering or not (looking up any pass imports every pass module)."""
    from mlir.dialects import linalg

    return linalg


PARALLEL = "parallel"
REDUCTION = "reduction"


# ------------------------------------------------------------------ types


def f32() -> ir.Type:
    return ir.F32Type.get()


def i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def i8() -> ir.Type:
    return ir.IntegerType.get_signless(8)


def scalar_type(name: str) -> ir.Type:
    return ir.Type.parse(name)


def empty(shape: Sequence[int], element: ir.Type) -> ir.Value:
    """``tensor.empty() : tensor<shape x element>``."""
    return tensor.EmptyOp(list(shape), element).result


# ------------------------------------------------------------------ maps


def identity_map(rank: int) -> ir.AffineMap:
    return ir.AffineMap.get_identity(rank)


def block_map(rank: int, axis: int, block_size: int, dims: Sequence[int] | None = None):
    """``(d0, .., dn) -> (.., d_axis floordiv B, ..)``: the scale operand's map.

    ``dims`` picks which loop dimension feeds each result (default: result i
    reads ``d_i``); ``axis`` indexes the results.
    """
    dims = list(range(rank)) if dims is None else list(dims)
    n_loops = max(dims) + 1 if dims else rank
    return _map_over(n_loops, dims, {axis: block_size})


def _map_over(n_loops: int, dims: Sequence[int], floordiv: dict[int, int]) -> ir.AffineMap:
    exprs = []
    for r, d in enumerate(dims):
        e = ir.AffineDimExpr.get(d)
        if r in floordiv:
            e = ir.AffineExpr.get_floor_div(e, ir.AffineConstantExpr.get(floordiv[r]))
        exprs.append(e)
    return ir.AffineMap.get(n_loops, 0, exprs)


def loops_map(n_loops: int, dims: Sequence[int], floordiv: dict[int, int] | None = None):
    """A map over ``n_loops`` loops whose result i is ``d_{dims[i]}`` (floordiv'd if asked)."""
    return _map_over(n_loops, dims, floordiv or {})


def drop_dim_map(rank: int, dropped: int) -> ir.AffineMap:
    """``(d0, .., dn) -> (all but d_dropped)``: the output map of a reduction."""
    return ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(d) for d in range(rank) if d != dropped])


# ------------------------------------------------------------------ generic


def generic(
    inputs: Sequence[ir.Value],
    outputs: Sequence[ir.Value],
    maps: Sequence[ir.AffineMap],
    iterators: Sequence[str],
    body: Callable[..., Sequence[ir.Value]],
) -> list[ir.Value]:
    """Build a ``linalg.generic`` on tensors whose payload is ``body(*block_args)``.

    ``body`` gets the scalar block arguments (inputs then outputs) and returns
    the values to ``linalg.yield``; it runs with the insertion point inside
    the payload block.  Returns the op's results.
    """
    result_types = [v.type for v in outputs]
    linalg = linalg_dialect()
    op = linalg.GenericOp(
        result_types,
        list(inputs),
        list(outputs),
        ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
        ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{it}>") for it in iterators]),
    )
    arg_types = [v.type.maybe_downcast().element_type for v in list(inputs) + list(outputs)]
    block = op.regions[0].blocks.append(*arg_types)
    with ir.InsertionPoint(block):
        yielded = body(*block.arguments)
        linalg.YieldOp(list(yielded))
    return list(op.results)


# ------------------------------------------------------------------ scalars
#
# Scalar payloads are built with the kernels' ArithBuilder and codec
# (mlir_mx.kernels.common.codec), at the current insertion point.


def _b() -> ArithBuilder:
    return ArithBuilder()


def element_to_f32(x: ir.Value, element: str) -> ir.Value:
    """The exact f32 value of one element code (``extf``; i8: ``sitofp(c) * 2^-6``)."""
    fmt = ELEMENT_FORMATS[element]
    b = _b()
    if fmt.widening == "int":
        return int_widen(b, x, fmt)
    return b.extf(x, b.f32)


def contracted_fma(a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """``c + a * b`` as ``mulf`` + ``addf`` with the ``contract`` fast-math flag.

    LLVM fuses the pair into one FMA (one rounding), which is what the
    generated kernels compute; unlike ``math.fma``, the ``addf`` is a
    combiner upstream's linalg vectorizer recognizes, so the stock vectorizing
    schedules still apply (their ``multi_reduction`` drops the flag, see
    ``docs/numerics.md``).
    """
    fm = ir.Attribute.parse("#arith.fastmath<contract>")
    prod = arith.MulFOp(a, b, fastmath=fm).result
    return arith.AddFOp(c, prod, fastmath=fm).result


def scale_to_f32(s: ir.Value) -> ir.Value:
    """``extf`` of an E8M0 scale: 2^(code-127), NaN for code 255."""
    b = _b()
    return b.extf(s, b.f32)


def scale_code(s: ir.Value) -> ir.Value:
    """The E8M0 scale's code as i32 in [0, 255] (``bitcast`` to i8, ``extui``)."""
    b = _b()
    return b.extui(b.bitcast(s, b.i8), b.i32)


def code_to_scale(code: ir.Value, scale_type: str = SCALE_TYPE) -> ir.Value:
    """An i32 code in [0, 255] as an E8M0 value (``trunci`` to i8, ``bitcast``)."""
    b = _b()
    return b.bitcast(b.trunci(code, b.i8), scalar_type(scale_type))


def amax_to_code(amax: ir.Value, emax: int) -> ir.Value:
    """E8M0 code (i32) of a block from its f32 ``amax`` (the OCP FLOOR rule,
    :func:`mlir_mx.kernels.common.codec.e8m0_code`: ``max(field - emax, 0)`` of the
    biased f32 exponent of ``|amax|``; a non-finite amax, from a NaN or an
    Inf in the block, gives code 255, NaN)."""
    b = _b()
    return e8m0_code(b, abs_bits(b, amax), emax)


def pow2_neg_shared_exp(code: ir.Value) -> ir.Value:
    """The f32 ``2^-shared_exp`` = ``2^(127 - code)`` for an i32 code
    (:func:`mlir_mx.kernels.common.codec.e8m0_inverse`: code 254 gives 2^-127, an
    f32 subnormal; code 255 gives NaN)."""
    return e8m0_inverse(_b(), code)


def scaled_to_element(x: ir.Value, code: ir.Value, element: str) -> ir.Value:
    """Element code of f32 ``x`` in a block whose E8M0 code is ``code`` (i32).

    ``x * 2^-shared_exp`` in one f32 multiply (exact unless the result is below
    2^-126, where every element format rounds to a signed zero anyway), clamped
    to +-max_normal (saturation, E5M2 included), rounded RNE by ``truncf``.
    i8: ``clamp(roundeven(x * 2^-shared_exp * 64), -127, 127)`` then ``fptosi``.
    A NaN block (code 255) gives code 0 for every element.
    """
    fmt = ELEMENT_FORMATS[element]
    b = _b()
    f = lambda v: b.const(v, b.f32)  # noqa: E731
    nan_block = b.cmpi("eq", code, b.const(SCALE_NAN_CODE, b.i32))
    p = b.fmul(x, pow2_neg_shared_exp(code))
    if fmt.is_int:
        one = 2.0**fmt.mbits  # code c is c / 2^mbits: c = x * 2^mbits
        top = fmt.max_normal * one  # 127
        q = b.roundeven(b.fmul(p, f(one)))
        q = b.minimumf(b.maximumf(q, f(-top)), f(top))
        q = b.select(nan_block, f(0.0), q)
        return b.fptosi(q, b.i8)
    p = b.minimumf(b.maximumf(p, f(-fmt.max_normal)), f(fmt.max_normal))
    p = b.select(nan_block, f(0.0), p)
    return b.truncf(p, scalar_type(element))


# ------------------------------------------------------------------ quantize


def expand_blocks(x: ir.Value, t: MXTensorType) -> ir.Value:
    """``tensor.expand_shape`` splitting the block axis into (nblocks, B)."""
    ax, bs = t.block_axis, t.block_size
    shape = list(t.shape)
    out_shape = shape[:ax] + [shape[ax] // bs, bs] + shape[ax + 1 :]
    reassoc = []
    j = 0
    for i in range(t.rank):
        if i == ax:
            reassoc.append([j, j + 1])
            j += 2
        else:
            reassoc.append([j])
            j += 1
    result = ir.RankedTensorType.get(out_shape, f32())
    attr = ir.ArrayAttr.get(
        [
            ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), k) for k in g])
            for g in reassoc
        ]
    )
    return tensor.ExpandShapeOp(result, x, attr, [], out_shape).result


def expand_axis(x: ir.Value, axis: int, block_size: int) -> ir.Value:
    """``tensor.expand_shape`` of ``x`` splitting ``axis`` into (size / B, B).

    Keeps the element type (mantissa codes, f32, ...); a pure view: it
    bufferizes to ``memref.expand_shape`` (no copy).
    """
    tt = ir.RankedTensorType(x.type)
    shape = list(tt.shape)
    out_shape = shape[:axis] + [shape[axis] // block_size, block_size] + shape[axis + 1 :]
    reassoc, j = [], 0
    for i in range(len(shape)):
        reassoc.append([j, j + 1] if i == axis else [j])
        j += 2 if i == axis else 1
    i64 = ir.IntegerType.get_signless(64)
    attr = ir.ArrayAttr.get(
        [ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in g]) for g in reassoc]
    )
    result = ir.RankedTensorType.get(out_shape, tt.element_type)
    return tensor.ExpandShapeOp(result, x, attr, [], out_shape).result


def block_amax(x: ir.Value, t: MXTensorType) -> ir.Value:
    """``max |x|`` per block as an f32 tensor of the scale shape.

    ``tensor.expand_shape`` to (.., nblocks, B, ..), ``linalg.fill`` 0.0, and a
    reduction ``linalg.generic`` over the B axis with ``absf`` + ``maximumf``.
    ``maximumf`` propagates NaN, so a block holding a NaN has a NaN amax and a
    block holding an Inf (and no NaN) has +Inf: both are non-finite.
    """
    expanded = expand_blocks(x, t)
    rank = t.rank + 1
    inner = t.block_axis + 1
    b = _b()
    init = linalg_dialect().fill(b.const(0.0, b.f32), outs=[empty(t.scale_shape, f32())])
    iters = [REDUCTION if d == inner else PARALLEL for d in range(rank)]

    def body(v, acc):
        return [b.maximumf(acc, b.absf(v))]

    return generic(
        [expanded], [init], [identity_map(rank), drop_dim_map(rank, inner)], iters, body
    )[0]


# ------------------------------------------------------------------ fold_scale

#: Exponent standing for "alpha is not a power of two": every code + it
#: leaves [0, 254], so every block takes the requantized route.
NOT_POW2 = 1 << 16


def power_of_two(v: float) -> int | None:
    """``p`` when ``v`` is exactly ``2^p`` (f32 subnormal powers included), else None."""
    if not (v > 0 and pymath.isfinite(v)):
        return None
    mant, exp = pymath.frexp(v)
    return exp - 1 if mant == 0.5 else None


def pow2_exponent(alpha: ir.Value) -> ir.Value:
    """i32 ``p`` when the f32 ``alpha`` is ``2^p`` (normal or subnormal), else
    :data:`NOT_POW2`; from the bits, at the current insertion point."""
    b = _b()
    c = lambda v: b.const(v, b.i32)  # noqa: E731
    bits = b.bitcast(alpha, b.i32)
    field = b.andi(b.shrui(bits, c(23)), c(0xFF))
    frac = b.andi(bits, c(0x7FFFFF))
    positive = b.cmpi("sgt", bits, c(0))  # no sign bit, not zero
    # field 0 with frac 0 is zero: excluded by `positive`
    normal = b.andi(b.cmpi("eq", frac, c(0)), b.cmpi("ne", field, c(255)))
    single_bit = b.cmpi("eq", b.andi(frac, b.subi(frac, c(1))), c(0))
    subnormal = b.andi(b.cmpi("eq", field, c(0)), single_bit)
    is_pow2 = b.andi(positive, b.ori(normal, subnormal))
    # subnormal 2^p = frac * 2^-149; frac (< 2^23) converts exactly, its exponent is log2(frac)
    ffield = b.shrui(b.bitcast(b.sitofp(frac, b.f32), b.i32), c(23))
    sub_p = b.subi(ffield, c(127 + 149))
    p = b.select(b.cmpi("eq", field, c(0)), sub_p, b.subi(field, c(127)))
    return b.select(is_pow2, p, c(NOT_POW2))


def exponent_add(mant, scale, qm, qs, p: int | ir.Value, t: MXTensorType):
    """Blocks of fold_scale by ``2^p``: scale code + ``p`` where that stays in
    [0, 254] (element codes unchanged), a NaN block (code 255) unchanged,
    otherwise the requantized block (``qm``, ``qs``).

    ``p`` is a Python int (constant alpha) or an i32 value (runtime alpha,
    :data:`NOT_POW2` when it is not a power of two: every block requantized,
    NaN blocks included).  A runtime ``p`` enters as a rank-0 tensor.
    """
    runtime = not isinstance(p, int)
    extra = (
        [tensor.FromElementsOp(ir.RankedTensorType.get([], i32()), [p]).result] if runtime else []
    )

    b = _b()
    c = lambda v: b.const(v, b.i32)  # noqa: E731

    def decide(code, rest):
        pv = rest[0] if runtime else c(p)
        nc = b.addi(code, pv)
        is_nan = b.cmpi("eq", code, c(SCALE_NAN_CODE))
        in_range = b.andi(b.cmpi("sge", nc, c(0)), b.cmpi("sle", nc, c(SCALE_NAN_CODE - 1)))
        add = b.andi(in_range, b.cmpi("ne", code, c(SCALE_NAN_CODE)))
        keep = b.andi(is_nan, b.cmpi("ne", pv, c(NOT_POW2))) if runtime else is_nan
        return nc, add, keep

    srank, rank = len(t.scale_shape), t.rank
    scalar = [ir.AffineMap.get(srank, 0, [])] if runtime else []

    def scale_body(s, q, *rest):
        nc, add, keep = decide(scale_code(s), rest)
        r = b.select(add, code_to_scale(nc, t.scale_type), q)
        return [b.select(keep, s, r)]

    new_scale = generic(
        [scale, qs, *extra],
        [empty(t.scale_shape, scalar_type(t.scale_type))],
        [identity_map(srank)] * 2 + scalar + [identity_map(srank)],
        [PARALLEL] * srank,
        scale_body,
    )[0]

    ident, blk = identity_map(rank), block_map(rank, t.block_axis, t.block_size)
    scalar = [ir.AffineMap.get(rank, 0, [])] if runtime else []

    def mant_body(m, q, s, *rest):
        _nc, add, keep = decide(scale_code(s), rest)
        return [b.select(b.ori(add, keep), m, q)]

    new_mant = generic(
        [mant, qm, scale, *extra],
        [empty(t.shape, scalar_type(t.element_type))],
        [ident, ident, blk] + scalar + [ident],
        [PARALLEL] * rank,
        mant_body,
    )[0]
    return new_mant, new_scale
