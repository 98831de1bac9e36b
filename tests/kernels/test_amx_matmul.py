"""The guarded AMX-BF16 matmul kernel (``mlir_mx.kernels.amx.matmul``) and its
driver (``mlir_mx.linear.amx_matmul.AMXMatmul``; issue 51, docs/numerics.md,
"AMX-BF16"): the exact path's bits (the oracle's blocked order and
``Linear(b, activations="bf16")``) and the numpy model's
(``oracle.amx_guarded_matmul``), with fallback rows, flagged weight blocks,
the call-level fallback and ragged M and N; without the fallback the bits
differ."""

from __future__ import annotations

import re

import numpy as np
import pytest
from amx_cases import assert_same_bits, bf16, exact
from format_cases import INTEGRAL, NON_INTEGRAL
from mlir import ir

import mlir_mx
from mlir_mx import host, oracle
from mlir_mx.amx_permission import amx_permission
from mlir_mx.errors import MXUnsupportedHostError, MXValueError
from mlir_mx.kernels.amx.matmul import matmul_module
from mlir_mx.linear import amx_matmul
from mlir_mx.linear.amx_matmul import AMXMatmul
from mlir_mx.numerics import MXArray

HAS_AMX = host.has_features("amx_tile", "amx_bf16") and amx_permission().granted
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="no AMX-BF16 on this CPU")
E2M1 = "f4E2M1FN"
INT8 = "i8"


def on_tiles(b, **kw) -> AMXMatmul:
    """AMXMatmul with every share of fallbacks on the tiles (the kernel under test)."""
    return AMXMatmul(b, max_fallback_share=1.0, **kw)


def weight(element, n, k, seed=0, scales=None) -> MXArray:
    """B (K, N) blocked along K; ``scales``: {(block, column): E8M0 code}."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp2(rng.integers(-8, 8, (n, 1)))
    w = oracle.quantize(w.astype(np.float32), element, 32)
    s = w.scales.view(np.uint8).T.copy()
    for (j, col), code in (scales or {}).items():
        s[j, col] = code
    return MXArray(w.codes.T.copy(), s, element, 32, 0)


def activations(m, k, seed=1, spread=True) -> np.ndarray:
    """N(0,1); with ``spread`` every third row's elements each in its own
    binade over 40 (those (row, block)s fail the guard and fall back)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k))
    if spread:
        x[::3] *= np.exp2(rng.integers(-20, 20, (m, k)))[::3]
    return bf16(x)


def test_the_module_accumulates_in_tiles_carried_by_the_k_loop():
    with ir.Context(), ir.Location.unknown():
        text = str(matmul_module("amx_matmul", (2, 2)))
    # whole column groups: 2x2 and the 1x2 row edge; the last odd column tile: 2x1 and 1x1;
    # the whole groups again on B's ring, where M is one row group (1 or 2 row tiles)
    assert text.count("amx.tile_zero") == 4 + 2 + 2 + 1 + (4 + 2)
    assert text.count("scf.parallel") == 1  # column groups, claimed by the threads
    assert "iter_args" in text and "-> (!amx.tile<16x16xf32>, !amx.tile<16x16xf32>" in text
    for op in ("amx.tile_mulf", "amx.tile_store", "amx.tile_load", "vector.load"):
        assert op in text
    with ir.Context(), ir.Location.unknown(), pytest.raises(ValueError, match="2 x 2"):
        matmul_module("x", (3, 1))
    with ir.Context(), ir.Location.unknown(), pytest.raises(ValueError, match="even number"):
        matmul_module("x", (2, 2), chunk=3)


@needs_amx
@pytest.mark.parametrize("element", INTEGRAL)
@pytest.mark.parametrize("m, n", [(16, 48), (40, 37), (256, 20)])
def test_the_kernel_gives_the_exact_paths_bits(element, m, n):
    """Fallback rows in every row tile, ragged M and N, 2 x 2 tile groups
    with their 2 x 1 and 1 x 1 edges."""
    b = weight(element, n, 128, seed=2)
    a = activations(m, 128, seed=3)
    mm = on_tiles(b)
    ok = oracle.amx_pass(a, mm.weight)
    assert ok.any() and (~ok).sum() >= m // 3
    got = mm(a)
    assert mm.last_path == "amx"
    assert_same_bits(got, exact(a, b))
    assert_same_bits(got, oracle.amx_guarded_matmul(a, mm.weight))


