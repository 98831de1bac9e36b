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

The op lowerings are in :mod:`mlir_mx.passes.mx_to_linalg.lowerings`; this module
does the split around them.  The split is done by hand on the IR API (there is no Python dialect
conversion framework at 22.1.8): signatures first, bridged with
``builtin.unrealized_conversion_cast`` (2 -> 1 and 1 -> 2); then calls,
returns and branches; then the mx ops; then the casts cancel.  When an mx
value is left (an op this pass does not know uses one, e.g. ``scf.for``
``iter_args``), the pass fails with a located error naming that op.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.dialect.types import MXTensorType, is_mx_type
from mlir_mx.ir_utils import collect, owner_op
from mlir_mx.passes.mx_to_linalg.lowerings import CAST, LOWERINGS, pack, unpack
from mlir_mx.passes.mx_to_linalg.storage import STORAGES, pack_codes, unpack_codes
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["mx_to_linalg", "MATMUL_LOWERINGS"]

#: Values of the ``matmul-lowering`` option.
MATMUL_LOWERINGS = ("fused", "blocked")



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
        ),
        Option(
            "subbyte-storage",
            str,
            "packed",
            "How FP4/FP6 codes cross function boundaries (arguments, results, "
            "calls): 'packed' (two FP4 / four FP6 codes per byte / three bytes "
            "along the last axis, as i8; what mlir_mx.numerics.pack_codes gives) "
            "or 'unpacked' (one code per byte, the element type)",
            choices=STORAGES,
        ),
    ],
)
def mx_to_linalg(
    op: ir.Operation, *, matmul_lowering: str = "blocked", subbyte_storage: str = "packed"
) -> None:
    """Run the conversion on ``op`` (normally the ``builtin.module``)."""
    op = getattr(op, "operation", op)
    if matmul_lowering not in MATMUL_LOWERINGS:
        raise PassError(
            f"mx-to-linalg: unknown matmul-lowering '{matmul_lowering}' "
            f"(available: {', '.join(MATMUL_LOWERINGS)})",
            op.location,
        )
    if subbyte_storage not in STORAGES:
        raise PassError(
            f"mx-to-linalg: unknown subbyte-storage '{subbyte_storage}' "
            f"(available: {', '.join(STORAGES)})",
            op.location,
        )
    packed = subbyte_storage == "packed"
    with op.context:
        _convert_functions(op, packed)
        _convert_branches(op)
        _convert_calls_and_returns(op, packed)
        _lower_mx_ops(op, matmul_lowering)
        _cancel_casts(op)
        _check_converted(op)


# ===================================================================== helpers


def _collect(root: ir.Operation, pred) -> list[ir.Operation]:
    """Every op under ``root`` (pre-order: in textual order) for which ``pred(op)`` holds."""
    return collect(root, pred, ir.WalkOrder.PRE_ORDER)


def _split_types(types, packed: bool = False) -> list[ir.Type]:
    """The types after the split; ``packed``: at a function boundary under
    ``subbyte-storage=packed`` (codes that pack become packed i8 tensors)."""
    out: list[ir.Type] = []
    for t in types:
        if is_mx_type(t):
            out += MXTensorType.from_mlir(t).storage_tensor_types(packed)
        else:
            out.append(t)
    return out


def _has_mx(values) -> bool:
    return any(is_mx_type(v.type) for v in values)


def _split_operands(values, packed: bool = False) -> list[ir.Value]:
    """(codes, scales) for each mx value, others as they are; ``packed``: into
    a function boundary (codes that pack are packed)."""
    out: list[ir.Value] = []
    for v in values:
        if is_mx_type(v.type):
            m, s = unpack(v)
            mt = MXTensorType.from_mlir(v.type)
            out += [pack_codes(m, mt) if packed and mt.packs_codes else m, s]
        else:
            out.append(v)
    return out


