"""``mx-to-linalg``: lower the mx dialect to linalg on tensors (the 1:N split).

Every ``!mx.tensor`` value becomes a pair (mantissa tensor, scale tensor),
mantissa first::

    !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
      -> (tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)

through ``func.func`` signatures (arguments and results, public, private and
declarations), ``func.call``, ``func.return``, the block arguments of a
function's blocks with ``cf.br`` / ``cf.cond_br`` predecessors, and the
operands of the four mx ops, which are lowered to ``linalg.generic``:

* ``dequantize_block``: one elementwise generic, the scale read through
  ``d_axis floordiv B``; payload ``extf``, ``extf``, ``mulf``.
* ``block_matmul``: ``matmul-lowering=fused`` (the v1 form): one generic over
  (m, n, k) writing the accumulator in place; ``matmul-lowering=blocked``: K
  split into (K/B, B) by ``tensor.expand_shape``, a partial-product generic
  then a per-block scale generic (no ``floordiv``; about 2 FLOPs per point
  instead of 3 or 4); mx x f32 and mx x mx.
* ``quantize_block``: block amax (``expand_shape`` + reduction), E8M0 codes
  from the amax exponent bits, scaled/saturated/rounded elements.
* ``fold_scale``: an alpha that is a power of two 2^p (a constant, or a
  runtime value tested per call) adds p to the scale codes (per block,
  falling back to requantization when a code would leave [0, 254]; NaN
  blocks are kept); any other alpha dequantizes, multiplies and requantizes.

The split is done by hand on the IR API (there is no Python dialect
conversion framework at 22.1.8): signatures first, bridged with
``builtin.unrealized_conversion_cast`` (2 -> 1 and 1 -> 2); then calls,
returns and branches; then the mx ops; then the casts cancel.  When an mx
value is left (an op this pass does not know uses one, e.g. ``scf.for``
``iter_args``), the pass fails with a located error naming that op.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, builtin, linalg, tensor

from mlir_mx.dialect.types import MXTensorType, is_mx_type
from mlir_mx.numerics.formats import ELEMENT_FORMATS
from mlir_mx.passes import mx_lowering_helpers as h
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["mx_to_linalg", "MATMUL_LOWERINGS"]

#: Values of the ``matmul-lowering`` option.
MATMUL_LOWERINGS = ("fused", "blocked")

_CAST = "builtin.unrealized_conversion_cast"
_MX_OPS = ("mx.quantize_block", "mx.dequantize_block", "mx.block_matmul", "mx.fold_scale")


@register_pass(
    "mx-to-linalg",
    "Lower the mx dialect to linalg on tensors: split every !mx.tensor into "
    "(mantissa, scale) tensors through signatures, calls, returns and block arguments",
    options=[
        Option(
            "matmul-lowering",
            str,
            # The default is the lowering measured faster on this machine kind
            # (bench/results/matmul-lowerings-2026-11-30.md): blocked wins
            # every vectorized comparison and most scalar ones, at ~1.03x the
            # f32 FLOPs instead of 1.5x / 2x.
            "blocked",
            "How mx.block_matmul lowers: 'fused' (one generic over (m, n, k) that "
            "rebuilds the mx operand(s) in its payload, the v1 form) or 'blocked' "
            "(K split into (K/B, B): partial products of the mantissas, then one "
            "scale multiply per block; no floordiv, tiles and vectorizes as is)",
            choices=MATMUL_LOWERINGS,
        )
    ],
)
def mx_to_linalg(op: ir.Operation, *, matmul_lowering: str = "blocked") -> None:
    """Run the conversion on ``op`` (normally the ``builtin.module``)."""
    op = getattr(op, "operation", op)
    if matmul_lowering not in MATMUL_LOWERINGS:
        raise PassError(
            f"mx-to-linalg: unknown matmul-lowering '{matmul_lowering}' "
            f"(available: {', '.join(MATMUL_LOWERINGS)})",
            op.location,
        )
    with op.context:
        _convert_functions(op)
        _convert_branches(op)
        _convert_calls_and_returns(op)
        _lower_mx_ops(op, matmul_lowering)
        _cancel_casts(op)
        _check_converted(op)


# ===================================================================== helpers


def _collect(root: ir.Operation, pred) -> list[ir.Operation]:
    """Every op under ``root`` (pre-order) for which ``pred(op)`` holds."""
    found: list[ir.Operation] = []

    def visit(o):
        o = getattr(o, "operation", o)
        if pred(o):
            found.append(o)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _split_types(types) -> list[ir.Type]:
    out: list[ir.Type] = []
    for t in types:
        if is_mx_type(t):
            mt = MXTensorType.from_mlir(t)
            out += [mt.mantissa_tensor_type(), mt.scale_tensor_type()]
        else:
            out.append(t)
    return out


def _has_mx(values) -> bool:
    return any(is_mx_type(v.type) for v in values)


def _pack(mant: ir.Value, scale: ir.Value, mx_type: ir.Type) -> ir.Value:
    """``unrealized_conversion_cast (mant, scale) -> !mx.tensor`` at the insertion point."""
    return builtin.UnrealizedConversionCastOp([mx_type], [mant, scale]).results[0]


def _owner_op(v: ir.Value):
    owner = v.owner
    op = getattr(owner, "operation", owner)
    return op if isinstance(op, ir.Operation) else None


def _unpack(v: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(mantissa, scale) of an mx value.

    Reads through a 2 -> 1 cast when ``v`` is one; otherwise inserts a
    1 -> 2 cast at the insertion point (resolved later, or reported).
    """
    op = _owner_op(v)
    if op is not None and op.name == _CAST and len(op.operands) == 2 and len(op.results) == 1:
        return op.operands[0], op.operands[1]
    mt = MXTensorType.from_mlir(v.type)
    cast = builtin.UnrealizedConversionCastOp(
        [mt.mantissa_tensor_type(), mt.scale_tensor_type()], [v]
    )
    return cast.results[0], cast.results[1]