@needs_amx
@pytest.mark.parametrize("element", [E2M1, INT8])
@pytest.mark.parametrize("group", [(1, 1), (2, 1), (1, 2)])
def test_other_tile_groups_give_the_same_bits(element, group):
    b = weight(element, 45, 96, seed=4)
    a = activations(50, 96, seed=5)
    assert_same_bits(on_tiles(b, group=group)(a), exact(a, b))


@needs_amx
@pytest.mark.parametrize("element", [E2M1, INT8])
def test_the_kernel_equals_linear_with_bf16_activations(element, monkeypatch):
    monkeypatch.setenv("MLIR_MX_AMX", "0")  # Linear's exact path, not its AMX hook
    b = weight(element, 40, 128, seed=6)
    a = activations(33, 128, seed=7)
    lin = mlir_mx.Linear(MXArray(b.codes.T.copy(), b.scales.T.copy(), element, 32, 1),
                         activations="bf16", threads=1)  # fmt: skip
    assert_same_bits(on_tiles(b)(a), lin(a))


def chunked_runner(element, threads, chunk=2):
    """The kernel with K in chunks of ``chunk`` blocks whatever A's size (the
    default chunks only an A over 1 MiB, too slow for the oracle here)."""
    from mlir_mx.execution import CompileOptions, Runner
    from mlir_mx.passes.pipeline import Pipeline, PipelineElement
    from mlir_mx.pipelines.amx import amx_library_pipeline

    with ir.Context(), ir.Location.unknown():
        text = str(matmul_module("amx_matmul", (2, 2), element, chunk=chunk, whole_k_tiles=0))
    tasks = PipelineElement.of("mx-parallel-tasks", threads=threads)
    return Runner(text, options=CompileOptions(Pipeline((tasks, *amx_library_pipeline()))))


@needs_amx
@pytest.mark.parametrize(
    "element, threads", [(E2M1, 2), pytest.param(INT8, 1, marks=pytest.mark.slow)]
)
def test_k_in_chunks_over_items_of_column_groups_gives_the_same_bits(element, threads):
    """K in chunks (7 blocks: 2, 2, 2, 1; C held in the item's ``cacc``
    between them) over items of 2 column groups (33 column tiles: 17 groups,
    the last of 1 tile and 8 columns), fallback rows, ragged M."""
    b = weight(element, 520, 224, seed=40)
    a = activations(40, 224, seed=41)
    mm = on_tiles(b)
    a_tiles, ptr, rows, bptr, bidx, fa = mm.prepare(a)
    assert ptr[-1] > 40  # fallback rows in several blocks
    c = np.full((48, 33 * 16), np.nan, np.float32)
    chunked_runner(element, threads).amx_matmul(
        a_tiles, mm.b_codes, c, ptr, rows, mm.b_scales, bptr, bidx, fa
    )
    assert_same_bits(c[:40, :520], exact(a, b))
    assert_same_bits(c[:40, :520], mm(a))


