"""Where a kernel's compile time goes, and what the persistent cache saves.

    python bench/compile_cache.py [--n 8192] [--k 8192] [--element f4E2M1FN] [--threads 2]

For each shape class (decode, small, prefill) of the library's dynamic-M
kernel (f32 activations x packed MX weight): time to build the kernel IR,
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
from mlir_mx.execution.runner import load_async_runtime, runtime_libraries
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.passes.pipeline import build_pass_manager
from mlir_mx.pipelines import kernel_library_pipeline


def phases(prob: Problem, schedule: str, threads: int) -> tuple[float, float, float, float]:
    t0 = time.perf_counter()
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        module = kernel_module(prob, plan_kernel(prob, schedule, threads))
        for op in module.body.operations:
            op.operation.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        t1 = time.perf_counter()
        pipe = kernel_library_pipeline(threads)
        build_pass_manager(pipe, ctx).run(module.operation)
        t2 = time.perf_counter()
        buf = io.BytesIO()
        module.operation.write_bytecode(buf)
        ExecutionEngine(module, opt_level=3, shared_libs=runtime_libraries()).raw_lookup(
            "_mlir_ciface_matmul"
        )
        t3 = time.perf_counter()
    with ir.Context():
        t4 = time.perf_counter()
        cached = ir.Module.parse(buf.getvalue())
        ExecutionEngine(cached, opt_level=3, shared_libs=runtime_libraries()).raw_lookup(
            "_mlir_ciface_matmul"
        )
        t5 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t5 - t4


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--element", default="f4E2M1FN")
    ap.add_argument("--threads", type=int, default=2)
    ns = ap.parse_args(argv)
    load_async_runtime()
    prob = Problem(None, ns.n, ns.k, 32, None, ns.element, b_packed=True)
    print("| kernel | build IR | passes | LLVM codegen | from the cache |")
    print("|---|---|---|---|---|")
    for schedule in ("decode", "small", "prefill"):
        b, p, c, h = phases(prob, schedule, ns.threads)
        print(f"| {schedule} | {b:.3f} s | {p:.3f} s | {c:.3f} s | {h:.3f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
