"""Right answers at the edges of the f32 range: scale products that overflow,
activations near the top of the range and subnormal activations, as property
tests over the edge, against the claim stated as a condition
(``mlir_mx.numerics.matmul.matmul_reference``, docs/numerics.md).  Each bullet
is one reproducer (its name in the tests' names):

* f9_scale_product_overflow_nan: a zero block product meeting a scale
  product of 2^128 or more gave ``fma(0, sa * sb = Inf, c) = NaN``; the
  scales are now applied one after the other.
* f12_linear_large_activation_overflow: FP4/FP6 weights pre-multiplied f32
  activations by 2^14, so x > 2^114 overflowed; codes now widen to exact
  values, nothing is pre-scaled.
* f8_linear_subnormal_activation_flushed: i8 weights pre-multiplied by
  2^-6, flushing subnormal activations; (b) a subnormal activation times a
  small element under a large scale underflows before the scale: the bound's
  absolute term states it, and the test checks the result at that edge.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mlir_mx
from mlir_mx.execution import Runner
from mlir_mx.kernels import SCHEDULES
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, finite_codes, quantize
from mlir_mx.numerics.matmul import matmul_reference

PROPS = settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
M, K, N = 3, 64, 32


def _text(ea: str, eb: str) -> str:
    a = f"!mx.tensor<{M}x{K}x{ea}, block_size = 32, scale_type = f8E8M0FNU>"
    b = f"!mx.tensor<{K}x{N}x{eb}, block_size = 32, scale_type = f8E8M0FNU, axis = 0>"
    c = f"tensor<{M}x{N}xf32>"
    return (
        f"func.func @mm(%a: {a}, %b: {b}, %acc: {c}) -> {c} {{\n"
        f"  %0 = mx.block_matmul %a, %b, %acc : {a}, {b}, {c} -> {c}\n"
        f"  return %0 : {c}\n}}"
    )


def _check(got: np.ndarray, exact, bound, inside) -> None:
    g = got.astype(np.float64)
    nan = np.isnan(exact)
    with np.errstate(invalid="ignore"):
        ok = np.where(nan, np.isnan(g), np.where(np.isinf(exact), g == exact, np.abs(g - exact) <= bound))
    assert np.all(ok | ~inside), (got[~(ok | ~inside)], exact[~(ok | ~inside)])


def _edge_mx(rng, shape, elem, axis, huge: int) -> MXArray:
    """Random finite codes in blocks with moderate scales (2^-27..2^23), and
    zero blocks (about half) with scales from 2^(huge - 127) to 2^127: a
    zero block then meets scale products far beyond 2^127 (or 2^-149)."""
    fmt = ELEMENT_FORMATS[elem]
    codes = rng.choice(finite_codes(fmt), shape).view(np.uint8).copy()
    blocks = shape[axis] // 32
    sshape = (shape[0], blocks) if axis == 1 else (blocks, shape[1])
    zero = rng.random(sshape) < 0.5
    scales = np.where(zero, rng.integers(huge, 255, sshape), rng.integers(100, 151, sshape))
    per_elem = np.repeat(zero, 32, axis=axis)
    codes[per_elem] = 0
    return MXArray(
        codes.view(fmt.dtype), scales.astype(np.uint8).view(np.dtype("float8_e8m0fnu")), elem, 32, axis
    )


@pytest.fixture(scope="module")
def runners():
    cache = {}

    def get(ea, eb, schedule, threads):
        key = (ea, eb, schedule, threads)
        if key not in cache:
            cache[key] = Runner(_text(ea, eb), schedule=schedule, threads=threads)
        return cache[key]

    return get


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    pair=st.sampled_from([("f8E4M3FN", "f8E4M3FN"), ("f4E2M1FN", "i8"), ("f6E3M2FN", "f8E5M2")]),
    top=st.integers(0, 254),
)
def test_f9_scale_product_overflow_nan(runners, seed, pair, top):
    """Zero blocks with scales anywhere in 2^-127..2^127 meet other blocks'
    scales (products far above 2^127 and below 2^-149): every output inside
    the claim is within the bound (the old order made NaN there), and every
    schedule at 1 and 2 threads gives the same bits."""
    rng = np.random.default_rng(seed)
    ea, eb = pair
    a = _edge_mx(rng, (M, K), ea, 1, top)
    b = _edge_mx(rng, (K, N), eb, 0, top)
    acc = np.full((M, N), 5.0, np.float32)
    exact, bound, inside = matmul_reference(a, b, acc)
    outs = []
    for name in SCHEDULES:
        for threads in (1, 2):
            outs.append(runners(ea, eb, name, threads).mm(a, b, acc.copy()))
    _check(outs[0], exact, bound, inside)
    assert inside.any()
    for o in outs[1:]:
        np.testing.assert_array_equal(o.view(np.uint32), outs[0].view(np.uint32))


def test_f9_zero_block_against_2_to_the_128_is_exact(runners):
    """The reproducer's own case: the exact result 5.0, not NaN."""
    x = np.zeros((M, K), np.float32)
    x[0, 0], x[0, 1] = 2.0**127, 1.0
    w = np.zeros((K, N), np.float32)
    w[1:, :] = 2.0**17
    a, b = quantize(x, "f8E4M3FN", 32), quantize(w, "f8E4M3FN", 32, axis=0)
    acc = np.full((M, N), 5.0, np.float32)
    for name in SCHEDULES:
        got = runners("f8E4M3FN", "f8E4M3FN", name, 1).mm(a, b, acc.copy())
        assert np.all(got[0] == 5.0), (name, got[0])


