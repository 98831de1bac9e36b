"""A converted tiny Llama against its correctness reference, quantize_'s summary,
the saved form, torch.compile and torch.export."""

from __future__ import annotations

import copy
import io
import warnings
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from llama_cases import prompt, tiny_llama  # noqa: E402

from mlir_mx.errors import MXError  # noqa: E402
from mlir_mx.numerics import MXArray  # noqa: E402
from mlir_mx.torch import (  # noqa: E402
    MXLinear,
    dequantize_,
    greedy,
    logit_bound,
    quantize_,
)


def _pair(element):
    model = tiny_llama()
    ref = copy.deepcopy(model)
    summary = quantize_(model, element)
    dequantize_(ref, element)
    return model, ref, summary


@pytest.mark.parametrize("element", ["f4E2M1FN", "f8E4M3FN"])
def test_logits_within_the_bound_and_greedy_tokens_equal(element):
    model, ref, summary = _pair(element)
    assert len(summary.converted) == 2 * 7 + 1 and "lm_head" in summary.converted
    ids = prompt()
    lb = logit_bound(ref, ids)
    with torch.inference_mode():
        logits = model(ids).logits
    assert lb.check(logits) <= 1.0
    # The bound is tight enough to mean something: a far smaller change than
    # any wrong block (one weight moved by one code in one layer) breaks it.
    assert float(lb.bound.max()) < 1e-3 * float(lb.logits.abs().max())
    np.testing.assert_array_equal(greedy(model, ids, 32), greedy(ref, ids, 32))


# Reproducer: ../shared/repro/round3/r3_reference_tied_embedding.py
def test_the_reference_of_a_tied_model_leaves_the_embedding():
    """dequantize_ gives a tied lm_head its own weight (it wrote into the
    embedding: the reference then failed a correct model's check, 9.4e3)."""
    model = tiny_llama(tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ref = copy.deepcopy(model)
    emb = ref.model.embed_tokens.weight.detach().clone()
    quantize_(model, "f4E2M1FN")
    summary = dequantize_(ref, "f4E2M1FN")
    assert "lm_head" in summary.converted
    assert torch.equal(ref.model.embed_tokens.weight, emb)
    assert torch.equal(model.model.embed_tokens.weight, emb)
    assert torch.equal(ref.lm_head.weight, model.lm_head.dequantized_weight())
    ids = prompt()
    with torch.inference_mode():
        assert logit_bound(ref, ids).check(model(ids).logits) <= 1.0


# Reproducer: ../shared/repro/round3/r3_greedy_zero_tokens_hangs.py
def test_greedy_counts():
    model = tiny_llama()
    ids = prompt()
    none = greedy(model, ids, 0)  # returned at once (it looped for ever)
    assert none.shape == (0,) and none.dtype == np.int64
    assert greedy(model, ids, 3).tolist() == greedy(model, ids, 5)[:3].tolist()
    with pytest.raises(ValueError, match="new_tokens: expected 0 or more, got -1") as err:
        greedy(model, ids, -1)
    assert isinstance(err.value, MXError)
    with pytest.raises(TypeError, match="new_tokens: expected an int, got float"):
        greedy(model, ids, 2.0)


def test_the_bound_catches_one_wrong_weight_block():
    model, ref, _ = _pair("f4E2M1FN")
    ids = prompt()
    lb = logit_bound(ref, ids)
    layer = model.model.layers[1].mlp.down_proj
    w = layer.weight()
    scales = np.array(w.scales.view(np.uint8))
    scales[5, 1] += 1  # one block of one row, twice as large
    layer.load_state_dict(
        {"weight_codes": torch.from_numpy(np.array(w.packed_codes())), "weight_scales": torch.from_numpy(scales)}
    )
    with torch.inference_mode():
        assert lb.check(model(ids).logits) > 1.0


def test_quantize_summary_and_skipped_layers():
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 16), torch.nn.Linear(16, 8)
    )
    with pytest.warns(UserWarning, match=r"kept 2 linear layer\(s\): 2 \(in_features 48 is not"):
        summary = quantize_(model, "f4E2M1FN")
    assert summary.converted == ["0"] and list(summary.skipped) == ["2", "3"]
    assert type(model[0]) is MXLinear and type(model[2]) is torch.nn.Linear
    assert summary.bytes_before == 64 * 48 * 4 and summary.bytes_after == 48 * (32 + 2)
    assert "kept 2: in_features 48 is not a multiple of block_size 32" in str(summary)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped: no warning
        s2 = quantize_(torch.nn.Sequential(torch.nn.Linear(32, 8)), "f8E4M3FN", filter_fn=lambda m, n: False)
    assert s2.converted == [] and s2.skipped == {}
    with pytest.raises(ValueError, match="activations"):
        quantize_(model, activations="f32")
    with pytest.raises(ValueError, match="block_size"):
        quantize_(model, block_size=0)


