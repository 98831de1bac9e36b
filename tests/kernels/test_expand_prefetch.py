"""The dot kernels' prefetch of ``Linear``'s B while they expand its chunks
(``kernels.dot.tiles``: ``EXPAND_AHEAD``, ``RECORDS_AHEAD``).

* bf16 activations, B as tiled codes: as a chunk of panel ``j`` is expanded,
  each K group prefetches the same rows of panel ``j + EXPAND_AHEAD`` and
  each block its scale line there (``CodeRows.prefetch_ahead``).
* B as VNNI records (integer and FP8 activations): each record expanded
  prefetches the record ``RECORDS_AHEAD`` on in the thread's run (x86).

Checked here: the kernels of ``Linear``'s B hold the prefetch, those of a
row-major B (the Runner's) or with the distance 0 none; and the bits are the
exact path's (the numpy oracle's) at several distances, also where every
prefetch runs past the last panel or the buffer's end (clamped to its last
row, and the scales to their last column).
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import dot_schedule, f32_bits, run_dot, same_bits
from format_cases import INTEGRAL, NON_INTEGRAL, SUB_BYTE
from matmul_cases import case
from mlir import ir
from test_bf16_activations import amd, bf16, needs_bf16, run_bf16  # noqa: F401 (fixture)

from mlir_mx import oracle
from mlir_mx.dialect import load_dialect
from mlir_mx.kernels import SCHEDULES, Problem
from mlir_mx.kernels.common.plan import KernelPlan
from mlir_mx.kernels.common.problem import BF16
from mlir_mx.kernels.dot import tiles
from mlir_mx.kernels.dot.isa import dot_isa
from mlir_mx.kernels.dot.units import dot_kind
from mlir_mx.kernels.emit import kernel_module
from mlir_mx.numerics import is_packed_storage

#: The bf16 dot schedules that expand chunks (small, prefill).
BF16_SCHEDULES = [s.name for s in SCHEDULES.values() if s.unit == "bf16"]
#: A packed FP4 format and an FP8 one (the expansion's two kinds of loop).
TWO = (SUB_BYTE[-1], NON_INTEGRAL[0])
pytestmark = pytest.mark.usefixtures("amd")


def _count(prob: Problem, schedule: str) -> int:
    """``memref.prefetch`` ops in ``schedule``'s kernel of ``prob``."""
    entry = SCHEDULES[schedule]
    plan = KernelPlan(entry, entry.configure(prob, 1))
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        return str(kernel_module(prob, plan)).count("memref.prefetch")


def _prefetches(element: str, schedule: str, tiled: bool) -> int:
    """Prefetches in the kernel of a 16 x 128 x 256 call with bf16 activations."""
    m, k, n = 16, 128, 256
    packed = is_packed_storage((k, n), element)
    prob = Problem(m, n, k, 32, None, element, b_packed=packed, b_tiled=tiled, a_quant=BF16)
    return _count(prob, schedule)


@needs_bf16
@pytest.mark.parametrize("element", TWO)
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
@pytest.mark.parametrize("element", TWO)
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
    """The exact path's bits with the prefetch at ``ahead`` panels."""
    m, k, n = shape
    x, qb, acc = _operands(element, m, k, n)
    want = oracle.blocked_order(bf16(x), qb, acc)
    monkeypatch.setattr(tiles, "EXPAND_AHEAD", ahead)
    got = run_bf16(x, qb, acc, schedule, threads, tiled=True)
    assert same_bits(got, want).all(), np.argwhere(~same_bits(got, want))[:5]


#: (A, B) pairs whose dot kernels expand B's records: FP4 x FP4 and INT8 x
#: FP6 (integer units), FP8 x FP8 (bf16 unit).
RECORD_PAIRS = [(SUB_BYTE[-1], SUB_BYTE[-1]), (INTEGRAL[-1], SUB_BYTE[0]), (NON_INTEGRAL[0],) * 2]


def _unit(ea: str, eb: str) -> str:
    kind = dot_kind(ea, eb, 32)
    if kind is None:
        pytest.skip(f"no dot unit for {ea} x {eb} on this CPU (the f32 kernels serve it)")
    return "bf16" if kind.name == "bf16" else "int"


@pytest.mark.parametrize("ea, eb", RECORD_PAIRS)
def test_records_prefetch_their_run_ahead(monkeypatch, ea, eb):
    """The expanding kernels of records prefetch (on x86: not measured on
    NEON, which keeps none); of codes (the Runner's) or with
    ``RECORDS_AHEAD = 0`` not."""
    schedule = dot_schedule(_unit(ea, eb), "small")
    kind = dot_kind(ea, eb, 32)
    neon = dot_isa(kind, ea, eb, True).neon
    kind = kind.name

    def count(source: str) -> int:
        dot = kind if source == "records" else None
        return _count(Problem(16, 256, 128, 32, ea, eb, b_dot=dot), schedule)

    assert (count("records") > 0) is not neon
    assert count("codes") == 0
    monkeypatch.setattr(tiles, "RECORDS_AHEAD", 0)
    assert count("records") == 0


@pytest.mark.parametrize("ea, eb", RECORD_PAIRS)
@pytest.mark.parametrize(
    "m, k, n, threads, ahead",
    # 2 panels x 3 blocks (6 records): 50 records ahead is past the end for all;
    # 5 panels (the last 2 columns wide) on 2 threads
    [(17, 96, 128, 1, 50), (61, 128, 258, 2, 6)],
)
def test_the_records_prefetch_keeps_the_bits(monkeypatch, ea, eb, m, k, n, threads, ahead):
    """The f32 kernels' bits with the records prefetched ``ahead`` on."""
    schedule = dot_schedule(_unit(ea, eb), "small" if m <= 48 else "prefill")
    (qa, qb), acc, _exact, _bound = case(m, k, n, ea, eb, seed=m + k)
    want = f32_bits(qa, qb, acc)
    monkeypatch.setattr(tiles, "RECORDS_AHEAD", ahead)
    got = run_dot(qa, qb, acc, schedule, threads)
    assert same_bits(got, want).all(), np.argwhere(~same_bits(got, want))[:5]
