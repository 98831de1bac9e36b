"""``MXExperts``' prefill on AMX-BF16 (``mlir_mx.torch.experts_amx``; issue
51): an expert projection with at least ``EXPERT_MIN_ROWS`` rows whose input
is bf16 values (a bf16 model's hidden states into ``gate_up``; every
projection with ``activations="bf16"``) takes the AMX path where the guard
passes, with the exact path's bits (the same module with ``MLIR_MX_AMX=0``):
experts with 0, few and many rows, ragged row counts, 1 and 2 threads.
Projections below the minimum, with f32 inputs, or with ``MLIR_MX_AMX=0``
never take it; a projection whose inputs fail the guard prepares nothing."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from format_cases import INTEGRAL, NON_INTEGRAL  # noqa: E402

from mlir_mx import host, oracle  # noqa: E402
from mlir_mx.amx_permission import amx_permission  # noqa: E402
from mlir_mx.linear import amx_linear  # noqa: E402
from mlir_mx.linear.amx_linear import amx_matmul_of  # noqa: E402
from mlir_mx.torch import MXExperts, experts_amx  # noqa: E402

HAS_AMX = host.has_features("amx_tile", "amx_bf16") and amx_permission().granted
needs_amx = pytest.mark.skipif(not HAS_AMX, reason="no AMX-BF16 on this CPU")
H, INTER = 160, 96  # down's N = 160: five column tiles, two and a half groups
#: rows per expert: none, few and some (below the minimum, 32), ragged, many
COUNTS = (0, 3, 20, 37, 64)


def experts(acts=None, element="f4E2M1FN", threads=1, seed=0, spread=1.0):
    """Weights scaled by 1/sqrt(in) so that the gate's outputs mostly pass the
    guard (``spread`` > 1: gate inputs far from 0, whose outputs fail)."""
    rng = np.random.default_rng(seed)

    def q(out, inp):
        w = rng.standard_normal((out, inp)) * spread / np.sqrt(inp)
        return oracle.quantize(w.astype(np.float32), element, 32)

    e = len(COUNTS)
    gub = torch.from_numpy(rng.standard_normal((e, 2 * INTER)).astype(np.float32) * 0.02)
    dnb = torch.from_numpy(rng.standard_normal((e, H)).astype(np.float32) * 0.02)
    return MXExperts([q(2 * INTER, H) for _ in range(e)], [q(H, INTER) for _ in range(e)], gub, dnb,
                     threads=threads, activations=acts)  # fmt: skip


def routing(counts=COUNTS, k=2, seed=0):
    """``(router_indices, routing_weights)`` giving expert ``e`` ``counts[e]`` rows."""
    rng = np.random.default_rng(seed)
    slots = rng.permutation(np.repeat(np.arange(len(counts)), counts))
    idx = torch.from_numpy(slots.reshape(-1, k).astype(np.int64))
    return idx, torch.from_numpy(rng.random(idx.shape).astype(np.float32))


def hidden(tokens, dtype, seed=1, grid=False):
    """N(0, 1) (``grid``: rounded to multiples of 1/16, which pass the guard
    for E3M2 and INT8 weights too, ``tests/test_linear_amx.py``'s ``passing``)."""
    x = np.random.default_rng(seed).standard_normal((tokens, H))
    x = np.round(x * 16) / 16 if grid else x
    return torch.from_numpy(x.astype(np.float32)).to(dtype)


def exact_call(ex, x, idx, w, monkeypatch):
    with monkeypatch.context() as mp:
        mp.setenv(amx_linear.ENV, "0")
        return ex(x, idx, w)


def assert_same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    differ = got.view(torch.int16 if got.dtype == torch.bfloat16 else torch.int32) != want.view(
        torch.int16 if want.dtype == torch.bfloat16 else torch.int32
    )
    assert not differ.any(), f"{int(differ.sum())} of {differ.numel()} outputs differ"


def used(counts=COUNTS):
    return ["amx" if c >= experts_amx.EXPERT_MIN_ROWS else None for c in counts]


@needs_amx
@pytest.mark.parametrize(("acts", "threads"), [(None, 2), ("bf16", 1), ("bf16", 2)])
def test_the_experts_amx_path_gives_the_exact_paths_bits(acts, threads, monkeypatch):
    """``acts=None`` with bf16 hidden states: a bf16 model (``gate_up`` on AMX,
    ``down``'s f32 input on the exact path); ``"bf16"``: f32 hidden states
    rounded, both projections on AMX."""
    ex = experts(acts, threads=threads)
    idx, w = routing()
    x = hidden(len(idx), torch.bfloat16 if acts is None else torch.float32)
    with torch.inference_mode():
        got = ex(x, idx, w)
        assert experts_amx.last_paths(ex.gate_up) == used()
        assert experts_amx.last_paths(ex.down) == (used() if acts else [None] * len(COUNTS))
        assert_same_bits(got, exact_call(ex, x, idx, w, monkeypatch))


@needs_amx
def test_f32_inputs_one_token_and_the_switch_never_take_it(monkeypatch):
    idx, w = routing()
    with torch.inference_mode():
        plain = experts()  # f32 hidden states, no activations=: f32 products
        plain(hidden(len(idx), torch.float32), idx, w)
        assert experts_amx.last_paths([*plain.gate_up, *plain.down]) == [None] * 2 * len(COUNTS)
        ex = experts("bf16")
        ex(hidden(1, torch.float32), idx[:1], w[:1])  # one token: the decode path
        exact_call(ex, hidden(len(idx), torch.float32), idx, w, monkeypatch)
        assert experts_amx.last_paths([*ex.gate_up, *ex.down]) == [None] * 2 * len(COUNTS)
        assert experts_amx.prepared_bytes(ex) == 0


def test_without_amx_bf16_the_calls_are_unchanged(monkeypatch):
    """``-amx_bf16`` masks the feature (and CPUs without it): the exact path,
    nothing prepared."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-amx_bf16")
    ex = experts("bf16", seed=5)
    idx, w = routing(seed=5)
    x = hidden(len(idx), torch.float32)
    with torch.inference_mode():
        got = ex(x, idx, w)
        assert "amx" not in experts_amx.last_paths([*ex.gate_up, *ex.down])
        assert_same_bits(got, exact_call(ex, x, idx, w, monkeypatch))
    assert experts_amx.prepared_bytes(ex) == 0


def test_without_amx_bf16_no_guard_is_looked_at(monkeypatch):
    """Where AMX cannot run, a projection never rounds its input to bf16 for
    the weight-free guard (it would, every ``RETRY_EVERY`` calls, for nothing)."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", "-amx_bf16")

    def guard(*_):
        raise AssertionError("the guard was looked at without AMX-BF16")

    monkeypatch.setattr(experts_amx, "_would_pass", guard)
    ex = experts("bf16", seed=5)
    idx, w = routing(seed=5)
    with torch.inference_mode():
        ex(hidden(len(idx), torch.float32), idx, w)


