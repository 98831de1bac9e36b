"""``Linear(w, activations="bf16")`` on AMX-BF16 (``mlir_mx.linear.amx_linear``;
issue 51): where the hook takes the AMX path the bits are the exact path's
(the same Linear with ``MLIR_MX_AMX=0``) for E2M1, E2M3, E3M2 and INT8
weights, M 16 / 40 / 130, ragged N, Inf/NaN rows, f32 inputs that are not
bf16, 1 and 2 threads; FP8 weights, fewer than 16 rows, f32 activations,
``MLIR_MX_AMX=0`` and CPUs without AMX-BF16 (``MLIR_MX_CPU_FEATURES=-amx_bf16``)
never take it."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from format_cases import INTEGRAL, NON_INTEGRAL

import mlir_mx
from mlir_mx import host, oracle
from mlir_mx.amx_permission import amx_permission
from mlir_mx.linear import amx_linear

HAS_AMX = host.has_features("amx_tile", "amx_bf16") and amx_permission().granted
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="no AMX-BF16 on this CPU")
K = 128


def weight(element, n=72, k=K, seed=0):
    """W (out, in) blocked along in; N = 72: four and a half column tiles."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp2(rng.integers(-6, 6, (n, 1)))
    return oracle.quantize(w.astype(np.float32), element, 32)


def passing(m, k=K, seed=1) -> np.ndarray:
    """f32 activations whose bf16 roundings mostly pass the guard for every
    format with one (multiples of 1/16 below 64), with every tenth row
    spread over 40 binades (its blocks fall back)."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal((m, k)) * 16) / 16
    x[::10] = rng.standard_normal((len(x[::10]), k)) * np.exp2(rng.integers(-20, 20, (len(x[::10]), k)))
    return x.astype(np.float32)


def exact(w, x, threads, monkeypatch) -> np.ndarray:
    with monkeypatch.context() as mp:
        mp.setenv(amx_linear.ENV, "0")
        lin = mlir_mx.Linear(w, activations="bf16", threads=threads)
        out = lin(x)
        assert amx_linear.last_path(lin) is None
    return out


def call(lin, x, threads, by_address=False) -> np.ndarray:
    """``lin(x, threads=threads)``, or the call by address with ``x`` flagged
    as bf16 values (``Linear.call_into``, the torch layers' call)."""
    if not by_address:
        return lin(x, threads=threads)
    out = np.zeros((len(x), lin.out_features), np.float32)
    assert lin.call_into(x.ctypes.data, len(x), out.ctypes.data, threads, True)
    return out


def assert_same_bits(got, want):
    assert got.shape == want.shape and got.dtype == np.float32
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), f"{int(differ.sum())} of {differ.size} outputs differ"


@needs_amx
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m", [16, 40, 130])  # 130: 8 full row tiles and 2 rows
@pytest.mark.parametrize("element", INTEGRAL)
def test_the_amx_path_gives_the_exact_paths_bits(element, m, threads, monkeypatch):
    """M 16 and 40 with the row minimum lowered to one tile (the default,
    64, is a speed choice); 130 with the default."""
    if m < amx_linear.MIN_ROWS:
        monkeypatch.setattr(amx_linear, "MIN_ROWS", 16)
    w = weight(element, seed=m)
    x = passing(m, seed=m + 1)
    lin = mlir_mx.Linear(w, activations="bf16", threads=threads)
    got = lin(x)
    assert amx_linear.last_path(lin) == "amx"
    assert_same_bits(got, exact(w, x, threads, monkeypatch))


@needs_amx
def test_non_finite_rows_and_inputs_that_are_not_bf16(monkeypatch):
    """Inf and NaN fall back per (row, block) (NaN payloads as the exact
    path's); f32 values are rounded to bf16 as the exact path rounds them
    (a value past bf16's largest becomes Inf)."""
    monkeypatch.setattr(amx_linear, "MIN_ROWS", 16)
    w = weight("f4E2M1FN", seed=3)
    x = np.random.default_rng(4).standard_normal((33, K)).astype(np.float32)
    x[1, 3], x[2, 40], x[4, 7], x[6, 100] = np.inf, np.nan, -np.inf, 3.4e38
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    got = lin(x)
    assert amx_linear.last_path(lin) == "amx"
    assert np.isnan(got).any() and np.isinf(got).any()
    assert_same_bits(got, exact(w, x, 1, monkeypatch))