_LINEARS: dict = {}
_B: dict = {}  # the weights as block_matmul's B = W^T (K, N), blocked along K


def _linear(elem: str) -> mlir_mx.Linear:
    if elem not in _LINEARS:
        rng = np.random.default_rng(1)
        w = rng.standard_normal((N, K)).astype(np.float32) * np.float32(2.0**-20)
        w[:, :32] *= np.float32(2.0**40)  # blocks with scales far apart
        q = quantize(w, elem, 32)
        _B[elem] = MXArray(q.codes.T.copy(), q.scales.T.copy(), elem, 32, 0)
        _LINEARS[elem] = mlir_mx.Linear(q, threads=1)
    return _LINEARS[elem]


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    elem=st.sampled_from(list(ELEMENT_FORMATS)),
    lo=st.integers(-149, 100),
    rows=st.sampled_from([1, 5, 60]),
)
def test_f12_f8_linear_activations_across_the_f32_range(seed, elem, lo, rows):
    """f32 activations spanning 2^lo .. 2^(lo + 27), subnormals and
    magnitudes near 2^127 included, against every weight format: inside the
    claim, within the bound (decode, small and prefill rows)."""
    rng = np.random.default_rng(seed)
    lin = _linear(elem)
    e = rng.integers(lo, min(lo + 28, 128), (rows, K))
    x = (np.ldexp(rng.uniform(1, 2, (rows, K)), e) * rng.choice((-1, 1), (rows, K))).astype(np.float32)
    got = lin(x)
    exact, bound, inside = matmul_reference(x, _B[elem], np.zeros((rows, N), np.float32))
    _check(got, exact, bound, inside)
    if lo + 28 < 90:  # far from overflow, every output is inside the claim
        assert inside.all()


def test_f12_large_activations_are_exact():
    """The reproducer's case: x = 2^116 against FP4/FP6 weights."""
    for elem in ("f4E2M1FN", "f6E2M3FN", "f6E3M2FN"):
        w = quantize(np.full((4, 32), 1.0, np.float32), elem, 32)
        x = np.zeros((1, 32), np.float32)
        x[0, 0] = 2.0**116
        y = mlir_mx.Linear(w, threads=1)(x)
        assert np.all(y == np.float32(2.0**116)), (elem, y)


def test_f8_subnormal_activations_are_not_flushed():
    """(a): x = 2^-149 against i8 weights: the exact, nonzero result."""
    w = quantize(np.full((64, 32), 2.0**60, np.float32), "i8", 32)
    x = np.zeros((1, 32), np.float32)
    for xv in (2.0**-149, 3 * 2.0**-140, 2.0**-126):
        x[0, 0] = xv
        y = mlir_mx.Linear(w, threads=1)(x)
        want = np.float32(xv) * np.float32(2.0**60)
        assert np.all(y == want), (xv, y[0, 0], want)
