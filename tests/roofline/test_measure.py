"""Measurement: ceilings and kernel timing on this machine (slow)."""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR, SUB_BYTE

from mlir_mx.host import host_arch
from mlir_mx.roofline.measure import fma_lanes, measure_machine, time_kernel, time_repeated
from mlir_mx.roofline.variants import Shape


def test_time_repeated_statistics():
    calls = []
    t = time_repeated(lambda n: calls.append(n), samples=5, budget_s=0.1)
    assert t.samples >= 3 and t.min <= t.median <= t.max and t.spread >= 0


@pytest.mark.slow
def test_measure_machine():
    lines = []
    m = measure_machine(threads=1, progress=lines.append)
    assert m.bandwidth > 1e9 and m.peak > 1e9 and m.threads == 1
    assert "numpy copyto GB/s" in m.reference and len(lines) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["f32", "mx-a", "mx-ab"])
def test_time_kernel_correct(variant, mx_to_linalg):
    kt = time_kernel(variant, Shape(4, 32, 64), samples=3, budget_s=0.5)
    assert kt.max_abs_error < 1e-3
    assert kt.timing.median > 0


def test_cli_measure_kernels_small(capsys, mx_to_linalg):
    from mlir_mx.tools.mx_roofline import main

    assert (
        main(["--shape", "1x32x32", "--variants", "f32,mx-a", "--measure-kernels", "--quiet"]) == 0
    )
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("mx-a"))
    assert row.split()[-1].endswith("x")  # a measured/model ratio


@pytest.mark.parametrize("element", SUB_BYTE[:1] + BY_BEHAVIOUR[:1])
def test_time_kernel_feeds_the_stored_form(element, mx_to_linalg):
    """mx x mx through the lowering's packed boundary: FP4/FP6 codes go in
    packed, 8-bit ones as they are (quantized by the compiled kernels)."""
    kt = time_kernel("mx-ab", Shape(4, 64, 64), element, samples=3, budget_s=0.3)
    assert kt.max_abs_error < 1e-4 and kt.timing.median > 0


def _peak_loop_spills(lanes: int, tmp_path) -> int:
    """Instructions of the compiled peak loop (1 task: every straight loop
    with an FMA, a jump target up to the backward jump to it with no other
    jump between) that move a vector
    register to or from the stack (the Runner's engine's machine code,
    disassembled with the wheel's ``llvm-objdump``)."""
    import re
    import subprocess

    from mlir_mx.execution.libraries import wheel_tool
    from mlir_mx.roofline.measure import _ceiling_runner, _fma_text

    runner = _ceiling_runner(_fma_text(lanes=lanes), 1)
    runner.invoke("fma_peak", 0.5, 10, np.zeros(1, np.float32))  # the code exists
    path = tmp_path / f"peak{lanes}.o"
    runner._compiled.engine.dump_to_object_file(str(path))
    objdump = [str(wheel_tool("llvm-objdump")), "-d", str(path)]
    code = subprocess.run(objdump, capture_output=True, text=True, check=True).stdout
    rows = [(int(m.group(1), 16), line) for line in code.splitlines()
            if (m := re.match(r"^\s+([0-9a-f]+):\s", line))]  # fmt: skip
    back = []  # (target, address) of each backward jump
    for addr, line in rows:
        m = re.search(r"\sj\w+\s+0x([0-9a-f]+)", line)
        if m and int(m.group(1), 16) < addr:
            back.append((int(m.group(1), 16), addr))
    spills, loops = 0, 0
    for lo, hi in back:
        if any(lo <= a < b < hi or lo < a < b <= hi for a, b in back):
            continue  # not innermost
        body = [x for a, x in rows if lo <= a <= hi]
        if any(re.search(r"\sj\w+\s", x) for x in body[:-1]):
            # a jump inside: not the straight peak loop but a block around
            # it (LLVM for an Intel target_cpu lays the one-iteration
            # remainder out as a loop with the outer loop's reloads)
            continue
        if any("vfmadd" in x for x in body):
            loops += 1
            spills += sum("mm" in x and "(%rsp)" in x for x in body)
    assert loops, code
    return spills


@pytest.mark.skipif(host_arch() != "x86_64", reason="x86 feature masks (this is not x86)")
def test_the_peak_loop_keeps_its_accumulators_in_avx2_registers(monkeypatch, tmp_path):
    """Masked to AVX2 (16 ymm registers) the peak loop runs 8-lane vectors:
    12 accumulators of 16 lanes would be 24 registers' worth and spill,
    and the measured peak was 17.9 GFLOP/s on a Zen 4 core that does 118."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-avx512f")
    assert fma_lanes() == 8
    assert _peak_loop_spills(8, tmp_path) == 0
    assert _peak_loop_spills(16, tmp_path) > 0  # what the fixed width did here
