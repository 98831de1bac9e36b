"""The FLOP rule of the model: float ops in ``linalg.generic`` payloads.

Every float arithmetic op in a payload counts once per point of the op's
iteration space (the product of the loop ranges, read from the operand shapes
through the indexing maps); named linalg ops are generalized before
(``linalg-generalize-named-ops``).  Conversions (``extf``, ``truncf``,
``sitofp``, ``bitcast``, ...) are counted apart.  FLOPs are *useful* (the
contraction's multiply-add: the ``addf`` that accumulates into an ``outs``
block argument of a generic with a reduction loop, and the ``mulf`` feeding it
when neither of its operands is a scale value), *dequant* (every other
``mulf``: the multiplies that undo the block scaling) or *other*.
``docs/roofline.md`` states the rule in full.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.ir_utils import (
    block_ops,
    collect,
    index_of,
    indexing_maps,
    ins_outs,
    iterator_types,
    loop_ranges,
    owner_op,
)
from mlir_mx.numerics.formats import SCALE_TYPE
from mlir_mx.roofline.kernel_model import LinalgCount, ModelError, require_static_shape

__all__ = ["count_generic", "flop_counts"]

# FLOPs per execution of each float op (per iteration-space point).
_FLOAT_OPS = {
    "arith.addf": 1,
    "arith.subf": 1,
    "arith.mulf": 1,
    "arith.divf": 1,
    "arith.remf": 1,
    "arith.negf": 1,
    "arith.maximumf": 1,
    "arith.minimumf": 1,
    "arith.maxnumf": 1,
    "arith.minnumf": 1,
    "math.fma": 2,
    "math.sqrt": 1,
    "math.rsqrt": 1,
    "math.exp": 1,
    "math.exp2": 1,
    "math.log": 1,
    "math.log2": 1,
    "math.tanh": 1,
    "math.absf": 1,
    "math.powf": 1,
}
# Conversions: counted separately, never as FLOPs.
_CONVERSIONS = {
    "arith.extf",
    "arith.truncf",
    "arith.sitofp",
    "arith.uitofp",
    "arith.fptosi",
    "arith.fptoui",
    "arith.bitcast",
    "arith.scaling_extf",
    "arith.scaling_truncf",
}


def flop_counts(
    fn: ir.Operation, linalg_ops: list[ir.Operation]
) -> tuple[list[LinalgCount], list[str]]:
    """The count of every ``linalg.generic`` of ``fn``, and notes on what is
    not counted (named ops left, float ops outside linalg payloads)."""
    counts, notes = [], []
    for op in linalg_ops:
        if op.name == "linalg.generic":
            counts.append(count_generic(op))
        elif op.name not in ("linalg.index",):
            notes.append(f"'{op.name}' was not generalized and is not counted")
    loose = collect(
        fn, lambda o: o.name in _FLOAT_OPS and not _inside_linalg(o), ir.WalkOrder.PRE_ORDER
    )
    if loose:
        notes.append(
            f"{len(loose)} float op(s) outside linalg payloads are not counted "
            f"(first: '{loose[0].name}')"
        )
    return counts, notes


def _inside_linalg(op: ir.Operation) -> bool:
    p = op.parent
    while p is not None:
        p = getattr(p, "operation", p)
        if p.name.startswith("linalg."):
            return True
        if p.name in ("func.func", "builtin.module"):
            return False
        p = p.parent
    return False


def _loop_ranges(op: ir.Operation) -> tuple[int, ...]:
    """Range of each loop: the size of an operand dimension a map reads as a bare ``d_i``."""
    shapes = [
        require_static_shape(v.type, f"an operand of '{op.name}'")
        if isinstance(v.type, ir.ShapedType)
        else None
        for v in op.operands
    ]
    ranges = loop_ranges(indexing_maps(op), shapes)
    if any(r is None for r in ranges):
        raise ModelError(f"cannot infer the loop ranges of '{op.name}' from its operand shapes")
    return tuple(ranges)  # type: ignore[arg-type]


def _scale_values(ins: list[ir.Value], bargs: list[ir.Value], payload) -> list[ir.Value]:
    """Scale values: scale operands' block arguments, their conversions, and
    arithmetic on nothing but scale values and constants (a combined scale)."""
    scale_vals: list[ir.Value] = [
        bargs[i]
        for i, v in enumerate(ins)
        if isinstance(v.type, ir.ShapedType) and str(v.type.element_type) == SCALE_TYPE
    ]
    const_vals: list[ir.Value] = []
    for o in payload:
        if o.name == "arith.constant":
            const_vals += list(o.results)
            continue
        operands = list(o.operands)
        if not operands or not o.results:
            continue
        non_const = [x for x in operands if index_of(const_vals, x) is None]
        if non_const and all(index_of(scale_vals, x) is not None for x in non_const):
            if o.name in _CONVERSIONS or o.name in _FLOAT_OPS:
                scale_vals += list(o.results)
    return scale_vals


def _useful_ops(body: ir.Block, out_args: list[ir.Value], is_scale) -> list[ir.Operation]:
    """The contraction's ops: yield operand j = ``addf(out_j, mulf(a, b))`` (or
    ``fma(a, b, out_j)``) with neither ``a`` nor ``b`` a scale value."""
    useful: list[ir.Operation] = []
    yields = [o for o in body.operations if o.operation.name == "linalg.yield"]
    if not yields:
        return useful
    for j, y in enumerate(yields[0].operation.operands):
        if j >= len(out_args):
            break
        acc = owner_op(y)
        if acc is None:
            continue
        if acc.name == "arith.addf":
            a, b = acc.operands
            if a == out_args[j]:
                p = b
            elif b == out_args[j]:
                p = a
            else:
                continue
            prod = owner_op(p)
            if (
                prod is not None
                and prod.name == "arith.mulf"
                and not any(is_scale(x) for x in prod.operands)
            ):
                useful += [acc, prod]
        elif acc.name == "math.fma":
            x, z, c = acc.operands
            if c == out_args[j] and not (is_scale(x) or is_scale(z)):
                useful.append(acc)
    return useful


def count_generic(op: ir.Operation) -> LinalgCount:
    """Iteration space and per-point useful/dequant/other FLOPs of one generic."""
    ranges = _loop_ranges(op)
    iterations = 1
    for r in ranges:
        iterations *= r
    ins, _outs = ins_outs(op)
    body = op.regions[0].blocks[0]
    bargs = list(body.arguments)
    payload = block_ops(body)
    scale_vals = _scale_values(ins, bargs, payload)

    def is_scale(v):
        return index_of(scale_vals, v) is not None

    useful = []
    if "reduction" in iterator_types(op):
        useful = _useful_ops(body, bargs[len(ins) :], is_scale)
    count = LinalgCount(op.name, iterations, ranges)
    for o in payload:
        if o.name in _CONVERSIONS:
            count.conversions += 1
            count.classified.append((o.name.split(".")[-1], "conversion"))
            continue
        k = _FLOAT_OPS.get(o.name)
        if k is None:
            continue
        if any(o == x for x in useful):
            count.useful += k
            cls = "useful"
        elif o.name == "arith.mulf":
            count.dequant += k
            cls = "dequant"
        else:
            count.other += k
            cls = "other"
        count.classified.append((o.name.split(".")[-1], cls))
    return count
