"""``MXExperts``: gpt-oss's experts on the MX kernels, against transformers' own
``GptOssExperts`` (the facts of issue 28 checked on its source and behaviour)."""

from __future__ import annotations

import copy
import inspect
import io
import pickle

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[torch]')")

from gpt_oss_cases import prompt, tiny_gpt_oss, transformers_or_skip  # noqa: E402

from mlir_mx.errors import InferenceOnlyError, MXArgTypeError, MXValueError  # noqa: E402
from mlir_mx.interop.orientation import transpose  # noqa: E402
from mlir_mx.torch import (  # noqa: E402
    Gate,
    MXExperts,
    MXLinear,
    dequantize_,
    greedy,
    logit_bound,
    quantize_,
)


def _experts_only(module, name):
    return "experts" in name


@pytest.fixture(scope="module")
def pair():
    """(ours: experts MXFP4, reference: the same model with the dequantized experts)."""
    model = tiny_gpt_oss()
    ref = copy.deepcopy(model)
    summary = quantize_(model, filter_fn=_experts_only)
    dequantize_(ref, filter_fn=_experts_only)
    return model, ref, summary


@pytest.fixture(scope="module")
def bound(pair):
    """The reference's logits for ``prompt()`` and their bound."""
    return logit_bound(pair[1], prompt(), probes=3)


def test_transformers_facts():
    """The gpt-oss facts the module is built on, read from transformers 5.24's
    ``GptOssExperts``: forward(hidden_states, router_indices, routing_weights),
    gate_up (E, H, 2I) transposed, interleaved gate/up, clamp, alpha 1.702."""
    transformers = transformers_or_skip()
    from transformers.models.gpt_oss import modeling_gpt_oss as mod

    params = list(inspect.signature(mod.GptOssExperts.forward).parameters)
    assert params[:4] == ["self", "hidden_states", "router_indices", "routing_weights"]
    src = inspect.getsource(mod.GptOssExperts._apply_gate)
    assert "gate_up[..., ::2], gate_up[..., 1::2]" in src
    assert "clamp(min=None, max=self.limit)" in src and "clamp(min=-self.limit, max=self.limit)" in src
    cfg = transformers.GptOssConfig()
    assert (cfg.swiglu_alpha, cfg.swiglu_limit) == (1.702, 7.0)
    ex = mod.GptOssExperts(transformers.GptOssConfig(hidden_size=64, intermediate_size=32,
                                                     num_local_experts=2))  # fmt: skip
    assert tuple(ex.gate_up_proj.shape) == (2, 64, 64) and tuple(ex.down_proj.shape) == (2, 32, 64)
    assert ex.is_transposed and not ex.is_concatenated and ex.has_bias
    # Our gate is transformers' bit for bit (same operations, same order).
    g = torch.randn(5, 64, generator=torch.Generator().manual_seed(0)) * 6
    assert torch.equal(Gate()(g), ex._apply_gate(g))


def test_model_within_the_bound_same_routing_and_tokens(pair, bound):
    model, ref, summary = pair
    assert len(summary.experts) == 2 and not summary.converted
    ex = model.model.layers[0].mlp.experts
    assert isinstance(ex, MXExperts) and 8 * ex.nbytes / (4 * 3 * 64 * 64) == 4.25
    ids = prompt()
    routes = {}

    def record(tag):
        def hook(module, inputs, out):
            routes.setdefault(tag, []).append(out[2].clone())
        return hook

    hooks = [m.mlp.router.register_forward_hook(record(tag))
             for tag, mm in (("ours", model), ("ref", ref)) for m in mm.model.layers]  # fmt: skip
    try:
        with torch.inference_mode():
            logits = model(ids).logits
            ref(ids)
    finally:
        for h in hooks:
            h.remove()
    assert 0 < bound.check(logits) <= 1
    for a, b in zip(routes["ours"], routes["ref"], strict=True):
        assert torch.equal(a, b)
    top2 = bound.logits[0, -1].topk(2).values
    assert float(top2[0] - top2[1]) > 100 * float(bound.bound.max())
    assert list(greedy(model, ids, 3)) == list(greedy(ref, ids, 3))


def test_bound_catches_a_wrong_gate(pair, bound):
    """Read gate/up as concatenated halves instead of interleaved rows: outside."""
    model, ids = pair[0], prompt()
    wrong = copy.deepcopy(model)
    for layer in wrong.model.layers:
        layer.mlp.experts.gate = Gate("concatenated", act="silu")
    with torch.inference_mode():
        assert bound.check(wrong(ids).logits) > 1


