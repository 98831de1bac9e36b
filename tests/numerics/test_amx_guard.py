"""The AMX-BF16 guard, the prepared weight and the numpy model of the guarded
AMX matmul (``mlir_mx.numerics.amx_guard``; issue 51, docs/numerics.md,
"AMX-BF16"): the model's bits equal the exact path's (the oracle's blocked
order, and ``Linear(w, activations="bf16")``) for the formats the guard
serves, and ignoring the guard (or the per-call condition) changes bits.
Runs anywhere: numpy only, no AMX needed."""

from __future__ import annotations

import re
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from format_cases import INTEGRAL, NON_INTEGRAL

import mlir_mx
import mlir_mx.numerics.amx_guard as amx_module
from mlir_mx import oracle
from mlir_mx.errors import MXValueError
from mlir_mx.numerics import MXArray


def bf16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def same_bits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise: the same f32 bits, or both NaN."""
    return (x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y))


def weight(element, n, k, seed=0, spread=8) -> MXArray:
    """B (K, N) blocked along K, from a quantized (N, K) ``Linear`` weight."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp2(rng.integers(-spread, spread, (n, 1)))
    w = oracle.quantize(w.astype(np.float32), element, 32)
    return MXArray(w.codes.T.copy(), w.scales.T.copy(), element, 32, 0)


def with_scales(b: MXArray, codes: dict) -> MXArray:
    """``b`` with the E8M0 scale codes of some (block, column)s replaced."""
    s = b.scales.view(np.uint8).copy()
    for (j, n), code in codes.items():
        s[j, n] = code
    return MXArray(b.codes, s, b.format_name, 32, 0)


def exact(a, b) -> np.ndarray:
    return oracle.blocked_order(a, b, np.zeros((a.shape[0], b.shape[1]), np.float32))


def activations(kind, m, k, seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k))
    if kind == "spread":  # odd rows: each element in its own binade (they fall back)
        x[1::2] *= np.exp2(rng.integers(-20, 20, (m, k)))[1::2]
    elif kind == "rows":  # rows over many binades
        x = x * np.exp2(rng.integers(-40, 40, (m, 1)))
    return bf16(x)


def test_bounds_give_the_documented_thresholds():
    """``T = 2^24 q / bmax`` from the format table: docs/numerics.md's table
    (E2M1, E2M3, E3M2, INT8 with bmax 2 from code -128; E4M3 73, E5M2 below 1)."""

    def floor_t(e):
        q, bmax = oracle.amx_bounds(e)
        return int(2.0**24 * q / bmax)

    assert sorted(map(floor_t, INTEGRAL)) == [37449, 131072, 279620, 1398101]
    assert sorted(map(floor_t, NON_INTEGRAL)) == [0, 73]


def _reference_guard(block, q, bmax) -> bool:
    """The condition of the docs, on one block, with Python fractions."""
    vals = [float(v) for v in block]
    if not all(np.isfinite(vals)):
        return False
    nz = [Fraction(v) for v in vals if v != 0]
    if not nz:
        return True
    g = min(Fraction(2) ** _v2(v) for v in nz)
    s = sum(abs(v) for v in nz)
    return (
        g * Fraction(q) >= Fraction(2) ** -126
        and s / g <= Fraction(2**24) * Fraction(q) / Fraction(bmax)
        and s * Fraction(bmax) < Fraction(2) ** 127
    )


def _v2(v: Fraction) -> int:
    """The 2-adic valuation of a nonzero dyadic rational."""
    num, den = v.numerator, v.denominator
    return (abs(num) & -abs(num)).bit_length() - 1 - (den.bit_length() - 1)