@needs_amx
def test_a_call_with_many_fallbacks_runs_the_exact_kernels(monkeypatch):
    monkeypatch.setattr(amx_linear, "MIN_ROWS", 16)
    w = weight("f4E2M1FN", seed=5)
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((32, K)) * np.exp2(rng.integers(-30, 30, (32, K)))).astype(np.float32)
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    got = lin(x)
    assert amx_linear.last_path(lin) == "exact"
    assert_same_bits(got, exact(w, x, 1, monkeypatch))
    got = lin(passing(32))  # the same Linear takes the tiles again
    assert amx_linear.last_path(lin) == "amx"


def never_on_amx(w, x, monkeypatch, **kw):
    lin = mlir_mx.Linear(w, threads=1, **kw)
    got = lin(x)
    assert amx_linear.last_path(lin) is None
    if kw.get("activations") == "bf16":
        assert_same_bits(got, exact(w, x, 1, monkeypatch))


@pytest.mark.parametrize("element", NON_INTEGRAL)
def test_fp8_weights_never_take_the_amx_path(element, monkeypatch):
    never_on_amx(weight(element), passing(32), monkeypatch, activations="bf16")


def test_few_rows_f32_activations_and_the_switch_stay_exact(monkeypatch):
    w = weight("f4E2M1FN", seed=7)
    never_on_amx(w, passing(amx_linear.MIN_ROWS - 1), monkeypatch, activations="bf16")
    never_on_amx(w, passing(40), monkeypatch)  # f32 activations: the exact f32 path
    monkeypatch.setenv(amx_linear.ENV, "0")
    never_on_amx(w, passing(40), monkeypatch, activations="bf16")