def test_precompile_of_a_bf16_model_prepares_no_experts_weight(monkeypatch):
    """``precompile`` of a bf16 model makes the AMX path of its plain ``MXLinear``
    ready, but an ``MXExperts``' projections prepare theirs only at a call
    whose inputs pass the guard (a gpt-oss-20b would hold ~10 GiB more)."""
    from mlir_mx.torch import MXLinear, precompile

    model = torch.nn.Module()
    model.experts = experts()
    w = oracle.quantize(np.ones((H, 64), np.float32), "f4E2M1FN", 32, axis=1)
    model.proj = MXLinear(w)
    model.register_buffer("held", torch.zeros(1, dtype=torch.bfloat16))  # a bf16 model
    asked, real = [], amx_linear.amx_matmul_of
    monkeypatch.setattr(amx_linear, "amx_matmul_of", lambda lin: asked.append(lin) or real(lin))
    precompile(model, m=[64], progress=False)
    assert asked and {id(lin) for lin in asked} == {id(model.proj.linear)}  # the plain one's only


@needs_amx
def test_only_the_experts_that_take_it_hold_a_prepared_weight():
    ex = experts("bf16")
    idx, w = routing()
    assert experts_amx.prepared_bytes(ex) == 0
    with torch.inference_mode():
        ex(hidden(len(idx), torch.float32), idx, w)
    taken = [layer for pair in zip(ex.gate_up, ex.down, strict=True) for layer in pair]
    taken = [layer for layer, c in zip(taken, np.repeat(COUNTS, 2), strict=True)
             if c >= experts_amx.EXPERT_MIN_ROWS]  # fmt: skip
    held = [amx_matmul_of(layer.linear)[0].held_bytes for layer in taken]
    assert experts_amx.prepared_bytes(ex) == sum(held) > 0
    assert sum(held) <= 1.25 * sum(layer.linear.nbytes for layer in taken)


