"""The lowerings of the four mx ops to linalg on tensors, for ``mx-to-linalg``.

Each lowering takes the op (its mx operands already available as (mantissa,
scale) pairs through :func:`unpack`) and returns the values that replace its
results, two per mx result.  ``docs/passes/mx-to-linalg.md`` shows the IR of
each; :mod:`mlir_mx.passes.mx_to_linalg.helpers` builds the pieces.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import builtin, tensor

from mlir_mx.dialect.types import MXTensorType, is_mx_type
from mlir_mx.ir_utils import KernelTag, constant_float, owner_op, tag_kernel
from mlir_mx.kernels.common.builder import ArithBuilder
from mlir_mx.numerics.formats import ELEMENT_FORMATS
from mlir_mx.passes.mx_to_linalg import helpers as h
from mlir_mx.passes.mx_to_linalg.nvfp4 import (
    dequantize_nvfp4,
    divide_into_acc,
    quantize_nvfp4,
    zeros_like,
)

__all__ = ["CAST", "LOWERINGS", "pack", "unpack"]

#: The bridge between an mx value and its (mantissa, scale) pair.
CAST = "builtin.unrealized_conversion_cast"


def _ab() -> ArithBuilder:
    """The scalar arith builder of the payloads (at the insertion point)."""
    return ArithBuilder()


def pack(mant: ir.Value, scale: ir.Value, mx_type: ir.Type) -> ir.Value:
    """``unrealized_conversion_cast (mant, scale) -> !mx.tensor`` at the insertion point."""
    return builtin.UnrealizedConversionCastOp([mx_type], [mant, scale]).results[0]


def unpack(v: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(mantissa, scale) of an mx value.

    Reads through a 2 -> 1 cast when ``v`` is one; otherwise inserts a
    1 -> 2 cast at the insertion point (resolved later, or reported).
    """
    op = owner_op(v)
    if op is not None and op.name == CAST and len(op.operands) == 2 and len(op.results) == 1:
        return op.operands[0], op.operands[1]
    mt = MXTensorType.from_mlir(v.type)
    cast = builtin.UnrealizedConversionCastOp(
        [mt.mantissa_tensor_type(), mt.scale_tensor_type()], [v]
    )
    return cast.results[0], cast.results[1]


def _lower_dequantize(op: ir.Operation, _mm: str) -> list[ir.Value]:
    src, *global_scale = op.operands
    t = MXTensorType.from_mlir(src.type)
    mant, scale = unpack(src)
    if t.has_global_scale:  # NVFP4: the verifier made sure the operand is there
        return [dequantize_nvfp4(mant, scale, global_scale[0], t)]
    return [_dequantize(mant, scale, t)]


def _dequantize(mant, scale, t: MXTensorType, alpha: ir.Value | None = None) -> ir.Value:
    """One elementwise generic: ``extf(m) * extf(s)`` (``* alpha`` when given)."""
    rank = t.rank
    maps = [
        h.identity_map(rank),
        h.block_map(rank, t.block_axis, t.block_size),
        h.identity_map(rank),
    ]
    out = h.empty(t.shape, h.f32())
    ins = [mant, scale] + ([alpha] if alpha is not None else [])
    if alpha is not None:
        maps.insert(2, ir.AffineMap.get(rank, 0, []))

    def body(m, s, *rest):
        v = _ab().fmul(h.element_to_f32(m, t.element_type), h.scale_to_f32(s))
        if alpha is not None:
            v = _ab().fmul(v, rest[0])
        return [v]

    if alpha is not None:
        # alpha is a scalar: feed it as a rank-0 tensor with an empty map.
        a0 = tensor.FromElementsOp(ir.RankedTensorType.get([], h.f32()), [alpha]).result
        ins[2] = a0
    result = h.generic(ins, [out], maps, [h.PARALLEL] * rank, body)[0]
    if alpha is None:  # mx-quantize-kernels replaces it after bufferization
        tag_kernel(result, KernelTag.DEQUANTIZE)
    return result


def _lower_quantize(op: ir.Operation, _mm: str) -> list[ir.Value]:
    x, *global_scale = op.operands
    t = MXTensorType.from_mlir(op.results[0].type)
    if t.has_global_scale:
        return list(quantize_nvfp4(x, global_scale[0], t))
    return list(_quantize(x, t))


def _quantize(x: ir.Value, t: MXTensorType) -> tuple[ir.Value, ir.Value]:
    """Three generics: block amax, E8M0 codes, scaled and rounded elements."""
    fmt = ELEMENT_FORMATS[t.element_type]
    amax = h.block_amax(x, t)
    tag_kernel(amax, KernelTag.QUANTIZE_AMAX)
    srank = len(t.scale_shape)
    scale_t = h.scalar_type(t.scale_type)
    scale = h.generic(
        [amax],
        [h.empty(t.scale_shape, scale_t)],
        [h.identity_map(srank)] * 2,
        [h.PARALLEL] * srank,
        lambda a, _o: [h.code_to_scale(h.amax_to_code(a, fmt.emax), t.scale_type)],
    )[0]
    tag_kernel(scale, KernelTag.QUANTIZE_SCALES)
    mant = _scale_elements(x, scale, t)
    tag_kernel(mant, KernelTag.QUANTIZE_ELEMENTS)  # the group mx-quantize-kernels replaces
    return mant, scale


