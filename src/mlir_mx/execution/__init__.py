"""JIT compilation and execution of lowered modules (numpy in, numpy out)."""

from mlir_mx.execution.runner import (
    FREE,
    BoundFunction,
    CompileOptions,
    Runner,
    clear_cache,
    compile_module,
    numpy_dtype,
    runtime_libraries,
)

__all__ = [
    "FREE",
    "BoundFunction",
    "CompileOptions",
    "Runner",
    "clear_cache",
    "compile_module",
    "numpy_dtype",
    "runtime_libraries",
]
