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
from mlir.dialects import arith, linalg, math, tensor

from mlir_mx.dialect.types import MXTensorType
from mlir_mx.kernels.builder import ArithBuilder
from mlir_mx.kernels.codec import e8m0_to_f32
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_TYPE

__all__ = [
    "block_map",
    "identity_map",
    "drop_dim_map",
    "generic",
    "empty",
    "f32",
    "i32",
    "const_f32",
    "const_i32",
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


def const_f32(value: float) -> ir.Value:
    return arith.ConstantOp(f32(), ir.FloatAttr.get(f32(), float(value))).result


def const_i32(value: int) -> ir.Value:
    return arith.ConstantOp(i32(), ir.IntegerAttr.get(i32(), int(value))).result


def _cmp(pred: str, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.CmpIOp(getattr(arith.CmpIPredicate, pred), a, b).result


def element_to_f32(x: ir.Value, element: str) -> ir.Value:
    """The exact f32 value of one element code (``extf``; i8: ``sitofp(c) * 2^-6``)."""
    fmt = ELEMENT_FORMATS[element]
    if fmt.is_int:
        c = arith.SIToFPOp(f32(), x).result
        return arith.MulFOp(c, const_f32(2.0**-fmt.mbits)).result
    return arith.ExtFOp(f32(), x).result


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
    return arith.ExtFOp(f32(), s).result


def scale_code(s: ir.Value) -> ir.Value:
    """The E8M0 scale's code as i32 in [0, 255] (``bitcast`` to i8, ``extui``)."""
    raw = arith.BitcastOp(i8(), s).result
    return arith.ExtUIOp(i32(), raw).result


def code_to_scale(code: ir.Value, scale_type: str = SCALE_TYPE) -> ir.Value:
    """An i32 code in [0, 255] as an E8M0 value (``trunci`` to i8, ``bitcast``)."""
    raw = arith.TruncIOp(i8(), code).result
    return arith.BitcastOp(scalar_type(scale_type), raw).result


def amax_to_code(amax: ir.Value, emax: int) -> ir.Value:
    """E8M0 code (i32) of a block from its f32 ``amax`` (the OCP FLOOR rule).

    ``field`` = biased f32 exponent of amax; ``shared_exp = field - 127 - emax``
    clamped below at -127, so ``code = max(field - emax, 0)``; a non-finite amax
    (field 255: the block holds a NaN or an Inf) gives code 255 (NaN).
    """
    bits = arith.BitcastOp(i32(), amax).result
    field = arith.AndIOp(arith.ShRUIOp(bits, const_i32(23)).result, const_i32(0xFF)).result
    unclamped = arith.SubIOp(field, const_i32(emax)).result if emax else field
    code = arith.MaxSIOp(unclamped, const_i32(0)).result
    nonfinite = _cmp("eq", field, const_i32(255))
    return arith.SelectOp(nonfinite, const_i32(255), code).result


def pow2_neg_shared_exp(code: ir.Value) -> ir.Value:
    """The f32 ``2^-shared_exp`` = ``2^(127 - code)`` for an i32 code in [0, 254].

    That is the E8M0 value of code ``254 - code``, decoded exactly as the
    kernels decode scales (:func:`mlir_mx.kernels.codec.e8m0_to_f32`; code
    254 gives 2^-127, an f32 subnormal).  The value for code 255 is garbage
    and must be selected away by the caller.
    """
    return e8m0_to_f32(ArithBuilder(), arith.SubIOp(const_i32(254), code).result)


def scaled_to_element(x: ir.Value, code: ir.Value, element: str) -> ir.Value:
    """Element code of f32 ``x`` in a block whose E8M0 code is ``code`` (i32).

    ``x * 2^-shared_exp`` in one f32 multiply (exact unless the result is below
    2^-126, where every element format rounds to a signed zero anyway), clamped
    to +-max_normal (saturation, E5M2 included), rounded RNE by ``truncf``.
    i8: ``clamp(roundeven(x * 2^-shared_exp * 64), -127, 127)`` then ``fptosi``.
    A NaN block (code 255) gives code 0 for every element.
    """
    fmt = ELEMENT_FORMATS[element]
    nan_block = _cmp("eq", code, const_i32(255))
    p = arith.MulFOp(x, pow2_neg_shared_exp(code)).result
    if fmt.is_int:
        one = 2.0**fmt.mbits  # code c is c / 2^mbits: c = x * 2^mbits
        top = fmt.max_normal * one  # 127
        q = arith.MulFOp(p, const_f32(one)).result
        q = math.RoundEvenOp(q).result
        q = arith.MinimumFOp(arith.MaximumFOp(q, const_f32(-top)).result, const_f32(top)).result
        q = arith.SelectOp(nan_block, const_f32(0.0), q).result
        return arith.FPToSIOp(i8(), q).result
    p = arith.MinimumFOp(
        arith.MaximumFOp(p, const_f32(-fmt.max_normal)).result, const_f32(fmt.max_normal)
    ).result
    p = arith.SelectOp(nan_block, const_f32(0.0), p).result
    return arith.TruncFOp(scalar_type(element), p).result


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
    init = linalg.fill(const_f32(0.0), outs=[empty(t.scale_shape, f32())])
    iters = [REDUCTION if d == inner else PARALLEL for d in range(rank)]

    def body(v, acc):
        return [arith.MaximumFOp(acc, math.AbsFOp(v).result).result]

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
    bits = arith.BitcastOp(i32(), alpha).result
    field = arith.AndIOp(arith.ShRUIOp(bits, const_i32(23)).result, const_i32(0xFF)).result
    frac = arith.AndIOp(bits, const_i32(0x7FFFFF)).result
    positive = _cmp("sgt", bits, const_i32(0))  # no sign bit, not zero
    normal = arith.AndIOp(
        _cmp("eq", frac, const_i32(0)), _cmp("ne", field, const_i32(255))
    ).result  # field 0 with frac 0 is zero: excluded by `positive`
    single_bit = _cmp("eq", arith.AndIOp(frac, arith.SubIOp(frac, const_i32(1)).result).result, const_i32(0))
    subnormal = arith.AndIOp(_cmp("eq", field, const_i32(0)), single_bit).result
    is_pow2 = arith.AndIOp(positive, arith.OrIOp(normal, subnormal).result).result
    # subnormal 2^p = frac * 2^-149; frac (< 2^23) converts exactly, its exponent is log2(frac)
    ffield = arith.ShRUIOp(
        arith.BitcastOp(i32(), arith.SIToFPOp(f32(), frac).result).result, const_i32(23)
    ).result
    sub_p = arith.SubIOp(ffield, const_i32(127 + 149)).result
    p = arith.SelectOp(_cmp("eq", field, const_i32(0)), sub_p, arith.SubIOp(field, const_i32(127)).result).result
    return arith.SelectOp(is_pow2, p, const_i32(NOT_POW2)).result


def exponent_add(mant, scale, qm, qs, p: int | ir.Value, t: MXTensorType):
    """Blocks of fold_scale by ``2^p``: scale code + ``p`` where that stays in
    [0, 254] (element codes unchanged), a NaN block (code 255) unchanged,
    otherwise the requantized block (``qm``, ``qs``).

    ``p`` is a Python int (constant alpha) or an i32 value (runtime alpha,
    :data:`NOT_POW2` when it is not a power of two: every block requantized,
    NaN blocks included).  A runtime ``p`` enters as a rank-0 tensor.
    """
    runtime = not isinstance(p, int)
    extra = [tensor.FromElementsOp(ir.RankedTensorType.get([], i32()), [p]).result] if runtime else []

    def decide(code, rest):
        pv = rest[0] if runtime else const_i32(p)
        nc = arith.AddIOp(code, pv).result
        is_nan = _cmp("eq", code, const_i32(255))
        in_range = arith.AndIOp(_cmp("sge", nc, const_i32(0)), _cmp("sle", nc, const_i32(254))).result
        add = arith.AndIOp(in_range, _cmp("ne", code, const_i32(255))).result
        keep = arith.AndIOp(is_nan, _cmp("ne", pv, const_i32(NOT_POW2))).result if runtime else is_nan
        return nc, add, keep

    srank, rank = len(t.scale_shape), t.rank
    scalar = [ir.AffineMap.get(srank, 0, [])] if runtime else []

    def scale_body(s, q, *rest):
        nc, add, keep = decide(scale_code(s), rest)
        r = arith.SelectOp(add, code_to_scale(nc, t.scale_type), q).result
        return [arith.SelectOp(keep, s, r).result]

    new_scale = generic(
        [scale, qs, *extra], [empty(t.scale_shape, scalar_type(t.scale_type))],
        [identity_map(srank)] * 2 + scalar + [identity_map(srank)], [PARALLEL] * srank, scale_body,
    )[0]  # fmt: skip

    ident, blk = identity_map(rank), block_map(rank, t.block_axis, t.block_size)
    scalar = [ir.AffineMap.get(rank, 0, [])] if runtime else []

    def mant_body(m, q, s, *rest):
        _nc, add, keep = decide(scale_code(s), rest)
        return [arith.SelectOp(arith.OrIOp(add, keep).result, m, q).result]

    new_mant = generic(
        [mant, qm, scale, *extra], [empty(t.shape, scalar_type(t.element_type))],
        [ident, ident, blk] + scalar + [ident], [PARALLEL] * rank, mant_body,
    )[0]  # fmt: skip
    return new_mant, new_scale