def _scale_elements(x: ir.Value, scale: ir.Value, t: MXTensorType) -> ir.Value:
    """Elementwise generic: element codes of ``x`` given the block scales."""
    rank = t.rank
    maps = [
        h.identity_map(rank),
        h.block_map(rank, t.block_axis, t.block_size),
        h.identity_map(rank),
    ]
    out = h.empty(t.shape, h.scalar_type(t.element_type))
    return h.generic(
        [x, scale],
        [out],
        maps,
        [h.PARALLEL] * rank,
        lambda v, s, _o: [h.scaled_to_element(v, h.scale_code(s), t.element_type)],
    )[0]


def _lower_matmul(op: ir.Operation, matmul_lowering: str) -> list[ir.Value]:
    """An NVFP4 rhs (a ``global_scale`` operand, the verifier's rule): the
    matmul from zero with its E4M3 scales, then ``acc + c / g``
    (:func:`~mlir_mx.passes.mx_to_linalg.nvfp4.divide_into_acc`)."""
    lhs, rhs, acc, *global_scale = op.operands
    lower = _lower_matmul_blocked if matmul_lowering == "blocked" else _lower_matmul_fused
    if not global_scale:
        return lower(lhs, rhs, acc)
    c = lower(lhs, rhs, zeros_like(acc))[0]
    return divide_into_acc(c, global_scale[0], acc)


def _lower_matmul_fused(lhs: ir.Value, rhs: ir.Value, acc: ir.Value) -> list[ir.Value]:
    """One generic over (m, n, k); the scales are read through ``d2 floordiv B``."""
    lt = MXTensorType.from_mlir(lhs.type)
    am, ascale = unpack(lhs)
    bs = lt.block_size
    d = ir.AffineDimExpr.get
    mk = ir.AffineMap.get(3, 0, [d(0), d(2)])
    m_kb = h.loops_map(3, [0, 2], {1: bs})
    kn = ir.AffineMap.get(3, 0, [d(2), d(1)])
    mn = ir.AffineMap.get(3, 0, [d(0), d(1)])
    iters = [h.PARALLEL, h.PARALLEL, h.REDUCTION]
    if is_mx_type(rhs.type):
        rt = MXTensorType.from_mlir(rhs.type)
        bm, bscale = unpack(rhs)
        kb_n = h.loops_map(3, [2, 1], {0: bs})

        def body_mx(a, sa, b, sb, c):
            av = _ab().fmul(h.element_to_f32(a, lt.element_type), h.scale_to_f32(sa))
            bv = _ab().fmul(h.element_to_f32(b, rt.element_type), h.scale_to_f32(sb))
            return [_ab().fadd(c, _ab().fmul(av, bv))]

        return h.generic([am, ascale, bm, bscale], [acc], [mk, m_kb, kn, kb_n, mn], iters, body_mx)

    def body(a, sa, b, c):
        av = _ab().fmul(h.element_to_f32(a, lt.element_type), h.scale_to_f32(sa))
        return [_ab().fadd(c, _ab().fmul(av, b))]

    return h.generic([am, ascale, rhs], [acc], [mk, m_kb, kn, mn], iters, body)


#: Discardable attribute naming the generics of the blocked matmul lowering,
#: for transform schedules (``schedules-blocked.mlir``) to match on.


def _sub_byte(element: str | None) -> bool:
    """Sub-byte mantissas (f4/f6): one code per byte in memory, but LLVM packs
    ``<N x i4>`` / ``<N x i6>`` vectors, so a vector load of them reads wrong
    values.  Their partial-product generic is tagged differently so that the
    vectorizing schedule leaves it scalar."""
    return element is not None and ELEMENT_FORMATS[element].is_sub_byte


