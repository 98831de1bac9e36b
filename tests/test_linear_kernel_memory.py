"""The kernels a process keeps after its Linears are gone are bounded
(reliability round 4, ``10-linear-kernels-retained-after-delete``: every distinct Linear kernel stayed resident,
about 5.4 MiB each, up to 256 of them).  ``linear/kernels.py`` holds the last
``RUNNERS_KEPT`` Runners asked for, and finds any Runner a live Linear holds
whatever that count."""

from __future__ import annotations

import gc

import numpy as np

import mlir_mx
from mlir_mx.linear import kernels


def _linear(n: int) -> mlir_mx.Linear:
    w = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
    return mlir_mx.Linear(mlir_mx.quantize(w, "f4E2M1FN", 32), threads=1)


def _live_runners() -> int:
    gc.collect()
    return len(kernels._LIVE)


def test_runners_of_deleted_linears_are_released_past_the_kept_count(monkeypatch):
    monkeypatch.setattr(kernels, "RUNNERS_KEPT", 2)
    x = np.ones((1, 64), np.float32)
    keep = _linear(16)
    keep(x)
    (first,) = keep._runners.values()
    before = _live_runners()
    for n in (24, 40, 48, 56):  # four other kernels (the weight's rows differ)
        lin = _linear(n)
        lin(x)
        del lin
    # the two most recent are kept; the others went with their Linears
    assert _live_runners() <= before + 2
    # the live Linear's Runner is still the one a new Linear of its kernel gets
    again = _linear(16)
    again(x)
    (runner,) = again._runners.values()
    assert runner is first
    np.testing.assert_array_equal(again(x), keep(x))


def test_the_kept_count_is_documented():
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "library.md").read_text()
    assert f"`RUNNERS_KEPT` = {kernels.RUNNERS_KEPT}" in doc
