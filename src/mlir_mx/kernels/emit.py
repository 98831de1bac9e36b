"""A matmul kernel at the insertion point (:func:`emit_matmul`, what
``mx-matmul-kernels`` puts in place of the blocked matmul) or in a module of
its own around one kernel (:func:`kernel_module`, for the library API, the
benchmarks and tests)."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.plan import KernelPlan
from mlir_mx.kernels.common.problem import Operands, Problem, code_columns
from mlir_mx.numerics.formats import SCALE_TYPE

__all__ = ["emit_matmul", "kernel_module"]


def emit_matmul(prob: Problem, ops: Operands, plan: KernelPlan) -> None:
    """Emit the kernel of ``plan`` at the current insertion point and location."""
    # Constants are created before an anchor op that precedes the kernel, so
    # that they dominate every loop the kernel builds after it.
    anchor = arith.ConstantOp(ir.IndexType.get(), 0)
    kb = KernelBuilder(ir.InsertionPoint(anchor))
    plan.emit(kb, prob, ops)
    anchor.operation.erase()


def _memref(shape, elem: str) -> ir.Type:
    dims = [ir.ShapedType.get_dynamic_size() if s is None else s for s in shape]
    return ir.MemRefType.get(dims, ir.Type.parse(elem))


def kernel_module(
    prob: Problem, plan: KernelPlan, name: str = "matmul", *, bench: bool = False
) -> ir.Module:
    """A module with ``func @name(a, sa, b, [sb,] [g,] c)`` on memrefs running one kernel.

    ``a``/``sa``: A's codes (M x K) and E8M0 scales (M x K/B), or an f32
    ``a`` alone when ``prob.a_element`` is None; ``b``: B's
    codes (K x N, blocked along K) or an f32 K x N; ``sb``: B's scales
    (K/B x N, only when B is MX); ``c``: the f32 M x N accumulator, updated
    in place.  M may be dynamic (``prob.m is None``).  With ``prob.a_packed``
    / ``prob.b_packed``, that operand's FP4/FP6 codes are ``ui8`` memrefs of
    packed bytes (``numerics.pack_codes``).  With ``prob.b_dot``, B is one
    ``ui8`` buffer of dot records (scales inside, no ``sb``); with
    ``prob.b_global`` (NVFP4) a ``(1,)`` f32 ``g`` follows B, and C's last
    store is ``c / g``.
    ``bench=True`` adds ``func @bench(..., n: index)`` calling ``@name`` ``n``
    times (timing without Python's call overhead).
    """
    m = prob.m

    def codes(rows, cols, elem, packed):
        if packed and code_columns(elem, cols, True) != cols:
            return _memref([rows, code_columns(elem, cols, True)], "ui8")  # packed bytes
        return _memref([rows, cols], elem)

    types = []
    if prob.a_is_mx:
        a_codes = codes(m, prob.k, prob.a_element, prob.a_packed)
        types += [a_codes, _memref([m, prob.kblocks], SCALE_TYPE)]
    else:
        types.append(_memref([m, prob.k], "f32"))
    if prob.b_dot is not None:  # dot records: B's scales are inside
        types.append(_memref(list(prob.b_codes_shape()), "ui8"))
    elif prob.b_is_mx:
        b_codes = (
            _memref(list(prob.b_codes_shape()), "ui8")
            if prob.b_tiled
            else codes(prob.k, prob.n, prob.b_element, prob.b_packed)
        )
        types += [b_codes, _memref([prob.kblocks, prob.n], prob.b_scale_type)]
    else:
        types.append(_memref([prob.k, prob.n], "f32"))
    if prob.b_global:  # NVFP4's global scale, divided by at the last store
        types.append(_memref([1], "f32"))
    types.append(_memref([m, prob.n], "f32"))
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(name, ir.FunctionType.get(types, []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            args = list(entry.arguments)
            a, sa = (args.pop(0), args.pop(0)) if prob.a_is_mx else (args.pop(0), None)
            two = prob.b_is_mx and prob.b_dot is None
            b, sb = (args.pop(0), args.pop(0)) if two else (args.pop(0), None)
            g = args.pop(0) if prob.b_global else None
            ops = Operands(a, sa, b, sb, args[0], g)
            emit_matmul(prob, ops, plan)
            func.ReturnOp([])
        if bench:
            _bench_function(fn, types)
    return module


def _bench_function(kernel: func.FuncOp, types: list[ir.Type]) -> None:
    from mlir.dialects import scf

    index = ir.IndexType.get()
    fn = func.FuncOp("bench", ir.FunctionType.get(types + [index], []))
    entry = fn.add_entry_block()
    with ir.InsertionPoint(entry):
        args = list(entry.arguments)
        zero = arith.ConstantOp(index, 0).result
        one = arith.ConstantOp(index, 1).result
        loop = scf.ForOp(zero, args[-1], one)
        with ir.InsertionPoint(loop.body):
            func.CallOp(kernel, args[:-1])
            scf.YieldOp([])
        func.ReturnOp([])