def _lower_matmul_blocked(lhs: ir.Value, rhs: ir.Value, acc: ir.Value) -> list[ir.Value]:
    """Block-factored matmul: K split into (K/B, B), no ``floordiv`` anywhere.

    1. ``tensor.expand_shape``: A mantissa (M, K) -> (M, K/B, B); B (mantissa,
       or the f32 rhs) (K, N) -> (K/B, B, N).
    2. Partial products over (d0, d1, d2, d3) = (m, n, kb, kk), iterators
       parallel x3, reduction; maps (d0, d2, d3), (d2, d3, d1), (d0, d2, d1)
       into a zero-filled (M, K/B, N) f32 tensor (n innermost: contiguous
       vectors along n when vectorized); payload: the exact element values
       (``extf``; ``sitofp * 2^-6`` for i8) and ``p = p + a * b`` with the
       ``contract`` fast-math flag (LLVM fuses it into one FMA).
    3. Scales over (m, n, kb), iterators parallel, parallel, reduction; maps
       (d0, d2, d1) (partials), (d0, d2) (A scale), (d2, d1) (B scale), (d0, d1)
       (the accumulator, ``outs``: updated in place); payload ``extf`` of the
       scale(s), ``t = p * sb`` (not contracted) and ``c = c + t * sa``
       (contracted): the scales one after the other, never ``sa * sb``,
       which can overflow where the block's contribution is finite.

    These are the f32 operations that define the matmul's numerics (the
    blocked order, ``docs/numerics.md``); ``mx-matmul-kernels`` replaces the
    pair by a kernel doing exactly the same operations per element.  About
    2 FLOPs per (m, n, k) point plus 2 (mx x f32) or 3 (mx x mx) per block.
    """
    lt = MXTensorType.from_mlir(lhs.type)
    bs = lt.block_size
    am, ascale = unpack(lhs)
    acc_t = ir.RankedTensorType(acc.type)
    m, n = acc_t.shape
    k = MXTensorType.from_mlir(lhs.type).shape[1]
    kb = k // bs
    rhs_mx = is_mx_type(rhs.type)
    rt = MXTensorType.from_mlir(rhs.type) if rhs_mx else None
    if rhs_mx:
        bm, bscale = unpack(rhs)
    else:
        bm, bscale = rhs, None

    a3 = h.expand_axis(am, 1, bs)  # (M, K/B, B)
    b3 = h.expand_axis(bm, 0, bs)  # (K/B, B, N)
    # Partials are laid out (M, K/B, N) so that a vector along n is contiguous.
    init = h.linalg_dialect().fill(_ab().const(0.0, h.f32()), outs=[h.empty([m, kb, n], h.f32())])
    d = ir.AffineDimExpr.get

    def pmap(*dims):
        return ir.AffineMap.get(4, 0, [d(i) for i in dims])

    b_element = rt.element_type if rhs_mx else None

    def partial_body(a, b, c):
        av = h.element_to_f32(a, lt.element_type)
        bv = h.element_to_f32(b, b_element) if rhs_mx else b
        return [h.contracted_fma(av, bv, c)]

    partial_op_results = h.generic(
        [a3, b3],
        [init],
        [pmap(0, 2, 3), pmap(2, 3, 1), pmap(0, 2, 1)],
        [h.PARALLEL, h.PARALLEL, h.PARALLEL, h.REDUCTION],
        partial_body,
    )
    partials = partial_op_results[0]
    sub_byte = _sub_byte(lt.element_type) or _sub_byte(b_element)
    tag_kernel(partials, KernelTag.BLOCK_PARTIALS_SUBBYTE if sub_byte else KernelTag.BLOCK_PARTIALS)

    def smap(*dims):
        return ir.AffineMap.get(3, 0, [d(i) for i in dims])

    def scale_body(p, *rest):
        *scales, c = rest
        if len(scales) == 2:  # B's scale first, alone
            p = _ab().fmul(p, h.scale_to_f32(scales[1]))
        return [h.contracted_fma(p, h.scale_to_f32(scales[0]), c)]

    ins = [partials, ascale] + ([bscale] if rhs_mx else [])
    maps = [smap(0, 2, 1), smap(0, 2)] + ([smap(2, 1)] if rhs_mx else []) + [smap(0, 1)]
    out = h.generic(ins, [acc], maps, [h.PARALLEL, h.PARALLEL, h.REDUCTION], scale_body)
    tag_kernel(out[0], KernelTag.BLOCK_SCALES)
    return out


def _lower_fold_scale(op: ir.Operation, _mm: str) -> list[ir.Value]:
    """fold_scale (``docs/dialect.md``): ``alpha = 2^p`` moves every scale code
    by ``p`` where the new code stays in [0, 254] (NaN blocks stay as they
    are) and requantizes the other blocks; any other alpha requantizes
    ``dequantize(t) * alpha``.  A constant alpha picks the route at compile
    time, a runtime one per call (same results)."""
    src, alpha = op.operands
    t = MXTensorType.from_mlir(src.type)
    mant, scale = unpack(src)
    constant = constant_float(alpha)
    p = h.power_of_two(constant) if constant is not None else None
    if p == 0:
        return [mant, scale]
    qm, qs = _quantize(_dequantize(mant, scale, t, alpha), t)
    if constant is not None and p is None:
        return [qm, qs]
    exponent = p if p is not None else h.pow2_exponent(alpha)
    return list(h.exponent_add(mant, scale, qm, qs, exponent, t))


#: The lowering of each op of :data:`~mlir_mx.dialect.irdl.OPS` (one entry per
#: op: ``tests/dialect/test_tables.py``).
LOWERINGS = {
    "mx.dequantize_block": _lower_dequantize,
    "mx.quantize_block": _lower_quantize,
    "mx.block_matmul": _lower_matmul,
    "mx.fold_scale": _lower_fold_scale,
}
