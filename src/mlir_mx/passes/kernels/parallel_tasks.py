"""``mx-parallel-tasks``: a kernel's parallel loop run by the caller's threads.

The other lowering of ``scf.parallel`` (beside upstream's async runtime,
:func:`mlir_mx.pipelines.threads_pipeline`): every thread of a team the
caller brings (:mod:`mlir_mx.execution.pool`, through
:mod:`mlir_mx.execution.threads`) calls the function, and the threads divide
the loop's iterations dynamically.  A public function with an
``scf.parallel`` gets one ``index`` argument appended, ``claims``: the
address of an ``i64`` counter the caller zeroes before the call and shares
with every thread.  Its loop ``scf.parallel (i) = (lb) to (ub) step (s)``
becomes

    scf.while: c = atomicrmw add claims, 1 (monotonic); i = lb + c * s; i < ub
    do: the body at i

so each iteration is claimed by exactly one thread, one atomic add per
iteration (the same tasks, so the same bits, whichever thread runs which:
each task owns its output whole), and a thread that arrives late finds the
work taken.  Each thread runs the code around the loop itself: the kernels'
prologues (activations prepared into buffers they allocate) and epilogues
(deallocations) are private to a thread.  The pass refuses what that would
break: a function whose code outside the loop writes memory it did not
allocate (an argument, a global), calls a function, or has results; more than
one parallel loop in a function, one nested in another, a loop with
reductions or more than one dimension.  The function carries ``mx.tasks``:
the most threads that find work (the loop's iteration count when static,
else the ``threads`` option), which the caller asks its team for.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm, scf

from mlir_mx.ir_utils import collect
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["TASKS_ATTR", "TASK_ARGS", "mx_parallel_tasks"]

#: The attribute of a function lowered by this pass: the most threads with work.
TASKS_ATTR = "mx.tasks"
#: The arguments the pass appends (``claims``: the shared counter's address).
TASK_ARGS = 1

#: Ops that may write memory they are given; outside the loop their target
#: must be an allocation of the function itself.
_WRITES = {
    "memref.store": 1,
    "vector.store": 1,
    "vector.maskedstore": 0,
    "vector.transfer_write": 1,
    "vector.scatter": 0,
    "memref.copy": 1,
}
#: Views: the memref they see is their first operand's.
_VIEWS = (
    "memref.subview",
    "memref.cast",
    "memref.reinterpret_cast",
    "memref.expand_shape",
    "memref.collapse_shape",
    "memref.view",
    "memref.transpose",
    "builtin.unrealized_conversion_cast",
)
_ALLOCS = ("memref.alloc", "memref.alloca")


@register_pass(
    "mx-parallel-tasks",
    "Run each public function's scf.parallel loop on the caller's threads: "
    "append a claims index argument (a shared counter's address) and let each "
    "thread claim iterations from it with an atomic add",
    options=[
        Option("threads", int, 1, "Threads asked for when the loop's trip count is dynamic"),
    ],
)
def mx_parallel_tasks(op: ir.Operation, *, threads: int = 1) -> None:
    """Rewrite the parallel loop of every public ``func.func`` under ``op``."""
    op = getattr(op, "operation", op)
    if threads < 1:
        raise PassError(
            f"mx-parallel-tasks: threads must be at least 1, got {threads}", op.location
        )
    with op.context:
        for fn in collect(op, lambda o: o.name == "func.func"):
            loops = collect(fn, lambda o: o.name == "scf.parallel")
            if not loops:
                continue
            _check(fn, loops)
            _rewrite(fn, loops[0], threads)


def _check(fn: ir.Operation, loops: list[ir.Operation]) -> None:
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    where = f"mx-parallel-tasks: @{name}"
    if (
        "sym_visibility" in fn.attributes
        and ir.StringAttr(fn.attributes["sym_visibility"]).value != "public"
    ):
        raise PassError(f"{where}: a private function with a parallel loop", fn.location)
    if len(loops) > 1:
        raise PassError(
            f"{where}: {len(loops)} parallel loops (one is supported)", loops[1].location
        )
    loop = loops[0]
    if len(loop.results) or len(loop.regions[0].blocks[0].arguments) != 1:
        raise PassError(
            f"{where}: a parallel loop with reductions or several dimensions", loop.location
        )
    if ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).results:
        raise PassError(f"{where}: a function with results", fn.location)
    for o in collect(fn, lambda o: not _within(o, loop) and o != fn):
        if o.name in ("func.call", "func.call_indirect", "llvm.call"):
            raise PassError(f"{where}: a call outside the parallel loop", o.location)
        target = _WRITES.get(o.name)
        if o.name.startswith("linalg."):
            targets = list(o.operands)  # conservative: any operand may be written
        elif target is not None:
            targets = [o.operands[target]]
        else:
            continue
        for v in targets:
            if isinstance(v.type, ir.MemRefType) and not _allocated(v):
                raise PassError(
                    f"{where}: '{o.name}' outside the parallel loop writes memory the function "
                    "did not allocate (every thread runs it)",
                    o.location,
                )


def _within(o: ir.Operation, loop: ir.Operation) -> bool:
    """Whether ``o`` is ``loop`` or inside it."""
    while o is not None:
        if o == loop:
            return True
        o = o.parent
    return False


def _allocated(v: ir.Value) -> bool:
    """Whether the memref ``v`` is (a view of) an allocation of the function."""
    while True:
        owner = v.owner
        if not isinstance(owner, ir.Operation):
            owner = getattr(owner, "operation", owner)
        if not isinstance(owner, ir.Operation):
            return False  # a block argument
        if owner.name in _ALLOCS:
            return True
        if owner.name not in _VIEWS:
            return False
        v = owner.operands[0]


def _rewrite(fn: ir.Operation, loop: ir.Operation, threads: int) -> None:
    index = ir.IndexType.get()
    i64 = ir.IntegerType.get_signless(64)
    entry = fn.regions[0].blocks[0]
    claims = entry.add_argument(index, fn.location)
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    new_type = ir.FunctionType.get([*ftype.inputs, index], ftype.results)
    fn.attributes["function_type"] = ir.TypeAttr.get(new_type)
    if "arg_attrs" in fn.attributes:
        attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([*attrs, ir.DictAttr.get({})])
    lb, ub, step = (loop.operands[i] for i in range(3))
    fn.attributes[TASKS_ATTR] = ir.IntegerAttr.get(i64, _trip_count(lb, ub, step) or threads)
    with ir.InsertionPoint(loop), loop.location:
        address = arith.IndexCastOp(i64, claims).result
        counter = llvm.IntToPtrOp(llvm.PointerType.get(), address).result
        one = arith.ConstantOp(i64, 1).result
        new = scf.WhileOp([index], [])
    before = new.before.blocks.append()
    with ir.InsertionPoint(before), loop.location:
        claim = llvm.AtomicRMWOp(
            llvm.AtomicBinOp.add, counter, one, llvm.AtomicOrdering.monotonic, alignment=8
        ).result
        k = arith.IndexCastOp(index, claim).result
        i = arith.AddIOp(lb, arith.MulIOp(k, step).result).result
        scf.ConditionOp(arith.CmpIOp(arith.CmpIPredicate.slt, i, ub).result, [i])
    after = new.after.blocks.append(index, arg_locs=[loop.location])
    with ir.InsertionPoint(after), loop.location:
        end = scf.YieldOp([])
    body = loop.regions[0].blocks[0]
    ops = list(body.operations)
    for o in ops[:-1]:  # all but scf.reduce
        o.operation.move_before(end)
    body.arguments[0].replace_all_uses_with(after.arguments[0])
    loop.erase()


def _trip_count(lb: ir.Value, ub: ir.Value, step: ir.Value) -> int | None:
    values = [_constant(v) for v in (lb, ub, step)]
    if None in values or values[2] <= 0:
        return None
    lo, hi, s = values
    return max(1, -(-(hi - lo) // s))


def _constant(v: ir.Value) -> int | None:
    owner = getattr(v.owner, "operation", v.owner)
    if isinstance(owner, ir.Operation) and owner.name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.IntegerAttr):
            return ir.IntegerAttr(attr).value
    return None