@needs_amx
@pytest.mark.slow
@pytest.mark.parametrize("element", INTEGRAL)
def test_many_random_chunked_calls_give_the_exact_paths_bits(element):
    """A campaign for the K chunks: 24 seeds, random M, N (up to 600: items
    of several column groups) and K (up to 12 blocks, odd counts included),
    chunks of 2, 4 and 6 blocks, 1 and 2 threads (our pool), fallback rows;
    counts printed."""
    from mlir_mx.execution import threads as threads_

    team = threads_.set_team("pool")
    runners, outputs = {}, 0
    try:
        for seed in range(24):
            rng = np.random.default_rng(500 + seed)
            m, n = int(rng.integers(1, 70)), int(rng.integers(1, 600))
            k = 32 * int(rng.integers(2, 13))
            key = (2 + 2 * (seed % 3), 1 + (seed // 3) % 2)
            if key not in runners:
                runners[key] = chunked_runner(element, key[1], chunk=key[0])
            b = weight(element, n, k, seed=seed)
            a = activations(m, k, seed=600 + seed, spread=seed % 2 == 0)
            mm = on_tiles(b)
            prepared = mm.prepare(a)
            if prepared is None:  # the per-call condition (none expected here)
                continue
            c = np.full((prepared[0].shape[0] * 16, mm.b_codes.shape[0] * 16), np.nan, np.float32)
            runners[key].amx_matmul(prepared[0], mm.b_codes, c, *prepared[1:3], mm.b_scales,
                                    *prepared[3:])  # fmt: skip
            assert same_or_both_nan(c[:m, :n], exact(a, b)).all(), seed
            outputs += m * n
    finally:
        threads_.set_team(team)
    print(element, {"outputs": outputs, "runners": len(runners)})
    assert outputs > 0


@needs_amx
@pytest.mark.parametrize("m, n", [(32, 48), (40, 37)])
def test_run_writes_into_out(m, n):
    """``run(..., out=)``: C written into ``out`` (by the kernel where M and
    N are multiples of 16, else copied once from the padded C) and
    returned; a wrong ``out`` refused by name before the kernel runs."""
    b = weight(E2M1, n, 96, seed=42)
    a = activations(m, 96, seed=43)
    mm = on_tiles(b)
    prepared = mm.prepare(a)
    out = np.full((m, n), np.nan, np.float32)
    assert mm.run(prepared, m, out=out) is out
    assert_same_bits(out, exact(a, b))
    assert_same_bits(mm.run(prepared, m), out)
    frozen = np.zeros((m, n), np.float32)
    frozen.flags.writeable = False
    wrong = [np.zeros((m, n + 1), np.float32), np.zeros((m, n)), np.zeros((n, m), np.float32).T]
    for bad in [*wrong, frozen]:
        with pytest.raises(MXValueError, match=r"out: a writeable, aligned, C-contiguous f32"):
            mm.run(prepared, m, out=bad)
    for rows in (m + 16, m - 16, 0):  # not the prepared rows: refused, not numpy's error
        with pytest.raises(MXValueError, match=r"^m: the prepared activations hold"):
            mm.run(prepared, rows, out=np.zeros((max(rows, 1), n), np.float32))
    for rows in (m - 0.5, float(m), True, "17"):  # not an int: refused before the kernel
        with pytest.raises(MXValueError, match=r"^m: an int, not"):
            mm.run(prepared, rows)


def test_prepared_arguments_that_do_not_fit_the_weight_are_refused():
    """``run`` checks what the kernel indexes by before it runs: another
    weight's (larger K) or edited arrays are refused by name (they read out
    of bounds: session 56's review). Pure numpy, on any CPU."""
    b = weight(E2M1, 48, 128, seed=5)
    a = activations(40, 128, seed=6, spread=False)
    w = oracle.amx_prepare(b)
    good = amx_matmul.prepare_model(a, w)
    assert amx_matmul.check_prepared(good, 4, 32) is good
    other = amx_matmul.prepare_model(activations(40, 256, seed=7, spread=False), oracle.amx_prepare(
        weight(E2M1, 48, 256, seed=8)))  # fmt: skip
    assert good is not None and other is not None and len(good[2]) > 1  # rows fail
    edited = []
    for i, change in ((2, lambda r: r + 16), (4, lambda x: x + len(good[2])), (1, lambda p: p[:-1])):
        args = list(good)
        args[i] = change(args[i]).astype(np.int32)
        edited.append(tuple(args))
    for bad in (other, good[:5], (good[0].view(np.int16), *good[1:]), *edited):
        with pytest.raises(MXValueError, match=r"^prepared: "):
            amx_matmul.check_prepared(bad, 4, 32)


@needs_amx
def test_run_refuses_another_weights_prepared_arguments():
    small = on_tiles(weight(E2M1, 48, 64, seed=9))
    big = on_tiles(weight(E2M1, 48, 256, seed=10))
    prepared = big.prepare(activations(32, 256, seed=11, spread=False))
    with pytest.raises(MXValueError, match=r"^prepared: a_tiles is not"):
        small.run(prepared, 32)


@needs_amx
def test_without_the_fallback_the_bits_differ():
    """The same kernel with every (row, block) passed as it is (nothing
    zeroed, no ``t``): the guard's fallback is what gives the exact bits."""
    b = weight("f4E2M1FN", 32, 128, seed=8)
    a = activations(48, 128, seed=9)
    mm = on_tiles(b)
    everything = np.ones((48, 4), bool)
    ptr, rows, bptr, bidx, grow = amx_matmul.failing_rows(everything)
    assert ptr[-1] == 0 and bptr[-1] == 0  # no fallback rows at all
    fa = amx_matmul.failing_blocks(a, bptr, bidx, grow)
    prepared = (amx_matmul.pack_activations(a, everything), ptr, rows, bptr, bidx, fa)
    ignored = mm.run(prepared, 48)
    assert (ignored.view(np.uint32) != exact(a, b).view(np.uint32)).any()


@needs_amx
def test_flagged_weight_blocks_take_the_exact_path():
    b = weight("f4E2M1FN", 24, 128, seed=10, scales={(1, 3): 0, (2, 5): 254})
    a = activations(20, 128, seed=11) * np.float32(2.0**40)  # passes the per-call condition
    mm = on_tiles(b)
    assert mm.weight.flagged.any() and oracle.amx_guard_call(a, mm.weight)
    got = mm(a)
    assert mm.last_path == "exact"
    assert_same_bits(got, exact(a, b))


@needs_amx
def test_a_call_that_fails_the_per_call_condition_takes_the_exact_path():
    b = weight("i8", 16, 64, seed=12)
    a = bf16(np.random.default_rng(13).standard_normal((8, 64)) * 2.0**-128)
    mm = on_tiles(b)
    assert not mm.weight.flagged.any() and not oracle.amx_guard_call(a, mm.weight)
    got = mm(a)
    assert mm.last_path == "exact"
    assert_same_bits(got, exact(a, b))
    assert mm.prepare(activations(8, 64)) is not None  # the same weight on normal inputs


@needs_amx
def test_bad_activations_are_refused_by_name():
    mm = on_tiles(weight("f4E2M1FN", 4, 64))
    good = activations(2, 64)
    for bad, says in [(good + np.float32(2.0**-20), "not bf16"), (good[:, :32], "K = 32"),
                      (good.astype(np.float64), "f32 (M, K)")]:  # fmt: skip
        with pytest.raises(MXValueError, match="a: .*" + re.escape(says)):
            mm(bad)


@needs_amx
def test_a_weight_in_blocks_other_than_32_is_refused_by_name():
    w = oracle.quantize(np.ones((8, 64), np.float32), E2M1, 16)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), E2M1, 16, 0)
    with pytest.raises(MXValueError, match="b: block_size 16"):
        AMXMatmul(b)


