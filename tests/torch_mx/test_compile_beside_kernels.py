"""``torch.compile`` in a process where our kernels have already run (issue 53).

Our runtime libraries once put the wheel's LLVM in the process's global
namespace; triton's LLVM (torch's default CUDA wheel) then bound to it and
``torch.compile`` aborted.  Each test runs in a fresh subprocess, after a
parallel (2-thread) and a 1-thread kernel: a crash fails the test, not the
run.  tests/execution/test_symbol_leaks.py checks the namespace itself.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

#: Our kernels first: a parallel Linear (the async runtime) and a 1-thread one.
KERNELS_FIRST = textwrap.dedent(
    """
    import numpy as np
    import mlir_mx
    from mlir_mx import oracle

    rng = np.random.default_rng(0)
    w = oracle.quantize(rng.standard_normal((64, 128)).astype(np.float32), "f4E2M1FN", 32)
    x = rng.standard_normal((5, 128)).astype(np.float32)
    for threads in (2, 1):
        mlir_mx.Linear(w, threads=threads)(x)
    """
)


def _run(body: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", KERNELS_FIRST + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_torch_compile_inductor_after_our_kernels():
    """Inductor (CPU: C++ code built with the host's compiler) on a converted
    model gives eager's output.  Outside our opaque layers the model has only
    a SiLU, which inductor may compute with its own vectorized exp: the bound
    is 1e-5 relative, 1e-6 absolute (the outputs are O(1))."""
    out = _run(
        """
        import torch
        from mlir_mx.torch import quantize_

        torch.manual_seed(3)
        net = torch.nn.Sequential(
            torch.nn.Linear(128, 96), torch.nn.SiLU(), torch.nn.Linear(96, 64)
        )
        quantize_(net, "f4E2M1FN", threads=2)
        x = torch.randn(2, 3, 128)
        with torch.inference_mode():
            eager = net(x)
            compiled = torch.compile(net, backend="inductor")(x)
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
        print("equal" if torch.equal(compiled, eager) else "close")
        """
    )
    assert out.strip().splitlines()[-1] in ("equal", "close")


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="triton is not installed (torch's CPU wheel has none; the crash it "
    "showed needs torch's default CUDA wheel, which brings it)",
)
def test_import_triton_after_our_kernels():
    """``import triton`` crashed (rc 139) once our kernels had run."""
    out = _run(
        """
        import triton
        print("triton", triton.__version__)
        """
    )
    assert out.strip().splitlines()[-1].startswith("triton")
