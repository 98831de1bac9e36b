"""``mx-host-target``: the JIT compiles for the CPU class the kernels were
chosen for (``MLIR_MX_CPU_FEATURES`` masks included), and refuses what that
class cannot run instead of aborting in LLVM.

Read from the machine code (the JIT object, ``ExecutionEngine.
dump_to_object_file``, disassembled with the wheel's ``llvm-objdump``): a
kernel chosen and compiled with AVX-512 masked has no ``zmm`` register.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from matmul_cases import case, kernel_runner
from mlir import ir
from mlir.execution_engine import ExecutionEngine

from mlir_mx.dialect import parse_module
from mlir_mx.errors import MXError
from mlir_mx.execution.libraries import wheel_tool
from mlir_mx.host import has_features, host_arch, host_features
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import kernel_library_pipeline

x86 = pytest.mark.skipif(host_arch() != "x86_64", reason="x86 feature masks (this is not x86)")
#: An AVX2 + AVX-VNNI CPU (Intel Alder Lake class) on an AVX-512 machine.
AVX2_CLASS = "-avx512f"


def _disassembly(prob: Problem, tmp_path) -> str:
    """The JIT's machine code for ``prob``'s automatic kernel (1 thread)."""
    with ir.Context() as ctx, ir.Location.unknown():
        module = parse_module(str(kernel_module(prob, plan_kernel(prob, "auto", 1))), ctx)
        run_pipeline(module, kernel_library_pipeline(1))
        engine = ExecutionEngine(module, opt_level=3)
        path = tmp_path / "kernel.o"
        engine.dump_to_object_file(str(path))
    objdump = [str(wheel_tool("llvm-objdump")), "-d", str(path)]
    return subprocess.run(objdump, capture_output=True, text=True, check=True).stdout


@x86
def test_a_masked_kernel_has_no_avx512_instruction(monkeypatch, tmp_path):
    prob = Problem(8, 64, 256, 32, "f8E4M3FN", "f6E2M3FN")
    if has_features("avx512f"):  # the probe sees zmm where the class has it
        assert "zmm" in _disassembly(prob, tmp_path)
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", AVX2_CLASS)
    code = _disassembly(prob, tmp_path)
    assert "zmm" not in code and "ymm" in code and "vfmadd" in code


@x86
def test_masking_a_feature_masks_what_needs_it(monkeypatch):
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512f")
    assert not any(f.startswith("avx512") for f in host_features())
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx")  # every VEX-encoded feature
    assert not {"avx2", "fma", "f16c", "avx_vnni"} & host_features()


@x86
@pytest.mark.parametrize("mask", ["-fma", "-f16c", "none"])
def test_an_x86_cpu_without_fma_is_refused(monkeypatch, mask):
    """No FMA: ``vector.fma`` (``llvm.fmuladd``) would be a multiply and an
    add, two roundings where docs/numerics.md promises one; no F16C: the f16
    conversions would call a function the JIT cannot find."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", mask)
    prob = Problem(3, 16, 64, 32, "f8E4M3FN", "f8E4M3FN")
    with pytest.raises(MXError, match=r"lacks .*(fma|f16c).*MLIR_MX_CPU_FEATURES"):
        kernel_runner(prob, "auto", 1)


@x86
def test_the_least_supported_x86_cpu_gives_the_same_bits(monkeypatch):
    """``baseline``: AVX, FMA and F16C only (no AVX2): the f32 kernels' bits."""
    m, n, k = 5, 40, 96
    (qa, qb), acc, exact, bound = case(m, k, n, "f6E3M2FN", "f4E2M1FN")
    arrays = [np.array(x) for x in (qa.codes, qa.scales, qb.codes, qb.scales)]
    prob = Problem(m, n, k, 32, "f6E3M2FN", "f4E2M1FN")
    out = []
    for mask in ("", "baseline"):
        monkeypatch.setenv("MLIR_MX_CPU_FEATURES", mask)
        c = acc.copy()
        kernel_runner(prob, "auto", 1).matmul(*arrays, c)
        out.append(c)
    assert host_features() <= {"pni", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "f16c"}
    assert np.all(np.abs(out[1] - exact) <= bound)
    np.testing.assert_array_equal(out[0].view(np.uint32), out[1].view(np.uint32))
