"""The guarded AMX matmul's ring (issue 51, session 57;
``mlir_mx.kernels.amx.order``): where M is one row group (1 to 32 rows),
each block of B is widened into a ring of panel slots inside the tiles' K
loop, ``AHEAD`` blocks before the tiles read it, with its fallback ``t``.
The exact path's bits at every small row count, with ragged N (the last odd
column tile takes the panel), an odd number of blocks, fallback rows in
every block (the last one included), K in chunks, NVFP4's blocks of 16, and
1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from amx_cases import assert_same_bits, bf16, exact
from format_cases import INTEGRAL
from mlir import ir

from mlir_mx import host, oracle
from mlir_mx.amx_permission import amx_permission
from mlir_mx.kernels.amx import order
from mlir_mx.kernels.amx.matmul import matmul_module
from mlir_mx.linear.amx_matmul import AMXMatmul
from mlir_mx.numerics import MXArray

HAS_AMX = host.has_features("amx_tile", "amx_bf16") and amx_permission().granted
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="no AMX-BF16 on this CPU")
E2M1 = "f4E2M1FN"
INT8 = "i8"


def weight(element, n, k, seed=0) -> MXArray:
    """B (K, N) blocked along K in blocks of 32 (every code of the format)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp2(rng.integers(-8, 8, (n, 1)))
    w = oracle.quantize(w.astype(np.float32), element, 32)
    return MXArray(w.codes.T.copy(), w.scales.T.copy(), element, 32, 0)


def activations(m, k, seed) -> np.ndarray:
    """N(0,1) with every third row's elements each in its own binade over 40
    (those rows fail the guard in every block, the last one included)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k))
    x[::3] *= np.exp2(rng.integers(-20, 20, (m, k)))[::3]
    return bf16(x)


def runner(element, threads, **kw):
    from mlir_mx.execution import CompileOptions, Runner
    from mlir_mx.passes.pipeline import Pipeline, PipelineElement
    from mlir_mx.pipelines.amx import amx_library_pipeline

    with ir.Context(), ir.Location.unknown():
        text = str(matmul_module("amx_matmul", (2, 2), element, **kw))
    tasks = PipelineElement.of("mx-parallel-tasks", threads=threads)
    return Runner(text, options=CompileOptions(Pipeline((tasks, *amx_library_pipeline()))))


def test_the_ring_runs_ahead_of_the_tiles_in_fewer_slots_than_it_has():
    assert 0 < order.AHEAD < order.RING and order.RING & (order.RING - 1) == 0


@needs_amx
@pytest.mark.parametrize("element", [E2M1, INT8])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_ring_gives_the_exact_paths_bits_at_every_small_row_count(element, threads):
    """M of 1 to 32 rows (one and two row tiles), N = 37 (a group of 2
    column tiles, then an odd one and 5 columns), K = 224 (7 blocks: the
    last stop serves one block), fallback rows; the team's threads claim the
    column groups (the same bits)."""
    b = weight(element, 37, 224, seed=2)
    mm = AMXMatmul(b, max_fallback_share=1.0)
    for m in (1, 2, 15, 16, 17, 31, 32):
        a = activations(m, 224, seed=m)
        prepared = mm.prepare(a)
        bptr = prepared[3]
        assert bptr[-1] > bptr[-2] and (np.diff(bptr) > 0).all()  # failing rows in every block
        assert_same_bits(mm.run(prepared, m, team=threads), exact(a, b))


@needs_amx
def test_the_ring_in_k_chunks_gives_the_exact_paths_bits():
    """K in chunks of 2 blocks whatever A's size (C held in ``cacc``
    between them; each chunk's ring from its first block), 9 blocks."""
    b = weight(E2M1, 70, 288, seed=3)
    mm = AMXMatmul(b, max_fallback_share=1.0)
    run = runner(E2M1, 1, chunk=2, whole_k_tiles=0).amx_matmul
    for m in (7, 20):
        a = activations(m, 288, seed=40 + m)
        a_tiles, ptr, rows, bptr, bidx, fa = mm.prepare(a)
        c = np.full((a_tiles.shape[0] * 16, 80), np.nan, np.float32)
        run(a_tiles, mm.b_codes, c, ptr, rows, mm.b_scales, bptr, bidx, fa)
        assert_same_bits(c[:m, :70], exact(a, b))


@needs_amx
def test_nvfp4_on_the_ring_gives_the_exact_paths_bits():
    """Blocks of 16 (8 pair rows a ring slot, E4M3 scales), M of 1 and 2
    row tiles, the global scale divided after the kernel."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((160, 40)) * np.exp2(rng.integers(-6, 6, (1, 40)))
    b = oracle.quantize(w.astype(np.float32), "nvfp4", 16, axis=0)
    mm = AMXMatmul(b, max_fallback_share=1.0)
    for m in (5, 16, 27):
        a = activations(m, 160, seed=60 + m)
        got = mm(a)
        assert mm.last_path == "amx"
        assert_same_bits(got, exact(a, b))


def test_prepared_arrays_must_be_contiguous():
    """``AMXMatmul.run`` passes the prepared arrays to the kernel by address
    (a bound call, unchecked there): a strided index array is refused first."""
    from mlir_mx.errors import MXValueError
    from mlir_mx.linear.amx_matmul import check_prepared, prepare_model

    b = weight(E2M1, 20, 64, seed=7)
    a = activations(5, 64, seed=8)
    prepared = prepare_model(a, oracle.amx_prepare(b), 1.0)
    assert check_prepared(prepared, 2, 32) is prepared
    a_tiles, ptr, rows, bptr, bidx, fa = prepared
    strided = np.repeat(rows, 2)[::2]
    assert np.array_equal(strided, rows) and not strided.flags.c_contiguous
    with pytest.raises(MXValueError, match="prepared: rows is not a non-empty, contiguous"):
        check_prepared((a_tiles, ptr, strided, bptr, bidx, fa), 2, 32)


@needs_amx
@pytest.mark.slow
@pytest.mark.parametrize("element", INTEGRAL)
def test_many_random_small_calls_give_the_exact_paths_bits(element):
    """A campaign on the ring: 48 seeds, M of 1 to 32 rows, N of 1 to 120, K
    of 1 to 20 blocks, failing rows on half the seeds, every tile group (the
    ring takes the row tiles of 1 x N and 2 x N groups), 1 or 2 threads;
    every output against the exact path.  Counts printed."""
    counts = dict.fromkeys(["outputs", "failing", "calls"], 0)
    for seed in range(48):
        rng = np.random.default_rng(700 + seed)
        m, n, k = int(rng.integers(1, 33)), int(rng.integers(1, 121)), 32 * int(rng.integers(1, 21))
        b = weight(element, n, k, seed=seed)
        group = [(2, 2), (1, 2), (2, 1), (1, 1)][seed % 4]
        mm = AMXMatmul(b, group=group, max_fallback_share=1.0)
        a = activations(m, k, seed=seed) if seed % 2 else bf16(rng.standard_normal((m, k)))
        prepared = mm.prepare(a)
        got = mm.run(prepared, m, team=1 + (seed // 4) % 2)
        assert_same_bits(got, exact(a, b))
        counts["outputs"] += got.size
        counts["failing"] += int(prepared[1][-1])
        counts["calls"] += 1
    print(element, counts)
    assert counts["failing"] > 0
