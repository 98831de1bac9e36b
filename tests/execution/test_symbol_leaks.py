"""Running our kernels puts no LLVM or MLIR symbol in the process's global namespace.

Another LLVM in the process (triton's, under ``torch.compile`` with torch's
CUDA wheel) binds to whatever ``dlsym(RTLD_DEFAULT, ...)`` finds: with the
wheel's ``libLLVM.so`` loaded ``RTLD_GLOBAL``, ``import triton`` segfaulted
and ``torch.compile`` aborted (issue 53).  Each check runs in a fresh
subprocess: a library once loaded globally stays so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mlir_mx.execution.libraries import library_name, wheel_tool

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="dlsym(RTLD_DEFAULT) and the wheels' ELF libraries"
)

#: Entry points of the wheels' libraries that must never be global: LLVM's C
#: API, MLIR's C API, upstream's async runtime and runner utilities.
FIXED = [
    "LLVMContextCreate",
    "LLVMInitializeX86Target",
    "LLVMInitializeAArch64Target",
    "mlirContextCreate",
    "mlirAsyncRuntimeCreateToken",
    "mlirAsyncRuntimeAwaitToken",
    "mlirAsyncRuntimGetNumWorkerThreads",  # sic
    "memrefCopy",
    "_mlir_ciface_printMemrefF32",
    "_mlir_apfloat_add",
    "__mlir_execution_engine_init",
]


def _exported(path, prefix: str, count: int) -> list[str]:
    """``count`` defined function symbols of ``path``'s dynamic symbol table
    starting with ``prefix`` (read with the wheel's ``llvm-nm``)."""
    out = subprocess.run(
        [str(wheel_tool("llvm-nm")), "-D", "--defined-only", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "T" and parts[2].startswith(prefix):
            names.append(parts[2].split("@")[0])
    step = max(1, len(names) // count)
    return names[::step][:count]


def _names() -> list[str]:
    llvm_lib = wheel_tool("llvm-nm").parents[1] / "lib" / library_name("LLVM")
    mlir_lib = wheel_tool("mlir-opt").parents[1] / "lib" / library_name("MLIR")
    mangled = _exported(llvm_lib, "_ZN4llvm", 8) + _exported(mlir_lib, "_ZN4mlir", 8)
    assert len(mangled) == 16
    return FIXED + mangled


SCRIPT = textwrap.dedent(
    """
    import ctypes, json, sys
    import numpy as np
    import mlir_mx
    from mlir_mx import oracle

    rng = np.random.default_rng(0)
    w = oracle.quantize(rng.standard_normal((64, 128)).astype(np.float32), "f4E2M1FN", 32)
    x = rng.standard_normal((5, 128)).astype(np.float32)
    ref = x.astype(np.float64) @ oracle.dequantize(w).astype(np.float64).T
    for threads in (2, 1):  # a parallel kernel (async runtime), then a 1-thread one
        y = mlir_mx.Linear(w, threads=threads)(x)
        assert np.allclose(y, ref, rtol=1e-4, atol=1e-4), threads
    process = ctypes.CDLL(None)  # dlopen(NULL): the global scope, as dlsym(RTLD_DEFAULT)
    print(json.dumps([n for n in json.loads(sys.argv[1]) if hasattr(process, n)]))
    """
)


def _leaked(cache_dir: str) -> list[str]:
    env = dict(os.environ, MLIR_MX_CACHE_DIR=cache_dir)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(_names())],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jit_compiled_kernels_leak_no_symbol():
    """Kernels compiled by the ExecutionEngine (no disk cache)."""
    assert _leaked("off") == []


def test_kernels_from_machine_code_leak_no_symbol(tmp_path):
    """The first process compiles and stores machine code, the second loads it."""
    assert _leaked(str(tmp_path)) == []
    assert _leaked(str(tmp_path)) == []


#: Functions whose code LLVM lowers to calls of the C compiler's runtime
#: (``__divti3`` for a 128-bit division, ``__powisf2`` for ``math.fpowi``),
#: which the module does not declare.
HELPERS = """
func.func @div(%a: memref<4xi64>, %b: memref<4xi64>, %c: memref<4xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %x = memref.load %a[%i] : memref<4xi64>
    %y = memref.load %b[%i] : memref<4xi64>
    %xw = arith.extsi %x : i64 to i128
    %yw = arith.extsi %y : i64 to i128
    %q = arith.divsi %xw, %yw : i128
    %qn = arith.trunci %q : i128 to i64
    memref.store %qn, %c[%i] : memref<4xi64>
  }
  return
}
func.func @powi(%a: memref<4xf32>, %n: i32, %c: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %x = memref.load %a[%i] : memref<4xf32>
    %p = math.fpowi %x, %n : f32, i32
    memref.store %p, %c[%i] : memref<4xf32>
  }
  return
}
"""


def test_compiler_runtime_helpers_still_link(tmp_path):
    """The runtime libraries no longer go global (above), and the C
    compiler's runtime helpers came into the process's global scope with
    them: ``libgcc_s`` is made global on its own (``compiler_runtime``; not
    LLVM), so a module whose code calls ``__divti3`` / ``__powisf2`` links in
    a fresh process (a review of issue 53's change found "Symbols not found")."""
    code = textwrap.dedent(
        """
        import sys, numpy as np
        from mlir_mx.execution import Runner
        r = Runner(open(sys.argv[1]).read())
        c = np.zeros(4, np.int64)
        r.div(np.array([7, 13, 21, 27], np.int64), np.full(4, 2, np.int64), c)
        y = np.zeros(4, np.float32)
        r.powi(np.array([2, 3, -2, 1], np.float32), np.int32(3), y)
        print(c.tolist(), y.tolist())
        """
    )
    path = tmp_path / "helpers.mlir"
    path.write_text(HELPERS)
    env = dict(os.environ, MLIR_MX_CACHE_DIR="off")
    run = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[-2] == "[3, 6, 10, 13] [8.0, 27.0, -8.0, 1.0]"
