"""Right answers at the edges of the f32 range: scale products that overflow,
activations near the top of the range and subnormal activations, as property
tests over the edge, against the claim stated as a condition
(``mlir_mx.oracle.matmul_reference``, docs/numerics.md) and, bit for
bit, against the blocked order emulated in numpy
(``mlir_mx.oracle.blocked_order``: every schedule computes exactly
it).  Each bullet is one reproducer (its name in the review's findings) and
the tests that check it:

* f9_scale_product_overflow_nan (``test_scale_products_past_2_to_the_127_are_not_nan``,
  ``test_zero_block_against_2_to_the_128_is_exact``): a zero block product
  meeting a scale product of 2^128 or more gave ``fma(0, sa * sb = Inf, c) =
  NaN``; the scales are now applied one after the other.
* f12_linear_large_activation_overflow (``test_large_activations_are_exact``,
  ``test_linear_activations_across_the_f32_range``): FP4/FP6 weights
  pre-multiplied f32 activations by 2^14, so x > 2^114 overflowed; codes now
  widen to exact values, nothing is pre-scaled.
* f8_linear_subnormal_activation_flushed (``test_subnormal_*``,
  ``test_one_nonzero_activation_is_one_rounding``): (a) i8 weights pre-multiplied by
  2^-6, flushing subnormal activations (0.0 for x = 2^-149 against 2^60:
  the claim's bound now forbids it, and the bit-for-bit tests do); (b) a
  subnormal activation times a small element under a large scale
  underflows before the scale: the bound's underflow term states exactly
  which products may round (``x a_k`` off the 2^-149 grid), and the tests
  check both sides of that edge.

Against the commit before the fixes (7b969b6^, with this file and
numerics/matmul.py copied over), the tests of all three fail
(docs/testing.md, "Recorded long runs").
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mlir_mx
from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.kernels import SCHEDULES
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, decode_elements, finite_codes

PROPS = settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
M, K, N = 3, 64, 32
#: The format pairs of the scale-product property test.
_PAIRS = [("f8E4M3FN", "f8E4M3FN"), ("f4E2M1FN", "i8"), ("f6E3M2FN", "f8E5M2")]


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
        ok = np.where(
            nan, np.isnan(g), np.where(np.isinf(exact), g == exact, np.abs(g - exact) <= bound)
        )
    assert np.all(ok | ~inside), (got[~(ok | ~inside)], exact[~(ok | ~inside)])


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit (every NaN equal to every NaN: payloads carry no meaning)."""
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (np.argwhere(~same)[:4], got[~same][:4], want[~same][:4])


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
        codes.view(fmt.dtype),
        scales.astype(np.uint8).view(np.dtype("float8_e8m0fnu")),
        elem,
        32,
        axis,
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
    pair=st.sampled_from(_PAIRS),
    top=st.integers(0, 254),
)
def test_scale_products_past_2_to_the_127_are_not_nan(runners, seed, pair, top):
    """Zero blocks with scales anywhere in 2^-127..2^127 meet other blocks'
    scales (products far above 2^127 and below 2^-149): every output inside
    the claim is within the bound (the old order made NaN there), and every
    schedule gives the bits of the blocked order, at 1 or 2 threads in turn
    (each schedule meets both over the pairs)."""
    rng = np.random.default_rng(seed)
    ea, eb = pair
    a = _edge_mx(rng, (M, K), ea, 1, top)
    b = _edge_mx(rng, (K, N), eb, 0, top)
    acc = np.full((M, N), 5.0, np.float32)
    exact, bound, inside = oracle.matmul_reference(a, b, acc)
    outs = []
    turn = _PAIRS.index(pair)
    for i, name in enumerate(SCHEDULES):
        threads = 1 + (i + turn) % 2
        outs.append(runners(ea, eb, name, threads).mm(a, b, acc.copy()))
    _check(outs[0], exact, bound, inside)
    assert inside.any()
    want = oracle.blocked_order(a, b, acc)
    for o in outs:
        _same_bits(o, want)


def test_zero_block_against_2_to_the_128_is_exact(runners):
    """The reproducer's own case: the exact result 5.0, not NaN."""
    x = np.zeros((M, K), np.float32)
    x[0, 0], x[0, 1] = 2.0**127, 1.0
    w = np.zeros((K, N), np.float32)
    w[1:, :] = 2.0**17
    a, b = oracle.quantize(x, "f8E4M3FN", 32), oracle.quantize(w, "f8E4M3FN", 32, axis=0)
    acc = np.full((M, N), 5.0, np.float32)
    for name in SCHEDULES:
        got = runners("f8E4M3FN", "f8E4M3FN", name, 1).mm(a, b, acc.copy())
        assert np.all(got[0] == 5.0), (name, got[0])


#: E8M0 scale codes at both edges (2^-127 .. 2^127) and in between.
_EDGE_SCALES = np.array([0, 1, 2, 3, 20, 60, 100, 127, 150, 200, 240, 250, 252, 253, 254], np.uint8)