def test_refused_where_amx_bf16_is_not_usable(monkeypatch):
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-amx_bf16")
    b = weight("f4E2M1FN", 4, 64)
    with pytest.raises(MXUnsupportedHostError, match="AMX-BF16 matmul refused here: no AMX"):
        AMXMatmul(b)
    with pytest.raises(MXUnsupportedHostError, match="AMX-BF16 matmul refused here"):
        amx_matmul.amx_matmul_runner()


def same_or_both_nan(x, y) -> np.ndarray:
    return (x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y))


@needs_amx
def test_non_finite_activations_and_overflowing_chains_fall_back(monkeypatch):
    """Inf and NaN activations fail the guard (their rows' ``t`` from the f32
    chain: NaN and Inf as the exact path's, payloads as ``Linear``'s); a
    block with a 2^125 scale, which folds into bf16 (not flagged) but whose
    chains could overflow, fails ``amx_pass`` on every row and falls back."""
    monkeypatch.setenv("MLIR_MX_AMX", "0")  # Linear's exact path, not its AMX hook
    b = weight(E2M1, 20, 128, seed=14, scales={(2, 3): 127 + 125})
    a = activations(18, 128, seed=15, spread=False)
    a[1, 3], a[2, 40], a[4, 7], a[4, 100] = np.inf, np.nan, -np.inf, np.inf
    a[5, 64:66] = 4, -4
    mm = on_tiles(b)
    ok = oracle.amx_pass(a, mm.weight)
    assert not mm.weight.flagged.any() and not ok[:, 2].any() and ok[:, 1].sum() > 10
    got = mm(a)
    assert mm.last_path == "amx" and np.isnan(got).any() and np.isinf(got).any()
    assert same_or_both_nan(got, exact(a, b)).all()
    lin = mlir_mx.Linear(MXArray(b.codes.T.copy(), b.scales.T.copy(), E2M1, 32, 1),
                         activations="bf16", threads=1)  # fmt: skip
    assert_same_bits(got, lin(a))


