"""The numpy model of AMX-BF16's ``TDPBF16PS`` (``oracle.amx_tdpbf16ps``:
two FMA chains, DAZ/FTZ at each step) against the bits the hardware gave in
``bench/probes/amx-bf16-model.c``'s directed cases (goldens; issue 51).
Runs anywhere: no AMX needed."""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.linear.amx import DIRECTED_CASES, directed_tile, random_tiles

#: Output element (0, 0) of each directed case, as the probe printed it on
#: this host (Intel Xeon, Sapphire Rapids class, KVM; 2026-12-05):
#: ``gcc -O2 -mamx-tile -mamx-bf16 -mavx512f bench/probes/amx-bf16-model.c``.
GOLDENS = {
    "2^20, -2^20, 2^-20 all even": 0x35800000,
    "2^20 (even), -2^20 (odd), 2^-20 (even): lost": 0x00000000,
    "2^20 (k 0), -2^20 (k 31), 2^-20 (k 4): lost": 0x00000000,
    "c = 2^20, -2^20 (k 0), 2^-20 (k 4): lost": 0x00000000,
    "c = 1, + 1.5 * 2^-24: nearest even": 0x3F800001,
    "c = 1, + 2^-24: tie to even": 0x3F800000,
    "c = -0, every product -0": 0x00000000,
    "c = -0, no products": 0x00000000,
    "c = 2^-130 (denormal, DAZ) + 2^-125": 0x01000000,
    "c = -(2^-125 - 2^-130) + 2^-125: FTZ": 0x00000000,
    "E + O = 2^-130 (FTZ), + c = 2^-120": 0x03800000,
    "even chain 2^-125, 2^-130 (FTZ), + 2^-125": 0x01000000,
    "bf16 denormal input (DAZ) * 2^100": 0x00000000,
    "quiet NaN input": 0x7FC10000,
    "signalling NaN input": 0x7FC10000,
    "negative NaN in B": 0xFFC10000,
    "NaN accumulator": 0x7FC00123,
    "Inf * 0": 0xFFC00000,
    "Inf (even) - Inf (odd)": 0xFFC00000,
    "2^128 then -2^128 in one chain": 0x7F800000,
    "E + O overflows": 0x7F800000,
}


def _bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def test_every_directed_case_has_a_golden():
    assert [c[0] for c in DIRECTED_CASES] == list(GOLDENS)


@pytest.mark.parametrize("case", DIRECTED_CASES, ids=[c[0] for c in DIRECTED_CASES])
def test_the_model_gives_the_hardwares_bits(case):
    a, b, c = directed_tile(case)
    out = _bits(oracle.amx_tdpbf16ps(a, b, c))
    assert int(out[0, 0]) == GOLDENS[case[0]]
    if np.isfinite(a).all() and np.isfinite(b).all():
        rest = out.copy()
        rest[0, 0] = 0
        assert not rest.any()  # zero rows and columns give +0, never -0


def _single_chain(a, b, c):
    """Intel's pseudocode read literally: one in-order FMA chain from c."""
    ftz = lambda x: np.where(np.abs(x) < 2.0**-126, np.copysign(np.float32(0), x), x)  # noqa: E731
    out = np.empty(c.shape, np.float32)
    for m in range(a.shape[0]):
        for n in range(b.shape[1]):
            t = np.float32(ftz(c[m, n]))
            for k in range(a.shape[1]):
                exact = np.float64(ftz(a[m, k])) * np.float64(ftz(b[k, n])) + np.float64(t)
                t = np.float32(ftz(np.float32(exact)))  # exact in f64 for these small cases
            out[m, n] = t
    return out


def test_the_model_is_not_the_single_chain():
    """The case that tells them apart: a term lost between the chains."""
    case = next(c for c in DIRECTED_CASES if c[0].startswith("2^20 (even)"))
    a, b, c = directed_tile(case)
    assert float(_single_chain(a, b, c)[0, 0]) == 2.0**-20
    assert float(oracle.amx_tdpbf16ps(a, b, c)[0, 0]) == 0.0


def test_without_rounding_the_model_is_the_exact_sum():
    """Small integers (cancellation): every chain step exact, so the model
    is ``c + a @ b`` exactly, +0 where that is 0."""
    rng = np.random.default_rng(5)
    a = rng.integers(-4, 5, (16, 32)).astype(np.float32)
    b = rng.integers(-4, 5, (32, 16)).astype(np.float32)
    c = rng.integers(-64, 65, (16, 16)).astype(np.float32)
    got = oracle.amx_tdpbf16ps(a, b, c)
    want = (c.astype(np.float64) + a.astype(np.float64) @ b).astype(np.float32)
    assert np.array_equal(_bits(got), _bits(want + np.float32(0)))


def test_the_pair_layout():
    b = np.arange(32 * 16, dtype=np.float32).reshape(32, 16)
    pairs = oracle.amx_pair_layout(b)
    assert pairs.shape == (16, 32)
    for k in range(32):
        for n in range(16):
            assert pairs[k // 2, 2 * n + k % 2] == b[k, n]


def test_the_random_tiles_cover_the_edges():
    """The self-test's random tiles hold what the model must get right."""
    tiles = list(random_tiles())
    a = np.concatenate([t[0].ravel() for t in tiles])
    c = np.concatenate([t[2].ravel() for t in tiles])
    tiny = (a != 0) & (np.abs(a) < 2.0**-126)
    assert tiny.any() and np.isnan(a).any() and np.isinf(a).any()
    assert (_bits(a) == 0x80000000).any() and (_bits(c) == 0x80000000).any()
    assert ((c != 0) & (np.abs(c) < 2.0**-126)).any()
