"""The Runner's ABI under packed sub-byte storage (``mx-to-linalg{subbyte-storage}``).

FP4/FP6 codes whose last axis packs cross the function boundary packed by
default; the Runner packs ``MXArray`` arguments, unpacks results, and gives
the same bits as the one-code-per-byte ABI."""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.pipelines import kernel_pipeline

FP4A = "!mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>"
FP6B = "!mx.tensor<64x32xf6E2M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>"
TEXT = f"""
func.func @mm(%a: {FP4A}, %b: {FP6B}, %c: tensor<4x32xf32>) -> tensor<4x32xf32> {{
  %0 = mx.block_matmul %a, %b, %c : {FP4A}, {FP6B}, tensor<4x32xf32> -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}}
func.func @q(%x: tensor<4x64xf32>) -> {FP4A} {{
  %0 = mx.quantize_block %x : tensor<4x64xf32> -> {FP4A}
  return %0 : {FP4A}
}}
"""
UNPACKED = kernel_pipeline("auto", 1).with_options("mx-to-linalg", subbyte_storage="unpacked")


@pytest.fixture(scope="module")
def runners():
    return Runner(TEXT, threads=1), Runner(TEXT, UNPACKED)


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(3)
    a = oracle.quantize(rng.standard_normal((4, 64)).astype(np.float32), "f4E2M1FN", 32)
    b = oracle.quantize(rng.standard_normal((64, 32)).astype(np.float32), "f6E2M3FN", 32, axis=0)
    c = rng.standard_normal((4, 32)).astype(np.float32)
    return a, b, c


def test_the_pipeline_decides_the_abi(runners):
    packed, unpacked = runners
    assert UNPACKED != kernel_pipeline("auto", 1)  # the replace above took effect
    a_param = packed.signature("mm").args[0]
    assert a_param.packed and a_param.parts[0].shape == (4, 32)
    assert a_param.parts[0].dtype == np.uint8
    b_param = packed.signature("mm").args[1]
    assert b_param.packed and b_param.parts[0].shape == (64, 24)
    assert not unpacked.signature("mm").args[0].packed
    assert unpacked.signature("mm").args[0].parts[0].shape == (4, 64)


def test_packed_and_unpacked_storage_give_the_same_bits(runners, operands):
    a, b, c = operands
    got = [r.invoke("mm", a, b, c.copy()) for r in runners]
    np.testing.assert_array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
    # and the value is the product (summation order differs from numpy: bound)
    want = c.astype(np.float64) + a.dequantize().astype(np.float64) @ b.dequantize()
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


def test_results_come_back_as_the_oracle_mxarray(runners):
    x = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float32)
    for r in runners:
        q = r.invoke("q", x)
        assert q.bitwise_equal(oracle.quantize(x, "f4E2M1FN", 32))


def test_code_pairs_may_be_logical_or_packed(runners, operands):
    a, b, c = operands
    packed = runners[0]
    want = packed.invoke("mm", a, b, c.copy())
    for a_arg in ((a.codes, a.scales), (a.packed_codes(), a.scales)):
        for b_arg in ((b.codes, b.scales), (b.packed_codes(), b.scales)):
            got = packed.invoke("mm", a_arg, b_arg, c.copy())
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_wrong_packed_bytes_name_the_argument(runners, operands):
    a, b, c = operands
    with pytest.raises((TypeError, ValueError), match="%arg0 codes"):
        runners[0].invoke("mm", (np.zeros((4, 30), np.uint8), a.scales), b, c.copy())