def _edge_weight(rng, elem: str, edge: bool) -> MXArray:
    """An (N, K) weight blocked along K: random finite codes, a zero block in
    four; scales in 2^-20..2^20, or with ``edge`` anywhere in 2^-127..2^127."""
    fmt = ELEMENT_FORMATS[elem]
    codes = rng.choice(finite_codes(fmt), (N, K)).view(np.uint8).copy()
    codes[np.repeat(rng.random((N, K // 32)) < 0.25, 32, axis=1)] = 0
    shape = (N, K // 32)
    scales = rng.choice(_EDGE_SCALES, shape) if edge else rng.integers(107, 148, shape)
    return MXArray(codes.view(fmt.dtype), scales.astype(np.uint8), elem, 32, 1)


def _rhs(w: MXArray) -> MXArray:
    """The weight as block_matmul's B = W^T (K, N), blocked along K."""
    return MXArray(w.codes.T.copy(), w.scales.T.copy(), w.element, 32, 0)


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    elem=st.sampled_from(list(ELEMENT_FORMATS)),
    lo=st.integers(-149, 100),
    rows=st.sampled_from([1, 5, 60]),
    edge=st.booleans(),
    threads=st.sampled_from([1, 2]),
)
def test_linear_activations_across_the_f32_range(seed, elem, lo, rows, edge, threads):
    """f32 activations spanning 2^lo .. 2^(lo + 27), subnormals and
    magnitudes near 2^127 included, against every weight format with scales
    moderate or anywhere in 2^-127..2^127: bit for bit the blocked order
    (decode, small and prefill rows), and inside the claim within the bound."""
    rng = np.random.default_rng(seed)
    w = _edge_weight(rng, elem, edge)
    e = rng.integers(lo, min(lo + 28, 128), (rows, K))
    x = (np.ldexp(rng.uniform(1, 2, (rows, K)), e) * rng.choice((-1, 1), (rows, K))).astype(
        np.float32
    )
    got = mlir_mx.Linear(w, threads=threads)(x)
    zero = np.zeros((rows, N), np.float32)
    _same_bits(got, oracle.blocked_order(x, _rhs(w), zero))
    exact, bound, inside = oracle.matmul_reference(x, _rhs(w), zero)
    _check(got, exact, bound, inside)
    if not edge and lo + 28 < 90:  # far from overflow, every output is inside the claim
        assert inside.all()


@PROPS
@given(seed=st.integers(0, 2**32 - 1), elem=st.sampled_from(list(ELEMENT_FORMATS)))
def test_one_nonzero_activation_is_one_rounding(seed, elem):
    """Rows with one nonzero activation ``x`` (half of them 2^-149..2^-120,
    the others anywhere in the f32 range) against weights with scales
    anywhere: output ``n`` is ``fl(fl(x e) sb)``, and exactly ``fl(x e sb)``,
    the correctly rounded product, wherever ``x e`` is a multiple of 2^-149
    or a normal below 2^127 (``fl(x e)`` then loses nothing ``fl(x e sb)``
    keeps) and ``x e sb`` is a normal f32 (the old i8 pre-scaling gave 0.0
    for x = 2^-149 against 2^60)."""
    rng = np.random.default_rng(seed)
    w = _edge_weight(rng, elem, True)
    rows = 16
    lo = np.where(np.arange(rows) % 2 == 0, -149, -149 + rng.integers(0, 277, rows))
    xv = np.ldexp(rng.uniform(1, 2, rows), rng.integers(lo, np.minimum(lo + 30, 128)))
    x = np.zeros((rows, K), np.float32)
    ks = rng.integers(0, K, rows)
    x[np.arange(rows), ks] = (xv * rng.choice((-1, 1), rows)).astype(np.float32)
    got = mlir_mx.Linear(w, threads=1)(x)
    _same_bits(got, oracle.blocked_order(x, _rhs(w), np.zeros((rows, N), np.float32)))
    xe = x[np.arange(rows), ks].astype(np.float64)[:, None] * w.element_values()[:, ks].T  # exact
    prod = xe * w.scale_values()[:, ks // 32].T
    grid = np.ldexp(xe, 149) == np.floor(np.ldexp(xe, 149))
    one = (
        (grid | (np.abs(xe) >= 2.0**-126))
        & (np.abs(xe) < 2.0**127)
        & (np.abs(prod) >= 2.0**-126)
        & (np.abs(prod) <= 2.0**127)
    )
    assert one.any()
    _same_bits(got[one], prod[one].astype(np.float32))


def test_large_activations_are_exact():
    """The reproducer's case: x = 2^116 against FP4/FP6 weights."""
    for elem in ("f4E2M1FN", "f6E2M3FN", "f6E3M2FN"):
        w = oracle.quantize(np.full((4, 32), 1.0, np.float32), elem, 32)
        x = np.zeros((1, 32), np.float32)
        x[0, 0] = 2.0**116
        y = mlir_mx.Linear(w, threads=1)(x)
        assert np.all(y == np.float32(2.0**116)), (elem, y)


def test_subnormal_activations_are_not_flushed():
    """(a): x = 2^-149 against i8 weights: the exact, nonzero result."""
    w = oracle.quantize(np.full((64, 32), 2.0**60, np.float32), "i8", 32)
    x = np.zeros((1, 32), np.float32)
    for xv in (2.0**-149, 3 * 2.0**-140, 2.0**-126):
        x[0, 0] = xv
        y = mlir_mx.Linear(w, threads=1)(x)
        want = np.float32(xv) * np.float32(2.0**60)
        assert np.all(y == want), (xv, y[0, 0], want)


def _smallest(elem: str):
    """(code, value) of the format's smallest positive element value."""
    fin = finite_codes(elem)
    vals = decode_elements(fin, elem).astype(np.float64)
    i = int(np.argmin(np.where(vals > 0, vals, np.inf)))
    return fin.view(np.uint8)[i], float(vals[i])


@pytest.mark.parametrize("elem", list(ELEMENT_FORMATS))
def test_subnormal_times_the_smallest_element_under_a_large_scale(elem):
    """(b), the reproducer's own case generalized: x = 2^-149 times the
    format's smallest element value (E4M3 2^-9, ..., the reproducer's 0.0625
    and 0.5 included) under scales up to 2^127. The product is off the
    2^-149 grid, so the blocked order rounds it before the scale (to 0:
    E2M1's 2^-150 is a tie, to even); the bound's underflow term covers exactly that
    (2^-150 sb), and both sides of the edge are exact: x e = 2^-149 (on the
    grid) gives 2^-149 sb, x e = 1.5 * 2^-149 gives 2^-148 sb (ties to even)."""
    code, e = _smallest(elem)
    fmt = ELEMENT_FORMATS[elem]
    for sb_exp in (0, 52, 58, 60, 127):
        codes = np.zeros((4, 32), np.uint8)
        codes[:, 0] = code
        scales = np.full((4, 1), 127 + sb_exp, np.uint8)
        w = MXArray(codes.view(fmt.dtype), scales, elem, 32, 1)
        lin = mlir_mx.Linear(w, threads=1)
        sb = 2.0**sb_exp
        # (x, the result, whether x e is on the 2^-149 grid)
        for xv, want, on_grid in (
            (2.0**-149, 0.0, False),  # x e < 2^-150, or E2M1's tie 2^-150: to 0
            (2.0**-149 / e, 2.0**-149 * sb, True),
            (1.5 * 2.0**-149 / e, 2.0**-148 * sb, False),  # 1.5 * 2^-149: to even, 2^-148
        ):
            x = np.zeros((1, 32), np.float32)
            x[0, 0] = xv
            assert float(x[0, 0]) == xv  # an f32 value
            got = lin(x)
            _same_bits(got, oracle.blocked_order(x, _rhs(w), np.zeros((1, 4), np.float32)))
            exact, bound, inside = oracle.matmul_reference(x, _rhs(w), np.zeros((1, 4), np.float32))
            assert inside.all()
            _check(got, exact, bound, inside)
            assert np.all(got == np.float32(want)), (elem, sb_exp, xv, got)
            if on_grid:  # exact, and the bound allows no underflow error
                assert np.all(got == exact) and np.all(bound < 2.0**-150 * sb)
            else:  # rounded before the scale, and the bound says so
                assert np.all(got != exact) and np.all(bound >= 2.0**-150 * sb)


def test_subnormal_activation_against_e4m3_0_0625_under_2_to_the_52():
    """E4M3 weight 0.0625 under 2^52 against 2^-149: 0.0 (exact 3.9e-31,
    inside the bound); the old flushing output for (a) is outside it."""
    wf = np.full((64, 32), 2.0**60, np.float32)
    wf[:, 0] = 2.0**48
    w = oracle.quantize(wf, "f8E4M3FN", 32)
    assert w.scale_values()[0, 0] == 2.0**52 and w.element_values()[0, 0] == 0.0625
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 2.0**-149
    y = mlir_mx.Linear(w, threads=1)(x)
    exact, bound, inside = oracle.matmul_reference(x, _rhs(w), np.zeros((1, 64), np.float32))
    assert np.all(y == 0.0) and np.all(exact == 2.0**-101) and np.all(bound >= exact)
    wi = oracle.quantize(np.full((64, 32), 2.0**60, np.float32), "i8", 32)
    exact, bound, inside = oracle.matmul_reference(x, _rhs(wi), np.zeros((1, 64), np.float32))
    assert inside.all() and np.all(np.abs(0.0 - exact) > bound)  # (a)'s old 0.0 is refused