@needs_amx
@pytest.mark.slow
@pytest.mark.parametrize("element", INTEGRAL)
def test_many_random_calls_give_the_exact_paths_bits(element):
    """A campaign: 40 seeds x 3 activation kinds (times 2^40 on every other
    seed), random M, N, K, extreme scales on a third of the weights, every
    tile group, 2 threads (our pool) on half the seeds of each.  Counts printed:
    outputs, fallbacks, calls on each path."""
    from mlir_mx.execution import threads as threads_

    team = threads_.set_team("pool")
    try:
        _campaign(element)
    finally:
        threads_.set_team(team)


def _campaign(element):
    counts = dict.fromkeys(["outputs", "fallbacks", "amx_calls", "exact_calls"], 0)
    for seed in range(40):
        rng = np.random.default_rng(seed)
        m, n, k = int(rng.integers(1, 90)), int(rng.integers(1, 90)), 32 * int(rng.integers(1, 9))
        scales = {}
        if seed % 3 == 0:
            at = [(int(rng.integers(k // 32)), int(rng.integers(n))) for _ in range(3)]
            scales = {p: int(rng.choice([0, 1, 253, 254])) for p in at}
        b = weight(element, n, k, seed=seed, scales=scales)
        mm = on_tiles(
            b, group=[(2, 2), (1, 1), (2, 1), (1, 2)][seed % 4], threads=1 + (seed // 4) % 2
        )
        for kind in range(3):
            a = activations(m, k, seed=1000 + seed + kind, spread=kind > 0)
            if kind == 2:
                a = a * np.exp2(rng.integers(-40, 40, (m, 1))).astype(np.float32)
            a = a * np.float32(2.0 ** (40 * (seed % 2)))
            got = mm(a)
            assert same_or_both_nan(got, exact(a, b)).all(), (seed, kind)
            counts["outputs"] += got.size
            counts[f"{mm.last_path}_calls"] += 1
            if mm.last_path == "amx":
                counts["fallbacks"] += int((~oracle.amx_pass(a, mm.weight)).sum())
    print(element, counts)
    assert counts["amx_calls"] > 0 and counts["exact_calls"] > 0 and counts["fallbacks"] > 0


@needs_amx
def test_calls_with_many_fallbacks_take_the_exact_path():
    """FP8 weights fail every nonzero block: by default such a call runs on
    the exact path; forced onto the tiles (every (row, block) an f32 chain)
    it still gives the exact path's bits."""
    e4m3 = next(f for f in NON_INTEGRAL if "E4M3" in f)
    b = weight(e4m3, 24, 64, seed=20)
    a = activations(20, 64, seed=21, spread=False)
    mm = AMXMatmul(b)
    assert mm.max_fallback_share == amx_matmul.MAX_FALLBACK_SHARE
    assert not oracle.amx_pass(a, mm.weight).any()
    got = mm(a)
    assert mm.last_path == "exact"
    assert_same_bits(got, exact(a, b))
    forced = on_tiles(b)
    assert_same_bits(forced(a), exact(a, b))
    assert forced.last_path == "amx"
    normal = AMXMatmul(weight(E2M1, 24, 64, seed=22))
    normal(a)
    assert normal.last_path == "amx"  # N(0,1) rows: a few % fail


@needs_amx
@pytest.mark.parametrize("element", INTEGRAL)
def test_the_weight_is_held_as_its_codes(element):
    """B is kept as its codes (the packed codes' bytes, in the kernel's order)
    and one byte per block for the scale codes and one for the flags (plus a
    scale bound pair per block): never the bf16 ``b * sb`` (4x an FP4
    weight); measured by ``tracemalloc`` too."""
    import tracemalloc

    b = weight(element, 256, 512, seed=30)
    codes = b.packed_codes().nbytes if b.is_packed else b.codes.nbytes
    small = 2 * (512 // 32) * 256 + 24 * (512 // 32)  # scale codes, flags, bounds, m_max
    AMXMatmul(b)  # the first: anything cached per process
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        mm = AMXMatmul(b)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert mm.held_bytes == codes + small
    assert kept < codes + small + 8192, (kept, codes)
    a = activations(40, 512, seed=31, spread=False)
    mm.max_fallback_share = 1.0
    assert_same_bits(mm(a), exact(a, b))
    assert mm.last_path == "amx" and mm.held_bytes == codes + small  # nothing kept by a call


@needs_amx
@pytest.mark.parametrize("element", [E2M1, INT8])
def test_extreme_scales_that_fold_are_widened_exactly(element):
    """The smallest and largest E8M0 scales that ``amx_prepare`` does not
    flag (E2M1: 2^-125 and 2^125; INT8: 2^-120 and 2^126), on whole weight
    blocks and single columns: the kernel's widened panel (``b sb`` by an
    f32 multiply, its top 16 bits) and its fallback (``(b sb) / sb``) give
    the exact path's bits."""
    lo, hi = (127 - 125, 127 + 125) if element == E2M1 else (127 - 120, 127 + 126)
    b = weight(element, 40, 128, seed=32,
               scales={(0, c): lo for c in range(40)} | {(1, 3): hi, (2, 7): lo, (3, 0): hi})  # fmt: skip
    a = activations(33, 128, seed=33) * np.float32(2.0**60)  # the per-call condition
    mm = on_tiles(b)
    assert not mm.weight.flagged.any() and oracle.amx_guard_call(a, mm.weight)
    got = mm(a)
    assert mm.last_path == "amx"
    assert same_or_both_nan(got, exact(a, b)).all()
    assert same_or_both_nan(got, oracle.amx_guarded_matmul(a, mm.weight)).all()


@needs_amx
@pytest.mark.parametrize("element", INTEGRAL)
def test_two_threads_give_the_same_bits_with_a_late_worker(element):
    """Column groups claimed by a team of 2 (our pool; 5 column tiles: two
    whole groups and an odd one), a worker sleeping inside or the caller
    late: the bits of 1 thread and of the exact path."""
    from mlir_mx.execution import pool as pool_
    from mlir_mx.execution import threads as threads_

    if pool_.pool() is None:
        pytest.skip("the pool needs Linux on x86-64 or AArch64 (futex)")
    b = weight(element, 80, 128, seed=34)
    a = activations(70, 128, seed=35)
    want = exact(a, b)
    assert_same_bits(on_tiles(b)(a), want)
    team = threads_.set_team("pool")
    pool = pool_.pool()
    try:
        two = on_tiles(b, threads=2)
        regions = threads_.regions()
        for hook in ({}, {"inside": 100_000}, {"caller": 100_000}):
            pool.hooks(**hook, load_check=0, backoff=False)
            assert_same_bits(two(a), want)
        assert threads_.regions() == regions + 3  # each call a team's region
        assert amx_matmul.amx_matmul_runner(element=element, threads=2).compiled.tasks == {
            "amx_matmul": 2
        }
    finally:
        pool.hooks()
        threads_.set_team(team)
