"""``mx-legalize-masked-stores``: keep LLVM's x86 backend from widening a
one-lane masked store of narrow integers (it overwrote the neighbours).

FIXME(upstream): llvm-project #179489, fixed by #179853 (merged 2026-02-05,
not in the 22.1.8 wheels we pin).  Since #169827, the x86 backend's
``reduceMaskedStoreToScalarStore`` turns a masked store whose mask is a
constant with exactly one lane set into a scalar store of that lane, and
does so before checking whether the store is a *truncating* one: for
``llvm.intr.masked.store(trunc <16 x i32> %v to <16 x i8>, %p, <1,0,...>)``
it stores the lane's **i32**, four bytes where the program stores one.  The
three bytes after it are overwritten with zeros (or sign bits), past the end
of the buffer when the lane is its last element.  Our kernels' tail stores
are exactly such stores (a quantize kernel's row of one element: the codes
and scales are i32 lanes narrowed to i8), and where a parallel task wrote
the neighbouring bytes first, its results were destroyed: the 2-thread
mismatches of the differential tester (``docs/testing.md``).  The mask need
not be constant in our IR: LLVM's own constant propagation (after inlining
or across an outlined parallel body) may make it one.

**What it rewrites.** Every ``llvm.intr.masked.store`` of an integer vector
with elements narrower than 64 bits gets its mask XOR-ed with a splat of a
bit that is zero at run time but unknown to LLVM (one ``llvm.inline_asm``
per function returns its input 0): the mask is never a constant to the
backend, which then emits the correct masked truncating store
(``vpmovdb mem {k}`` on AVX-512, a blend on AVX2).  A few instructions per
masked store, which our kernels execute only in tails.  Only for x86 targets
(``arch``): other backends are not affected.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import llvm

from mlir_mx import cpu_features
from mlir_mx.host import host_arch
from mlir_mx.ir_utils import collect, top_level_ops
from mlir_mx.passes.registry import Option, register_pass

__all__ = ["legalize_masked_stores", "needs_guard"]


def needs_guard(store: ir.Operation) -> bool:
    """Whether a masked store's value is a vector of integers narrower than
    64 bits (what the backend can turn into a truncating store)."""
    t = store.operands[0].type.maybe_downcast()
    if not isinstance(t, ir.VectorType):
        return False
    e = t.element_type.maybe_downcast()
    return isinstance(e, ir.IntegerType) and e.width < 64


@register_pass(
    "mx-legalize-masked-stores",
    "Hide the masks of narrow-integer masked stores from LLVM's x86 backend, which "
    "widens a one-lane masked truncating store (llvm-project #179489)",
    options=[Option("arch", str, "host", "Target architecture.", ("host", *cpu_features.ARCHES))],
)
def legalize_masked_stores(op: ir.Operation, *, arch: str) -> None:
    """See the module docstring."""
    if (host_arch() if arch == "host" else arch) != "x86_64":
        return
    for fn in top_level_ops(op):
        if fn.name != "llvm.func" or not len(fn.regions[0].blocks):
            continue
        stores = collect(fn, lambda o: o.name == "llvm.intr.masked.store" and needs_guard(o))
        if stores:
            _guard(fn, stores)


def _guard(fn: ir.Operation, stores: list[ir.Operation]) -> None:
    with fn.context, fn.location:
        i1 = ir.IntegerType.get_signless(1)
        i32 = ir.IntegerType.get_signless(32)
        i64 = ir.IntegerType.get_signless(64)
        entry = fn.regions[0].blocks[0]
        with ir.InsertionPoint.at_block_begin(entry):
            zero = llvm.ConstantOp(i64, ir.IntegerAttr.get(i64, 0)).result
            # Zero at run time; LLVM cannot see through the asm.
            opaque = llvm.InlineAsmOp(i64, [zero], "", "=r,0").result
            bit = llvm.TruncOp(i1, opaque, ir.Attribute.parse("#llvm.overflow<none>")).result
        for st in stores:
            mask = st.operands[2]
            lanes = ir.VectorType(mask.type).shape[0]
            with ir.InsertionPoint(st), st.location:
                undef = llvm.PoisonOp(mask.type).result
                at0 = llvm.ConstantOp(i32, ir.IntegerAttr.get(i32, 0)).result
                one = llvm.InsertElementOp(undef, bit, at0).result
                splat = llvm.ShuffleVectorOp(
                    mask.type, one, undef, ir.DenseI32ArrayAttr.get([0] * lanes)
                ).result
                st.operands[2] = llvm.XOrOp(mask, splat).result