def _replace_results(old: ir.Operation, new_results, packed: bool = False) -> None:
    """Replace ``old``'s results by ``new_results`` (split: 2 values per mx
    result; ``packed``: results of a call, codes that pack are unpacked)."""
    it = iter(new_results)
    for r in old.results:
        if is_mx_type(r.type):
            m, s = next(it), next(it)
            mt = MXTensorType.from_mlir(r.type)
            if packed and mt.packs_codes:
                m = unpack_codes(m, mt)
            r.replace_all_uses_with(pack(m, s, r.type))
        else:
            r.replace_all_uses_with(next(it))


# ============================================================ signatures/blocks


def _split_block_arguments(block: ir.Block, packed: bool = False) -> bool:
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
            code_type, scale_type = mt.storage_tensor_types(packed)
            m = block.add_argument(code_type, a.location)
            s = block.add_argument(scale_type, a.location)
            with ip, a.location:
                if packed and mt.packs_codes:
                    m = unpack_codes(m, mt)
                value = pack(m, s, a.type)
            a.replace_all_uses_with(value)
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


def _convert_functions(root: ir.Operation, packed: bool) -> None:
    """New ``function_type`` for every ``func.func``; split its blocks'
    arguments (the entry block's in the function-boundary storage)."""
    for fn in _collect(root, lambda o: o.name == "func.func"):
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        inputs, results = list(ftype.inputs), list(ftype.results)
        if any(is_mx_type(t) for t in inputs + results):
            fn.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(_split_types(inputs, packed), _split_types(results, packed))
            )
            for key, types in (("arg_attrs", inputs), ("res_attrs", results)):
                if key in fn.attributes:
                    fn.attributes[key] = _expand_attrs(ir.ArrayAttr(fn.attributes[key]), types)
        for i, block in enumerate(fn.regions[0].blocks):
            _split_block_arguments(block, packed and i == 0)


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


def _convert_calls_and_returns(root: ir.Operation, packed: bool) -> None:
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
                results=_split_types([r.type for r in op.results], packed),
                operands=_split_operands(op.operands, packed),
                attributes=attrs,
            )
        with ir.InsertionPoint.after(new), op.location:
            _replace_results(op, new.results, packed)
        op.erase()


# ================================================================ the mx ops


def _lower_mx_ops(root: ir.Operation, matmul_lowering: str) -> None:
    """Replace every mx op by its linalg lowering (walk first, mutate after)."""
    for op in _collect(root, lambda o: o.name in LOWERINGS):
        with ir.InsertionPoint(op), op.location:
            new_results = LOWERINGS[op.name](op, matmul_lowering)
            _replace_results(op, new_results)
        op.erase()


# ================================================================= clean up


def _is_mx_cast(o: ir.Operation) -> bool:
    return o.name == CAST and (_has_mx(o.operands) or _has_mx(o.results))


def _cancel_casts(root: ir.Operation) -> None:
    """Fold ``1 -> 2`` casts of ``2 -> 1`` casts, then erase dead bridging casts."""
    for cast in _collect(root, _is_mx_cast):
        if len(cast.operands) == 1 and len(cast.results) == 2:
            src = owner_op(cast.operands[0])
            if src is not None and src.name == CAST and len(src.operands) == 2:
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

    def left(o) -> bool:
        if o.name == CAST:
            return _is_mx_cast(o)
        if _has_mx(o.operands) or _has_mx(o.results):
            return True
        return any(_has_mx(b.arguments) for r in o.regions for b in r.blocks)

    offenders = _collect(root, left)
    if not offenders:
        return
    first = offenders[0]
    if first.name == CAST:
        users = [u.owner for r in first.results for u in r.uses]
        user = getattr(users[0], "operation", users[0]) if users else None
        if user is not None and user.name != CAST:
            first = user
    what = f"'{first.name}'"
    raise PassError(
        f"mx-to-linalg: an !mx.tensor value is still used by {what}, which this pass "
        f"cannot convert (supported: func.func/call/return, cf.br/cond_br and the mx ops); "
        f"{len(offenders)} op(s) left with mx types",
        first.location,
    )