def test_decode_is_the_prefill_row(pair):
    ex = pair[0].model.layers[1].mlp.experts
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(7, 64, generator=gen)
    idx = torch.stack([torch.randperm(4, generator=gen)[:2] for _ in range(7)])
    w = torch.rand(7, 2, generator=gen)
    with torch.inference_mode():
        full = ex(x, idx, w)
        for t in range(7):
            assert torch.equal(ex(x[t : t + 1], idx[t : t + 1], w[t : t + 1]), full[t : t + 1])
        # One token takes its own path (MXExperts._decode): an expert named in
        # two slots, and three slots out of expert order (three terms: the
        # order of the sum shows in its bits), add up as in a batch.
        w3 = torch.rand(2, 3, generator=gen)
        for row in ([2, 2, 1], [3, 0, 1], [3, 1, 0]):
            idx2 = torch.tensor([row, [1, 0, 2]])
            both = ex(x[:2], idx2, w3)
            assert torch.equal(ex(x[:1], idx2[:1], w3[:1]), both[:1])
        # One expert's output is its two MXLinear layers and the gate.
        e = int(idx[0, 0])
        mid = Gate()(ex.gate_up[e](x[:1]))
        assert torch.equal(ex.expert(e, x[:1]), ex.down[e](mid))


def test_state_dict_pickle_and_meaning_checks(pair):
    model = pair[0]
    ex = model.model.layers[0].mlp.experts
    sd = ex.state_dict()
    assert "gate_up.0.weight_format" in sd and "down.3.weight_shape" in sd
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(4))
    idx, w = torch.tensor([[0, 1], [2, 3], [1, 2]]), torch.full((3, 2), 0.5)
    with torch.inference_mode():
        want = ex(x, idx, w)
        other = copy.deepcopy(model.model.layers[1].mlp.experts)
        other.load_state_dict(sd)
        assert torch.equal(other(x, idx, w), want)
        back = pickle.loads(pickle.dumps(ex))
        assert torch.equal(back(x, idx, w), want)
        buf = io.BytesIO()
        torch.save(ex, buf)
        buf.seek(0)
        assert torch.equal(torch.load(buf, weights_only=False)(x, idx, w), want)
    bad = dict(sd)
    bad["down.2.weight_shape"] = torch.tensor([64, 32])
    with pytest.raises(RuntimeError, match=r"down\.2\.weight_shape"):
        other.load_state_dict(bad)


def test_bad_calls_name_the_argument(pair):
    ex = pair[0].model.layers[0].mlp.experts
    x = torch.randn(2, 64)
    w = torch.ones(2, 2)
    with pytest.raises(MXValueError, match="router_indices"):
        ex(x, torch.tensor([[0, 4], [1, 2]]), w)
    for t in (1, 2):  # one token takes the rows path: it refuses grad as the layers do
        with pytest.raises(InferenceOnlyError, match="x: requires grad"):
            ex(x[:t].clone().requires_grad_(), torch.tensor([[0, 2]] * t), w[:t])
    for t in (1, 2):  # the rows path passes addresses: a meta or sparse tensor is refused first
        idx, wt = torch.tensor([[0, 2]] * t), w[:t]
        with pytest.raises(MXValueError, match="hidden_states: mlir_mx runs on the CPU, got a tensor on meta"):
            ex(torch.empty(t, 64, device="meta"), idx, wt)
        with pytest.raises(MXArgTypeError, match="hidden_states: expected a dense"):
            ex(x[:t].to_sparse(), idx, wt)
    for one in ([[0, 4]], [[-1, 2]]):  # one token: its experts checked as a list
        with pytest.raises(MXValueError, match=r"router_indices: expected experts in \[0, 4\)"):
            ex(x[:1], torch.tensor(one), w[:1])
    with pytest.raises(MXArgTypeError, match="router_indices"):
        ex(x, torch.zeros(2, 2), w)
    with pytest.raises(MXValueError, match="hidden_states"):
        ex(torch.randn(2, 32), torch.zeros(2, 2, dtype=torch.long), w)
    with pytest.raises(MXValueError, match="routing_weights"):
        ex(x, torch.zeros(2, 2, dtype=torch.long), torch.ones(2, 3))
    with pytest.raises(MXArgTypeError, match="experts"):
        MXExperts.from_experts(torch.nn.Linear(4, 4))
    with pytest.raises(MXValueError, match="gate"):
        Gate("swapped")
    w0 = ex.gate_up[0].weight()
    with pytest.raises(MXValueError, match=r"down\[0\]"):
        MXExperts([w0], [w0])
    assert isinstance(ex.down[0], MXLinear)


