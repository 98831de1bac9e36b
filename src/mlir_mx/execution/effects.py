"""Which buffer arguments a compiled function may write, read off its LLVM IR.

The Runner passes numpy arrays to native code by reference.  A read-only
array (``setflags(write=False)``, a memmap opened ``mode="r"``, an array over
an immutable ``bytes`` object) must not reach a parameter the function
writes: the write would silently change "read-only" data, or fault on a
read-only mapping and kill the process.  Read-only arrays stay fine for
parameters that are only read (weights in a read-only memmap are the
normal case), so the Runner asks this module, per function, which
parameters may be written.

The answer comes from the final LLVM-dialect function, where bufferization's
in-place decisions are settled: a taint analysis from the descriptor
pointers of each memref parameter through address arithmetic, aggregates,
casts and branches.  A parameter "may be written" when a tainted pointer is
the address of a store (``llvm.store``, masked stores and scatters,
``memcpy``/``memmove``/``memset`` destinations), escapes into memory, or is
passed to a call or to any op this module does not know.  The analysis is
conservative: when in doubt, a parameter is written.
"""

from __future__ import annotations

from mlir import ir

from mlir_mx.passes.kernels.parallel_tasks import TASK_ARGS, TASKS_ATTR

__all__ = ["written_parameters"]

# Ops that read memory through a pointer operand and write nothing.
_READS = frozenset(
    {
        "llvm.load",
        "llvm.intr.masked.load",
        "llvm.intr.masked.gather",
        "llvm.intr.prefetch",
        "llvm.intr.expandload",
    }
)
# Ops without memory effects whose results are derived from their operands.
_PURE_PREFIXES = ("llvm.mlir.", "llvm.intr.vector.reduce", "llvm.intr.fma", "llvm.intr.fmuladd")
_PURE = frozenset(
    """getelementptr insertvalue extractvalue insertelement extractelement shufflevector
    bitcast addrspacecast ptrtoint inttoptr select icmp fcmp freeze trunc zext sext
    add sub mul udiv sdiv urem srem and or xor shl lshr ashr fadd fsub fmul fdiv frem fneg
    fpext fptrunc fptosi fptoui sitofp uitofp
    intr.ptrmask intr.smax intr.smin intr.umax intr.umin intr.maxnum intr.minnum
    intr.maximum intr.minimum intr.fabs intr.copysign intr.roundeven intr.floor intr.ceil
    intr.trunc intr.round intr.rint intr.sqrt intr.abs""".split()
)
# Ops with memory or control effects that never write through a pointer operand.
_HARMLESS = frozenset(
    {
        "llvm.return",
        "llvm.intr.assume",
        "llvm.intr.lifetime.start",
        "llvm.intr.lifetime.end",
        "llvm.intr.invariant.start",
        "llvm.intr.invariant.end",
    }
)
# Ops that write through ONE operand (index) and only read the others.
_WRITES_OPERAND = {
    "llvm.store": 1,
    "llvm.intr.masked.store": 1,
    "llvm.intr.memcpy": 0,
    "llvm.intr.memcpy.inline": 0,
    "llvm.intr.memmove": 0,
    "llvm.intr.memset": 0,
    "llvm.intr.memset.inline": 0,
}

# Target intrinsics (``llvm.call_intrinsic``) that only read through their
# pointer operands, and those that write through ONE operand (index): the
# AMX tile loads and store (``mlir_mx.kernels.amx``).
_INTRINSIC_READS = frozenset({"llvm.x86.tileloadd64.internal", "llvm.x86.tileloaddt164.internal"})
_INTRINSIC_WRITES_OPERAND = {"llvm.x86.tilestored64.internal": 2}


# Functions that only allocate: they write nothing their operands point to.
_ALLOCATORS = frozenset({"malloc", "aligned_alloc", "calloc"})


def _callee(op: ir.Operation) -> str | None:
    attr = op.attributes["callee"] if "callee" in op.attributes else None
    return None if attr is None else ir.FlatSymbolRefAttr(attr).value


def _intrinsic(op: ir.Operation) -> str | None:
    """The name an ``llvm.call_intrinsic`` calls; None for another op."""
    if op.name != "llvm.call_intrinsic" or "intrin" not in op.attributes:
        return None
    return ir.StringAttr(op.attributes["intrin"]).value


def _function(module: ir.Module, name: str):
    for op in module.body.operations:
        op = op.operation
        if op.name == "llvm.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    return None


def _lowered_arity(is_buffer: bool, rank: int) -> int:
    """Number of LLVM arguments one parameter expands to (memref: 3 + 2 * rank)."""
    return 3 + 2 * rank if is_buffer else 1


