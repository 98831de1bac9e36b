"""The tiled, pinned, vectorized block matmul (mx-vectorize + lower-to-llvm)
runs and matches the oracle.

Tolerance: the kernel sums K products in f32 in some order (the vectorized
reduction order differs from the scalar loop's), so against the exact (f64)
result ``acc + A @ B`` each output is within ``(K + 2) * 2^-24 * (|acc| +
sum_k |a_ik * b_kj|)`` (the standard bound for recursive summation, with
one extra rounding for the product and one for the accumulator add).
"""

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx.pipelines import load_pipeline

PIPELINE = load_pipeline("mx-vectorize") + load_pipeline("lower-to-llvm")


def _module(m, n, k, elem, rhs_mx):
    a = f"!mx.tensor<{m}x{k}x{elem}, block_size = 32, scale_type = f8E8M0FNU>"
    b = (
        f"!mx.tensor<{k}x{n}x{elem}, block_size = 32, scale_type = f8E8M0FNU, axis = 0>"
        if rhs_mx
        else f"tensor<{k}x{n}xf32>"
    )
    c = f"tensor<{m}x{n}xf32>"
    return (
        f"func.func @mm(%a: {a}, %b: {b}, %acc: {c}) -> {c} {{\n"
        f"  %0 = mx.block_matmul %a, %b, %acc : {a}, {b}, {c} -> {c}\n"
        f"  return %0 : {c}\n}}\n"
    )


def _check(m, n, k, elem, rhs_mx, seed=0):
    rng = np.random.default_rng(seed)
    a = oracle.quantize(rng.standard_normal((m, k)).astype(np.float32), elem, 32)
    bf = rng.standard_normal((k, n)).astype(np.float32)
    b = oracle.quantize(bf, elem, 32, axis=0) if rhs_mx else bf
    a_d = oracle.dequantize(a).astype(np.float64)
    b_d = (oracle.dequantize(b) if rhs_mx else bf).astype(np.float64)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    exact = acc + a_d @ b_d
    runner = Runner(_module(m, n, k, elem, rhs_mx), PIPELINE)
    got = runner.mm(a, b, acc.copy())
    bound = (k + 2) * 2.0**-24 * (np.abs(acc) + np.abs(a_d) @ np.abs(b_d))
    assert np.all(np.abs(got - exact) <= bound), np.abs(got - exact).max()


@pytest.mark.parametrize(
    "rhs_mx",
    # mx x mx runs by default in test_partial_m_tiles (M = 1 and 3)
    [False, pytest.param(True, marks=pytest.mark.slow)],
    ids=["mx_x_f32", "mx_x_mx"],
)
def test_v1_shape(rhs_mx):
    _check(32, 64, 64, "f8E4M3FN", rhs_mx)


@pytest.mark.parametrize("m", [1, 3])
def test_partial_m_tiles(m):
    # M = 1 used to exhaust memory in vector.lower_broadcast + canonicalize
    # (now dropped from the schedule); M = 3 leaves a partial M tile.  One
    # 32-column tile (N = 32): the unrolled tiles are LLVM's time (7 s at N = 64).
    _check(m, 32, 64, "f8E4M3FN", rhs_mx=True)


@pytest.mark.slow  # ~10 s of LLVM compile per case
@pytest.mark.parametrize("rhs_mx", [False, True], ids=["mx_x_f32", "mx_x_mx"])
def test_128x256x512(rhs_mx):
    _check(128, 256, 512, "f8E4M3FN", rhs_mx)


@pytest.mark.parametrize(
    "elem",
    [
        pytest.param(e, marks=[] if e == "f4E2M1FN" else [pytest.mark.slow])
        for e in ELEMENT_FORMATS
        if e != "f8E4M3FN"
    ],
)
def test_every_element_type(elem):
    # f4/f6 mantissas go through mx-legalize-subbyte-vector-memory: without it
    # the vector loads read bit-packed memory and the result is garbage.
    _check(32, 64, 64, elem, rhs_mx=True)