def test_without_amx_bf16_the_calls_are_unchanged(monkeypatch):
    """``-amx_bf16`` masks the feature: nothing AMX is compiled or run, and
    the bits are the exact path's."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-amx_bf16")
    never_on_amx(weight("f4E2M1FN", seed=8), passing(40), monkeypatch, activations="bf16")


@needs_amx
def test_a_mask_set_after_the_first_amx_call_steps_aside(monkeypatch):
    """``-amx_bf16`` set after a Linear's first AMX call: its later calls run
    the exact path (no refusal from the prepared AMX matmul), same bits."""
    w, x = weight("f4E2M1FN", seed=13), passing(amx_linear.MIN_ROWS, seed=14)
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    first = lin(x)
    assert amx_linear.last_path(lin) == "amx"
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-amx_bf16")
    masked = lin(x)
    assert amx_linear.last_path(lin) == "exact"
    assert_same_bits(masked, first)


@needs_amx
def test_the_prepared_weight_is_not_a_second_mxarray():
    """What the hook keeps per Linear (``amx_matmul_of``; traced with nothing
    kept by the test) is the kernel's codes and scale bytes, about 1.13x the
    packed codes, not also the transposed MXArray it is made from."""
    import gc
    import tracemalloc

    w = weight("f4E2M1FN", n=512, k=1024, seed=15)
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    packed = 512 * 1024 // 2
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert amx_linear.amx_matmul_of(lin) is not None
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 1.25 * packed, (held, packed)


@needs_amx
@pytest.mark.parametrize("activations", ["bf16", None])
def test_the_call_by_address_takes_the_amx_path_for_bf16_values(activations, monkeypatch):
    """``Linear.call_into`` (the torch layers' call): ``activations="bf16"``,
    or bf16 values flagged ``bf16=True`` with no ``activations=`` (a bf16
    model's input), take the AMX path with the exact path's bits; f32
    values without the flag do not."""
    w = weight("f4E2M1FN", seed=9)
    x = passing(amx_linear.MIN_ROWS, seed=10)
    x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    lin = mlir_mx.Linear(w, activations=activations, threads=1)
    out = np.zeros((len(x), 72), np.float32)
    assert lin.call_into(x.ctypes.data, len(x), out.ctypes.data, 1, True)
    assert amx_linear.last_path(lin) == "amx"
    with monkeypatch.context() as mp:
        mp.setenv(amx_linear.ENV, "0")
        assert_same_bits(out, mlir_mx.Linear(w, activations=activations, threads=1)(x))
    plain = mlir_mx.Linear(w, threads=1)
    if activations is None:
        out2 = np.zeros_like(out)
        assert plain.call_into(x.ctypes.data, len(x), out2.ctypes.data, 1, False)
        assert amx_linear.last_path(plain) is None
        assert_same_bits(out2, out)


@needs_amx
@pytest.mark.parametrize("by_address", [False, True])
def test_the_amx_kernel_runs_on_the_calls_team(by_address):
    """The AMX kernel's column groups run on the call's thread count (a torch
    layer's Linear is made with one thread and called with torch's count),
    not the Linear's: a parallel region per 2-thread call, none per
    1-thread call, the same bits."""
    from mlir_mx.execution import threads as team

    w = weight("f4E2M1FN", seed=11)
    x = passing(amx_linear.MIN_ROWS, seed=12).astype(ml_dtypes.bfloat16).astype(np.float32)
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    outs = []
    for t in (1, 2):
        before = team.regions()
        out = call(lin, x, t, by_address)
        assert amx_linear.last_path(lin) == "amx"
        assert team.regions() - before == (t > 1)
        outs.append(out)
    assert_same_bits(outs[1], outs[0])


@needs_amx
@pytest.mark.slow
@pytest.mark.parametrize("element", INTEGRAL)
def test_many_random_linear_calls_give_the_exact_paths_bits(element, monkeypatch):
    """A campaign: 24 seeds, random M (16-200), N, K, 1 or 2 threads, three
    activation kinds; every call's bits against the same Linear's with the
    hook off.  Counts printed."""
    monkeypatch.setattr(amx_linear, "MIN_ROWS", 16)
    counts = {"outputs": 0, "amx": 0, "exact": 0}
    for seed in range(24):
        rng = np.random.default_rng(500 + seed)
        m, n, k = int(rng.integers(16, 200)), int(rng.integers(1, 100)), 32 * int(rng.integers(1, 9))
        w = weight(element, n, k, seed)
        lin = mlir_mx.Linear(w, activations="bf16", threads=1 + seed % 2)
        for kind in range(3):
            x = passing(m, k, seed + kind) if kind < 2 else rng.standard_normal((m, k))
            x = (x * 2.0 ** (30 * (kind - 1))).astype(np.float32)
            got = lin(x)
            with monkeypatch.context() as mp:
                mp.setenv(amx_linear.ENV, "0")
                want = lin(x)
            assert_same_bits(got, want)
            counts["outputs"] += got.size
            counts[amx_linear.last_path(lin)] += 1
    print(element, counts)
    assert counts["amx"] > 0


@needs_amx
@pytest.mark.parametrize("by_address", [False, True])
def test_the_prepared_weight_goes_with_its_linear(by_address):
    """With the garbage collector off, dropping a Linear after its AMX calls
    frees its prepared weight at once: the calls bound for it (``call_into``
    keeps them in the Linear) hold it weakly, no reference cycle (a replaced
    layer's weight was kept until a full collection)."""
    import gc
    import weakref

    w = weight("f4E2M1FN", seed=16)
    x = passing(amx_linear.MIN_ROWS, seed=17).astype(ml_dtypes.bfloat16).astype(np.float32)
    lin = mlir_mx.Linear(w, activations="bf16", threads=1)
    call(lin, x, 1, by_address)
    assert amx_linear.last_path(lin) == "amx"
    prepared = weakref.ref(amx_linear.amx_matmul_of(lin)[0])
    linear = weakref.ref(lin)
    gc.disable()
    try:
        del lin
        assert linear() is None and prepared() is None
    finally:
        gc.enable()


@needs_amx
def test_threads_racing_on_a_fresh_linear_prepare_its_weight_once(monkeypatch):
    """Two threads asking for a fresh Linear's AMX weight at once (its first
    two calls, on two threads) build it once and get the same one; each
    build is made slow here (50 ms) so that both ask while it runs."""
    import threading
    import time

    from mlir_mx.linear import amx_matmul

    builds = []

    class Counted(amx_matmul.AMXMatmul):
        def __init__(self, *args, **kwargs):
            builds.append(threading.get_ident())
            time.sleep(0.05)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(amx_matmul, "AMXMatmul", Counted)
    lin = mlir_mx.Linear(weight("f4E2M1FN", seed=18), activations="bf16", threads=1)
    start, got = threading.Barrier(2), [None, None]

    def ask(i):
        start.wait()
        got[i] = amx_linear.amx_matmul_of(lin)

    workers = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert len(builds) == 1, builds
    assert got[0] is not None and got[0] is got[1]
    assert isinstance(got[0][0], Counted)


@needs_amx
def test_precompile_leaves_the_amx_path_nothing_to_compile(monkeypatch):
    """After ``Linear.precompile(m)`` (``activations="bf16"``), and
    ``precompile(m, bf16=True)`` for bf16 values by address (a bf16 model's
    layer), the first calls with ``m`` rows take the AMX path and neither
    compiles a kernel nor prepares the weight (both made to fail), with the
    exact path's bits.  The compile cache and the AMX Runners are cleared
    first, so nothing is left from another test (one thread: the AMX
    kernels are not in the disk cache, and each team's takes ~1 s to
    compile; ``Linear.precompile`` covers the teams as for every kernel)."""
    from mlir_mx.execution import clear_cache, compiled
    from mlir_mx.linear import amx_matmul, amx_prepare

    w = weight("f4E2M1FN", seed=19)
    x = passing(40, seed=20).astype(ml_dtypes.bfloat16).astype(np.float32)
    want = exact(w, x, 1, monkeypatch)
    clear_cache()
    amx_matmul._runner.cache_clear()
    amx_prepare._runner.cache_clear()
    rounding = mlir_mx.Linear(w, activations="bf16", threads=1)
    rounding.precompile(len(x))
    by_address = mlir_mx.Linear(w, threads=1)
    by_address.precompile(len(x), bf16=True)

    def refuse(*args, **kwargs):
        raise AssertionError("compiled or prepared after precompile")

    monkeypatch.setattr(compiled, "Compiled", refuse)
    monkeypatch.setattr(amx_matmul, "AMXMatmul", refuse)
    for lin in (rounding, by_address):
        got = call(lin, x, 1, lin is by_address)
        assert amx_linear.last_path(lin) == "amx"
        assert_same_bits(got, want)


@needs_amx
@pytest.mark.slow
def test_precompile_on_two_threads_leaves_the_team_preparation_nothing_to_compile(monkeypatch):
    """On 2 threads at M K >= ``SPLIT_MIN`` A is prepared on the team:
    ``precompile`` compiles that prepare kernel too (slow: each team's AMX
    kernels take ~1 s to compile)."""
    from mlir_mx.execution import clear_cache, compiled
    from mlir_mx.linear import amx_matmul, amx_prepare

    monkeypatch.setenv("MLIR_MX_LOAD_CHECK", "0")
    w = weight("f4E2M1FN", seed=23, k=4096)
    x = passing(160, 4096, seed=24)
    assert amx_prepare.split_threads(len(x), 4096, 2) == 2
    want = exact(w, x, 2, monkeypatch)
    clear_cache()
    amx_matmul._runner.cache_clear()
    amx_prepare._runner.cache_clear()
    lin = mlir_mx.Linear(w, activations="bf16", threads=2)
    lin.precompile(len(x))

    def refuse(*args, **kwargs):
        raise AssertionError("compiled after precompile")

    monkeypatch.setattr(compiled, "Compiled", refuse)
    got = lin(x)
    assert amx_linear.last_path(lin) == "amx"
    assert_same_bits(got, want)


@needs_amx
def test_the_prepare_kernel_is_kept_in_the_persistent_cache():
    """The prepare kernel's machine code is kept on disk (``MLIR_MX_CACHE_DIR``,
    the run's directory here): a process that has compiled it once loads it
    (``precompile`` of a later process then compiles nothing for it)."""
    from mlir_mx.execution import clear_cache
    from mlir_mx.execution.objects import machine_code_supported
    from mlir_mx.linear import amx_prepare

    amx_prepare.prepare_runner()  # compiled, or loaded, once
    clear_cache()
    amx_prepare._runner.cache_clear()
    assert amx_prepare.prepare_runner().compiled.from_disk
    assert amx_prepare.prepare_runner().compiled.machine_code == machine_code_supported()


def test_precompile_without_the_amx_path_prepares_nothing(monkeypatch):
    """Where no call with those rows would take the AMX path (fewer rows
    than ``MIN_ROWS``, f32 activations, bf16 values not flagged,
    ``MLIR_MX_AMX=0``, AMX-BF16 masked), ``precompile`` neither prepares an
    AMX weight nor compiles an AMX kernel (each made to fail)."""
    from mlir_mx.linear import amx_matmul, amx_prepare

    def refuse(*args, **kwargs):
        raise AssertionError("the AMX path made ready where no call takes it")

    for name in ("AMXMatmul", "amx_matmul_runner"):
        monkeypatch.setattr(amx_matmul, name, refuse)
    monkeypatch.setattr(amx_prepare, "prepare_runner", refuse)
    w = weight("f4E2M1FN", seed=21)
    cases = [  # activations, rows, bf16, environment
        ("bf16", amx_linear.MIN_ROWS - 1, False, {}),
        (None, 40, False, {}),
        ("bf16", 40, False, {amx_linear.ENV: "0"}),
        (None, 40, True, {"MLIR_MX_CPU_FEATURES": "-amx_bf16"}),
    ]
    for activations, m, bf16, env in cases:
        with monkeypatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            lin = mlir_mx.Linear(w, activations=activations, threads=1)
            lin.precompile(m, **({"bf16": True} if bf16 else {}))
            assert amx_linear.last_path(lin) is None