def _split_operands(values) -> list[ir.Value]:
    out: list[ir.Value] = []
    for v in values:
        if is_mx_type(v.type):
            out += list(_unpack(v))
        else:
            out.append(v)
    return out


def _replace_results(old: ir.Operation, new_results) -> None:
    """Replace ``old``'s results by ``new_results`` (split: 2 values per mx result)."""
    it = iter(new_results)
    for r in old.results:
        if is_mx_type(r.type):
            m, s = next(it), next(it)
            r.replace_all_uses_with(_pack(m, s, r.type))
        else:
            r.replace_all_uses_with(next(it))


# ============================================================ signatures/blocks


def _split_block_arguments(block: ir.Block) -> bool:
    """Give every mx argument of ``block`` two arguments (mantissa, scale).

    Python 22.1.8 can only append and erase block arguments, so the whole list
    is rebuilt: new arguments are appended in order, old uses are redirected
    (through a 2 -> 1 cast for mx ones) and the old arguments erased.
    """
    old = list(block.arguments)
    if not _has_mx(old):
        return False
    first = block.operations[0] if len(block.operations) else None
    ip = ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(block)
    for a in old:
        if is_mx_type(a.type):
            mt = MXTensorType.from_mlir(a.type)
            m = block.add_argument(mt.mantissa_tensor_type(), a.location)
            s = block.add_argument(mt.scale_tensor_type(), a.location)
            with ip, a.location:
                packed = _pack(m, s, a.type)
            a.replace_all_uses_with(packed)
        else:
            a.replace_all_uses_with(block.add_argument(a.type, a.location))
    for i in reversed(range(len(old))):
        block.erase_argument(i)
    return True


def _expand_attrs(attrs: ir.ArrayAttr, types) -> ir.ArrayAttr:
    """Duplicate a per-argument attribute dictionary for each split mx argument."""
    out = []
    for a, t in zip(list(attrs), types, strict=True):
        out += [a, a] if is_mx_type(t) else [a]
    return ir.ArrayAttr.get(out)


def _convert_functions(root: ir.Operation) -> None:
    """New ``function_type`` for every ``func.func``; split its blocks' arguments."""
    for fn in _collect(root, lambda o: o.name == "func.func"):
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        inputs, results = list(ftype.inputs), list(ftype.results)
        if any(is_mx_type(t) for t in inputs + results):
            fn.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(_split_types(inputs), _split_types(results))
            )
            for key, types in (("arg_attrs", inputs), ("res_attrs", results)):
                if key in fn.attributes:
                    fn.attributes[key] = _expand_attrs(ir.ArrayAttr(fn.attributes[key]), types)
        for block in fn.regions[0].blocks:
            _split_block_arguments(block)


_BRANCHES = ("cf.br", "cf.cond_br")