@needs_amx
def test_a_projection_whose_inputs_fail_prepares_nothing_and_retries_later(monkeypatch):
    """Large gate inputs: the gate's outputs span many binades (the guard
    fails on most (row, block)s), so ``down`` declines before preparing, then
    skips ``RETRY_EVERY - 1`` calls before it looks again."""
    ex = experts("bf16", spread=16.0)
    idx, w = routing()
    x = hidden(len(idx), torch.float32)
    looks = []
    would_pass = experts_amx._would_pass
    monkeypatch.setattr(experts_amx, "_would_pass",
                        lambda a, lin: looks.append(lin) or would_pass(a, lin))  # fmt: skip
    down = ex.down[4].linear  # 64 rows
    with torch.inference_mode():
        want = exact_call(ex, x, idx, w, monkeypatch)
        for _ in range(experts_amx.RETRY_EVERY + 1):
            assert_same_bits(ex(x, idx, w), want)
            assert experts_amx.last_paths(ex.down) == [p and "exact" for p in used()]
    assert looks.count(down) == 2  # the first call and the 9th
    taken = [layer for layer, p in zip(ex.gate_up, used(), strict=True) if p]
    gate_up = [amx_matmul_of(layer.linear)[0].held_bytes for layer in taken]
    assert experts_amx.prepared_bytes(ex) == sum(gate_up) > 0  # no down prepared


@pytest.mark.slow
@needs_amx
@pytest.mark.parametrize("element", INTEGRAL + NON_INTEGRAL)
def test_many_random_expert_calls_give_the_exact_paths_bits(element, monkeypatch):
    """A campaign: 12 seeds, random routings (8-120 tokens, top-1 to top-3 of
    5 experts: 0 to 360 rows each), 1 or 2 threads, a bf16 model and
    ``activations="bf16"``, N(0, 1) hidden states or on a 1/16 grid; every
    call's bits against the hook off (FP8 weights never take it).  Counts printed (projection calls by
    path: ``None`` below the row minimum or not bf16 inputs)."""
    counts = {"outputs": 0, "amx": 0, "exact": 0, None: 0}
    for seed in range(12):
        rng = np.random.default_rng(900 + seed)
        t, k = int(rng.integers(8, 121)), int(rng.integers(1, 4))
        acts = None if seed % 2 else "bf16"
        ex = experts(acts, element, threads=1 + (seed // 2) % 2, seed=seed)
        p = rng.dirichlet(np.ones(len(COUNTS)) * 0.7)
        idx = torch.from_numpy(rng.choice(len(COUNTS), (t, k), p=p))
        w = torch.from_numpy(rng.random((t, k)).astype(np.float32))
        x = hidden(t, torch.bfloat16 if acts is None else torch.float32, seed, seed % 3 > 0)
        with torch.inference_mode():
            got = ex(x, idx, w)
            for path in experts_amx.last_paths([*ex.gate_up, *ex.down]):
                counts[path] += 1
            assert_same_bits(got, exact_call(ex, x, idx, w, monkeypatch))
        counts["outputs"] += got.numel()
    print(element, counts)
    assert (counts["amx"] > 0) == (element in INTEGRAL)  # FP8 weights: never (their T)
