"""The by-block lists of A's per-call preparation for the guarded AMX-BF16
matmul (issue 51): :func:`mlir_mx.linear.amx_prepare.by_block` (numpy,
vectorized, from the prepare kernel's CSR list) gives
:func:`mlir_mx.linear.amx_matmul.failing_rows`' lists (the numpy model, a
loop over blocks with ``np.resize``) byte for byte, on random and edge
masks: nothing failing, everything failing, M not a multiple of 16, one
block, NVFP4's two lists (chains and tile route) with either one empty.
Numpy only: runs on any CPU."""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx.linear.amx_matmul import failing_rows
from mlir_mx.linear.amx_prepare import block_major, by_block


def host_lists(ok: np.ndarray, route: np.ndarray | None) -> list[np.ndarray]:
    """``by_block``'s ``(bptr, bidx)`` (and for a ``route``, the tile
    route's ``(tptr, tidx)``) from the model's CSR list ``ptr``, each entry's
    route looked up from its row (``grow``) and block."""
    nb = ok.shape[1]
    ptr, _rows, _bptr, _bidx, grow, *_ = failing_rows(ok, route)
    if route is None:
        return list(by_block(ptr, nb))
    block = np.repeat(np.arange(len(ptr) - 1) % nb, np.diff(ptr))
    tiled = route[grow[: len(block)], block]
    major = block_major(ptr, nb)
    return [*by_block(ptr, nb, ~tiled, major=major), *by_block(ptr, nb, tiled, 16, major)]


def assert_model_lists(ok: np.ndarray, route: np.ndarray | None = None) -> None:
    model = failing_rows(ok, route)
    want = [model[2], model[3], *model[5:]]
    have = host_lists(ok, route)
    assert len(have) == len(want)
    for x, y in zip(have, want, strict=True):
        assert x.dtype == y.dtype == np.int32 and x.shape == y.shape
        assert np.array_equal(x, y)


def masks(rng, m: int, nb: int, share: float, route_share: float | None):
    """``(ok, route)``: about ``share`` of the (row, block)s failing, about
    ``route_share`` of those on the tile route (None: no route, E8M0)."""
    ok = rng.random((m, nb)) >= share
    if route_share is None:
        return ok, None
    return ok, ~ok & (rng.random((m, nb)) < route_share)


@pytest.mark.parametrize("seed", range(8))
def test_random_lists_are_the_models(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        m, nb = int(rng.integers(1, 70)), int(rng.integers(1, 12))
        share = float(rng.choice([0.02, 0.1, 0.3, 0.7]))
        route_share = None if seed % 2 else float(rng.random())
        assert_model_lists(*masks(rng, m, nb, share, route_share))


@pytest.mark.parametrize("m", [1, 15, 16, 17, 48, 61])
@pytest.mark.parametrize("route_share", [None, 0.0, 0.5, 1.0])
def test_edge_masks_give_the_models_lists(m, route_share):
    rng = np.random.default_rng(m)
    for share in (0.0, 1.0, 0.5):  # nothing failing, all failing, half
        for nb in (1, 5):
            assert_model_lists(*masks(rng, m, nb, share, route_share))


def test_one_failing_entry_is_repeated_to_fill_its_list():
    ok = np.ones((20, 3), bool)
    ok[17, 1] = False  # the second row tile's row 1, block 1
    bptr, bidx = by_block(failing_rows(ok)[0], 3)
    assert bptr.tolist() == [0, 0, 4, 4] and bidx.tolist() == [0, 0, 0, 0]
    route = ~ok
    tptr, tidx = by_block(failing_rows(ok)[0], 3, route[17:18, 1], 16)
    assert tptr.tolist() == [0, 0, 16, 16] and tidx.tolist() == [0] * 16
    assert_model_lists(ok, route)


def test_block_major_orders_entries_by_block_then_row_tile():
    ptr = np.array([0, 2, 2, 3, 8, 9, 9], np.int32)  # 3 row tiles x 2 blocks
    order, last = block_major(ptr, 2)
    assert order.tolist() == [0, 1, 2, 8, 3, 4, 5, 6, 7]
    assert last.tolist() == [4, 9]
    order, last = block_major(np.zeros(7, np.int32), 2)
    assert order.tolist() == [] and last.tolist() == [0, 0]
