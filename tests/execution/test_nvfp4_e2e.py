"""End to end: NVFP4 ``mx.quantize_block`` / ``mx.dequantize_block`` (``f8E4M3FN``
scales, the f32 ``global_scale`` operand) lowered by ``mx-to-linalg``,
JIT-compiled, bit for bit against the oracle (:mod:`mlir_mx.numerics.nvfp4`,
itself bit for bit compressed-tensors': tests/numerics/test_nvfp4.py), on the
golden cases (the whole f32 range, zero and subnormal blocks, tiny and huge
tensors, ties) plus NaN and Inf blocks, blocked along the last axis and axis 0."""

from __future__ import annotations

import numpy as np
import pytest
from tests.execution.test_mx_e2e import _assert_f32_identical, _bits, _f32, compile_mx
from tests.numerics import nvfp4_refs

from mlir_mx import oracle
from mlir_mx.numerics.nvfp4 import global_scale

CASES = nvfp4_refs.cases()


def _nv(shape, axis) -> str:
    dims = "x".join(str(d) for d in shape)
    ax = f", axis = {axis}" if axis != len(shape) - 1 else ""
    return f"!mx.tensor<{dims}xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN{ax}>"


def _module(shapes) -> str:
    funcs = []
    for i, (shape, axis) in enumerate(shapes):
        t, f = _nv(shape, axis), _f32(shape)
        funcs.append(
            f"func.func @q{i}(%x: {f}, %g: f32) -> {t} {{\n"
            f"  %r = mx.quantize_block %x, %g : {f}, f32 -> {t}\n"
            f"  return %r : {t}\n}}\n"
            f"func.func @d{i}(%t: {t}, %g: f32) -> {f} {{\n"
            f"  %r = mx.dequantize_block %t, %g : {t}, f32 -> {f}\n"
            f"  return %r : {f}\n}}"
        )
    return "\n".join(funcs)


SHAPES = sorted({(x.shape, 1) for _, x, _ in CASES} | {((64, 8), 0)})


@pytest.fixture(scope="module", params=["unpacked", "packed"])
def runner(request):
    return request.param, compile_mx(_module(SHAPES), storage=request.param)


def _check(runner, x, axis, g):
    storage, r = runner
    i = SHAPES.index((x.shape, axis))
    ref = oracle.quantize(x, "nvfp4", axis=axis, global_scale=g)
    codes, scales = r.invoke(f"q{i}", x, ref.global_scale)
    want = ref.packed_codes() if storage == "packed" else _bits(ref.codes)
    np.testing.assert_array_equal(_bits(codes), want)
    np.testing.assert_array_equal(_bits(scales), _bits(ref.scales))
    got = r.invoke(f"d{i}", codes, scales, ref.global_scale)
    _assert_f32_identical(got, oracle.dequantize(ref))


@pytest.mark.parametrize("name,x,g", CASES, ids=[c[0] for c in CASES])
def test_golden_cases_bit_exact(runner, name, x, g):
    _check(runner, x, 1, g if g is not None else global_scale(x))


def test_nan_inf_blocks_and_axis_0(runner):
    rng = np.random.default_rng(54)
    x = (rng.standard_normal((64, 8)) * np.exp2(rng.integers(-40, 40, (64, 8)))).astype(np.float32)
    x[3, 0], x[40, 5], x[17, 2] = np.nan, np.inf, -np.inf
    x[16:32, 1] = 0.0
    x[:, 3] = -0.0
    _check(runner, x, 0, global_scale(x))
    _check(runner, x, 0, 2.0**-30)  # factors overflow: every code +-0
    _check(runner, x, 0, 3.0e38)  # tiny factors: saturation


def test_runner_default_pipeline():
    """``Runner(text)`` with the default (kernel) pipeline: an NVFP4 MXArray
    argument passes its codes and scales, its global scale goes as the f32
    argument; an NVFP4 result is its (packed codes, scales) pair."""
    from mlir_mx.errors import MXArgTypeError
    from mlir_mx.execution import Runner

    r = Runner(_module([((4, 32), 1)]))
    x = np.random.default_rng(5).standard_normal((4, 32)).astype(np.float32)
    a = oracle.quantize(x, "nvfp4")
    codes, scales = r.invoke("q0", x, a.global_scale)
    np.testing.assert_array_equal(_bits(codes), a.packed_codes())
    np.testing.assert_array_equal(_bits(scales), _bits(a.scales))
    _assert_f32_identical(r.invoke("d0", a, a.global_scale), a.dequantize())
    with pytest.raises(MXArgTypeError, match="scales f8E4M3FN for .*got .* scales f8E8M0FNU"):
        r.invoke("d0", oracle.quantize(x, "mxfp4", 16), a.global_scale)