def _convert_branches(root: ir.Operation) -> None:
    """Split mx operands of ``cf.br`` / ``cf.cond_br`` (their successors were split)."""
    for br in _collect(root, lambda o: o.name in _BRANCHES and _has_mx(o.operands)):
        with ir.InsertionPoint(br), br.location:
            attrs = {n: br.attributes[n] for n in br.attributes}
            if br.name == "cf.br":
                operands = _split_operands(br.operands)
            else:
                seg = list(ir.DenseI32ArrayAttr(br.attributes["operandSegmentSizes"]))
                ops = list(br.operands)
                cond = ops[0]
                t_ops = _split_operands(ops[1 : 1 + seg[1]])
                f_ops = _split_operands(ops[1 + seg[1] :])
                operands = [cond] + t_ops + f_ops
                attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([1, len(t_ops), len(f_ops)])
            ir.Operation.create(
                br.name, results=[], operands=operands, attributes=attrs,
                successors=list(br.successors),
            )  # fmt: skip
        br.erase()


def _convert_calls_and_returns(root: ir.Operation) -> None:
    """Split the mx operands/results of ``func.call`` and ``func.return``."""
    ops = _collect(
        root,
        lambda o: (
            o.name in ("func.call", "func.return") and (_has_mx(o.operands) or _has_mx(o.results))
        ),
    )
    for op in ops:
        with ir.InsertionPoint(op), op.location:
            attrs = {n: op.attributes[n] for n in op.attributes}
            new = ir.Operation.create(
                op.name,
                results=_split_types([r.type for r in op.results]),
                operands=_split_operands(op.operands),
                attributes=attrs,
            )
        with ir.InsertionPoint.after(new), op.location:
            _replace_results(op, new.results)
        op.erase()


# ================================================================ the mx ops


def _lower_mx_ops(root: ir.Operation, matmul_lowering: str) -> None:
    """Replace every mx op by its linalg lowering (walk first, mutate after)."""
    for op in _collect(root, lambda o: o.name in _MX_OPS):
        with ir.InsertionPoint(op), op.location:
            new_results = _LOWERINGS[op.name](op, matmul_lowering)
            _replace_results(op, new_results)
        op.erase()


def _lower_dequantize(op: ir.Operation, _mm: str) -> list[ir.Value]:
    (src,) = op.operands
    t = MXTensorType.from_mlir(src.type)
    mant, scale = _unpack(src)
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
        v = arith.MulFOp(h.element_to_f32(m, t.element_type), h.scale_to_f32(s)).result
        if alpha is not None:
            v = arith.MulFOp(v, rest[0]).result
        return [v]

    if alpha is not None:
        # alpha is a scalar: feed it as a rank-0 tensor with an empty map.
        a0 = tensor.FromElementsOp(ir.RankedTensorType.get([], h.f32()), [alpha]).result
        ins[2] = a0
    return h.generic(ins, [out], maps, [h.PARALLEL] * rank, body)[0]


def _lower_quantize(op: ir.Operation, _mm: str) -> list[ir.Value]:
    (x,) = op.operands
    t = MXTensorType.from_mlir(op.results[0].type)
    return list(_quantize(x, t))


def _quantize(x: ir.Value, t: MXTensorType) -> tuple[ir.Value, ir.Value]:
    """Three generics: block amax, E8M0 codes, scaled and rounded elements."""
    fmt = ELEMENT_FORMATS[t.element_type]
    amax = h.block_amax(x, t)
    srank = len(t.scale_shape)
    scale_t = h.scalar_type(t.scale_type)
    scale = h.generic(
        [amax],
        [h.empty(t.scale_shape, scale_t)],
        [h.identity_map(srank)] * 2,
        [h.PARALLEL] * srank,
        lambda a, _o: [h.code_to_scale(h.amax_to_code(a, fmt.emax), t.scale_type)],
    )[0]
    mant = _scale_elements(x, scale, t)
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
    if matmul_lowering == "blocked":
        return _lower_matmul_blocked(op)
    return _lower_matmul_fused(op)


