"""The dot kernels' row tiles (``kernels/dot/tiles.py``, ``row_tiles``):
tiles of the schedule's ``mr`` rows, then the rest of M in tiles of
``TAIL_ROWS`` heights, so that no tile computes rows past M.

One kernel per schedule with a dynamic M (``Problem.m = None``, as
``mlir_mx.Linear`` compiles them), called at every M from 1 to past twice its
``mr`` (every rest of M, every tail tile and every mix of them): the bits
are the oracle's blocked order, and C's rows past M (sentinels after the
output's rows in the same buffer) are never written.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from dot_cases import a_args, compile_module, same_bits

from mlir_mx import oracle
from mlir_mx.host import has_features
from mlir_mx.kernels import SCHEDULES, Problem, find
from mlir_mx.kernels.common.plan import KernelPlan
from mlir_mx.kernels.common.problem import BF16, tile_b_codes
from mlir_mx.kernels.dot import tiles
from mlir_mx.kernels.dot.units import RecordLayout, dot_kind, pack_records
from mlir_mx.kernels.registry import SHAPE_CLASSES
from mlir_mx.numerics import is_packed_storage, pack_codes

FP4 = "f4E2M1FN"
FP6 = "f6E2M3FN"
FP8 = "f8E4M3FN"
INT8 = "i8"

#: (schedule, A's format (None: bf16 activations), B's format, B tiled, A
#: tiny): B as ``Linear`` holds it (records; bf16: codes, tiled where N is
#: whole tiles: the in-lane FP4 expansion, ``CodesSource._bf16_fp4_pairs``)
#: or as the Runner passes it (row-major codes); a tiny row of A (below
#: ``units.bf16_floor``) sends the call to the FMA form's copy of the kernel,
#: whose tails are 1-row tiles (``_Dot.rare``).
CASES = [
    ("int-small", FP4, FP4, False, False),
    ("int-prefill", INT8, FP6, False, False),
    ("bf16-small", None, FP4, False, False),
    ("bf16-small", None, FP4, True, False),
    ("bf16-small", None, FP4, False, True),
    ("bf16-prefill", None, FP8, False, False),
    # On an AVX2 CPU the pairs above get one-row tiles (no tails); this one 3.
    ("int-prefill", FP4, INT8, False, False),
]

SMALL_PREFILL = SHAPE_CLASSES[1:]

K = 128


def _width(tiled: bool) -> int:
    """N: a partial last panel, or whole 64-column tiles."""
    return 128 if tiled else 80


def _operands(ea, eb, m, seed, n):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, n)) * np.exp2(rng.integers(-4, 4, (1, n)))
    qb = oracle.quantize(w.astype(np.float32), eb, 32, axis=0)
    x = (rng.standard_normal((m, K)) * np.exp2(rng.integers(-8, 8, (m, 1)))).astype(np.float32)
    qa = x if ea is None else oracle.quantize(x, ea, 32, axis=1)
    return qa, qb, rng.standard_normal((m, n)).astype(np.float32)


def _kernel(schedule, ea, eb, tiled, m=None):
    """The schedule's kernel for any M (or for ``m`` rows), and how its B and
    A are passed."""
    bf16 = ea is None
    kind = dot_kind(BF16 if bf16 else ea, eb, 32)
    n = _width(tiled)
    prob = Problem(
        m, n, K, 32, ea, eb, a_packed=not bf16 and is_packed_storage((1, K), ea),
        b_packed=tiled and is_packed_storage((K, n), eb), b_tiled=tiled,
        a_quant=BF16 if bf16 else None, b_dot=None if bf16 else kind.name,
    )  # fmt: skip
    entry = SCHEDULES[schedule]
    if not entry.supports(prob):
        pytest.skip(f"{schedule} does not run {ea} x {eb} on this CPU")
    cfg = entry.configure(prob, 2)
    return compile_module(prob, KernelPlan(entry, cfg)), cfg, kind


def _skip_one_row(cfg) -> None:
    """A tile of one row has no tail tiles: on 256-bit halves without VNNI
    (an AVX2 CPU) ``DotConfig.adapt`` gives the pairs that take the A-offset
    mode, or the i16 unit, one row of 32 columns (``tiles.ONE_ROW_KCB``)."""
    if cfg.mr == 1:
        pytest.skip(f"this CPU's tile is one row ({cfg}): no tail tiles to test")


def _b_args(qb, kind, bf16, tiled):
    if tiled:  # packed, tiled: Linear's stored form
        packed = is_packed_storage(qb.codes.shape, qb.element)
        raw = (
            pack_codes(np.ascontiguousarray(qb.codes), qb.element)
            if packed
            else qb.codes.view(np.uint8)
        )
        return [np.array(tile_b_codes(raw, 32, qb.element, packed)), np.array(qb.scales)]
    if bf16:  # one code per byte (FP8: not packed), row-major
        return [np.array(qb.codes), np.array(qb.scales)]
    return [pack_records(qb.codes, qb.scales, RecordLayout(kind, qb.element, 32))]


@pytest.mark.parametrize(
    "schedule, ea, eb, tiled, tiny",
    CASES,
    ids=[c[0] + "-tiled" * c[3] + "-tiny" * c[4] for c in CASES],
)
def test_every_row_count_gives_the_oracle_bits_and_writes_no_row_past_m(
    schedule, ea, eb, tiled, tiny
):
    if ea is None and not has_features("avx512_bf16", "avx512bw"):
        pytest.skip("the CPU has no AVX512-BF16 (no bf16 dot schedule)")
    runner, cfg, kind = _kernel(schedule, ea, eb, tiled)
    _skip_one_row(cfg)
    for m in range(1, 2 * cfg.mr + 4):
        _check(runner, kind, ea, eb, tiled, tiny, m)


def _check(runner, kind, ea, eb, tiled, tiny, m):
    """One call of ``m`` rows: the oracle's bits, no row of C past M written."""
    n = _width(tiled)
    qa, qb, acc = _operands(ea, eb, m, m, n)
    if tiny:  # the last row: a bf16 A below the floor (FP4: 2^-118)
        qa[-1] *= np.float32(2.0**-124)
    # Rows past M: -0.0, which a write of a computed row would turn into
    # +0.0 at least (such a row's A is 0: c + 0 = +0.0 for c = -0.0).
    buf = np.full((m + 8, n), -0.0, np.float32)
    buf[:m] = acc
    a = [qa] if ea is None else a_args(qa)
    runner.invoke("matmul", *a, *_b_args(qb, kind, ea is None, tiled), buf[:m])
    want = oracle.blocked_order(
        qa.astype("bfloat16").astype(np.float32) if ea is None else qa, qb, acc
    )
    assert same_bits(buf[:m], want).all(), (m, np.argwhere(~same_bits(buf[:m], want))[:5])
    assert (buf[m:].view(np.uint32) == 0x80000000).all(), f"M = {m}: a row past M written"


