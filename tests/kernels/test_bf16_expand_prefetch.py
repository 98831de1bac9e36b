"""The bf16 dot kernels' prefetch of a tiled B while they expand its chunks
(``kernels.dot.tiles.EXPAND_AHEAD``, ``CodeRows.prefetch_ahead``).

A chunk of ``Linear``'s tiled codes prefetches, as it expands each K group
of panel ``j``, the same rows of panel ``j + EXPAND_AHEAD`` and the block's
scale line there.  Checked here: the kernels of a tiled B hold the prefetch,
those of a row-major B (the Runner's) or with ``EXPAND_AHEAD = 0`` none; and
the bits are the exact path's whatever the distance, also where every
prefetch runs past the last panel or the buffer's end (clamped to its last
tile row and its last scale column).
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import same_bits
from format_cases import BY_BEHAVIOUR
from mlir import ir
from test_bf16_activations import amd, bf16, needs_bf16, run_bf16  # noqa: F401 (fixture)

from mlir_mx import oracle
from mlir_mx.dialect import load_dialect
from mlir_mx.kernels import SCHEDULES, Problem
from mlir_mx.kernels.common.plan import KernelPlan
from mlir_mx.kernels.common.problem import BF16
from mlir_mx.kernels.dot import tiles
from mlir_mx.kernels.emit import kernel_module
from mlir_mx.numerics import is_packed_storage

#: The bf16 dot schedules that expand chunks (small, prefill).
BF16_SCHEDULES = [s.name for s in SCHEDULES.values() if s.unit == "bf16"]
pytestmark = pytest.mark.usefixtures("amd")


def _prefetches(element: str, schedule: str, tiled: bool) -> int:
    """``memref.prefetch`` ops in the kernel of a 16 x 128 x 256 call."""
    m, k, n = 16, 128, 256
    packed = is_packed_storage((k, n), element)
    prob = Problem(m, n, k, 32, None, element, b_packed=packed, b_tiled=tiled, a_quant=BF16)
    entry = SCHEDULES[schedule]
    plan = KernelPlan(entry, entry.configure(prob, 1))
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        return str(kernel_module(prob, plan)).count("memref.prefetch")


@needs_bf16
@pytest.mark.parametrize("element", BY_BEHAVIOUR)
@pytest.mark.parametrize("schedule", BF16_SCHEDULES)
def test_a_tiled_b_prefetches_the_panel_ahead(monkeypatch, element, schedule):
    """Tiled: prefetches in the expansion; row-major or ``EXPAND_AHEAD = 0``: none."""
    assert _prefetches(element, schedule, tiled=True) > 0
    assert _prefetches(element, schedule, tiled=False) == 0
    monkeypatch.setattr(tiles, "EXPAND_AHEAD", 0)
    assert _prefetches(element, schedule, tiled=True) == 0


def _operands(element, m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)) * np.exp2(rng.integers(-6, 6, (1, n)))
    qb = oracle.quantize(w.astype(np.float32), element, 32, axis=0)
    x = rng.standard_normal((m, k)).astype(np.float32)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    return x, qb, acc


@needs_bf16
@pytest.mark.parametrize("element", BY_BEHAVIOUR)
@pytest.mark.parametrize(
    "schedule, threads, shape, ahead",
    [
        # 2 panels x 3 blocks (6 tile rows): 7 panels ahead is past the end for all
        ("bf16-small", 1, (17, 96, 128), 7),
        ("bf16-small", 2, (9, 96, 128), 2),
        ("bf16-prefill", 2, (61, 128, 320), 2),
        ("bf16-prefill", 1, (50, 64, 192), 1),
    ],
)
def test_the_prefetch_keeps_the_bits(monkeypatch, element, schedule, threads, shape, ahead):
    """The exact path's bits with the prefetch at ``ahead`` panels, as with none."""
    m, k, n = shape
    x, qb, acc = _operands(element, m, k, n)
    want = oracle.blocked_order(bf16(x), qb, acc)
    for distance in (ahead, 0):
        monkeypatch.setattr(tiles, "EXPAND_AHEAD", distance)
        got = run_bf16(x, qb, acc, schedule, threads, tiled=True)
        assert same_bits(got, want).all(), (distance, np.argwhere(~same_bits(got, want))[:5])
