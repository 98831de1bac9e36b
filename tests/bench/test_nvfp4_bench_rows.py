"""mx-bench's nvfp4 rows (issue 54 item 5): the problem (blocks of 16, a
global scale), the Runner's kernels (``ours mx x mx``, one row per schedule
that supports the problem: the NVFP4 B with its global scale as the f32
argument, an MXFP4 A in blocks of 16) within their oracle and bit for bit
``oracle.blocked_order``, our Linear rows (f32 x, f32->bf16, f32->i8) each
within its oracle, the baselines that apply (numpy f32, torch f32, MLX's own
quantized matmul) and those skipped with their reasons (the E8M0 emulation,
torch bf16, ggml without its NVFP4 type); MLX's MXFP4 row beside an MXFP4
group; a quick ``mx-bench --formats nvfp4`` run with the Runner rows."""

import importlib.util
import json

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.convert import quantize
from mlir_mx.errors import MXValueError
from mlir_mx.kernels import SCHEDULES, shape_class
from mlir_mx.kernels import Problem as KProblem
from mlir_mx.roofline.variants import Shape, variant_module_text
from mlir_mx_bench import loop
from mlir_mx_bench.baselines import numpy_methods, torch_methods
from mlir_mx_bench.cases import make_problem
from mlir_mx_bench.cli import main
from mlir_mx_bench.ggml_baseline import ggml_available, ggml_methods
from mlir_mx_bench.method import Method, Skipped
from mlir_mx_bench.mlx_baseline import mlx_available, mlx_methods
from mlir_mx_bench.nvfp4_rows import nvfp4_methods
from mlir_mx_bench.ours import runner_methods
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


def _schedules(m: int, a_element: str) -> set[str]:
    """The registry's schedules for an NVFP4 B at M = m, N = 128, K = 64 (the
    decode one only at M = 1, as for every format)."""
    prob = KProblem(m, 128, 64, 16, a_element, "f4E2M1FN", b_scale_type="f8E4M3FN")
    return {
        s.name
        for s in SCHEDULES.values()
        if s.supports(prob) and (s.shape_class != shape_class(1) or m == 1)
    }


def _runner_rows_bit_exact(methods, p, qa) -> set[str]:
    """The Runner rows' schedules; each row's result is ``blocked_order(qa, qb, 0)``
    bit for bit (the kernels' NVFP4 bit model, ``docs/numerics.md``)."""
    want = oracle.blocked_order(qa, p.qb, np.zeros((p.shape.M, p.shape.N), np.float32))
    seen = []
    for m in methods:
        if m.name.startswith("ours mx x "):
            assert m.name.startswith("ours mx x mx") and m.operands == "mx-ab", m.name
            np.testing.assert_array_equal(m.result().view(np.uint32), want.view(np.uint32))
            seen.append(m.note.split()[2].rstrip(";"))  # "schedule mx-matmul-kernels <name>"
    assert len(seen) == len(set(seen)), seen  # one row per schedule
    return set(seen)


def test_our_nvfp4_rows_are_within_their_oracles():
    """Decode (M = 1: every schedule; the quick run below takes M = 5)."""
    m = 1
    p = make_problem(Shape(m, 128, 64), "nvfp4")
    methods = nvfp4_methods(p, 2, lambda s: None)
    rows = _checked(methods)
    assert {"ours Linear f32 x", "ours Linear f32->bf16", "ours Linear f32->i8"} <= set(rows)
    assert "blocks of 16" in rows["ours Linear f32->i8"]
    assert not any(isinstance(x, Skipped) for x in methods)  # the Runner rows run
    # The Runner's kernels: an MXFP4 A in blocks of 16 (E8M0: mx.block_matmul's
    # lhs), every schedule of the registry that supports the problem, bit exact.
    qa = quantize(p.a, "f4E2M1FN", 16, axis=1)
    assert _runner_rows_bit_exact(methods, p, qa) == _schedules(m, "f4E2M1FN")
    assert "A in f4E2M1FN, blocks of 16 (E8M0)" in rows["ours mx x mx"]
    assert "ours mx x f32" not in rows  # an f32 B has no NVFP4 in it


def test_an_mx_a_of_the_pair_is_the_runner_rows_a():
    """``i8:nvfp4``: the problem's own MXINT8 A (blocks of 16) goes to the
    Runner's kernels as it is, with the problem's oracle."""
    p = make_problem(Shape(2, 128, 64), "nvfp4", a_element="i8")
    methods = runner_methods(p, 1, {}, lambda s: None)
    rows = _checked(methods)
    assert all(m.oracle is p.oracle for m in methods)
    assert not any("A in" in note for note in rows.values())
    assert _runner_rows_bit_exact(methods, p, p.qa) == _schedules(2, "i8")


def test_the_module_builder_takes_an_nvfp4_b_and_refuses_an_nvfp4_a():
    text = variant_module_text("mx-ab", Shape(2, 32, 32), "nvfp4", 16, "mxfp4")
    assert "scale_type = f8E4M3FN, axis = 0>, %arg2: f32, %arg3: tensor<2x32xf32>" in text
    assert text.count("mx.block_matmul %arg0, %arg1, %arg") == 2  # @kernel and @bench
    with pytest.raises(MXValueError, match="a_element: nvfp4 has f8E4M3FN scales"):
        variant_module_text("mx-ab", Shape(2, 32, 32), "nvfp4", 16)


def test_a_quick_nvfp4_run_has_the_runner_rows(tmp_path, monkeypatch):
    """``mx-bench --quick --formats nvfp4``: the Runner rows, checked by the
    oracle, in the results file (the baselines left out to keep it cheap)."""
    monkeypatch.setattr(loop, "FAMILIES", ())
    argv = ["--quick", "--quiet", "--formats", "nvfp4", "--shapes", "5x128x64", "--threads", "2"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    [js] = tmp_path.glob("mx-bench-*-quick.json")
    rec = json.loads(js.read_text())
    runner = {r["method"]: r for r in rec["rows"] if r["method"].startswith("ours mx x mx")}
    assert len(runner) == len(_schedules(5, "f4E2M1FN")) and "ours mx x mx" in runner
    assert {r["note"].split()[2].rstrip(";") for r in runner.values()} == _schedules(5, "f4E2M1FN")
    assert all(r["format"] == "nvfp4" and r["block_size"] == 16 for r in runner.values())
    assert all(0 <= r["max_err_over_bound"] <= 1 for r in runner.values())
    assert not [s for s in rec["skipped"] if "Runner" in s["method"]]


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