def _lower_matmul_fused(op: ir.Operation) -> list[ir.Value]:
    """One generic over (m, n, k); the scales are read through ``d2 floordiv B``."""
    lhs, rhs, acc = op.operands
    lt = MXTensorType.from_mlir(lhs.type)
    am, ascale = _unpack(lhs)
    bs = lt.block_size
    d = ir.AffineDimExpr.get
    mk = ir.AffineMap.get(3, 0, [d(0), d(2)])
    m_kb = h.loops_map(3, [0, 2], {1: bs})
    kn = ir.AffineMap.get(3, 0, [d(2), d(1)])
    mn = ir.AffineMap.get(3, 0, [d(0), d(1)])
    iters = [h.PARALLEL, h.PARALLEL, h.REDUCTION]
    if is_mx_type(rhs.type):
        rt = MXTensorType.from_mlir(rhs.type)
        bm, bscale = _unpack(rhs)
        kb_n = h.loops_map(3, [2, 1], {0: bs})

        def body_mx(a, sa, b, sb, c):
            av = arith.MulFOp(h.element_to_f32(a, lt.element_type), h.scale_to_f32(sa)).result
            bv = arith.MulFOp(h.element_to_f32(b, rt.element_type), h.scale_to_f32(sb)).result
            return [arith.AddFOp(c, arith.MulFOp(av, bv).result).result]

        return h.generic([am, ascale, bm, bscale], [acc], [mk, m_kb, kn, kb_n, mn], iters, body_mx)

    def body(a, sa, b, c):
        av = arith.MulFOp(h.element_to_f32(a, lt.element_type), h.scale_to_f32(sa)).result
        return [arith.AddFOp(c, arith.MulFOp(av, b).result).result]

    return h.generic([am, ascale, rhs], [acc], [mk, m_kb, kn, mn], iters, body)


#: Discardable attribute naming the generics of the blocked matmul lowering,
#: for transform schedules (``schedules-blocked.mlir``) to match on.
KERNEL_ATTR = "mx.kernel"
#: Sub-byte mantissas (f4/f6): one code per byte in memory, but LLVM packs
#: ``<N x i4>`` / ``<N x i6>`` vectors, so a vector load of them reads wrong
#: values.  Their partial-product generic is tagged differently so that the
#: vectorizing schedule leaves it scalar.
_SUB_BYTE = ("f4E2M1FN", "f6E2M3FN", "f6E3M2FN")


