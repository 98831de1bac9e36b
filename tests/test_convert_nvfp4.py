"""``mlir_mx.quantize(x, "nvfp4")`` / ``mlir_mx.dequantize`` of NVFP4 arrays (the
compiled kernels) against the oracle, bit for bit (the oracle is bit for bit
compressed-tensors': tests/numerics/test_nvfp4.py): the golden cases (the
whole f32 range, tiny and huge tensors, zero and subnormal blocks, ties,
given global scales), NaN/Inf and every f32 bit pattern, ranks 1-3 and every
axis, strided and f64/f16/bf16 inputs, 1-3 threads, every E4M3 scale byte."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_convert import assert_same, assert_same_f32, check, special_values, strided
from tests.numerics import nvfp4_refs

import mlir_mx
from mlir_mx import oracle
from mlir_mx.errors import MXArgTypeError, MXValueError
from mlir_mx.numerics import MXArray

CASES = nvfp4_refs.cases()


@pytest.mark.parametrize("name,x,g", CASES, ids=[c[0] for c in CASES])
def test_golden_cases(name, x, g):
    for axis in (1, 0):
        if x.shape[axis] % 16 == 0:
            want = oracle.quantize(x, "nvfp4", axis=axis, global_scale=g)
            got = mlir_mx.quantize(x, "nvfp4", axis=axis, global_scale=g, threads=2)
            assert_same(got, want)
            assert_same_f32(mlir_mx.dequantize(want, threads=2), oracle.dequantize(want))


# (shape, axis, threads, view)
LAYOUTS = [
    ((96,), 0, 1, None),
    ((6, 128), -1, 3, None),
    ((4, 32, 5), 1, 2, None),
    ((32, 2, 3), 0, 3, None),
    ((2, 9, 48), 2, 1, None),
    ((4, 6, 32), 2, 2, "step"),
    ((64, 12), 0, 1, "transposed"),
    ((5, 32), 1, 3, "reversed"),
    # rows of 16 blocks and more: the kernels' groups of 16 blocks, the tail,
    # a row of two segments (256 + 16 blocks)
    ((6, 560), -1, 2, None),
    ((3, 4352), 1, 3, None),
    ((4, 512), 1, 2, "step"),
]


@pytest.mark.parametrize("case", LAYOUTS, ids=[f"{c[0]}-ax{c[1]}-{c[3]}" for c in LAYOUTS])
def test_layouts_and_special_values(case):
    shape, axis, threads, view = case
    x = special_values(shape, seed=len(shape) + threads)
    check(x if view is None else strided(x, view), "nvfp4", 16, axis, threads)


def test_every_f32_bit_pattern_kind():
    """Random f32 bit patterns: NaN payloads, infinities, subnormals, every exponent."""
    x = np.random.default_rng(5).integers(0, 2**32, (64, 512), dtype=np.uint64)
    x = x.astype(np.uint32).view(np.float32)
    check(x, "nvfp4", 16, 1, 2)
    check(x, "nvfp4", 16, 0, 2)
    finite = np.where(np.isfinite(x), x, np.float32(1.0))
    check(finite, "nvfp4", 16, 1, 2)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, ml_dtypes.bfloat16])
def test_input_types(dtype):
    x = special_values((32, 64), seed=3).astype(np.float64)
    x[0, :3] = [1e300, -1e300, 2.0**-149 * 0.75]
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    check(x, "nvfp4", 16, 1, 2)
    check(x[:, ::2], "nvfp4", 16, 0, 1)


def test_given_global_scales():
    x = special_values((8, 64), seed=11)
    for g in (1.0, 2.0**-30, 0.37, 3.0e38, np.float32(7.5)):
        want = oracle.quantize(x, "nvfp4", global_scale=g)
        assert_same(mlir_mx.quantize(x, "nvfp4", global_scale=g, threads=2), want)
        assert_same_f32(mlir_mx.dequantize(want), oracle.dequantize(want))


def test_thread_counts_agree():
    x = special_values((96, 320), seed=6)
    ref = mlir_mx.quantize(x, "nvfp4", threads=1)
    for t in (2, 3, 7):
        assert_same(mlir_mx.quantize(x, "nvfp4", threads=t), ref)
    np.testing.assert_array_equal(mlir_mx.dequantize(ref, threads=3), mlir_mx.dequantize(ref, 1))


def test_every_scale_byte_dequantizes():
    """Every E4M3 byte as a block scale (negative, subnormal, NaN 0x7f/0xff
    included: a file may hold them), every E2M1 code, both layouts, several
    global scales."""
    codes = np.tile(np.arange(16, dtype=np.uint8), (256, 1))  # each row: every code
    scales = np.arange(256, dtype=np.uint8)[:, None]  # row r: scale byte r
    for g in (1.0, 0.001, 2.0**100):
        a = MXArray(codes, scales, "nvfp4", 16, 1, global_scale=g)
        assert_same_f32(mlir_mx.dequantize(a, threads=2), oracle.dequantize(a))
        b = MXArray(np.ascontiguousarray(codes.T), scales.T.copy(), "nvfp4", 16, 0, global_scale=g)
        assert_same_f32(mlir_mx.dequantize(b, threads=1), oracle.dequantize(b))


def test_errors_name_the_argument():
    x = np.ones((2, 32), np.float32)
    with pytest.raises(MXValueError, match="block_size 16 only"):
        mlir_mx.quantize(x, "nvfp4", 32)
    with pytest.raises(MXValueError, match="global_scale: must be finite and positive"):
        mlir_mx.quantize(x, "nvfp4", global_scale=-1.0)
    with pytest.raises(MXArgTypeError, match="global_scale: expected a real number"):
        mlir_mx.quantize(x, "nvfp4", global_scale="2")
    with pytest.raises(MXValueError, match="global_scale: only nvfp4"):
        mlir_mx.quantize(x, "mxfp4", global_scale=1.0)
    assert mlir_mx.quantize(x, "mxfp4").block_size == 32


def test_avx2_mask_gives_the_same_bits(monkeypatch):
    """The kernels compiled for an AVX2-only CPU (MLIR_MX_CPU_FEATURES masks
    AVX-512: a kernel of its own, host features are part of the key) give the
    oracle's bits too."""
    from dot_cases import mask_avx2

    mask_avx2(monkeypatch, "avx2")
    x = special_values((32, 96), seed=21)
    check(x, "nvfp4", 16, 1, 2)
    check(x, "nvfp4", 16, 0, 1)
