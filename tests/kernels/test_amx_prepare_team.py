"""A's preparation for the guarded AMX-BF16 matmul on the call's team
(``mlir_mx.linear.amx_prepare``, ``prepare_module(tiles=True)``; issue 51):
the row tiles prepared in parallel, each in its own slots, then packed, give
the 1-thread kernel's arrays bit for bit (tile-layout A with the failing
(row, block)s zeroed, the CSR lists, the failing blocks, the by-block lists
and the counters) on ragged M; and a ``Linear(activations="bf16")`` on 2
threads gives the exact path's bits."""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.linear import amx_prepare
from mlir_mx.linear.amx_prepare import guard_params, prepare_activations, split_threads
from mlir_mx.numerics import MXArray

K = 256


def weight(element="f4E2M1FN", n=20, k=K, seed=0):
    rng = np.random.default_rng(seed)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), element, 32)
    return oracle.amx_prepare(MXArray(w.codes.T.copy(), w.scales.view(np.uint8).T.copy(),
                                      element, 32, 0))  # fmt: skip


def activations(m: int, k: int, seed: int) -> np.ndarray:
    """Random A with about a fifth of its (row, block)s failing the guard
    (one element scaled by 2^40: S/g past the bound), some NaN and Inf."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    rows, cols = np.nonzero(rng.random((m, k // 32)) < 0.2)
    a[rows, cols * 32 + rng.integers(0, 32, len(rows))] *= np.float32(2.0**40)
    a[rng.integers(0, m), rng.integers(0, k)] = np.nan
    a[rng.integers(0, m), rng.integers(0, k)] = np.inf
    return a


@pytest.mark.parametrize("m", [17, 37, 48, 61])
def test_team_preparation_is_the_serial_one(m, monkeypatch):
    params = guard_params(weight())
    a = activations(m, K, seed=m)
    one = prepare_activations(a, params, 1.0)
    monkeypatch.setattr(amx_prepare, "SPLIT_MIN", 0)  # every size on the team
    assert split_threads(m, K, 2) == 2
    two = prepare_activations(a, params, 1.0, threads=2)
    assert one.failing > 0 and one.args is not None
    assert (one.failing, one.breaks, one.nonbf16) == (two.failing, two.breaks, two.nonbf16)
    for x, y in zip(one.args, two.args, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


def test_split_threads_rule():
    assert split_threads(256, 4096, 1) == 1
    assert split_threads(16, 1 << 20, 2) == 1  # one row tile
    assert split_threads(128, amx_prepare.SPLIT_MIN // 128, 2) == 2
    assert split_threads(128, amx_prepare.SPLIT_MIN // 128 - 32, 2) == 1