def test_layers_are_converted_one_at_a_time_and_released():
    """When a layer is converted, every original weight converted before it is gone."""
    model = tiny_llama()
    alive: dict[str, object] = {}
    for name, m in model.named_modules():
        if type(m) is torch.nn.Linear:
            alive[name] = weakref.ref(m.weight)
    del m  # the loop variable would keep the last layer alive
    seen = []

    def watch(module, name):
        assert all(alive[n]() is None for n in seen), f"still held when converting {name}"
        seen.append(name)
        return True

    quantize_(model, "f8E4M3FN", filter_fn=watch)
    assert len(seen) == len(alive) and all(r() is None for r in alive.values())


def test_a_converted_model_deep_copies():
    model, _, _ = _pair("f4E2M1FN")
    twin = copy.deepcopy(model)
    layer, copied = model.lm_head, twin.lm_head
    assert type(copied) is MXLinear and copied.weight().bitwise_equal(layer.weight())
    assert not np.shares_memory(copied.codes.numpy(), layer.codes.numpy())
    ids = prompt()
    with torch.inference_mode():
        assert torch.equal(twin(ids).logits, model(ids).logits)


def test_state_dict_saves_codes_and_scales_and_round_trips():
    model, _, _ = _pair("f4E2M1FN")
    sd = model.state_dict()
    layer = model.model.layers[0].self_attn.q_proj
    codes, scales = sd["model.layers.0.self_attn.q_proj.weight_codes"], sd["model.layers.0.self_attn.q_proj.weight_scales"]
    assert codes.dtype == scales.dtype == torch.uint8
    assert tuple(codes.shape) == (64, 32) and tuple(scales.shape) == (64, 2)  # nn.Linear's layout, FP4 packed
    assert MXArray.from_packed(codes.numpy(), scales.numpy(), "f4E2M1FN", 32, 1).bitwise_equal(layer.weight())
    assert not any(k.endswith((".codes", ".scales")) for k in sd)  # the kernel layout is not saved
    buf = io.BytesIO()
    torch.save(sd, buf)
    other = tiny_llama(seed=5)  # other weights, converted the same way
    quantize_(other, "f4E2M1FN")
    buf.seek(0)
    other.load_state_dict(torch.load(buf))
    ids = prompt()
    with torch.inference_mode():
        assert torch.equal(other(ids).logits, model(ids).logits)
    bad = dict(sd)
    bad["lm_head.weight_codes"] = bad["lm_head.weight_codes"][:, :-1]
    with pytest.raises(RuntimeError, match="lm_head.weight_codes/weight_scales"):
        other.load_state_dict(bad)


def _mlp(activations=None):
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.SiLU(), torch.nn.Linear(96, 64))
    quantize_(net, "f4E2M1FN", activations=activations, threads=1)
    return net  # activations="i8": the second layer holds the dot kernels' records (VNNI)


@pytest.mark.parametrize("activations", [None, "i8"])
def test_torch_compile_traces_without_graph_breaks(activations):
    net = _mlp(activations)
    x = torch.randn(2, 3, 64)
    with torch.inference_mode():
        eager = net(x)
        compiled = torch.compile(net, fullgraph=True, backend="aot_eager")  # fullgraph: no break
        assert torch.equal(compiled(x), eager)


@pytest.mark.parametrize("activations", [None, "i8"])
def test_torch_export_keeps_the_op(activations):
    net = _mlp(activations)
    x = torch.randn(5, 64)
    ep = torch.export.export(net, (x,))
    ops = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.mlir_mx.linear.default) == 2
    with torch.inference_mode():
        assert torch.equal(ep.module()(x), net(x))


@pytest.mark.slow
def test_torch_compile_of_the_tiny_llama_inductor():
    """Inductor fuses and reorders the other ops, so the compiled model is held to
    the reference's bound, not to eager's bits; our layers add no graph break."""
    model, ref, _ = _pair("f4E2M1FN")
    ids = prompt()
    lb = logit_bound(ref, ids)
    with torch.no_grad():
        breaks = torch._dynamo.explain(tiny_llama())(ids).graph_break_count
        torch._dynamo.reset()
        assert torch._dynamo.explain(model)(ids).graph_break_count == breaks
        torch._dynamo.reset()
    with torch.inference_mode():
        compiled = torch.compile(model)
        assert lb.check(compiled(ids).logits) <= 1.0
