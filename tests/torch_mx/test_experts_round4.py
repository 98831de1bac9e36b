"""``MXExperts`` on the cases of reliability round 4 (``../shared/repro/round4/``:
``05-experts-k0-one-token``, ``06-experts-int-hidden-states``,
``07-experts-batch-dependent-bits``): k = 0 at
every token count, inputs of the wrong dtype or device refused by name before
any kernel, and a token's bits independent of the batch it is in whatever the
intermediate size."""

from __future__ import annotations

import collections
import itertools
import random

import pytest

torch = pytest.importorskip("torch", reason="MXExperts needs torch")

import mlir_mx  # noqa: E402
from mlir_mx.errors import MXArgTypeError, MXValueError  # noqa: E402
from mlir_mx.torch import Gate, MXExperts  # noqa: E402

H, E = 64, 4


def _experts(inter: int, block: int = 32, gate: Gate | None = None, seed: int = 0) -> MXExperts:
    gen = torch.Generator().manual_seed(seed)

    def q(*shape):
        w = (torch.randn(*shape, generator=gen) * 0.3).numpy()
        return mlir_mx.quantize(w, "f4E2M1FN", block)

    kw = {} if gate is None else {"gate": gate}
    return MXExperts([q(2 * inter, H) for _ in range(E)], [q(H, inter) for _ in range(E)], **kw)


@pytest.fixture(scope="module")
def experts():
    return _experts(64)


@pytest.mark.parametrize("t", [1, 2, 3])
def test_no_routed_expert_gives_zeros_at_every_token_count(experts, t):
    """Round 4 ``05``: one token with k = 0 raised IndexError."""
    x = torch.randn(t, H)
    with torch.inference_mode():
        y = experts(x, torch.zeros(t, 0, dtype=torch.long), torch.zeros(t, 0))
    assert y.dtype == x.dtype and y.shape == (t, H)
    assert not y.any()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.float64])
def test_hidden_states_of_another_dtype_are_refused_by_name(experts, dtype):
    """Round 4 ``06``: int32 hidden states ran and came back truncated."""
    x = torch.ones(2, H, dtype=dtype)
    with pytest.raises(MXArgTypeError, match=f"^hidden_states: expected float32.*{dtype}"):
        experts(x, torch.tensor([[0, 1], [2, 3]]), torch.full((2, 2), 0.5))


@pytest.mark.parametrize("t", [1, 3])
def test_routing_tensors_off_the_cpu_or_of_the_wrong_kind_are_refused(experts, t):
    """Meta routing tensors gave a RuntimeError from torch; integer routing
    weights ran.  Each is an MXError naming the argument, at one token (the
    rows path) and several."""
    x = torch.randn(t, H)
    idx = torch.zeros(t, 2, dtype=torch.long)
    w = torch.full((t, 2), 0.5)
    with pytest.raises(MXValueError, match="^router_indices: expected a dense tensor on the CPU"):
        experts(x, idx.to("meta"), w)
    with pytest.raises(MXValueError, match="^routing_weights: expected a dense tensor on the CPU"):
        experts(x, idx, w.to("meta"))
    with pytest.raises(MXArgTypeError, match="^routing_weights: expected floats, got torch.int64"):
        experts(x, idx, torch.ones(t, 2, dtype=torch.long))


@pytest.mark.parametrize(
    "inter, block, gate",
    [
        (48, 16, None),  # the reproducer: 48 = 32 + a 16-element tail
        (40, 8, Gate("concatenated", act="silu")),
        (288, 32, Gate("concatenated", act="gelu")),  # 60 rows x 288 > one chunk
    ],
)
def test_a_tokens_bits_do_not_depend_on_its_batch(inter, block, gate):
    """Round 4 ``07``: with an intermediate size not a multiple of 32 the
    grouped (prefill) path's rows differed from the same token alone by 1 ulp
    (the gate's scalar tail).  Every row of a 60-token call equals the token
    called alone, bit for bit, at 1 and 2 torch threads."""
    ex = _experts(inter, block, gate, seed=inter)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(60, H, generator=gen) * 3
    idx = torch.stack([torch.randperm(E, generator=gen)[:3] for _ in range(60)])
    w = torch.rand(60, 3, generator=gen)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                y = ex(x, idx, w)
                alone = torch.cat([ex(x[i : i + 1], idx[i : i + 1], w[i : i + 1]) for i in range(60)])
            assert torch.equal(y.view(torch.int32), alone.view(torch.int32)), threads
    finally:
        torch.set_num_threads(before)


_H_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.bool)
_I_DTYPES = (torch.int64, torch.int32, torch.uint8, torch.float32, torch.bool)
_W_DTYPES = (torch.float32, torch.bfloat16, torch.int64)
_SWEEP = list(
    itertools.product(_H_DTYPES, _I_DTYPES, _W_DTYPES, ("cpu", "meta"), (1, 3), (0, 1, 2))
)


def _misuse(experts, case):
    """One call of the sweep: an MXError, or the right dtype, shape and a
    result equal to the same call with f32 hidden states and int64 indices."""
    hd, idd, wd, device, t, k = case
    gen = torch.Generator().manual_seed(t * 10 + k)
    x = (torch.randn(t, H, generator=gen) * 2).to(hd)
    idx = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(t)]).to(idd)
    w = torch.rand(t, k, generator=gen).to(wd)
    if device == "meta":
        idx = idx.to("meta")
    try:
        with torch.inference_mode():
            y = experts(x, idx, w)
    except mlir_mx.MXError:
        return "refused"
    assert y.dtype == hd and y.shape == (t, H), case
    with torch.inference_mode():
        ref = experts(x.float(), idx.long(), w.float()).to(hd)
    assert torch.equal(y, ref), case
    return "ran"


def test_quick_moe_misuse_sweep(experts):
    """Round 4's MoE misuse cases, 120 of the sweep's 1,080 (drawn once):
    every call is refused with an MXError or gives the result of the same
    call in the types it takes; never a builtin exception or a truncated
    result.  ``-m slow`` runs all."""
    cases = random.Random(4).sample(_SWEEP, 120)
    got = collections.Counter(_misuse(experts, c) for c in cases)
    assert got["refused"] > 0 and got["ran"] > 0


@pytest.mark.slow
def test_long_moe_misuse_sweep(experts):
    got = collections.Counter(_misuse(experts, c) for c in _SWEEP)
    assert got["refused"] > 0 and got["ran"] > 0
