"""mx-bench's nvfp4 rows (issue 54 item 5): the problem (blocks of 16, a
global scale), our Linear rows (f32 x, f32->bf16, f32->i8) each within its
oracle, the baselines that apply (numpy f32, torch f32, MLX's own quantized
matmul) and those skipped with their reasons (the E8M0 emulation, torch
bf16, the Runner's kernels, ggml without its NVFP4 type); MLX's MXFP4 row
beside an MXFP4 group."""

import importlib.util

import pytest

from mlir_mx.roofline.variants import Shape
from mlir_mx_bench import loop
from mlir_mx_bench.baselines import numpy_methods, torch_methods
from mlir_mx_bench.cases import make_problem
from mlir_mx_bench.ggml_baseline import ggml_available, ggml_methods
from mlir_mx_bench.method import Method, Skipped
from mlir_mx_bench.mlx_baseline import mlx_available, mlx_methods
from mlir_mx_bench.nvfp4_rows import nvfp4_methods
from mlir_mx_bench.results import RATIO_BASELINES

MLX_WHY = mlx_available()
needs_mlx = pytest.mark.skipif(MLX_WHY is not None, reason=f"{MLX_WHY}")


def _checked(methods) -> dict[str, str]:
    """Each method's result checked against its oracle; name -> note or reason."""
    out = {}
    for m in methods:
        if isinstance(m, Skipped):
            out[m.name] = m.reason
            continue
        assert isinstance(m, Method)
        ratio = m.oracle.check(m.name, "test", m.result(), m.out_unit)
        assert 0 <= ratio <= 1, m.name
        m.run(1)
        out[m.name] = m.note
    return out


def test_an_nvfp4_problem_has_blocks_of_16_and_a_global_scale():
    p = make_problem(Shape(2, 64, 64), "nvfp4")
    assert p.block_size == 16 and p.qb.format_name == "nvfp4" and p.qb.global_scale is not None
    assert p.qb.axis == 0 and p.qa.axis == 1


def test_our_nvfp4_rows_are_within_their_oracles():
    p = make_problem(Shape(5, 128, 64), "nvfp4")
    rows = _checked(nvfp4_methods(p, 2, lambda s: None))
    assert {"ours Linear f32 x", "ours Linear f32->bf16", "ours Linear f32->i8"} <= set(rows)
    assert "E8M0" in rows["ours Runner kernels (nvfp4)"]
    assert "blocks of 16" in rows["ours Linear f32->i8"]


def test_baselines_of_an_nvfp4_problem():
    p = make_problem(Shape(3, 64, 64), "nvfp4")
    rows = _checked(numpy_methods(p, 1))
    assert "numpy f32" in rows and "E8M0" in rows["emulation (nvfp4)"]
    torch_rows = torch_methods(p, 1)
    if not isinstance(torch_rows, Skipped):  # torch installed
        assert "not exact in bf16" in _checked(torch_rows)["torch bf16 (nvfp4)"]
    gg = ggml_methods(p, 1)
    if ggml_available() is not None:
        assert isinstance(gg, Skipped) and gg.name == "ggml NVFP4"
    assert mlx_methods in loop.FAMILIES
    assert {"ggml NVFP4", "mlx MXFP4", "mlx NVFP4"} <= set(RATIO_BASELINES)


@needs_mlx
@pytest.mark.parametrize("element, label", [("nvfp4", "mlx NVFP4"), ("f4E2M1FN", "mlx MXFP4")])
def test_mlx_rows_match_their_own_oracle(element, label):
    p = make_problem(Shape(3, 64, 128), element)
    rows = _checked(mlx_methods(p, 1))
    assert label in rows and "its own quantization" in rows[label]


def test_mlx_rows_skip_with_the_reason(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "mlx" else find_spec(n, *a)
    )
    got = mlx_methods(make_problem(Shape(1, 64, 64), "nvfp4"), 1)
    assert isinstance(got, Skipped) and got.name == "mlx NVFP4" and "pip install mlx" in got.reason
    other = mlx_methods(make_problem(Shape(1, 64, 64), "f8E4M3FN"), 1)
    assert isinstance(other, Skipped) and "MXFP4 and NVFP4" in other.reason
