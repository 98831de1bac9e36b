"""NVFP4 (``docs/numerics.md``, "NVFP4"): the oracle bit for bit against
compressed-tensors' reference and, with the differences stated there, MLX's;
through goldens made by ``tests/numerics/nvfp4_refs.py`` (always) and the live
packages (where installed: the ``test`` extra); MXArray's NVFP4 form."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from tests.numerics import nvfp4_refs

from mlir_mx import oracle
from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import MXArray, element_format, formats
from mlir_mx.numerics.nvfp4 import E4M3_NAN_CODE, global_scale

GOLDENS = np.load(nvfp4_refs.GOLDENS)
CASES = nvfp4_refs.cases()
ZERO_SCALE_CODE = 0x20  # E4M3 0.125: compressed-tensors' scale of a zero block


def _ours(x, g):
    return oracle.quantize(x, "nvfp4", global_scale=g)


def _assert_ct_equal(a: MXArray, gs, s8, codes, deq):
    assert a.global_scale.view(np.uint32) == np.float32(gs).view(np.uint32)
    np.testing.assert_array_equal(a.scales.view(np.uint8), s8)
    np.testing.assert_array_equal(a.codes.view(np.uint8), codes)
    np.testing.assert_array_equal(a.dequantize().view(np.uint32), deq.view(np.uint32))


def test_goldens_cover_the_cases():
    assert sorted({k.split("/")[0] for k in GOLDENS.files}) == sorted(n for n, _, _ in CASES)


@pytest.mark.parametrize("name,x,g", CASES, ids=[c[0] for c in CASES])
def test_oracle_equals_compressed_tensors_goldens(name, x, g):
    np.testing.assert_array_equal(GOLDENS[f"{name}/x"], x)  # the cases are still the goldens'
    _assert_ct_equal(
        _ours(x, g), *(GOLDENS[f"{name}/{k}"] for k in ("g", "scales", "codes", "deq"))
    )


@pytest.mark.parametrize("name,x,g", CASES, ids=[c[0] for c in CASES])
def test_oracle_equals_live_compressed_tensors(name, x, g):
    pytest.importorskip("compressed_tensors", reason="compressed-tensors not installed (test extra)")
    _assert_ct_equal(_ours(x, g), *nvfp4_refs.compressed_tensors_nvfp4(x, g))


def _assert_mlx_differences(x, a: MXArray, s8, codes, deq, tensor_amax):
    """MLX equals the oracle but where docs/numerics.md says it differs: a zero
    block scale stays 0 (ours 0.125), a negative value rounding to zero gives
    +0, and a tie rounds toward zero (ours to even).  With MLX's global scale
    (the tensor's amax) its dequantization multiplies by ``f32(s * f32(amax /
    2688))`` where compressed-tensors divides, ``f32(s / g)``: the values are
    compared without one (``tensor_amax`` None), where both are ``code * s``."""
    ours_s = a.scales.view(np.uint8)
    zero = s8 == 0
    assert np.all(ours_s[zero] == ZERO_SCALE_CODE)
    np.testing.assert_array_equal(s8[~zero], ours_s[~zero])
    ours_c = a.codes.view(np.uint8)
    same_blocks = np.repeat(~zero, 16, axis=-1)
    p = x.astype(np.float64) / np.repeat(a.block_factors(), 16, axis=-1)
    mag = nvfp4_refs.E2M1_VALUES
    mids = (mag[1:] + mag[:-1]) / 2
    tie = np.isin(np.abs(p), mids)
    signed_zero = ((ours_c & 7) == 0) & ((codes & 7) == 0)
    toward_zero = tie & ((codes & 7) == (ours_c & 7) - 1)
    ok = (codes == ours_c) | signed_zero | toward_zero
    assert np.all(ok[same_blocks])
    assert np.all(codes[signed_zero] == 0)  # MLX: +0 only
    agree = same_blocks & (codes == ours_c)
    if tensor_amax is None:
        d = a.dequantize()
    else:
        t = np.float32(tensor_amax) / np.float32(2688)
        factor = (a.scale_values().astype(np.float32) * t).astype(np.float64)
        d = (a.element_values() * np.repeat(factor, 16, axis=-1)).astype(np.float32)
    np.testing.assert_array_equal(deq[agree].view(np.uint32), d[agree].view(np.uint32))


MLX_CASES = [c for c in CASES if f"{c[0]}/mlx_codes" in GOLDENS.files]


@pytest.mark.parametrize("name,x,g", MLX_CASES, ids=[c[0] for c in MLX_CASES])
def test_oracle_against_mlx_goldens(name, x, g):
    amax = nvfp4_refs.mlx_tensor_amax(x, g)
    _assert_mlx_differences(
        x, _ours(x, g), *(GOLDENS[f"{name}/{k}"] for k in ("mlx_scales", "mlx_codes", "mlx_deq")),
        amax,
    )


@pytest.mark.parametrize("name,x,g", MLX_CASES, ids=[c[0] for c in MLX_CASES])
def test_oracle_against_live_mlx(name, x, g):
    pytest.importorskip("mlx.core", reason="mlx not installed (test extra: mlx[cpu] on Linux)")
    amax = nvfp4_refs.mlx_tensor_amax(x, g)
    _assert_mlx_differences(x, _ours(x, g), *nvfp4_refs.mlx_nvfp4(x, amax), amax)


def test_mlx_goldens_show_each_difference():
    """The differences the MLX comparison allows all occur in the goldens."""
    s = GOLDENS["ties_g1/mlx_codes"][0, :8]
    assert list(s) == [0, 1, 2, 3, 4, 5, 6, 7]  # 0.25 0.75 ... 5 6: ties toward zero
    assert list(oracle.quantize(CASES[[c[0] for c in CASES].index("ties_g1")][1], "nvfp4",
                                global_scale=1.0).codes.view(np.uint8)[0, :8]) == [
        0, 2, 2, 4, 4, 6, 6, 7]  # fmt: skip
    assert np.any(GOLDENS["zeros_subnormals/mlx_scales"] == 0)


def test_nan_and_inf_blocks():
    """A block with a NaN or an Inf: E4M3 NaN scale, codes 0, NaN values; the
    computed global scale ignores them; the other blocks are untouched."""
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(2, 32)
    y = x.copy()
    y[0, 3], y[1, 20] = np.nan, -np.inf
    a, b = oracle.quantize(x, "nvfp4"), oracle.quantize(y, "nvfp4")
    assert a.global_scale == b.global_scale == global_scale(x)
    bad = np.array([[True, False], [False, True]])
    assert np.all(b.scales.view(np.uint8)[bad] == E4M3_NAN_CODE)
    np.testing.assert_array_equal(b.scales.view(np.uint8)[~bad], a.scales.view(np.uint8)[~bad])
    codes = b.codes.view(np.uint8).reshape(2, 2, 16)
    assert np.all(codes[bad] == 0)
    d = b.dequantize().reshape(2, 2, 16)
    assert np.all(np.isnan(d[bad])) and not np.any(np.isnan(d[~bad]))


def test_global_scale_fallback_and_saturation():
    assert global_scale(np.zeros(16, np.float32)) == 1.0
    assert global_scale(np.full(16, 1e-39, np.float32)) == 1.0  # 2688 / amax overflows f32
    assert global_scale(np.array([np.nan] * 16, np.float32)) == 1.0
    # A given global scale larger than the tensor calls for: scales saturate at 448.
    a = oracle.quantize(np.full((1, 16), 100.0, np.float32), "nvfp4", global_scale=1000.0)
    assert a.scale_values()[0, 0] == 448.0 and np.all(a.element_values() == 6.0)


def test_axis_and_layout():
    x = np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32)
    a = oracle.quantize(x, "nvfp4", axis=0)
    b = oracle.quantize(np.ascontiguousarray(x.T), "nvfp4", global_scale=a.global_scale)
    assert a.scale_shape == (2, 48) and a.block_size == 16 and a.axis == 0
    np.testing.assert_array_equal(a.scales.view(np.uint8), b.scales.view(np.uint8).T)
    np.testing.assert_array_equal(a.dequantize(), b.dequantize().T)


def test_mxarray_nvfp4_form():
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    a = oracle.quantize(x, "NVFP4")
    assert (a.element, a.scale_type, a.format_name) == ("f4E2M1FN", "f8E4M3FN", "nvfp4")
    assert a.is_packed and a.nbytes == 4 * 16 + 4 * 2
    b = pickle.loads(pickle.dumps(a))
    assert b.bitwise_equal(a) and b.global_scale == a.global_scale
    c = MXArray.from_packed(a.packed_codes(), a.scales.view(np.uint8), "nvfp4", 16,
                            global_scale=a.global_scale)  # fmt: skip
    assert c.bitwise_equal(a)
    d = MXArray(a.codes, a.scales, "nvfp4", 16, global_scale=a.global_scale * 2)
    assert not d.bitwise_equal(a)
    np.testing.assert_array_equal(d.dequantize() * 2, a.dequantize())  # powers of two: exact
    e = oracle.quantize(x, "f4E2M1FN", 16)
    assert not e.bitwise_equal(a) and e.global_scale is None and e.scale_type == "f8E8M0FNU"
    assert "global_scale" in repr(a)


def test_bad_arguments():
    x = np.ones((2, 32), np.float32)
    a = oracle.quantize(x, "nvfp4")
    with pytest.raises(MXValueError, match="block_size 16 only"):
        oracle.quantize(x, "nvfp4", 32)
    with pytest.raises(MXValueError, match="global_scale: must be finite and positive"):
        oracle.quantize(x, "nvfp4", global_scale=0.0)
    with pytest.raises(MXValueError, match="global_scale: must be finite and positive"):
        oracle.quantize(x, "nvfp4", global_scale=float("inf"))
    with pytest.raises(MXValueError, match="global_scale: only nvfp4"):
        oracle.quantize(x, "mxfp4", global_scale=1.0)
    with pytest.raises(MXValueError, match="global_scale: .*need one"):
        MXArray(a.codes, a.scales, "nvfp4", 16)
    with pytest.raises(MXValueError, match="only .* arrays have one"):
        MXArray(a.codes, np.zeros((2, 2), np.uint8), "f4E2M1FN", 16, global_scale=1.0)
    with pytest.raises(MXArgTypeError, match="scales: expected dtype float8_e4m3fn"):
        MXArray(a.codes, np.zeros((2, 2), formats.SCALE_DTYPE), "nvfp4", 16, global_scale=1.0)
    with pytest.raises(MXArgTypeError, match="global_scale: expected a real number"):
        MXArray(a.codes, a.scales, "nvfp4", 16, global_scale="1")
    with pytest.raises(MXValueError, match="is not an MX element format"):
        element_format("nvfp4")
    with pytest.raises(MXValueError, match="fold_scale takes E8M0-scaled arrays"):
        oracle.fold_scale(a, 2.0)


def test_default_block_sizes():
    x = np.ones((2, 32), np.float32)
    assert oracle.quantize(x, "mxfp4").block_size == 32
    assert oracle.quantize(x, "nvfp4").block_size == 16


@pytest.mark.parametrize("element,scale,block,ok", [
    ("f4E2M1FN", "f8E4M3FN", 16, True),
    ("f4E2M1FN", "f8E4M3FN", 32, False),
    ("f8E4M3FN", "f8E4M3FN", 16, False),
    ("f6E2M3FN", "f8E4M3FN", 16, False),
    ("i8", "f8E8M0FNU", 7, True),
    ("f4E2M1FN", "bf16", 16, False),
])  # fmt: skip
def test_scale_rule(element, scale, block, ok):
    assert (formats.scale_rule(element, scale, block) is None) == ok


def test_interop_keeps_nvfp4():
    """transpose keeps an NVFP4 array NVFP4 (its global scale too); the linear
    weight check (the torch layers' and experts') takes it as an MXFP4 one."""
    from mlir_mx.interop.orientation import check_linear_weight, transpose

    x = np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)
    a = oracle.quantize(x, "nvfp4")
    t = transpose(a)
    assert (t.format_name, t.axis, t.global_scale) == ("nvfp4", 0, a.global_scale)
    np.testing.assert_array_equal(t.dequantize(), a.dequantize().T)
    check_linear_weight(a)
    with pytest.raises(MXValueError, match=r"w: expected a 2-D MXArray .* blocked along axis 0"):
        check_linear_weight(t)


def test_the_oracles_matmul_refuses_nvfp4_activations():
    """NVFP4 goes in B (tests/test_linear_nvfp4.py); an NVFP4 A is refused by
    name, never read as if its E4M3 scales were E8M0."""
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    a = oracle.quantize(x, "nvfp4")
    b = oracle.quantize(x.T.copy(), "mxfp4", 16, axis=0)
    for f in (oracle.matmul_reference, oracle.blocked_order):
        with pytest.raises(MXValueError, match=r"a: .*E8M0-scaled .* not an nvfp4 MXArray"):
            f(a, b, np.zeros((4, 4), np.float32))
