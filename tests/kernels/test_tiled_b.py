"""B's codes in 64-column tiles (``Problem.b_tiled``, what ``mlir_mx.Linear``
stores for whole tiles): the same bytes in another order, the same results
bit for bit, at every schedule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR
from matmul_cases import kernel_runner, schedule_cases

from mlir_mx import oracle
from mlir_mx.kernels import Problem
from mlir_mx.kernels.common.problem import TILE_COLUMNS, tile_b_codes
from mlir_mx.numerics import ELEMENT_FORMATS, pack_codes

K, N = 128, 192


def test_tile_layout():
    """Row (k // 32) * tiles + n // 64 holds rows k of the block, 64 codes each."""
    codes = np.arange(K * N, dtype=np.uint32).astype(np.uint8).reshape(K, N)
    t = tile_b_codes(codes, 32, "f8E4M3FN", packed=False)
    tiles = N // TILE_COLUMNS
    assert t.shape == (K // 32 * tiles, 32 * TILE_COLUMNS)
    for k, n in [(0, 0), (5, 70), (33, 191), (127, 64)]:
        row = (k // 32) * tiles + n // TILE_COLUMNS
        assert t[row, (k % 32) * TILE_COLUMNS + n % TILE_COLUMNS] == codes[k, n]
    packed = tile_b_codes(codes[:, : N // 2], 32, "f4E2M1FN", packed=True)
    assert packed.shape == (K // 32 * tiles, 32 * 32)


@pytest.mark.parametrize("k", [48, 64, 96])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmt, block", [("nvfp4", None), ("mxfp4", 16), ("mxfp8", 16)])
def test_a_linear_with_blocks_of_16_gives_the_oracles_bits(fmt, block, threads, k):
    """``mlir_mx.Linear`` with blocks of 16 (NVFP4, and MX formats given
    block 16), tiled (N = 256) and not (N = 200): every batch size's kernel
    (decode, small, prefill) gives the oracle's blocked order bit for bit,
    at 1 and 2 threads, K an odd and an even number of blocks."""
    import mlir_mx

    rng = np.random.default_rng(k)
    for n in (256, 200):
        w = (rng.standard_normal((n, k)) * np.exp2(rng.integers(-6, 6, (n, 1)))).astype(np.float32)
        q = oracle.quantize(w, fmt, block, axis=1)
        lin = mlir_mx.Linear(q, threads=threads)
        assert lin.tiled == (n % TILE_COLUMNS == 0)
        b = oracle.MXArray(
            q.codes.T.copy(), q.scales.T.copy(), q.format_name, q.block_size, axis=0,
            global_scale=q.global_scale,
        )  # fmt: skip
        for m in (1, 3, 40):
            x = rng.standard_normal((m, k)).astype(np.float32)
            want = oracle.blocked_order(x, b, np.zeros((m, n), np.float32))  # NVFP4: / global
            got = lin(x)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"{n} {m}")


def test_b_tiled_needs_whole_tiles():
    with pytest.raises(ValueError, match="multiple of 64"):
        Problem(None, 100, K, 32, None, "f4E2M1FN", b_packed=True, b_tiled=True)


def test_a_column_tile_wider_than_a_b_tile_is_refused():
    """The streaming kernel reads a run of B's codes within one tile of a
    tiled B; a config whose column tile (16 nv) does not divide it is
    refused when the kernel is emitted (it read the wrong columns before)."""
    from mlir import ir

    from mlir_mx.dialect import load_dialect
    from mlir_mx.kernels import kernel_module, plan_kernel, shape_class
    from mlir_mx.kernels.registry import find

    prob = Problem(1, 2 * TILE_COLUMNS, K, 32, None, "f4E2M1FN", b_packed=True, b_tiled=True)
    plan = plan_kernel(prob, find(shape_class(1)).name, 1)
    plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, nv=8))
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        with pytest.raises(ValueError, match="a tiled B needs 16 nv to divide 64"):
            kernel_module(prob, plan)


#: Every schedule (in its shape class) with every format behaviour, at 1 or
#: 2 threads in turn, so that each schedule and each format meets both
#: thread counts; ``-m slow`` adds the other thread count of each.
_TILED_CASES = [
    (element, schedule, m, 1 + (i + j) % 2)
    for i, element in enumerate(BY_BEHAVIOUR)
    for j, (schedule, m, _k, _n) in enumerate(schedule_cases())
]


@pytest.mark.parametrize(
    "element, schedule, m, threads",
    [*_TILED_CASES, *(pytest.param(e, s, m, 3 - t, marks=pytest.mark.slow) for e, s, m, t in _TILED_CASES)],
)
def test_tiled_b_gives_the_same_bits(element, schedule, m, threads):
    rng = np.random.default_rng(0)
    b = oracle.quantize(rng.standard_normal((K, N)).astype(np.float32), element, 32, axis=0)
    packed = ELEMENT_FORMATS[element].is_sub_byte
    raw = pack_codes(b.codes, element) if packed else b.codes.view(np.uint8)
    x = rng.standard_normal((m, K)).astype(np.float32)
    out = []
    for tiled in (False, True):
        prob = Problem(
            None, N, K, 32, None, element, a_packed=packed, b_packed=packed, b_tiled=tiled
        )
        codes = tile_b_codes(raw, 32, element, packed) if tiled else raw
        if not packed and not tiled:
            codes = np.array(b.codes)
        c = np.zeros((m, N), np.float32)
        # A writeable copy of the read-only scales: a threaded kernel (effects.py).
        kernel_runner(prob, schedule, threads).invoke("matmul", x, codes, np.array(b.scales), c)
        out.append(c)
    np.testing.assert_array_equal(out[0].view(np.uint32), out[1].view(np.uint32))
    ref = x.astype(np.float64) @ b.dequantize().astype(np.float64)
    np.testing.assert_allclose(out[1], ref, rtol=1e-4, atol=1e-4)
