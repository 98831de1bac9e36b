"""The byte rule of the model: buffers at the function boundary, and their roles.

Bytes are the memref arguments and results of the *bufferized* function,
each buffer once (a result that is an argument, or a view of one, is not
counted again), at the element type's bit width.  Buffers allocated inside
the function are listed as temporaries and not counted.  Argument buffers
are named by their role in the contraction (``A``, ``B scale``, ``C
(accumulator)``, ...).  ``docs/roofline.md`` states the rule.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.ir_utils import (
    KernelTag,
    block_ops,
    collect,
    dims_used,
    index_of,
    indexing_maps,
    ins_outs,
    iterator_types,
    kernel_tag,
    owner_op,
    users,
)
from mlir_mx.numerics.formats import SCALE_TYPE
from mlir_mx.roofline.kernel_model import Buffer, element_bits, require_static_shape

__all__ = ["boundary_buffers", "temporaries"]

# Ops that only re-view a buffer (the byte rule follows them to the root).
_VIEWS = {
    "memref.expand_shape",
    "memref.collapse_shape",
    "memref.subview",
    "memref.cast",
    "memref.reinterpret_cast",
    "memref.reshape",
    "memref.transpose",
    "memref.view",
    "memref.assume_alignment",
}


def _root(v: ir.Value) -> ir.Value:
    """Follow view ops (expand_shape, subview, cast, ...) back to the viewed buffer."""
    while True:
        op = owner_op(v)
        if op is None or op.name not in _VIEWS:
            return v
        v = op.operands[0]


def _through_unpack(v: ir.Value) -> tuple[ir.Value, str | None]:
    """The buffer ``v`` views, followed through an ``mx.kernel = "unpack_codes"``
    generic to the packed bytes it reads (``subbyte-storage=packed``), and the
    element type of the unpacked codes when it was."""
    root = _root(v)
    for user in users(root):
        if kernel_tag(user) != KernelTag.UNPACK_CODES:
            continue
        ins, outs = ins_outs(user)
        if outs and _root(outs[0]) == root:
            return _root(ins[0]), str(ir.ShapedType(root.type).element_type)
    return root, None


def _buffer(index: int | None, name: str, t: ir.Type, shape, returned: bool = False) -> Buffer:
    elem = t.element_type
    return Buffer(index, name, str(t), shape, str(elem), element_bits(elem), returned=returned)


def boundary_buffers(
    fn: ir.Operation, linalg_ops: list[ir.Operation]
) -> tuple[list[Buffer], list[str]]:
    """The counted buffers of function ``fn`` (its memref arguments, named by
    role, then the fresh buffers it returns) and notes on what is not counted."""
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    args = list(fn.regions[0].blocks[0].arguments)
    buffers = [
        _buffer(i, f"arg{i}", a.type, require_static_shape(a.type, f"argument {i} of @{name}"))
        for i, a in enumerate(args)
        if isinstance(a.type, ir.MemRefType)
    ]
    notes = []
    if any(isinstance(a.type, ir.RankedTensorType) for a in args):
        notes.append("tensor arguments left after bufferization are not counted")
    returns = collect(fn, lambda o: o.name == "func.return", ir.WalkOrder.PRE_ORDER)
    results: list[Buffer] = []
    for ret in returns[:1]:
        for j, v in enumerate(ret.operands):
            if not isinstance(v.type, ir.MemRefType):
                continue
            k = index_of(args, _root(v))
            if k is not None:
                for b in buffers:
                    if b.index == k:
                        b.returned = True
                continue
            shape = require_static_shape(v.type, f"result {j} of @{name}")
            results.append(_buffer(None, f"result{j}", v.type, shape, returned=True))
    _name_roles(buffers, args, linalg_ops)
    return buffers + results, notes


def temporaries(fn: ir.Operation, counted: list[Buffer]) -> list[Buffer]:
    """The statically shaped buffers ``fn`` allocates, except the fresh ones
    it returns (results, in ``counted``)."""
    allocs = collect(
        fn, lambda o: o.name in ("memref.alloc", "memref.alloca"), ir.WalkOrder.PRE_ORDER
    )
    temps = [
        _buffer(None, f"temp{k}", alloc.results[0].type, tuple(alloc.results[0].type.shape))
        for k, alloc in enumerate(allocs)
        if ir.ShapedType(alloc.results[0].type).has_static_shape
    ]
    returned = {b.type for b in counted if b.index is None}
    return [t for t in temps if t.type not in returned]


def _name_roles(buffers: list[Buffer], args: list[ir.Value], linalg_ops) -> None:
    """Name argument buffers by their role in the linalg ops that read them.

    In a contraction (a generic with a reduction loop), the ``outs`` buffer is
    ``C`` (``C (accumulator)`` when the payload reads it); an input indexed by
    the output's first parallel dimension and not its second is ``A``, the
    converse ``B``; a scale-typed input is that operand's ``scale`` (and the
    other buffer of the same operand its ``mantissa``).  Otherwise: ``argN``.
    """
    roles: dict[int, tuple[str, str]] = {}  # arg index -> (operand, part)
    packed_elements: dict[int, str] = {}  # arg index -> element of its packed codes
    for op in linalg_ops:
        if op.name != "linalg.generic":
            continue
        ins, outs = ins_outs(op)
        maps = indexing_maps(op)
        reduction = "reduction" in iterator_types(op)
        body = op.regions[0].blocks[0]
        bargs = list(body.arguments)
        out_dims: list[int] = []
        for j, (v, m) in enumerate(zip(outs, maps[len(ins) :], strict=False)):
            out_dims = [r.position for r in m.results if isinstance(r, ir.AffineDimExpr)]
            k = index_of(args, _root(v))
            if k is not None and k not in roles:
                reads = _is_used(bargs[len(ins) + j], body)
                roles[k] = ("C", "accumulator" if reduction and reads else "")
        if not reduction or len(out_dims) < 2:
            continue
        for v, m in zip(ins, maps, strict=False):
            src, unpacked = _through_unpack(v)
            k = index_of(args, src)
            if k is None or k in roles:
                continue
            if unpacked is not None:
                packed_elements[k] = unpacked
            used = set()
            for r in m.results:
                used |= dims_used(r)
            a, b = out_dims[0] in used, out_dims[1] in used
            who = "A" if a and not b else "B" if b and not a else None
            if who is None:
                continue
            part = "scale" if str(ir.ShapedType(v.type).element_type) == SCALE_TYPE else ""
            roles[k] = (who, part)
    scaled = {who for who, part in roles.values() if part == "scale"}
    for b in buffers:
        if b.index in packed_elements:  # packed i8 bytes: same size, named by content
            b.element = f"{packed_elements[b.index]} (packed)"
        if b.index is None or b.index not in roles:
            continue
        who, part = roles[b.index]
        if who == "C":
            b.name = "C (accumulator)" if part else "C"
        elif part == "scale":
            b.name = f"{who} scale"
        elif who in scaled:
            b.name = f"{who} mantissa"
        else:
            b.name = who


def _is_used(v: ir.Value, block: ir.Block) -> bool:
    return any(index_of(list(o.operands), v) is not None for o in block_ops(block))