def test_mixtral_stacked_experts_plug_in():
    """transformers 5's Mixtral holds its experts stacked too (gate_up (E, 2I, H),
    concatenated halves, silu, no bias): quantize_ makes them MXExperts with a
    concatenated gate, within the bound of their dequantized reference."""
    transformers = transformers_or_skip()
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, num_local_experts=4, num_experts_per_tok=2,
    )  # fmt: skip
    model = transformers.MixtralForCausalLM(config).eval()
    with torch.no_grad():
        for p in (model.model.layers[0].mlp.experts.gate_up_proj, model.model.layers[0].mlp.experts.down_proj):
            p.normal_(0.0, 0.2)
    ref = copy.deepcopy(model)
    summary = quantize_(model, filter_fn=_experts_only)
    dequantize_(ref, filter_fn=_experts_only)
    ex = model.model.layers[0].mlp.experts
    assert summary.experts == ["model.layers.0.mlp.experts"]
    assert ex.gate == Gate("concatenated", act="silu") and ex.gate_up[0].bias is None
    ids = prompt(8)
    bound = logit_bound(ref, ids)
    with torch.inference_mode():
        assert 0 < bound.check(model(ids).logits) <= 1


def _expert_loop(ex, x, idx, w):
    """One token through each of its experts alone, summed in the grouped
    path's order (ascending expert, then slot): what ``MXExperts`` computes."""
    out = torch.zeros(1, ex.hidden_size)
    for e, j in sorted((e, j) for j, e in enumerate(idx[0].tolist())):
        out += ex.expert(e, x) * w[0, j]
    return out


def _experts_of(pair, monkeypatch, acts, mask, gate):
    """Layer 0's experts as a new ``MXExperts`` with ``activations=acts`` and
    ``gate`` (biases with the interleaved gate only), under the CPU ``mask``."""
    if mask is not None:
        monkeypatch.setenv("MLIR_MX_CPU_FEATURES", mask)
    src = pair[0].model.layers[0].mlp.experts
    biases = {}
    if gate == "interleaved":
        biases = dict(gate_up_bias=torch.stack([m.bias for m in src.gate_up]),
                      down_bias=torch.stack([m.bias for m in src.down]))  # fmt: skip
    return MXExperts([m.weight() for m in src.gate_up], [m.weight() for m in src.down],
                     gate=Gate(gate), activations=acts, **biases)  # fmt: skip


@pytest.mark.parametrize("acts, mask", [(None, None), ("i8", None), ("i8", "baseline")])
@pytest.mark.parametrize("gate", ["interleaved", "concatenated"])
def test_one_token_runs_its_experts_rows_together(pair, monkeypatch, acts, mask, gate):
    """A one-token call runs its k experts' rows through each step together
    (``MXExperts._rows``: the kernels write the rows of one output; one bias
    add, gate and scaling) with the bits of each expert alone; also where a
    layer's own call computes the row (no dot unit for ``i8`` under the mask
    ``baseline``: activations quantized by a separate kernel) and without biases
    (a concatenated gate, Mixtral's).  Its first call binds every expert's
    one-row kernel."""
    from mlir_mx.kernels import shape_class

    ex = _experts_of(pair, monkeypatch, acts, mask, gate)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1, 64, generator=gen) * 2
    with torch.inference_mode():
        for row in ([2, 0], [3, 3], [1, 2, 0], [0, 1, 2, 3]):
            idx = torch.tensor([row])
            w = torch.rand(1, len(row), generator=gen)
            got = ex(x, idx, w)
            assert torch.equal(got, _expert_loop(ex, x, idx, w)), row
            assert got.abs().max() > 0
    copied = copy.deepcopy(ex)  # new Linears: its first one-token call binds them again
    with torch.inference_mode():
        copied(x, torch.tensor([[0]]), w[:, :1])  # one expert: the bind makes the rest
    for layer in (*ex.gate_up, *ex.down, *copied.gate_up, *copied.down):
        assert any(key[1] == shape_class(1) for key in layer._linear._calls)


