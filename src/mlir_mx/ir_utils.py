"""Small queries on upstream IR that every layer needs, written once.

The walk-and-collect closure, the defining op of a value, a function's
signature, the public functions of a module, static shapes, indexing maps and
the loop ranges they imply.  Everything here reads IR and changes nothing; it
depends only on the upstream bindings, so any layer (dialect, passes,
execution, model, kernels) may use it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from mlir import ir

__all__ = [
    "block_ops",
    "collect",
    "constant_float",
    "declared_types",
    "dims_used",
    "find_first",
    "function_type",
    "index_of",
    "KERNEL_ATTR",
    "KernelTag",
    "kernel_tag",
    "tag_kernel",
    "top_level_ops",
    "users",
    "indexing_maps",
    "ins_outs",
    "iterator_types",
    "loop_ranges",
    "owner_op",
    "producer",
    "public_functions",
    "static_shape",
]

Predicate = Callable[[ir.Operation], bool]


def _op(o) -> ir.Operation:
    return getattr(o, "operation", o)


def _walk(root, pred: Predicate, order: ir.WalkOrder, first_only: bool) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(o):  # upstream's walk hands each op as an ir.Operation
        if pred(o):
            found.append(o)
            if first_only:
                return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    _op(root).walk(visit, order)
    return found


def collect(
    root, pred: Predicate, order: ir.WalkOrder = ir.WalkOrder.POST_ORDER
) -> list[ir.Operation]:
    """Every op under ``root`` (itself included) for which ``pred(op)`` holds.

    ``order`` is upstream's walk order (default, as upstream's ``walk``:
    post-order).  Collecting first and mutating after is the safe way to
    rewrite: the walk must not see the ops a rewrite creates or erases.
    """
    return _walk(root, pred, order, first_only=False)


def find_first(
    root, pred: Predicate, order: ir.WalkOrder = ir.WalkOrder.POST_ORDER
) -> ir.Operation | None:
    """The first op under ``root`` (in ``order``) for which ``pred(op)`` holds;
    the walk stops there."""
    found = _walk(root, pred, order, first_only=True)
    return found[0] if found else None


def block_ops(block: ir.Block) -> list[ir.Operation]:
    """Every op in ``block`` and in its nested regions, in textual order."""
    out: list[ir.Operation] = []
    for o in block.operations:
        o = _op(o)
        out.append(o)
        for r in o.regions:
            for b in r.blocks:
                out += block_ops(b)
    return out


def top_level_ops(root) -> list[ir.Operation]:
    """The ops of a module's body, and of the bodies of modules nested in it:
    where symbols such as ``func.func`` and ``llvm.func`` live.  Cheaper than
    a walk of every op (a Python call per op) when only those are wanted.
    A root that is not a module is its own only top-level op."""
    root = _op(root)
    if root.name != "builtin.module":
        return [root]
    out: list[ir.Operation] = []
    for block in root.regions[0].blocks:
        for o in block.operations:
            o = _op(o)
            out.append(o)
            if o.name == "builtin.module":
                out += top_level_ops(o)
    return out


def owner_op(v: ir.Value) -> ir.Operation | None:
    """The op defining ``v``; None for a block argument."""
    owner = _op(v.owner)
    return owner if isinstance(owner, ir.Operation) else None


def users(v: ir.Value) -> list[ir.Operation]:
    """The ops using ``v`` (once per use)."""
    return [_op(use.owner) for use in v.uses]


#: The attribute naming what a ``linalg.generic`` of the mx lowering computes
#: (a :class:`KernelTag`): the passes after bufferization (and the shipped
#: transform schedules) find their ops by it.
KERNEL_ATTR = "mx.kernel"


class KernelTag(str, enum.Enum):
    """The values of :data:`KERNEL_ATTR`: what each tagged generic computes.

    ``mx-to-linalg`` sets them; ``mx-matmul-kernels``, ``mx-quantize-kernels``,
    the byte model and ``schedules-blocked.mlir`` match them."""

    BLOCK_PARTIALS = "block_partials"  # a matmul's in-block partial products
    BLOCK_PARTIALS_SUBBYTE = "block_partials_subbyte"  # the same, an f4/f6 operand
    BLOCK_SCALES = "block_scales"  # the partials scaled and accumulated
    UNPACK_CODES = "unpack_codes"  # packed FP4/FP6 codes -> one code per byte
    PACK_CODES = "pack_codes"  # one code per byte -> packed FP4/FP6 codes
    DEQUANTIZE = "dequantize"  # codes x scales -> f32
    QUANTIZE_AMAX = "quantize_amax"  # a quantization's block maxima
    QUANTIZE_SCALES = "quantize_scales"  # its E8M0 scale codes
    QUANTIZE_ELEMENTS = "quantize_elements"  # its element codes

    def __str__(self) -> str:
        return self.value


def kernel_tag(o: ir.Operation) -> KernelTag | None:
    """The :data:`KERNEL_ATTR` tag of a ``linalg.generic``, else None."""
    if o.name != "linalg.generic" or KERNEL_ATTR not in o.attributes:
        return None
    value = ir.StringAttr(o.attributes[KERNEL_ATTR]).value
    return KernelTag(value) if value in KernelTag._value2member_map_ else None


def tag_kernel(result: ir.Value, tag: KernelTag) -> None:
    """Tag the op defining ``result`` with :data:`KERNEL_ATTR` = ``tag``."""
    owner_op(result).attributes[KERNEL_ATTR] = ir.StringAttr.get(KernelTag(tag).value)


def producer(v: ir.Value, name: str) -> ir.Operation | None:
    """The op named ``name`` that defines ``v``, else None."""
    op = owner_op(v)
    return op if op is not None and op.name == name else None


def constant_float(v: ir.Value) -> float | None:
    """The value of an ``arith.constant`` float scalar, else None."""
    op = producer(v, "arith.constant")
    if op is None:
        return None
    attr = op.attributes["value"]
    attr = attr.maybe_downcast() if hasattr(attr, "maybe_downcast") else attr
    return float(ir.FloatAttr(attr).value) if isinstance(attr, ir.FloatAttr) else None


def function_type(op) -> ir.FunctionType | None:
    """The builtin function type of a function-like op (``func.func``), or None
    (no ``function_type`` attribute, or not a builtin one, e.g. ``llvm.func``)."""
    op = _op(op)
    if "function_type" not in op.attributes:
        return None
    try:
        return ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    except ValueError:
        return None


def declared_types(op) -> list[ir.Type]:
    """Argument and result types of a function DECLARATION (a function-like op
    without a body, hence without block arguments to read them from)."""
    op = _op(op)
    if any(len(r.blocks) for r in op.regions):
        return []
    ft = function_type(op)
    return [] if ft is None else list(ft.inputs) + list(ft.results)


def public_functions(module) -> list[ir.Operation]:
    """The public ``func.func`` ops with a body at the top of ``module``, in order."""
    out = []
    for op in _op(module).regions[0].blocks[0].operations:
        op = _op(op)
        if op.name != "func.func" or not op.regions[0].blocks:
            continue
        attrs = op.attributes
        if "sym_visibility" in attrs and ir.StringAttr(attrs["sym_visibility"]).value != "public":
            continue
        out.append(op)
    return out


def static_shape(t: ir.Type) -> tuple[int | None, ...] | None:
    """Shape of a ranked tensor or memref type, None for each dynamic size;
    ``()`` for a scalar; None for any other shaped type (unranked, ...)."""
    t = t.maybe_downcast()
    if isinstance(t, ir.RankedTensorType | ir.MemRefType):
        return tuple(None if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank))
    if isinstance(t, ir.ShapedType):
        return None
    return ()


def index_of(values: list[ir.Value], v: ir.Value) -> int | None:
    """Position of ``v`` in ``values`` (by identity of the value), or None."""
    for i, x in enumerate(values):
        if x == v:
            return i
    return None


def ins_outs(op) -> tuple[list[ir.Value], list[ir.Value]]:
    """The ``ins`` and ``outs`` operands of a linalg structured op."""
    op = _op(op)
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    operands = list(op.operands)
    return operands[: seg[0]], operands[seg[0] : seg[0] + seg[1]]


def iterator_types(op) -> list[str]:
    """``"parallel"`` or ``"reduction"`` for each loop of a linalg structured op."""
    return [
        "reduction" if "reduction" in str(a) else "parallel"
        for a in ir.ArrayAttr(_op(op).attributes["iterator_types"])
    ]


def indexing_maps(op) -> list[ir.AffineMap]:
    """The ``indexing_maps`` of a linalg structured op."""
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(_op(op).attributes["indexing_maps"])]


def _down(e: ir.AffineExpr) -> ir.AffineExpr:
    return e.maybe_downcast() if hasattr(e, "maybe_downcast") else e


def loop_ranges(
    maps: list[ir.AffineMap], shapes: list[tuple[int | None, ...] | None]
) -> list[int | None]:
    """The range of every loop of a structured op, read from its operands.

    A loop ``d_i`` that some operand's map reads as a bare result runs over
    that operand's size along that result (the first such static size
    decides; the inversion upstream's verifier does for static shapes).
    ``shapes[i]`` is operand ``i``'s :func:`static_shape`; a loop no operand
    gives a static size for is None.
    """
    ranges: list[int | None] = [None] * (maps[0].n_dims if maps else 0)
    for amap, shape in zip(maps, shapes, strict=True):
        if shape is None:
            continue
        for r, size in zip(amap.results, shape, strict=False):
            r = _down(r)
            if isinstance(r, ir.AffineDimExpr) and ranges[r.position] is None and size is not None:
                ranges[r.position] = size
    return ranges


def dims_used(e: ir.AffineExpr) -> set[int]:
    """Positions of the dimensions affine expression ``e`` uses."""
    e = _down(e)
    if isinstance(e, ir.AffineDimExpr):
        return {e.position}
    if isinstance(e, ir.AffineBinaryExpr):
        return dims_used(e.lhs) | dims_used(e.rhs)
    return set()
