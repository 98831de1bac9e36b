"""``mx-pin-map-constants``: replace indexing-map results that are constant
over the op's static loop ranges by that constant.

After tiling the v1 block matmul with ``[0, 32, 32]`` the scale operand is a
``tensor<32x1xf8E8M0FNU>`` slice read through ``(d0, d2 floordiv 32)`` while
``d2`` only runs over ``0..31``: the result is always 0.  The vectorizer
refuses the op ("not projected permutations") and unit-dim folding cannot
drop the axis, because the map *says* ``d2 floordiv 32``.  This rewrite asks
the verifier's question and keeps the answer:

1. derive each loop's static range from the operand shapes: a loop ``dK``
   that appears as a bare result of some operand's map runs over that
   operand's size along that result (the inversion the op verifier does for
   static shapes);
2. for every map result that is not a bare dimension or a constant, check it
   is monotone (non-decreasing) in every dimension it uses, and evaluate it at
   the first and the last iteration; where both ends agree, the expression
   takes that value on the whole iteration box, so replace it by the constant.

Soundness of the monotonicity check (non-decreasing in each dim): a dim;
a constant; ``a + b`` of monotone terms; ``a * c`` / ``c * a`` with a
constant ``c >= 0``; ``a floordiv c`` / ``a ceildiv c`` with ``c > 0``.
``mod``, negative coefficients, symbols and anything else are left alone.
For a non-decreasing ``f`` on a box, ``f(lo) <= f(x) <= f(hi)``, so
``f(lo) == f(hi)`` proves ``f`` constant on the box.

The untiled v1 matmul is unchanged (ends 0 and 1), and so is a tiled op
whose tile straddles a block (K tile 32 with block 16; K tile 64 with
block 32).

FIXME(upstream): no upstream pass or transform op rewrites linalg indexing
maps from loop ranges (``isUnitDim`` in ``linalg-fold-unit-extent-dims`` only
accepts a literal 0).  No upstream issue found; llvm-project#173873 drops
unit dims inside non-trivial expressions, not ``d2 floordiv 32`` over a
range of 0..31.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx import ir_utils
from mlir_mx.ir_utils import collect, dims_used, indexing_maps, static_shape
from mlir_mx.passes.registry import register_pass

__all__ = [
    "loop_ranges",
    "is_monotone",
    "evaluate",
    "pin_map_results",
    "pin_linalg_op",
]


def _down(e: ir.AffineExpr) -> ir.AffineExpr:
    return e.maybe_downcast() if hasattr(e, "maybe_downcast") else e


def evaluate(e: ir.AffineExpr, dims: list[int]) -> int | None:
    """Value of ``e`` at the integer point ``dims`` (None with symbols)."""
    e = _down(e)
    if isinstance(e, ir.AffineDimExpr):
        return dims[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return e.value
    if isinstance(e, ir.AffineSymbolExpr):
        return None
    a, b = evaluate(e.lhs, dims), evaluate(e.rhs, dims)
    if a is None or b is None:
        return None
    if isinstance(e, ir.AffineAddExpr):
        return a + b
    if isinstance(e, ir.AffineMulExpr):
        return a * b
    if b == 0:
        return None
    if isinstance(e, ir.AffineFloorDivExpr):
        return a // b
    if isinstance(e, ir.AffineCeilDivExpr):
        return -((-a) // b)
    if isinstance(e, ir.AffineModExpr):
        return a % b
    return None


def _const(e: ir.AffineExpr) -> int | None:
    e = _down(e)
    return e.value if isinstance(e, ir.AffineConstantExpr) else None


def is_monotone(e: ir.AffineExpr) -> bool:
    """True when ``e`` is provably non-decreasing in every dimension it uses."""
    e = _down(e)
    if isinstance(e, ir.AffineDimExpr | ir.AffineConstantExpr):
        return True
    if isinstance(e, ir.AffineAddExpr):
        return is_monotone(e.lhs) and is_monotone(e.rhs)
    if isinstance(e, ir.AffineMulExpr):
        cl, cr = _const(e.lhs), _const(e.rhs)
        if cr is not None:
            return cr >= 0 and is_monotone(e.lhs)
        if cl is not None:
            return cl >= 0 and is_monotone(e.rhs)
        return False
    if isinstance(e, ir.AffineFloorDivExpr | ir.AffineCeilDivExpr):
        c = _const(e.rhs)
        return c is not None and c > 0 and is_monotone(e.lhs)
    return False  # mod, symbols, anything unknown


def loop_ranges(
    maps: list[ir.AffineMap], shapes: list[tuple[int | None, ...] | None]
) -> list[int | None] | None:
    """Static trip count of every loop, from bare-dim results
    (:func:`mlir_mx.ir_utils.loop_ranges`); an empty loop counts as unknown.

    ``shapes[i]`` is operand i's shape (``()`` for a scalar, None when
    unranked; a dynamic size is None).  A loop whose range cannot be derived
    is None; expressions using it are left alone.  Returns None when no loop
    range is known at all.
    """
    if not maps:
        return None
    ranges = [r if r else None for r in ir_utils.loop_ranges(maps, shapes)]
    if all(r is None for r in ranges):
        return None
    return ranges


def pin_map_results(amap: ir.AffineMap, ranges: list[int | None]) -> ir.AffineMap | None:
    """``amap`` with every box-constant monotone result pinned; None if unchanged.

    A result using a loop of unknown range (None) is left alone.
    """
    lo = [0] * len(ranges)
    hi = [0 if r is None else r - 1 for r in ranges]
    changed = False
    results = []
    for r in amap.results:
        d = _down(r)
        if (
            isinstance(d, ir.AffineDimExpr | ir.AffineConstantExpr)
            or not is_monotone(d)
            or any(ranges[k] is None for k in dims_used(d))
        ):
            results.append(r)
            continue
        a, b = evaluate(d, lo), evaluate(d, hi)
        if a is not None and a == b:
            results.append(ir.AffineConstantExpr.get(a, amap.context))
            changed = True
        else:
            results.append(r)
    if not changed:
        return None
    return ir.AffineMap.get(amap.n_dims, amap.n_symbols, results, amap.context)


def pin_linalg_op(op: ir.Operation) -> bool:
    """Pin the maps of one linalg op in place; True when something changed."""
    op = getattr(op, "operation", op)
    if "indexing_maps" not in op.attributes:
        return False
    maps = indexing_maps(op)
    if any(m.n_symbols for m in maps):
        return False
    shapes = [static_shape(v.type) for v in op.operands]
    if len(shapes) != len(maps):
        return False
    ranges = loop_ranges(maps, shapes)
    if ranges is None:
        return False
    new = [pin_map_results(m, ranges) for m in maps]
    if all(m is None for m in new):
        return False
    attrs = [ir.AffineMapAttr.get(n if n is not None else m) for m, n in zip(maps, new, strict=True)]
    op.attributes["indexing_maps"] = ir.ArrayAttr.get(attrs, op.context)
    return True


@register_pass(
    "mx-pin-map-constants",
    "Replace linalg indexing-map results that are constant over the op's static "
    "loop ranges (e.g. d2 floordiv 32 with d2 in [0, 32)) by that constant",
)
def mx_pin_map_constants(op: ir.Operation) -> None:
    """Apply :func:`pin_linalg_op` to every linalg op under ``op``."""
    linalg = collect(op, lambda o: o.name.startswith("linalg.") and "indexing_maps" in o.attributes)
    for t in linalg:
        pin_linalg_op(t)