@pytest.mark.parametrize("element", INTEGRAL + NON_INTEGRAL)
def test_the_guard_is_the_documented_condition(element):
    """The vectorized mask equals the condition on each block with exact
    rationals, on blocks near each edge: zero blocks, denormal, NaN and Inf
    elements, tiny and huge values, and ``S/g`` around ``T``."""
    rng = np.random.default_rng(7)
    q, bmax = oracle.amx_bounds(element)
    rows = [np.zeros(32), rng.standard_normal(32), rng.standard_normal(32) * 2.0**-118,
            rng.standard_normal(32) * 2.0**-130, rng.standard_normal(32) * 2.0**120,
            rng.standard_normal(32) * np.exp2(rng.integers(-12, 12, 32))]  # fmt: skip
    nan, inf = rng.standard_normal(32), rng.standard_normal(32)
    nan[3], inf[30] = np.nan, -np.inf
    ladder = np.zeros(32)
    ladder[:11] = [1.0] + [4.0**i for i in range(1, 11)]  # S/g = 1,398,101: E2M1's T, floored
    over = ladder.copy()
    over[11] = 1.0  # 1,398,102: above
    a = bf16(np.stack(rows + [nan, inf, ladder, over]))
    a = np.concatenate([a, a[:, ::-1]], axis=1)  # two blocks per row
    got = oracle.amx_guard(a, element)
    want = [[_reference_guard(r[j * 32 : (j + 1) * 32], q, bmax) for j in range(2)] for r in a]
    assert (got == np.array(want)).all()
    if element == "f4E2M1FN":
        assert got[-2].all() and not got[-1].any()
    if element in NON_INTEGRAL:  # FP8: only the all-zero block passes
        assert got[0].all() and got[1:].sum() == 0


