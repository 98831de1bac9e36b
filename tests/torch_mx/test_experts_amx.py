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
#: The shipped cost model (the fixture below zeroes its narrow-N term).
SHIPPED_COST = dict(experts_amx.AMX_COST)


@pytest.fixture(autouse=True)
def as_wide(monkeypatch):
    """The policy's costs without its narrow-N term (``amx_pays``: at these
    small N AMX would never pay, and these tests check its bits): the
    decisions then follow the rows and the failing share alone."""
    monkeypatch.setitem(experts_amx.AMX_COST, "narrow", 0.0)


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
    """None below the row minimum, else a path (the policy's: :func:`paths`)."""
    return ["amx" if c >= experts_amx.EXPERT_MIN_ROWS else None for c in counts]


def predicted(layer, a):
    """The path the policy takes for ``layer`` on ``a`` (f32 rows): the guard's
    failing (row, block)s (``amx_guard`` on ``a`` rounded to bf16), then
    ``amx_pays``."""
    import ml_dtypes

    from mlir_mx.linear.amx_matmul import MAX_FALLBACK_SHARE
    from mlir_mx.numerics.amx_guard import amx_guard

    b = a.numpy().astype(ml_dtypes.bfloat16).astype(np.float32)
    with np.errstate(all="ignore"):
        ok = amx_guard(b, layer.element)
    failing = int(ok.size - np.count_nonzero(ok))
    pays = experts_amx.amx_pays(len(a), failing, ok.shape[1], layer.out_features)
    return "amx" if pays and failing <= MAX_FALLBACK_SHARE * ok.size else "exact"


def paths(ex, x, idx, acts, monkeypatch):
    """Per expert, the paths of ``(gate_up, down)`` the policy takes on this
    call's real inputs (None: below the minimum, or ``down``'s f32 input)."""
    out = ([], [])
    with monkeypatch.context() as mp:
        mp.setenv(amx_linear.ENV, "0")
        for e in range(ex.num_experts):
            rows = x.float()[(idx == e).nonzero()[:, 0]]
            if len(rows) < experts_amx.EXPERT_MIN_ROWS:
                out[0].append(None), out[1].append(None)
                continue
            out[0].append(predicted(ex.gate_up[e], rows))
            g = ex.gate.rows(ex.gate_up[e](rows))
            out[1].append(predicted(ex.down[e], g) if acts else None)
    return out


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
        want_gu, want_dn = paths(ex, x, idx, acts, monkeypatch)
        got = ex(x, idx, w)
        assert experts_amx.last_paths(ex.gate_up) == want_gu
        assert experts_amx.last_paths(ex.down) == want_dn
        assert "amx" in want_gu + want_dn  # the path is exercised
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
    taken = [layer for layer, p in zip(taken, experts_amx.last_paths(taken), strict=True)
             if p == "amx"]  # fmt: skip
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
    gu_paths = experts_amx.last_paths(ex.gate_up)
    taken = [layer for layer, p in zip(ex.gate_up, gu_paths, strict=True) if p == "amx"]
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


def test_the_cost_model_takes_the_measured_faster_side():
    """``amx_pays`` at points measured on gpt-oss-20b's projections (session
    57's kernel, the module's table; ``gate_up`` N = 5760, ``down`` N = 2880,
    K = 2880: 90 blocks): AMX where it measured at least 1.10x, the exact
    path where slower."""
    pays = experts_amx.amx_pays
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(experts_amx, "AMX_COST", SHIPPED_COST)
        for m, share, n, faster in [(8, 0.06, 5760, False), (12, 0.0, 5760, True),
                                    (12, 0.10, 5760, False), (16, 0.03, 5760, True),
                                    (16, 0.10, 5760, True), (24, 0.15, 5760, True),
                                    (8, 0.03, 2880, False), (12, 0.06, 2880, False),
                                    (16, 0.06, 2880, True), (24, 0.03, 2880, True),
                                    (48, 0.15, 2880, True)]:  # fmt: skip
            assert pays(m, round(share * m * 90), 90, n) is faster, (m, share, n)
        assert not pays(11, 0, 90, 5760) and not pays(64, 0, 90, 160)  # few rows; narrow N


def _rows_failing(m: int, share: float, seed: int = 3) -> torch.Tensor:
    """``m`` f32 rows of bf16 values on a 1/16 grid (every block passes), but a
    random ``share`` of the (row, block)s holding one element 2^-20 (fails)."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal((m, H)) * 16) / 16
    x = np.where(np.abs(x) < 1 / 16, 1 / 16, x)
    hit = np.nonzero(rng.random((m, H // 32)) < share)
    x[hit[0], hit[1] * 32] = 2.0**-20
    return torch.from_numpy(x.astype(np.float32))


@needs_amx
def test_a_call_takes_amx_only_where_its_rows_and_failing_share_pay(monkeypatch):
    """Real calls of one expert projection (``activations="bf16"``): 16 rows
    with no failing block take AMX; 12 rows with ~15 % failing (the guard's 30 %
    would let them run) take the exact path, as ``amx_pays`` says; 8 rows
    never look; after the decline a call of more rows (24) tries again.  The
    bits equal the exact path's every time.  At the shipped costs a narrow
    projection (N = 192) does not pay even with no failing block: no guard."""
    layer = experts("bf16").gate_up[2]
    cases = [(16, 0.0, "amx"), (12, 0.15, "exact"), (8, 0.0, None), (24, 0.0, "amx")]
    for m, share, path in cases:
        x = _rows_failing(m, share)
        with torch.inference_mode():
            y = experts_amx.amx_projection(layer, x)
            with monkeypatch.context() as mp:
                mp.setenv(amx_linear.ENV, "0")
                want = layer(x)
        if path == "exact":  # declined by the cost, not by the guard's 30 %
            from mlir_mx.numerics.amx_guard import amx_guard

            assert 0.05 < 1.0 - amx_guard(x.numpy(), layer.element).mean() <= 0.3
            assert y is None and predicted(layer, x) == "exact"
        if path is None:
            assert y is None
            continue
        assert experts_amx.last_paths([layer]) == [path], (m, share)
        assert_same_bits(want if y is None else y, want)
    narrow = experts("bf16", seed=2).gate_up[4]  # N = 192 at the shipped costs: never pays
    monkeypatch.setitem(experts_amx.AMX_COST, "narrow", SHIPPED_COST["narrow"])
    with torch.inference_mode():
        assert experts_amx.amx_projection(narrow, _rows_failing(64, 0.0)) is None
    assert experts_amx.last_paths([narrow]) == [None]  # declined before any guard