#: (case of :data:`CASES`, M known to the kernel): the tiles it emits are
#: those it runs (``row_tiles``' ``m``): 13 on 6 rows is 6 + 6 + 1, 5 is 3 +
#: 2, 12 on 7 rows is 7 + 3 + 2.
STATIC = [(CASES[1], 13), (CASES[1], 5), (CASES[2], 12)]


@pytest.mark.parametrize("case, m", STATIC, ids=[f"{c[0]}-{m}" for c, m in STATIC])
def test_a_known_m_runs_its_tiles_only(case, m):
    schedule, ea, eb, tiled, tiny = case
    if ea is None and not has_features("avx512_bf16", "avx512bw"):
        pytest.skip("the CPU has no AVX512-BF16 (no bf16 dot schedule)")
    runner, cfg, kind = _kernel(schedule, ea, eb, tiled, m)
    _skip_one_row(cfg)
    assert m % cfg.mr
    _check(runner, kind, ea, eb, tiled, tiny, m)


def test_tail_heights_cover_every_rest():
    """Each rest of M below a tile's rows splits into ``TAIL_ROWS`` tiles
    (largest first, as ``row_tiles`` runs them), none above the rest."""
    for mr in range(2, 9):
        heights = [h for h in tiles.TAIL_ROWS if h < mr]
        for rest in range(1, mr):
            left, used = rest, []
            for h in heights:
                used += [h] * (left // h)
                left %= h
            assert left == 0 and sum(used) == rest, (mr, rest, used)


def test_small_bf16_tile_is_the_prefill_tile():
    """``bf16-small`` takes ``bf16-prefill``'s 7 rows (its chunks stay of 8
    blocks): with the tail tiles a few rows no longer pay for 7."""
    small, prefill = (
        replace(s.config(), **s.settings) for s in (find(c, "bf16") for c in SMALL_PREFILL)
    )
    assert small.mr == prefill.mr == 7 and small.kcb == 8