@pytest.mark.parametrize("element", INTEGRAL)
@pytest.mark.parametrize("kind, m, n", [("normal", 33, 48), ("spread", 17, 37), ("rows", 5, 20)])
def test_the_guarded_model_gives_the_exact_paths_bits(element, kind, m, n):
    """Random normal data, elements spread over 40 binades (most blocks fall
    back), rows over 80 binades; ragged M and N."""
    b = weight(element, n, 128, seed=2)
    a = activations(kind, m, 128, seed=3)
    w = oracle.amx_prepare(b)
    ok = oracle.amx_pass(a, w)
    assert oracle.amx_guard_call(a, w)
    assert 0 < ok.sum() and (kind != "spread" or (~ok).sum() >= ok.shape[1] * (m // 2))
    assert same_bits(oracle.amx_guarded_matmul(a, w), exact(a, b)).all()


@pytest.mark.parametrize("element", INTEGRAL)
def test_the_model_equals_linear_with_bf16_activations(element, monkeypatch):
    """The product's exact path: ``Linear(w, activations="bf16")`` on the
    same (bf16-exact) inputs (its AMX path off: ``MLIR_MX_AMX=0``)."""
    monkeypatch.setenv("MLIR_MX_AMX", "0")
    b = weight(element, 40, 96, seed=4)
    a = np.concatenate([activations("normal", 9, 96, 5), activations("spread", 8, 96, 6)])
    w_lin = MXArray(b.codes.T.copy(), b.scales.T.copy(), element, 32, 1)
    got = oracle.amx_guarded_matmul(a, oracle.amx_prepare(b))
    assert same_bits(got, mlir_mx.Linear(w_lin, activations="bf16", threads=1)(a)).all()
    assert not oracle.amx_pass(a, oracle.amx_prepare(b)).all()


def _run_tiles(a, w):
    """The tiles accumulated with every (row, block) treated as passing: the
    guard ignored (no flagged blocks here)."""
    c = np.zeros((a.shape[0], w.tiles.shape[2] // 2), np.float32)
    for j in range(w.tiles.shape[0]):
        c = oracle.amx_tdpbf16ps(a[:, j * 32 : (j + 1) * 32], w.values(j), c)
    return c


@pytest.mark.parametrize("element", INTEGRAL)
def test_ignoring_the_guard_changes_bits(element):
    b = weight(element, 32, 128, seed=8)
    a = activations("spread", 24, 128, seed=9)
    w = oracle.amx_prepare(b)
    assert not w.flagged.any() and oracle.amx_guard_call(a, w)
    want = exact(a, b)
    assert not same_bits(_run_tiles(a, w), want).all()
    assert same_bits(oracle.amx_guarded_matmul(a, w), want).all()


def test_ignoring_the_per_call_condition_changes_bits(monkeypatch):
    """Activations near 2^-128 (the guard fails them: their ``t`` goes
    through the f32 chain and is subnormal): with the per-call condition
    the call runs on the exact path; forced onto the tiles, the next
    block's DAZ reads the subnormal C as zero."""
    b = weight("f4E2M1FN", 16, 128, seed=10, spread=1)
    a = bf16(np.random.default_rng(11).standard_normal((8, 128)) * 2.0**-128)
    w = oracle.amx_prepare(b)
    assert not oracle.amx_guard_call(a, w)
    want = exact(a, b)
    assert same_bits(oracle.amx_guarded_matmul(a, w), want).all()
    monkeypatch.setattr(amx_module, "amx_guard_call", lambda a, w: True)
    assert not same_bits(oracle.amx_guarded_matmul(a, w), want).all()


#: (block, column) -> E8M0 code: 2^-127, 2^-126 (flagged for every format:
#: q <= 1/2), 2^125 and 2^127 (flagged where bmax sb >= 2^128).
EXTREME = {(0, 0): 0, (1, 3): 1, (2, 5): 0, (3, 7): 1, (1, 1): 252, (2, 2): 254, (3, 4): 253}


@pytest.mark.parametrize("element", INTEGRAL)
@pytest.mark.parametrize("scale_a", [2.0**40, 1.0, 2.0**-60])
def test_blocks_with_extreme_scales(element, scale_a):
    """Weight blocks at the E8M0 range's ends keep the unscaled form (flagged)
    and the per-block store; large activations pass the per-call condition
    over 2^-127 scales, small ones do not (the exact path then), and
    2^127 scales over large activations overflow to Inf on both paths."""
    b = with_scales(weight(element, 12, 128, seed=12, spread=2), EXTREME)
    a = activations("normal", 19, 128, seed=13) * np.float32(scale_a)
    w = oracle.amx_prepare(b)
    q, bmax = oracle.amx_bounds(element)
    assert w.flagged.sum() == sum(
        1 for c in EXTREME.values() if c <= 1 or bmax * 2.0 ** (c - 127) >= 2**128
    )
    assert oracle.amx_guard_call(a, w) == (scale_a > 1)
    assert same_bits(oracle.amx_guarded_matmul(a, w), exact(a, b)).all()


def test_a_chain_that_overflows_falls_back():
    """E2M1 codes 6, 6 with ``sb = 2^125`` (``b sb`` folds into bf16) against
    ``a = 4, -4``: A alone passes the guard, but the scaled chains overflow
    (``Inf - Inf``) where the exact path gives 0, so the (row, block) fails
    ``amx_pass`` and falls back."""
    codes = np.zeros((32, 1), ml_dtypes.float4_e2m1fn)
    codes[:2] = 6
    b = MXArray(codes, np.array([[127 + 125]], np.uint8), "f4E2M1FN", 32, 0)
    a = np.zeros((1, 32), np.float32)
    a[0, :2] = 4, -4
    w = oracle.amx_prepare(b)
    assert not w.flagged.any() and oracle.amx_guard(a, "f4E2M1FN").all()
    assert np.isnan(oracle.amx_tdpbf16ps(a, w.values(0), np.zeros((1, 1), np.float32))).all()
    assert not oracle.amx_pass(a, w).any()
    assert same_bits(oracle.amx_guarded_matmul(a, w), exact(a, b)).all()
    assert oracle.amx_guarded_matmul(a, w).view(np.uint32)[0, 0] == 0


def test_non_finite_activations_fall_back():
    b = weight("f4E2M1FN", 16, 64, seed=14)
    a = activations("normal", 6, 64, seed=15)
    a[1, 3], a[2, 40], a[4, 7], a[4, 50] = np.inf, np.nan, -np.inf, np.inf
    w = oracle.amx_prepare(b)
    ok = oracle.amx_pass(a, w)
    assert not ok[1, 0] and not ok[2, 1] and ok[1, 1] and ok[2, 0]
    got, want = oracle.amx_guarded_matmul(a, w), exact(a, b)
    assert np.isnan(got).any() and same_bits(got, want).all()


def test_the_prepared_weight_is_b_times_sb_in_the_pair_layout():
    b = with_scales(weight("f6E2M3FN", 6, 64, seed=16), {(0, 1): 0, (1, 2): 254})
    w = oracle.amx_prepare(b)
    assert w.tiles.dtype == ml_dtypes.bfloat16 and w.tiles.shape == (2, 16, 12)
    assert w.flagged.tolist() == [[False, True] + [False] * 4, [False, False, True] + [False] * 3]
    vals = b.element_values() * np.repeat(np.where(w.flagged, 1.0, b.scale_values()), 32, axis=0)
    for j in range(2):
        assert (w.tiles[j] == oracle.amx_pair_layout(vals[j * 32 : (j + 1) * 32])).all()
        assert (w.values(j) == vals[j * 32 : (j + 1) * 32]).all()


def test_bad_inputs_are_refused_by_name():
    w = oracle.amx_prepare(weight("f4E2M1FN", 4, 64))
    good = activations("normal", 2, 64)
    for bad, says in [(good + np.float32(2.0**-20), "not bf16"), (good[:, :32], "K = 32"),
                      (good.astype(np.float64), "f32 (M, K)")]:  # fmt: skip
        with pytest.raises(MXValueError, match="a: .*" + re.escape(says)):
            oracle.amx_guarded_matmul(bad, w)
    with pytest.raises(MXValueError, match="b: "):
        oracle.amx_prepare(oracle.quantize(np.ones((4, 64), np.float32), "f4E2M1FN", 32))


@pytest.mark.slow
@pytest.mark.parametrize("element", INTEGRAL)
def test_many_random_cases_give_the_exact_paths_bits(element):
    """A campaign: 60 seeds x 3 activation kinds (times 2^40 on every other
    seed, so that 2^-127 scales pass the per-call condition), extreme scales
    on a third of the weights.  Counts (printed): output elements, (row,
    block)s, fallbacks, calls on the exact path, calls on the tiles with
    flagged weight blocks."""
    counts = dict.fromkeys(["elements", "blocks", "fallbacks", "exact_calls", "flagged_calls"], 0)
    for seed in range(60):
        rng = np.random.default_rng(seed)
        m, n = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        b = weight(element, n, 256, seed=seed, spread=int(rng.integers(1, 20)))
        if seed % 3 == 0:
            codes = [0, 1, 253, 254]
            at = [(int(rng.integers(8)), int(rng.integers(n))) for _ in range(4)]
            b = with_scales(b, {p: int(rng.choice(codes)) for p in at})
        w = oracle.amx_prepare(b)
        for kind in ("normal", "spread", "rows"):
            a = activations(kind, m, 256, seed=1000 + seed) * np.float32(2.0 ** (40 * (seed % 2)))
            got = oracle.amx_guarded_matmul(a, w)
            assert same_bits(got, exact(a, b)).all(), (seed, kind)
            ok, tiles = oracle.amx_pass(a, w), oracle.amx_guard_call(a, w)
            counts["elements"] += got.size
            counts["blocks"] += ok.size
            counts["fallbacks"] += int((~ok).sum())
            counts["exact_calls"] += not tiles
            counts["flagged_calls"] += tiles and bool(w.flagged.any())
    print(element, counts)
    assert counts["flagged_calls"] > 0 and counts["fallbacks"] > 0


@pytest.mark.parametrize("element", INTEGRAL)
def test_the_plan_is_the_pass_mask_or_none_where_the_call_fails(element):
    """``amx_plan`` (one scan of A): ``amx_pass``'s mask where
    ``amx_guard_call`` holds, None where it fails (activations near 2^-128)."""
    w = oracle.amx_prepare(weight(element, 16, 128, seed=17))
    a = activations("spread", 21, 128, seed=18)
    assert oracle.amx_guard_call(a, w)
    plan = oracle.amx_plan(a, w)
    assert plan is not None and (plan == oracle.amx_pass(a, w)).all() and not plan.all()
    tiny = bf16(np.random.default_rng(19).standard_normal((4, 128)) * 2.0**-128)
    assert not oracle.amx_guard_call(tiny, w) and oracle.amx_plan(tiny, w) is None


def test_an_empty_weight_prepares_without_a_reduction_error():
    """N = 0: ``amx_prepare`` gives the empty flags and +-inf bounds (no
    numpy "zero-size array" error from the per-block reductions)."""
    b = oracle.quantize(np.zeros((64, 0), np.float32), "f4E2M1FN", 32, axis=0)
    w = oracle.amx_prepare(b)
    assert w.flagged.shape == (2, 0)
    assert np.all(w.sb_min == np.inf) and np.all(w.sb_max == -np.inf)
