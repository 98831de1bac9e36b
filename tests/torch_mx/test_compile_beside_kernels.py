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
from pathlib import Path

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


@pytest.mark.slow  # 16-17 s; the default suite's test_compile_and_generate_give_the_eager_tokens
# runs inductor after our kernels too (on a whole model, tokens compared)
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
    reason="triton is not installed (the test extra installs it on Linux, "
    "pip install -e '.[test]'; torch's CPU wheel brings none, its default CUDA wheel does)",
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


#: Whether triton is importable here: where it is (the `test` extra installs it,
#: beside the CPU torch as beside the CUDA one), inductor imports it, and so the
#: compile below runs with triton's LLVM in the process beside ours.
HAS_TRITON = importlib.util.find_spec("triton") is not None


def test_compile_and_generate_give_the_eager_tokens():
    """The issue's target: ``quantize_``, then ``torch.compile`` (inductor) of
    the model's forward, then ``generate``: the same greedy tokens as eager,
    after our kernels ran, in a process where inductor has loaded triton
    wherever it is installed (checked: the crash came from triton's LLVM)."""
    out = _run(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        import torch
        from llama_cases import prompt, tiny_llama
        from mlir_mx.torch import quantize_

        model = tiny_llama(num_hidden_layers=1)
        quantize_(model, "f4E2M1FN", threads=2)
        ids = prompt(12)
        with torch.inference_mode():
            eager = model.generate(ids, max_new_tokens=2, do_sample=False)
            model.forward = torch.compile(model.forward, backend="inductor")
            compiled = model.generate(ids, max_new_tokens=2, do_sample=False)
        print("tokens", eager[0, 12:].tolist(), compiled[0, 12:].tolist())
        print("triton loaded" if "triton" in sys.modules else "no triton")
        print("equal" if torch.equal(compiled, eager) else "DIFFERENT")
        """
    )
    lines = out.strip().splitlines()
    assert lines[-1] == "equal", lines
    assert lines[-2] == ("triton loaded" if HAS_TRITON else "no triton")