def test_experts_are_laid_out_on_threads_in_order(pair):
    """``MXExperts`` makes its experts' ``mlir_mx.Linear`` on up to ``threads``
    threads at once: the same arrays, in the experts' order, as on one; a bad
    weight is named by its list and index before any is made."""
    src = pair[0].model.layers[0].mlp.experts
    gu, dn = [m.weight() for m in src.gate_up], [m.weight() for m in src.down]
    one = MXExperts(gu, dn, threads=1, activations="i8")
    two = MXExperts(gu, dn, threads=2, activations="i8")
    for a, b, w in zip((*one.gate_up, *one.down), (*two.gate_up, *two.down), gu + dn, strict=True):
        assert a._linear.records_unit == b._linear.records_unit
        for x, y in zip(a._linear.held, b._linear.held, strict=True):
            assert x.tobytes() == y.tobytes()
        got, want = b.weight().held_buffers(), w.held_buffers()
        assert all(g.tobytes() == h.tobytes() for g, h in zip(got, want, strict=True))
    assert two.threads == 2 and all(m.threads == 2 for m in two.down)
    with pytest.raises(MXArgTypeError, match=r"down\[1\]: expected an MXArray"):
        MXExperts(gu[:2], [dn[0], "not a weight"])
    with pytest.raises(MXValueError, match=r"gate_up\[0\]: expected a 2-D MXArray"):
        MXExperts([transpose(gu[0])], dn[:1])
    with pytest.raises(MXValueError, match=r"threads: expected an integer in \[1, "):
        MXExperts(gu, dn, threads=0)  # checked before any weight is laid out
    with pytest.raises(MXArgTypeError, match="lin: expected an mlir_mx.Linear, got MXArray"):
        MXLinear.from_mx_linear(gu[0])


def test_the_gate_of_rows_is_each_rows_own(pair):
    """``Gate.rows`` gives each row's gate bit for bit as of that row alone:
    at once below its chunk (16384 elements), in chunks of rows above."""
    ex = pair[0].model.layers[0].mlp.experts
    gen = torch.Generator().manual_seed(6)
    for k in (4, 1025):  # 4 x 32 and 1025 x 32 elements: at once, then in chunks
        mid = torch.randn(k, 2 * ex.intermediate_size, generator=gen) * 6
        got = ex.gate.rows(mid)
        assert got.is_contiguous() and got.shape == (k, ex.intermediate_size)
        for r in (0, k // 2, k - 1):
            assert torch.equal(got[r : r + 1], ex.gate(mid[r : r + 1]))


def _per_expert_loop(ex, x, idx, w):
    """Several tokens through each expert alone (``MXExperts.expert`` on the
    expert's tokens, its output times the weights ``index_add_``-ed into the
    sum per expert): the grouped call's products and sums, one expert at a
    time."""
    t, k = idx.shape
    out = torch.zeros(t, ex.hidden_size)
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    start = 0
    for e, count in enumerate(torch.bincount(flat, minlength=ex.num_experts).tolist()):
        pairs = order[start : start + count]
        start += count
        if count:
            y = ex.expert(e, x.float()[pairs // k], x.dtype == torch.bfloat16)
            out.index_add_(0, pairs // k, y * w.reshape(-1)[pairs].float()[:, None])
    return out.to(x.dtype)


@pytest.mark.parametrize(
    "acts, mask", [(None, None), ("i8", None), ("i8", "baseline"), ("bf16", None)]
)
@pytest.mark.parametrize("gate", ["interleaved", "concatenated"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tokens_run_each_step_once_for_all_experts(pair, monkeypatch, acts, mask, gate, dtype):
    """A call of several tokens (``MXExperts._grouped``) runs each step once
    for all the experts' rows (one gather, each projection's kernels into one
    output, one gate, one scaling and ``index_add_``) with the bits of the
    per-expert loop: with and without biases, an expert with no token, where
    a layer's own call computes a segment (``i8`` under the mask
    ``baseline``), and for f32 and bf16 hidden states."""
    ex = _experts_of(pair, monkeypatch, acts, mask, gate)
    gen = torch.Generator().manual_seed(9)
    x = (torch.randn(11, 64, generator=gen) * 2).to(dtype)
    idx = torch.stack([torch.randperm(3, generator=gen)[:2] for _ in range(11)])  # expert 3: none
    idx[4] = torch.tensor([2, 0])  # slots out of expert order
    w = torch.rand(11, 2, generator=gen).to(dtype)
    with torch.inference_mode():
        got = ex(x, idx, w)
        want = _per_expert_loop(ex, x, idx, w)
    assert got.dtype == dtype and torch.equal(got, want)
    assert got.abs().max() > 0
