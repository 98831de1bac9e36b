"""The conversion kernels (quantize and dequantize): :mod:`.emitter` (the spec,
the loops both kernels share), :mod:`.encode` (the per-register numerics of
quantization), :mod:`.quantize` and :mod:`.dequantize`; here the module
around one kernel (:func:`convert_module`) and the dispatch by operation
(:func:`emit_convert`, also used by ``mx-quantize-kernels``)."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func

from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.convert.dequantize import Dequantize
from mlir_mx.kernels.convert.emitter import RUNTIME_THREADS, ConvertSpec
from mlir_mx.kernels.convert.quantize import Quantize

__all__ = ["RUNTIME_THREADS", "ConvertSpec", "convert_module", "emit_convert"]


def convert_module(spec: ConvertSpec) -> ir.Module:
    """A module with the one kernel of ``spec`` (in the current context)."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(spec.name, ir.FunctionType.get(spec.arg_types(), []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            anchor = arith.ConstantOp(ir.IndexType.get(), 0)
            kb = KernelBuilder(ir.InsertionPoint(anchor))
            args = list(entry.arguments)
            g = args.pop(3) if spec.global_scale else None
            threads = args[3] if len(args) > 3 else None
            emit_convert(kb, spec, *args[:3], threads=threads, global_scale=g)
            func.ReturnOp([])
            anchor.operation.erase()
    return module


def emit_convert(
    kb: KernelBuilder, spec: ConvertSpec, *args: ir.Value, threads: ir.Value | None = None,
    global_scale: ir.Value | None = None,
) -> None:
    """Emit the kernel of ``spec`` at the insertion point; ``args``: the memrefs
    of :meth:`ConvertSpec.arg_types` (``x, codes, scales`` to quantize,
    ``codes, scales, out`` to dequantize); ``threads``: the run-time thread
    count (an ``index`` value) of a :data:`RUNTIME_THREADS` kernel;
    ``global_scale``: NVFP4's (an ``f32`` value)."""
    emitter = (Quantize if spec.op == "quantize" else Dequantize)(kb, spec, *args)
    if spec.global_scale:
        if global_scale is None:
            raise ValueError("an NVFP4 kernel needs its global_scale argument")
        emitter.global_scale = global_scale
    if spec.threads == RUNTIME_THREADS:
        if threads is None:
            raise ValueError("a RUNTIME_THREADS kernel needs its threads argument")
        emitter.threads = threads
    emitter.emit()
