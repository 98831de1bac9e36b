"""Measurement: ceilings and kernel timing on this machine (slow)."""

from __future__ import annotations

import pytest
from format_cases import BY_BEHAVIOUR, SUB_BYTE

from mlir_mx.roofline.measure import measure_machine, time_kernel, time_repeated
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
