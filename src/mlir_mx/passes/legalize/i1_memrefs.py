"""``mx-legalize-i1-memrefs``: store booleans in ``i8`` memrefs.

``finalize-memref-to-llvm`` at 22.1.8 aborts the process (an assertion,
``MemRefToLLVM.cpp`` ``StoreOpLowering``) on a ``memref.store`` into a
``memref<...xi1>``.  Upstream's own ``bufferization-lower-deallocations``
creates exactly such buffers (the ``memref<?xi1>`` ownership flags of its
generic dealloc helper) when a function holds several buffers of unknown
ownership, e.g. the two results of a call.  So a valid program could kill
the Python process.  Smallest reproducer::

    func.func @f(%m: memref<3xi1>, %b: i1) {
      %c0 = arith.constant 0 : index
      memref.store %b, %m[%c0] : memref<3xi1>
      return
    }
    // mlir-opt --finalize-memref-to-llvm  -> assertion failure, abort

This pass rewrites every ``memref<...xi1>`` value (function signatures,
block arguments, op results) to ``memref<...xi8>``; loads get an
``arith.trunci`` to ``i1`` and stores an ``arith.extui`` from ``i1``.  It runs
right before ``finalize-memref-to-llvm`` in the ``lower-to-llvm`` bundle.

FIXME(upstream): remove once MemRefToLLVM lowers ``i1`` stores (the same
function lowers ``i4``/``i6`` stores, which are 1-byte in memory, fine).  No
upstream issue found (the assertion is ``integralElementType.getWidth() >=
8`` in ``StoreOpLowering``; i2 aborts too).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from mlir_mx.ir_utils import collect
from mlir_mx.passes.registry import register_pass

__all__ = ["legalize_i1_memrefs"]


#: Dialects whose ops neither produce memrefs nor hold regions with memref
#: block arguments (checked by name first: the kernels are thousands of them).
_NO_MEMREFS = ("arith.", "vector.", "math.", "llvm.", "index.", "ub.")


def _is_i1_memref(t: ir.Type) -> bool:
    t = t.maybe_downcast()
    if isinstance(t, ir.MemRefType | ir.UnrankedMemRefType):
        e = t.element_type.maybe_downcast()
        return isinstance(e, ir.IntegerType) and e.width == 1
    return False


def _widen(t: ir.Type) -> ir.Type:
    """``memref<...xi1, layout, space>`` -> the same with ``i8`` (via text)."""
    text = str(t)
    i = text.rfind("xi1")
    if i < 0:  # unranked: memref<*xi1>
        return ir.Type.parse(text.replace("*xi1", "*xi8"))
    return ir.Type.parse(text[:i] + "xi8" + text[i + 3 :])


def _fix_type(t: ir.Type) -> ir.Type:
    return _widen(t) if _is_i1_memref(t) else t


@register_pass(
    "mx-legalize-i1-memrefs",
    "Rewrite memref<...xi1> to memref<...xi8> (with trunci/extui at loads/stores) "
    "so finalize-memref-to-llvm does not abort on i1 stores (upstream assertion)",
)
def legalize_i1_memrefs(op: ir.Operation) -> None:
    """See the module docstring."""
    values: list[ir.Value] = []
    funcs: list[ir.Operation] = []
    loads: list[ir.Operation] = []
    stores: list[ir.Operation] = []
    # Types are uniqued: one answer per distinct type (the per-op downcasts
    # were most of this pass's time, which every compilation pays).
    memo: dict[ir.Type, bool] = {}

    def i1_memref(t: ir.Type) -> bool:
        hit = memo.get(t)
        if hit is None:
            hit = memo[t] = _is_i1_memref(t)
        return hit

    for o in collect(op, lambda o: True):
        name = o.name
        if name.startswith(_NO_MEMREFS):
            continue  # most ops of a kernel; none has a memref result or region
        # llvm.func (e.g. the async runtime declarations) cannot carry memrefs.
        if name == "func.func" and "function_type" in o.attributes:
            funcs.append(o)
        for region in o.regions:
            for block in region.blocks:
                values.extend(a for a in block.arguments if i1_memref(a.type))
        values.extend(r for r in o.results if i1_memref(r.type))
        if name == "memref.load" and i1_memref(o.operands[0].type):
            loads.append(o)
        elif name == "memref.store" and i1_memref(o.operands[1].type):
            stores.append(o)
    if not values and not funcs:
        return
    with op.context, ir.Location.unknown(op.context):
        i1 = ir.IntegerType.get_signless(1)
        i8 = ir.IntegerType.get_signless(8)
        for f in funcs:
            ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            ins = [_fix_type(t) for t in ftype.inputs]
            outs = [_fix_type(t) for t in ftype.results]
            if ins != list(ftype.inputs) or outs != list(ftype.results):
                f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ins, outs))
        for v in values:
            v.set_type(_widen(v.type))
        for ld in loads:
            res = ld.results[0]
            res.set_type(i8)
            with ir.InsertionPoint.after(ld), ld.location:
                narrowed = arith.TruncIOp(i1, res).result
            res.replace_all_uses_except(narrowed, narrowed.owner.operation)
        for st in stores:
            with ir.InsertionPoint(st), st.location:
                wide = arith.ExtUIOp(i8, st.operands[0]).result
            st.operands[0] = wide
