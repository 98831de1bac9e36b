"""mx-bench's openvino rows (issue 51): OpenVINO's MXFP4 MatMul (NNCF
``CompressWeightsMode.MXFP4``, group 32) at its default and its f32 precision
hint, the kernel its execution graph reports, the bound of bf16 activations,
and the skip with its reason where openvino/nncf are not installed."""

import importlib.util

import ml_dtypes
import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.roofline.variants import Shape
from mlir_mx_bench import loop
from mlir_mx_bench.cases import BenchFailure, Oracle, make_problem
from mlir_mx_bench.method import Skipped
from mlir_mx_bench.openvino_baseline import (
    OV_ROWS,
    openvino_available,
    openvino_methods,
    ov_oracle,
)
from mlir_mx_bench.results import RATIO_BASELINES

WHY = openvino_available()
needs_openvino = pytest.mark.skipif(WHY is not None, reason=f"{WHY}")
BF16_UNIT = 2.0**-8


def _bf16(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bf16 (nearest even), back in f32."""
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def test_the_rows_are_a_baseline_family_with_ratio_columns():
    assert openvino_methods in loop.FAMILIES
    assert [label for label, _hint in OV_ROWS] == ["openvino MXFP4", "openvino MXFP4 f32"]
    assert {"openvino MXFP4", "openvino MXFP4 f32"} <= set(RATIO_BASELINES)


def test_without_openvino_the_rows_skip_with_how_to_install():
    """Where openvino or nncf is missing the family is one Skipped naming the
    extra; where both are here the check says so (None)."""
    missing = [m for m in ("openvino", "nncf") if importlib.util.find_spec(m) is None]
    got = openvino_methods(make_problem(Shape(2, 8, 32), "f4E2M1FN"), 1)
    if missing:
        assert isinstance(got, Skipped) and got.name == "openvino MXFP4"
        assert got.reason == f"{' and '.join(missing)} not installed " + (
            "(pip install 'mlir-mx[bench]' (openvino and nncf))"
        )
    else:
        assert WHY is None and [m.name for m in got] == [label for label, _ in OV_ROWS]


def test_bf16_activations_bound():
    """Activations rounded to bf16, then exact products summed in f32: outside
    the f32 bound of ``a @ b``, inside the widened one (``u |a| @ |b|`` +
    ``gamma (1 + u)``); an error of twice the rounding is still refused."""
    p = make_problem(Shape(4, 24, 256), "f4E2M1FN")
    base = p.f32_a_oracle
    got = _bf16(p.a) @ p.db
    with pytest.raises(BenchFailure):
        base.check("bf16 a", "t", got)
    wide = ov_oracle(base, p.shape.K, BF16_UNIT)
    assert 0.05 < wide.check("bf16 a", "t", got) <= 1
    # the output rounded to bf16 too: the out_unit term
    assert wide.check("bf16 a, bf16 out", "t", _bf16(got), out_unit=BF16_UNIT) <= 1
    # twice each activation's worst rounding, all pushing output column 0 one way
    a64 = p.a.astype(np.float64)
    worse = (a64 + 2 * BF16_UNIT * np.abs(a64) * np.sign(p.db[:, 0])) @ p.db
    with pytest.raises(BenchFailure):
        wide.check("worse", "t", worse.astype(np.float32))
    assert ov_oracle(base, p.shape.K, 0.0) is base


@needs_openvino
def test_rows_run_check_and_report_their_kernel():
    """Both rows against the f32 activations' oracle, each with the kernel of
    the MatMul OpenVINO's execution graph reports; the f32-hint row within the
    plain f32 bound; where the default precision is bf16, that row's result
    is outside the f32 bound (its activations were rounded)."""
    p = make_problem(Shape(5, 40, 96), "f4E2M1FN")
    methods = openvino_methods(p, 1)
    by_name = {m.name: m for m in methods}
    assert list(by_name) == ["openvino MXFP4", "openvino MXFP4 f32"]
    for m in methods:
        assert m.kind == "baseline" and m.operands == "f32-a" and m.threads == 1
        assert m.extra["kernel"] and m.extra["kernel"] in m.note
        assert m.oracle.check(m.name, "t", m.result(), m.out_unit) <= 1
        m.run(2)
        assert "weights = B bit for bit" in m.note
    f32 = by_name["openvino MXFP4 f32"]
    assert f32.extra["inference_precision"] == "f32" and f32.out_unit == 0
    assert f32.oracle is p.f32_a_oracle  # NNCF gave B's values back exactly
    default = by_name["openvino MXFP4"]
    if default.extra["inference_precision"] == "bf16":
        assert "bf16" in default.extra["kernel"]
        with pytest.raises(BenchFailure):
            p.f32_a_oracle.check("bf16 row", "t", default.result())


@needs_openvino
def test_weights_nncf_changes_are_checked_on_their_own():
    """f32 weights that are not MXFP4 values: NNCF rounds them, and the row
    is checked on OpenVINO's own weights (decompressed from the model)."""
    from mlir_mx_bench.openvino_baseline import OvMatmul, compress_mxfp4, decompressed_weights

    p = make_problem(Shape(3, 16, 64), "f4E2M1FN")
    model = compress_mxfp4(p.b.T, 3)
    w = decompressed_weights(model)
    assert w.shape == (16, 64) and not np.array_equal(w, p.b.T)
    # MXFP4 values (blocks of 32 along K): the oracle's MXFP4 round trip keeps them
    assert np.array_equal(oracle.dequantize(oracle.quantize(w, "f4E2M1FN", 32, axis=1)), w)
    mm = OvMatmul(model, p.a, 1, "f32")
    Oracle.of(p.a, w.T).check("own weights", "t", mm.result())
    with pytest.raises(BenchFailure):
        Oracle.of(p.a, p.b).check("B itself", "t", mm.result())


@needs_openvino
def test_other_weight_formats_and_emulation_skip_with_reasons(monkeypatch):
    from mlir_mx_bench.emulate import MARK

    got = openvino_methods(make_problem(Shape(2, 8, 32), "f8E4M3FN"), 1)
    assert isinstance(got, Skipped) and "f4E2M1FN" in got.reason
    monkeypatch.setenv(MARK, "avx2")
    assert "--emulate" in openvino_available()
