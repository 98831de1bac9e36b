"""``mx-parallel-tasks``: a kernel's parallel loop claimed from a shared counter
(the IR: ``tests/lit/Transforms/mx-parallel-tasks.mlir``; running it:
``tests/execution/test_tasks_on_threads.py``)."""

from __future__ import annotations

import pytest
from mlir import ir

from mlir_mx.diagnostics import DiagnosticError
from mlir_mx.dialect import load_dialect
from mlir_mx.errors import MXValueError
from mlir_mx.execution import CompileOptions
from mlir_mx.execution import threads as threads_
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.passes.pipeline import PipelineError, run_pipeline
from mlir_mx.pipelines import kernel_library_pipeline, threads_pipeline

# Small problems, split into tasks all the same (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("tasks_for_small_work")


def _kernel_text(m, n, k, threads, schedule):
    prob = Problem(m, n, k, 32, None, "f4E2M1FN", b_packed=True)
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        return str(kernel_module(prob, plan_kernel(prob, schedule, threads)))


def test_the_pass_claims_the_loop_from_a_counter():
    text = _kernel_text(1, 512, 256, 2, "decode")
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        module = ir.Module.parse(text)
        run_pipeline(module, threads_pipeline(2, "tasks"))
        out = str(module)
    assert "scf.parallel" not in out and "async" not in out
    assert "%arg3: memref<1x512xf32>, %arg4: index) attributes {mx.tasks = 2 : i64}" in out
    # one atomic add per claimed task, on the counter whose address is %arg4
    assert out.count("llvm.atomicrmw add") == 1 and "scf.while" in out


def test_the_pass_refuses_writes_outside_the_loop():
    text = """
    func.func @f(%out: memref<8xf32>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c8 = arith.constant 8 : index
      %z = arith.constant 0.0 : f32
      memref.store %z, %out[%c0] : memref<8xf32>
      scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
        memref.store %z, %out[%i] : memref<8xf32>
        scf.reduce
      }
      return
    }"""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        with pytest.raises(DiagnosticError, match="writes memory the function did not allocate"):
            run_pipeline(module, threads_pipeline(2, "tasks"))


def test_unknown_parallel_mode_is_refused():
    with pytest.raises(PipelineError, match="parallel: expected one of async, tasks"):
        kernel_library_pipeline(2, "openmp")
    with pytest.raises(MXValueError, match="parallel"):
        CompileOptions(parallel="openmp")
    with pytest.raises(MXValueError, match="explicit"):
        CompileOptions(kernel_library_pipeline(2), parallel="tasks")
    with pytest.raises(MXValueError, match="parallel"):
        threads_.set_parallel("threads")
