"""The compiled preparation of A for the guarded AMX-BF16 matmul
(``mlir_mx.kernels.amx.prepare``, driven by ``mlir_mx.linear.amx_prepare``;
issue 51): its guard is ``oracle.amx_plan``'s decision bit for bit, and its
tile-layout A, failing lists and failing blocks are the numpy model's
(``amx_matmul.prepare_model``), on directed cases (denormals, Inf/NaN, zero
blocks, S/g at the bound T and one past it, g q at 2^-126, the overflow rule,
wide binade spreads, values that are not bf16) for every element format with
a guard, and on seeded random calls.  No tile instruction: it runs on any
CPU the project supports."""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np
import pytest
from format_cases import INTEGRAL, NON_INTEGRAL

from mlir_mx import oracle
from mlir_mx.linear.amx_matmul import prepare_model
from mlir_mx.linear.amx_prepare import by_block, guard_params, prepare_activations
from mlir_mx.numerics import MXArray
from mlir_mx.numerics.amx_guard import amx_bounds

FORMATS = INTEGRAL + NON_INTEGRAL
K = 256


def bf16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def weight(element, n=20, k=K, seed=0, codes=None) -> oracle.AMXWeight:
    """B (K, N) blocked along K, prepared; ``codes``: E8M0 codes of every
    scale of block ``j`` ({j: code})."""
    rng = np.random.default_rng(seed)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), element, 32)
    s = w.scales.view(np.uint8).T.copy()
    for j, code in (codes or {}).items():
        s[j, :] = code
    return oracle.amx_prepare(MXArray(w.codes.T.copy(), s, element, 32, 0))


def exact_sum_row(total: int, rng) -> np.ndarray:
    """32 bf16 values (one block) with ``g = 1`` and ``S/g = total``:
    1.0, then ``total - 1`` cut into 8-bit chunks, random signs."""
    out, rest, shift = [1.0], total - 1, 0
    while rest:
        chunk = rest & 0xFF
        if chunk:
            out.append(float(chunk << shift))
        rest >>= 8
        shift += 8
    row = np.zeros(32, np.float32)
    row[: len(out)] = out
    return row * rng.choice([-1.0, 1.0], 32).astype(np.float32)


