"""Where a kernel's compile time goes, and what the persistent cache saves.

    python bench/compile_cache.py [--n 8192] [--k 8192] [--element f4E2M1FN] [--threads 2]

For each kernel schedule of the registry (``mlir_mx.kernels.SCHEDULES``) that
supports the library's dynamic-M kernel of f32 activations x a packed MX
weight (the f32 kernels of each shape class): time to build the kernel IR,
to run the passes down to the LLVM dialect, and to create the
ExecutionEngine (LLVM's code generation), then the time to create the
engine from the cached bytecode of the lowered module (what a cache hit
costs).  Prints a markdown table.
"""

from __future__ import annotations

import argparse
import io
import time

from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.dialect import load_dialect
from mlir_mx.errors import MXError
from mlir_mx.execution.c_interface import lookup_entry
from mlir_mx.execution.runner import load_async_runtime, runtime_libraries
from mlir_mx.execution.signature import emit_c_interfaces
from mlir_mx.host import check_threads
from mlir_mx.kernels import SCHEDULES, Problem, kernel_module, plan_kernel
from mlir_mx.passes.pipeline import build_pass_manager
from mlir_mx.pipelines import kernel_library_pipeline


def _codegen(module: ir.Module) -> None:
    """An engine for the lowered ``module``, its kernel looked up (LLJIT
    emits the machine code then), as the Runner does (``Runner.entry``)."""
    lookup_entry(ExecutionEngine(module, opt_level=3, shared_libs=runtime_libraries()), "matmul")


def phases(prob: Problem, schedule: str, threads: int) -> tuple[float, float, float, float]:
    t0 = time.perf_counter()
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        module = kernel_module(prob, plan_kernel(prob, schedule, threads))
        emit_c_interfaces(module)
        t1 = time.perf_counter()
        pipe = kernel_library_pipeline(threads)
        build_pass_manager(pipe, ctx).run(module.operation)
        t2 = time.perf_counter()
        buf = io.BytesIO()
        module.operation.write_bytecode(buf)
        _codegen(module)
        t3 = time.perf_counter()
    with ir.Context():
        t4 = time.perf_counter()
        cached = ir.Module.parse(buf.getvalue())
        _codegen(cached)
        t5 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t5 - t4


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--element", default="f4E2M1FN")
    ap.add_argument("--threads", type=int, default=2)
    ns = ap.parse_args(argv)
    try:
        threads = check_threads(ns.threads, "--threads")
    except MXError as err:
        ap.error(str(err))
    load_async_runtime()
    prob = Problem(None, ns.n, ns.k, 32, None, ns.element, b_packed=True)
    print("| kernel | build IR | passes | LLVM codegen | from the cache |")
    print("|---|---|---|---|---|")
    for schedule in (s.name for s in SCHEDULES.values() if s.supports(prob)):
        b, p, c, h = phases(prob, schedule, threads)
        print(f"| {schedule} | {b:.3f} s | {p:.3f} s | {c:.3f} s | {h:.3f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
