"""``mx-parallel-tasks``: a kernel's parallel loop run by the caller's threads.

The other lowering of ``scf.parallel`` (beside upstream's async runtime,
:func:`mlir_mx.pipelines.threads_pipeline`): every thread of a team the
caller brings (torch's OpenMP team, :mod:`mlir_mx.execution.threads`) calls
the function, each with its place in the team.  A public function with an
``scf.parallel`` gets two ``index`` arguments appended, ``thread`` and
``team``, and its loop ``scf.parallel (i) = (lb) to (ub) step (s)`` becomes

    scf.for %i = lb + thread * s to ub step team * s

so the team runs exactly the loop's iterations (the same tasks, so the same
bits), thread ``t`` the iterations ``t, t + team, ...``.  Each thread runs the
code around the loop itself: the kernels' prologues (activations prepared into
buffers they allocate) and epilogues (deallocations) are private to a thread.
The pass refuses what that would break: a function whose code outside the
loop writes memory it did not allocate (an argument, a global), calls a
function, or has results; more than one parallel loop in a function, one
nested in another, a loop with reductions or more than one dimension.  The
function carries ``mx.tasks``: the most threads that find work (the loop's
iteration count when static, else the ``threads`` option), which the caller
asks its team for.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf

from mlir_mx.ir_utils import collect
from mlir_mx.passes.registry import Option, PassError, register_pass

__all__ = ["TASKS_ATTR", "mx_parallel_tasks"]

#: The attribute of a function lowered by this pass: the most threads with work.
TASKS_ATTR = "mx.tasks"

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
    "append (thread, team) index arguments and stride the loop by the team",
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
    entry = fn.regions[0].blocks[0]
    thread = entry.add_argument(index, fn.location)
    team = entry.add_argument(index, fn.location)
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    new_type = ir.FunctionType.get([*ftype.inputs, index, index], ftype.results)
    fn.attributes["function_type"] = ir.TypeAttr.get(new_type)
    if "arg_attrs" in fn.attributes:
        attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
        empty = ir.DictAttr.get({})
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get([*attrs, empty, empty])
    lb, ub, step = (loop.operands[i] for i in range(3))
    fn.attributes[TASKS_ATTR] = ir.IntegerAttr.get(
        ir.IntegerType.get_signless(64), _trip_count(lb, ub, step) or threads
    )
    with ir.InsertionPoint(loop), loop.location:
        first = arith.AddIOp(lb, arith.MulIOp(thread, step).result).result
        stride = arith.MulIOp(team, step).result
        new = scf.ForOp(first, ub, stride)
    body = loop.regions[0].blocks[0]
    ops = list(body.operations)
    with ir.InsertionPoint(new.body), loop.location:
        end = scf.YieldOp([])
    for o in ops[:-1]:  # all but scf.reduce
        o.operation.move_before(end)
    body.arguments[0].replace_all_uses_with(new.induction_variable)
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
