"""``mx-legalize-subbyte-vector-memory``: vector loads/stores of f4/f6 memrefs
done element by element.

A ``memref<...xf4E2M1FN>`` (or f6, i4, ...) holds one element per byte, as
scalar ``memref.load``/``memref.store`` and ml_dtypes agree.  But
``convert-vector-to-llvm`` lowers a ``vector<32xf4E2M1FN>`` load to an LLVM
load of ``<32 x i4>``, which LLVM lays out bit-packed in memory (16 bytes),
so a vectorized kernel reading f4/f6 mantissas silently computes garbage.
Smallest reproducer::

    %v = vector.load %m[%c0] : memref<8xf4E2M1FN>, vector<8xf4E2M1FN>
    // lowered: llvm.load <8 x i4> -> reads 4 bytes, not 8

This pass runs after ``convert-vector-to-scf`` (which leaves 1-D transfers)
and rewrites every 1-D ``vector.transfer_read`` / ``vector.load`` (and
``vector.transfer_write`` / ``vector.store``) whose memref element type is
not a whole number of bytes into scalar ``memref.load``s +
``vector.from_elements`` (``vector.extract`` + ``memref.store``s).  The
vector arithmetic on those values stays vectorized; only the memory access is
scalar.  Accesses it cannot rewrite (masked, out-of-bounds, n-D, non-minor
permutation maps) fail the pass with a located error instead of producing
wrong numbers.

FIXME(upstream): the LLVM lowering of vector memory ops does not account for
sub-byte element types stored one per byte (``memref`` layout) — see
``docs/passes/mx-expand-narrow-floats.md``.  No upstream issue found (the
narrow-type emulation of llvm-project#70293 assumes the packed layout).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, memref, vector

from mlir_mx.ir_utils import collect
from mlir_mx.numerics.formats import ELEMENT_FORMATS
from mlir_mx.passes.registry import PassError, register_pass

__all__ = ["legalize_subbyte_vector_memory"]

_READS = ("vector.transfer_read", "vector.load")
_WRITES = ("vector.transfer_write", "vector.store")


def _subbyte_memref(t: ir.Type) -> bool:
    t = t.maybe_downcast()
    if not isinstance(t, ir.MemRefType):
        return False
    e = t.element_type.maybe_downcast()
    width = getattr(e, "width", None)
    if width is None:
        fmt = ELEMENT_FORMATS.get(str(e))
        width = fmt.bits if fmt is not None else None
    return width is not None and width % 8 != 0


def _check_plain(op: ir.Operation, vec_type) -> str | None:
    """None when op is an in-bounds, unmasked, 1-D minor-identity access."""
    if vec_type.rank != 1:
        return f"{vec_type.rank}-D vector"
    if op.name.startswith("vector.transfer"):
        if len(op.operands) > (3 + len(_indices_of(op))):  # a mask operand
            return "masked transfer"
        if "in_bounds" in op.attributes:
            flags = [ir.BoolAttr(a).value for a in ir.ArrayAttr(op.attributes["in_bounds"])]
            if not all(flags):
                return "possibly out-of-bounds transfer"
        else:
            return "possibly out-of-bounds transfer"
        pmap = ir.AffineMapAttr(op.attributes["permutation_map"]).value
        if str(pmap.results[0]) != f"d{pmap.n_dims - 1}":
            return f"permutation map {pmap}"
    return None


def _indices_of(op: ir.Operation) -> list[ir.Value]:
    # transfer_read: (source, indices..., padding[, mask]); vector.load: (base, indices...)
    # transfer_write: (value, dest, indices...[, mask]); vector.store: (value, base, indices...)
    mtype_pos = 1 if op.name in _WRITES else 0
    rank = op.operands[mtype_pos].type.maybe_downcast().rank
    start = mtype_pos + 1
    return list(op.operands)[start : start + rank]


@register_pass(
    "mx-legalize-subbyte-vector-memory",
    "Rewrite 1-D vector loads/stores of memrefs with sub-byte elements (f4/f6) into "
    "scalar accesses: LLVM packs <N x i4> in memory, memrefs store one element per byte",
)
def legalize_subbyte_vector_memory(op: ir.Operation) -> None:
    """See the module docstring."""

    def target(o) -> bool:
        if o.name in _READS:
            return _subbyte_memref(o.operands[0].type)
        return o.name in _WRITES and _subbyte_memref(o.operands[1].type)

    for t in collect(op, target):
        _rewrite(t)


def _rewrite(op: ir.Operation) -> None:
    is_read = op.name in _READS
    vec_type = (op.results[0] if is_read else op.operands[0]).type.maybe_downcast()
    why = _check_plain(op, vec_type)
    if why:
        raise PassError(
            f"cannot lower a vector access ({why}) of a memref with sub-byte elements "
            f"correctly; scalarize it before vector lowering",
            op.location,
        )
    base = op.operands[0 if is_read else 1]
    idx = _indices_of(op)
    n = vec_type.shape[0]
    with ir.InsertionPoint(op), op.location:
        index = ir.IndexType.get()
        positions = []
        for j in range(n):
            if j == 0:
                positions.append(idx[-1])
            else:
                c = arith.ConstantOp(index, ir.IntegerAttr.get(index, j)).result
                positions.append(arith.AddIOp(idx[-1], c).result)
        if is_read:
            elems = [memref.LoadOp(base, idx[:-1] + [p]).result for p in positions]
            new = vector.FromElementsOp(vec_type, elems).result
            op.results[0].replace_all_uses_with(new)
        else:
            value = op.operands[0]
            for j, p in enumerate(positions):
                e = vector.ExtractOp(value, [], [j]).result
                memref.StoreOp(e, base, idx[:-1] + [p])
    op.erase()