def directed(element) -> np.ndarray:
    """One block row per directed case, K = 256 (8 blocks), bf16 values."""
    rng = np.random.default_rng(7)
    q, bmax = amx_bounds(element)
    big_t = int(2.0**24 * q / bmax)
    rows = [bf16(rng.standard_normal(K)) for _ in range(4)]
    zero, neg_zero = np.zeros(K, np.float32), np.full(K, -0.0, np.float32)
    rows += [zero, neg_zero]
    dn = bf16(rng.standard_normal(K) * 2.0**-130)  # bf16 denormals (and some zeros)
    rows += [dn, np.where(np.arange(K) % 3 == 0, dn, bf16(rng.standard_normal(K) * 2.0**-120))]
    for lq_off in (0, -1, 1):  # g q at 2^-126, just below, just above
        g = 2.0 ** (-126 - math.log2(q) + lq_off)
        rows.append(bf16(np.round(rng.standard_normal(K) * 4) * g))
    nonfinite = bf16(rng.standard_normal(K))
    nonfinite[[3, 40, 77, 130, 200]] = [np.inf, np.nan, -np.inf, np.nan, np.inf]
    rows.append(nonfinite)
    for total in sorted({max(big_t, 1), big_t + 1, max(big_t - 1, 1)}):  # S/g at T
        for e in (0, -60, 60):
            row = np.concatenate([exact_sum_row(total, rng) for _ in range(K // 32)])
            rows.append(bf16(row * 2.0**e))
    for spread in (10, 40, 80):  # each element in its own binade
        rows.append(bf16(rng.standard_normal(K) * np.exp2(rng.integers(-spread, spread, K))))
    for top in (2.0**127 / bmax, 2.0**126 / bmax, 2.0**120):  # the overflow rule
        rows.append(bf16(np.full(K, top / 32, np.float32) * rng.choice([-1, 1], K)))
        rows.append(bf16(np.round(rng.standard_normal(K) * 8) * top / 128))
    rows.append(bf16(np.full(K, 2.0**127)))
    return np.stack(rows).astype(np.float32)


def ok_map(args, m: int, nb: int) -> np.ndarray:
    """The pass mask (M, K/32) the CSR list ``ptr``, ``rows`` encodes."""
    _tiles, ptr, rows = args[:3]
    ok = np.ones((-(-m // 16) * 16, nb), bool)
    for s in range(len(ptr) - 1):
        for f in range(ptr[s], ptr[s + 1]):
            ok[(s // nb) * 16 + rows[f], s % nb] = False
    return ok[:m]


def no_call_condition(params):
    """The kernel's arguments with the per-call condition never failing."""
    return dataclasses.replace(params, lim=params.lim - 10_000)


def assert_same_args(got, want):
    names = ("a_tiles", "ptr", "rows", "bptr", "bidx", "fa")
    for name, x, y in zip(names, got, want, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape, (name, x.shape, y.shape)
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), name


def check(a, w, share=1.0):
    """The kernel against the oracle and the numpy model on ``a``."""
    params = guard_params(w)
    done = prepare_activations(a, params, share)
    r = bf16(a)
    assert (done.breaks == 0) == oracle.amx_guard_call(r, w)
    free = prepare_activations(a, no_call_condition(params), 1.0)
    want_ok = oracle.amx_pass(r, w)
    got_ok = ok_map(free.args, *want_ok.shape)
    assert np.array_equal(got_ok, want_ok), f"{int((got_ok != want_ok).sum())} decisions differ"
    assert free.failing == int((~want_ok).sum())
    model = prepare_model(r, w, share)
    assert (done.args is None) == (model is None)
    if model is not None:
        assert_same_args(done.args, model)
    return done, want_ok


@pytest.mark.parametrize("element", FORMATS)
def test_directed_cases_decide_as_the_oracle(element):
    w = weight(element)
    a = directed(element)
    _, ok = check(a, w)
    assert ok.any() or element in NON_INTEGRAL  # the cases pass and fail
    assert not ok.all()


@pytest.mark.parametrize("element", INTEGRAL)
def test_the_bound_t_is_met_exactly_where_the_oracle_meets_it(element):
    """Blocks with ``S/g`` = floor(T) pass and floor(T) + 1 fail, at three
    magnitudes."""
    q, bmax = amx_bounds(element)
    big_t = math.floor(2.0**24 * q / bmax)
    rng = np.random.default_rng(3)
    rows = [np.concatenate([exact_sum_row(t, rng) for _ in range(K // 32)]) * 2.0**e
            for t in (big_t, big_t + 1) for e in (-20, 0, 20)]  # fmt: skip
    w = weight(element, seed=2)
    _, ok = check(np.stack(rows).astype(np.float32), w)
    assert ok[:3].all() and not ok[3:].any()


@pytest.mark.parametrize("element", INTEGRAL)
def test_small_scales_break_the_per_call_condition(element):
    """Weight blocks at scales 2^-119 and 2^-115 and 1 against small activations:
    the kernel says the call breaks the condition exactly when the oracle's
    ``amx_guard_call`` fails (then no arguments: the exact path)."""
    rng = np.random.default_rng(4)
    seen = set()
    for code, e in [(8, -5), (8, 20), (12, 40), (127, -100), (127, -130)]:
        w = weight(element, seed=5, codes={2: code, 5: code})
        assert not w.flagged.any()
        a = bf16(rng.standard_normal((20, K)) * 2.0**e)
        done, _ = check(a, w)
        assert (done.args is None) == (not oracle.amx_guard_call(a, w))
        seen.add(done.breaks > 0)
    assert seen == {True, False}


def test_flagged_weights_get_no_kernel_arguments():
    w = weight("f4E2M1FN", codes={1: 0xFF})  # a NaN scale: flagged
    assert w.flagged.any() and guard_params(w) is None


@pytest.mark.parametrize("element", INTEGRAL)
def test_values_that_are_not_bf16_are_rounded_and_counted(element):
    """f32 inputs (as ``Linear(activations="bf16")`` gets them): the kernel
    rounds to bf16 nearest even (ml_dtypes' rounding; a NaN stays NaN) and
    counts the blocks that held other values."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((19, K)).astype(np.float32)
    a[2, 7], a[5, 100] = np.nan, 3.0e38  # rounds to Inf
    a[6] = bf16(a[6])
    done, _ = check(a, weight(element, seed=8))
    assert done.nonbf16 == 19 * (K // 32) - K // 32


def test_by_block_lists_each_blocks_entries_in_fours():
    ptr = np.array([0, 2, 2, 3, 8], np.int32)  # s = tile * 2 + block, nb = 2
    bptr, bidx = by_block(ptr, 2)
    assert bptr.tolist() == [0, 4, 12]  # block 0: entries 0, 1, 2; block 1: 3 to 7
    assert bidx.tolist() == [0, 1, 2, 0, 3, 4, 5, 6, 7, 3, 4, 5]
    bptr, bidx = by_block(np.zeros(5, np.int32), 2)
    assert bptr.tolist() == [0, 0, 0] and bidx.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(6))
def test_random_calls_give_the_models_arguments(seed):
    rng = np.random.default_rng(100 + seed)
    element = INTEGRAL[seed % len(INTEGRAL)]
    m, k = int(rng.integers(1, 70)), 32 * int(rng.integers(1, 10))
    a = rng.standard_normal((m, k)) * np.exp2(rng.integers(-3 * seed, 3 * seed + 1, (m, k)))
    a[rng.random((m, k)) < 0.05] = 0.0
    check(bf16(a * 2.0 ** int(rng.integers(-100, 100))), weight(element, 17, k, seed))


@pytest.mark.slow
@pytest.mark.parametrize("element", FORMATS)
def test_many_random_calls_decide_as_the_oracle(element):
    """A campaign: 60 seeds x 3 distributions.  Counts printed."""
    decisions = failing = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        m, k = int(rng.integers(1, 300)), 32 * int(rng.integers(1, 40))
        w = weight(element, 9, k, seed)
        for kind in range(3):
            a = rng.standard_normal((m, k))
            if kind == 1:
                a *= np.exp2(rng.integers(-40, 40, (m, k)))
            if kind == 2:
                a = np.round(a * 64) * 2.0 ** int(rng.integers(-140, 120))
            _, ok = check(a.astype(np.float32), w)
            decisions += ok.size
            failing += int((~ok).sum())
    print(element, {"decisions": decisions, "failing": failing})
    assert decisions and failing


@pytest.mark.parametrize("m", [1, 16, 17, 33])
@pytest.mark.parametrize("k", [32, 96])
def test_the_kernels_own_lists_are_the_models_on_edge_inputs(m, k):
    """The serial E8M0 kernel's by-block lists (``prepare_module(lists=True)``)
    where nothing fails, where every (row, block) fails, and on a mix, one
    after the other with the same buffers (no earlier call's entries kept)."""
    rng = np.random.default_rng(m + k)
    w = weight(INTEGRAL[0], 17, k, seed=m)
    params = guard_params(w)
    signs = np.where(rng.random((m, k)) < 0.5, -1.0, 1.0).astype(np.float32)
    every = signs.copy()
    every[:, ::32] *= np.float32(2.0**40)  # one element a block: S/g past the bound
    mixed = np.where(rng.random((m, k)) < 0.3, every, signs)
    buffers: dict = {}
    for a, failing in ((every, m * k // 32), (signs, 0), (mixed, None), (every, m * k // 32)):
        done = prepare_activations(a, params, 1.0, buffers)
        assert failing is None or done.failing == failing
        assert_same_args(done.args, prepare_model(a, w, 1.0))