def written_parameters(module: ir.Module, name: str, params) -> frozenset[int]:
    """Indices (into ``params``) of the buffer parameters ``@name`` may write.

    ``params`` are the flattened parameters the Runner recorded before
    lowering (``is_buffer``, ``shape``).  When the lowered function does not
    have the expected shape of arguments (another calling convention), every
    buffer parameter is reported as written.
    """
    everything = frozenset(i for i, p in enumerate(params) if p.is_buffer)
    fn = _function(module, name)
    if fn is None or not fn.regions[0].blocks:
        return everything
    entry = fn.regions[0].blocks[0]
    args = list(entry.arguments)
    widths = [_lowered_arity(p.is_buffer, len(p.shape) if p.is_buffer else 0) for p in params]
    # mx-parallel-tasks appends claims: an index, never a buffer.
    if TASKS_ATTR in fn.attributes:
        args = args[:-TASK_ARGS]
    if sum(widths) != len(args):
        return everything
    taint: dict[ir.Value, frozenset[int]] = {}
    pos = 0
    for i, (p, w) in enumerate(zip(params, widths, strict=True)):
        if p.is_buffer:
            taint[args[pos]] = taint[args[pos + 1]] = frozenset({i})  # allocated, aligned
        pos += w
    return _propagate(taint) & everything


def _propagate(taint: dict) -> frozenset[int]:
    """Run the taint to a fixed point; the parameters that may be written.

    A worklist over the uses of each value whose taint grew: only the ops a
    descriptor's pointers reach are visited (address arithmetic, stores,
    calls), not the kernel's vector arithmetic on loaded values, which a scan
    of every op to the fixed point read from the bindings two or three times
    (most of a compilation's analysis time: 40 ms for a prefill kernel).  An
    ``llvm.insertvalue`` passes its result on even when the aggregate's
    taint did not grow: an ``llvm.extractvalue`` reads the taint of the
    field (:func:`_extracted`), which may have grown under an unchanged
    aggregate."""
    written: set[int] = set()
    none = frozenset()
    work = list(taint)
    while work:
        for use in work.pop().uses:
            op = use.owner.operation
            flows = _effect(op, [taint.get(v, none) for v in op.operands], written, taint)
            forced = op.name == "llvm.insertvalue"
            for r in _receivers(op):
                old = taint.get(r, none)
                new = old | flows
                if new != old:
                    taint[r] = new
                if new != old or forced:
                    work.append(r)
    return frozenset(written)


def _effect(
    op: ir.Operation, tainted: list[frozenset[int]], written: set[int], taint: dict
) -> frozenset[int]:
    """Record what ``op`` writes; return the taint its results/successors receive."""
    name = op.name
    every = frozenset().union(*tainted)
    if name in _READS or name in _HARMLESS:
        return frozenset()
    if name == "llvm.extractvalue":
        return _extracted(op, taint)
    short = name[5:] if name.startswith("llvm.") else name
    if short in _PURE or name.startswith(_PURE_PREFIXES):
        return every
    if name in _WRITES_OPERAND:
        target = _WRITES_OPERAND[name]
        written.update(tainted[target])
        if name in ("llvm.store", "llvm.intr.masked.store"):
            written.update(tainted[0])  # a pointer stored to memory escapes
        return frozenset()
    if op.successors:  # branches: operands flow into successor arguments
        return every
    intrinsic = _intrinsic(op)
    if intrinsic in _INTRINSIC_READS:
        return frozenset()
    if intrinsic in _INTRINSIC_WRITES_OPERAND:
        written.update(tainted[_INTRINSIC_WRITES_OPERAND[intrinsic]])
        return frozenset()
    if name == "llvm.call" and _callee(op) in _ALLOCATORS:
        # malloc(size): its operands are sizes (tainted when computed from a
        # descriptor's shape fields, which share the pointers' aggregate); it
        # writes nothing of the caller's and returns fresh memory.
        return frozenset()
    written.update(every)  # calls, scatters, unknown ops: may write anything they see
    return every


def _positions(op: ir.Operation) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes["position"]))


def _extracted(op: ir.Operation, taint: dict) -> frozenset[int]:
    """The taint of ``llvm.extractvalue``, field by field.

    A memref descriptor is one aggregate of its pointers and its sizes and
    strides: without this, a size read back from it (the ``M`` of a matmul)
    would carry the pointers' taint, and so would every buffer address
    computed from it.  Walks the ``llvm.insertvalue`` chain that built the
    aggregate: the field is what was last inserted at (or around) its
    position; anything else (a block argument, a load) keeps the whole
    aggregate's taint.
    """
    pos = _positions(op)
    agg, acc = op.operands[0], frozenset()
    while True:
        owner = agg.owner if isinstance(agg, ir.OpResult) else None
        if owner is None or owner.name != "llvm.insertvalue":
            return acc | taint.get(agg, frozenset())
        container, value = owner.operands[0], owner.operands[1]
        ipos = _positions(owner)
        if pos[: len(ipos)] == ipos:  # the field lies inside the inserted value
            return acc | taint.get(value, frozenset())
        if ipos[: len(pos)] == pos:  # the inserted value lies inside the field
            acc |= taint.get(value, frozenset())
        agg = container


def _receivers(op: ir.Operation) -> list[ir.Value]:
    """Results, plus the arguments of successor blocks (over-approximated: all of them)."""
    out = list(op.results)
    for succ in op.successors:
        out.extend(succ.arguments)
    return out