def _lower_matmul_blocked(op: ir.Operation) -> list[ir.Value]:
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
       scale(s), ``s = sa * sb`` and ``c = c + p * s`` (contracted).

    These are the f32 operations that define the matmul's numerics (the
    blocked order, ``docs/numerics.md``); ``mx-matmul-kernels`` replaces the
    pair by a kernel doing exactly the same operations per element.  About
    2 FLOPs per (m, n, k) point plus 2 (mx x f32) or 3 (mx x mx) per block.
    """
    lhs, rhs, acc = op.operands
    lt = MXTensorType.from_mlir(lhs.type)
    bs = lt.block_size
    am, ascale = _unpack(lhs)
    acc_t = ir.RankedTensorType(acc.type)
    m, n = acc_t.shape
    k = MXTensorType.from_mlir(lhs.type).shape[1]
    kb = k // bs
    rhs_mx = is_mx_type(rhs.type)
    rt = MXTensorType.from_mlir(rhs.type) if rhs_mx else None
    if rhs_mx:
        bm, bscale = _unpack(rhs)
    else:
        bm, bscale = rhs, None

    a3 = h.expand_axis(am, 1, bs)  # (M, K/B, B)
    b3 = h.expand_axis(bm, 0, bs)  # (K/B, B, N)
    # Partials are laid out (M, K/B, N) so that a vector along n is contiguous.
    init = linalg.fill(h.const_f32(0.0), outs=[h.empty([m, kb, n], h.f32())])
    d = ir.AffineDimExpr.get

    def pmap(*dims):
        return ir.AffineMap.get(4, 0, [d(i) for i in dims])

    b_elem = rt.element_type if rhs_mx else None

    def partial_body(a, b, c):
        av = h.element_to_f32(a, lt.element_type)
        bv = h.element_to_f32(b, b_elem) if rhs_mx else b
        return [h.contracted_fma(av, bv, c)]

    partial_op_results = h.generic(
        [a3, b3], [init], [pmap(0, 2, 3), pmap(2, 3, 1), pmap(0, 2, 1)],
        [h.PARALLEL, h.PARALLEL, h.PARALLEL, h.REDUCTION], partial_body,
    )  # fmt: skip
    partials = partial_op_results[0]
    sub_byte = lt.element_type in _SUB_BYTE or (rhs_mx and b_elem in _SUB_BYTE)
    _owner_op(partials).attributes[KERNEL_ATTR] = ir.StringAttr.get(
        "block_partials_subbyte" if sub_byte else "block_partials"
    )

    def smap(*dims):
        return ir.AffineMap.get(3, 0, [d(i) for i in dims])

    def scale_body(p, *rest):
        *scales, c = rest
        s = h.scale_to_f32(scales[0])
        if len(scales) == 2:
            s = arith.MulFOp(s, h.scale_to_f32(scales[1])).result
        return [h.contracted_fma(p, s, c)]

    ins = [partials, ascale] + ([bscale] if rhs_mx else [])
    maps = [smap(0, 2, 1), smap(0, 2)] + ([smap(2, 1)] if rhs_mx else []) + [smap(0, 1)]
    out = h.generic(ins, [acc], maps, [h.PARALLEL, h.PARALLEL, h.REDUCTION], scale_body)
    _owner_op(out[0]).attributes[KERNEL_ATTR] = ir.StringAttr.get("block_scales")
    return out


def _lower_fold_scale(op: ir.Operation, _mm: str) -> list[ir.Value]:
    """fold_scale (``docs/dialect.md``): ``alpha = 2^p`` moves every scale code
    by ``p`` where the new code stays in [0, 254] (NaN blocks stay as they
    are) and requantizes the other blocks; any other alpha requantizes
    ``dequantize(t) * alpha``.  A constant alpha picks the route at compile
    time, a runtime one per call (same results)."""
    src, alpha = op.operands
    t = MXTensorType.from_mlir(src.type)
    mant, scale = _unpack(src)
    constant = h.constant_value(alpha)
    p = h.power_of_two(constant) if constant is not None else None
    if p == 0:
        return [mant, scale]
    qm, qs = _quantize(_dequantize(mant, scale, t, alpha), t)
    if constant is not None and p is None:
        return [qm, qs]
    exponent = p if p is not None else h.pow2_exponent(alpha)
    return list(h.exponent_add(mant, scale, qm, qs, exponent, t))


_LOWERINGS = {
    "mx.dequantize_block": _lower_dequantize,
    "mx.quantize_block": _lower_quantize,
    "mx.block_matmul": _lower_matmul,
    "mx.fold_scale": _lower_fold_scale,
}


# ================================================================= clean up


def _is_mx_cast(o: ir.Operation) -> bool:
    return o.name == _CAST and (_has_mx(o.operands) or _has_mx(o.results))


def _cancel_casts(root: ir.Operation) -> None:
    """Fold ``1 -> 2`` casts of ``2 -> 1`` casts, then erase dead bridging casts."""
    for cast in _collect(root, _is_mx_cast):
        if len(cast.operands) == 1 and len(cast.results) == 2:
            src = _owner_op(cast.operands[0])
            if src is not None and src.name == _CAST and len(src.operands) == 2:
                cast.results[0].replace_all_uses_with(src.operands[0])
                cast.results[1].replace_all_uses_with(src.operands[1])
    changed = True
    while changed:
        changed = False
        for cast in _collect(root, _is_mx_cast):
            if not any(True for r in cast.results for _ in r.uses):
                cast.erase()
                changed = True


def _check_converted(root: ir.Operation) -> None:
    """Fail, located at the first offender, when any mx value is left."""
    offenders: list[ir.Operation] = []

    def visit(o):
        o = getattr(o, "operation", o)
        if o.name == _CAST:
            if _is_mx_cast(o):
                offenders.append(o)
            return ir.WalkResult.ADVANCE
        if _has_mx(o.operands) or _has_mx(o.results):
            offenders.append(o)
        else:
            for region in o.regions:
                for block in region.blocks:
                    if _has_mx(block.arguments):
                        offenders.append(o)
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    if not offenders:
        return
    first = offenders[0]
    if first.name == _CAST:
        users = [u.owner for r in first.results for u in r.uses]
        user = getattr(users[0], "operation", users[0]) if users else None
        if user is not None and user.name != _CAST:
            first = user
    what = f"'{first.name}'"
    raise PassError(
        f"mx-to-linalg: an !mx.tensor value is still used by {what}, which this pass "
        f"cannot convert (supported: func.func/call/return, cf.br/cond_br and the mx ops); "
        f"{len(offenders)} op(s) left with mx types",
        first.location,
    )
