"""A's preparation for the guarded AMX-BF16 matmul on the call's team
(``mlir_mx.linear.amx_prepare``, ``prepare_module(tiles=True)``; issue 51):
the row tiles prepared in parallel, each in its own slots, then packed, give
the 1-thread kernel's arrays bit for bit (tile-layout A with the failing
(row, block)s zeroed, the CSR lists, the failing blocks, the by-block lists
and the counters) on ragged M; and a ``Linear(activations="bf16")`` on 2
threads gives the exact path's bits."""

from __future__ import annotations

import os

import numpy as np
import pytest
from format_cases import INTEGRAL, NON_INTEGRAL

import mlir_mx
from mlir_mx import host, oracle
from mlir_mx.amx_permission import amx_permission
from mlir_mx.execution import threads
from mlir_mx.linear import amx_linear, amx_prepare
from mlir_mx.linear.amx_prepare import guard_params, prepare_activations, split_threads
from mlir_mx.numerics import MXArray

K = 256
FORMATS = INTEGRAL + NON_INTEGRAL


def weight(element="f4E2M1FN", n=20, k=K, seed=0):
    """B (K, N) prepared for the tiles: blocks of 32, or NVFP4's 16."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    if element == "nvfp4":
        return oracle.amx_prepare(oracle.quantize(w, "nvfp4", 16, axis=0))
    q = oracle.quantize(w.T.copy(), element, 32)
    return oracle.amx_prepare(MXArray(q.codes.T.copy(), q.scales.view(np.uint8).T.copy(),
                                      element, 32, 0))  # fmt: skip


def same_preparation(element: str, m: int, k: int, seed: int) -> int:
    """Asserts the team's preparation (2 threads) is the 1-thread one, byte
    for byte; returns the failing (row, block)s."""
    params = guard_params(weight(element, k=k, seed=seed))
    a = activations(m, k, seed)
    one = prepare_activations(a, params, 1.0)
    os.environ[amx_prepare.SPLIT_ENV] = "0"  # every size on the team
    try:
        before = threads.regions()
        two = prepare_activations(a, params, 1.0, threads=2)
        assert threads.regions() == before + 1  # a parallel region on a team of 2
    finally:
        del os.environ[amx_prepare.SPLIT_ENV]
    assert (one.failing, one.breaks, one.nonbf16) == (two.failing, two.breaks, two.nonbf16)
    assert (one.args is None) == (two.args is None)
    for x, y in zip(one.args or (), two.args or (), strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8))
    return one.failing


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


E2M1 = "f4E2M1FN"
INT8 = "i8"


@pytest.mark.parametrize(("element", "m"), [(E2M1, 17), (E2M1, 37), (INT8, 48), ("nvfp4", 61)])
def test_team_preparation_is_the_serial_one(element, m):
    assert same_preparation(element, m, K, seed=m) > 0


@pytest.mark.slow
def test_team_preparation_campaign():
    """Seeded random shapes (M 17-300, K 64-2048), every format with a
    guard and NVFP4; about a fifth of the (row, block)s failing."""
    rng = np.random.default_rng(51)
    elements = [*FORMATS, "nvfp4"]
    cases = failing = 0
    for i in range(240):
        m, k = int(rng.integers(17, 301)), 32 * int(rng.integers(2, 65))
        failing += same_preparation(elements[i % len(elements)], m, k, seed=i)
        cases += 1
    assert cases == 240 and failing > 0
    print(f"{cases} calls, {failing} failing (row, block)s, all byte-equal")


def test_split_threads_rule(monkeypatch):
    monkeypatch.delenv(amx_prepare.SPLIT_ENV, raising=False)
    assert amx_prepare.split_min() == amx_prepare.SPLIT_MIN == 1 << 19  # unset: the default
    assert split_threads(128, 4096, 2) == 2 and split_threads(128, 4096 - 32, 2) == 1
    monkeypatch.setenv(amx_prepare.SPLIT_ENV, "off")
    assert split_threads(256, 4096, 2) == 1
    monkeypatch.setenv(amx_prepare.SPLIT_ENV, str(128 * 2048))
    assert split_threads(128, 2048, 2) == 2
    assert split_threads(128, 2048 - 32, 2) == 1
    assert split_threads(256, 4096, 1) == 1
    assert split_threads(16, 1 << 20, 2) == 1  # one row tile
    monkeypatch.setenv(amx_prepare.SPLIT_ENV, "no")
    assert split_threads(256, 4096, 2) == 1


HAS_AMX = host.has_features("amx_tile", "amx_bf16") and amx_permission().granted


@pytest.mark.skipif(not HAS_AMX, reason="no AMX-BF16 on this CPU")
def test_linear_on_two_threads_with_the_team_preparation_is_exact(monkeypatch):
    """130 rows (8 tiles and 2 rows), every tenth row spread over 40 binades
    (its blocks fall back): the AMX path with A prepared on the team gives
    the exact path's bits."""
    rng = np.random.default_rng(7)
    w = oracle.quantize((rng.standard_normal((72, 128)) * 4).astype(np.float32), "f4E2M1FN", 32)
    x = np.round(rng.standard_normal((130, 128)) * 16) / 16
    x[::10] = rng.standard_normal((13, 128)) * np.exp2(rng.integers(-20, 20, (13, 128)))
    x = x.astype(np.float32)
    with monkeypatch.context() as mp:
        mp.setenv(amx_linear.ENV, "0")
        want = mlir_mx.Linear(w, activations="bf16", threads=2)(x)
    monkeypatch.setenv(amx_prepare.SPLIT_ENV, "0")
    lin = mlir_mx.Linear(w, activations="bf16", threads=2)
    lin(x)  # the weight prepared, the kernels compiled
    before = threads.regions()
    got = lin(x)
    assert amx_linear.last_path(lin) == "amx"
    assert threads.regions() == before + 2  # the preparation's region, then the matmul's
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
