"""quantize_ beyond nn.Linear (issue 29): GPT-2's transformers Conv1D layers are
converted (their weight is (in, out), transposed against nn.Linear's), bit for
bit the library on the transposed weight and within the reference's bound; the
linear layers it keeps are reported with why."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")
transformers = pytest.importorskip(
    "transformers", reason="transformers not installed (pip install 'mlir-mx[test]')"
)

from llama_cases import prompt  # noqa: E402

import mlir_mx  # noqa: E402
from mlir_mx import oracle  # noqa: E402
from mlir_mx.torch import MXLinear, dequantize_, greedy, logit_bound, quantize_  # noqa: E402

U = 2.0**-24


def tiny_gpt2(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                                  bos_token_id=0, eos_token_id=0)  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg).eval()


CONV1D = [f"transformer.h.{i}.{p}" for i in range(2)
          for p in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]  # fmt: skip


@pytest.mark.parametrize("element", BY_BEHAVIOUR)
def test_gpt2_conv1d_layers_equal_the_library_on_the_transposed_weight(element):
    model = tiny_gpt2()
    original = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing kept: no warning
        summary = quantize_(model, element, threads=1)
    assert summary.conv1d == CONV1D and summary.converted == CONV1D + ["lm_head"]
    assert summary.skipped == {} and "8 of them Conv1D" in str(summary)
    x = torch.randn(5, 64)
    for name in CONV1D:
        conv, layer = original.get_submodule(name), model.get_submodule(name)
        assert type(layer) is MXLinear
        wt = conv.weight.detach().numpy().T  # (out, in), nn.Linear's layout
        w = oracle.quantize(np.ascontiguousarray(wt), element, 32, axis=1)
        assert layer.weight().bitwise_equal(w) and layer.in_features == conv.weight.shape[0]
        xin = x if layer.in_features == 64 else torch.randn(5, layer.in_features)
        with torch.no_grad():
            y = layer(xin)
        want = mlir_mx.Linear(w, threads=1)(xin.numpy()) + conv.bias.detach().numpy()
        np.testing.assert_array_equal(y.numpy().view(np.uint32), want.view(np.uint32))
        # within the matmul's bound of the Conv1D itself on the dequantized weight
        w64 = oracle.dequantize(w).astype(np.float64).T  # back to (in, out)
        x64 = xin.numpy().astype(np.float64)
        exact = x64 @ w64 + conv.bias.detach().numpy()
        bound = (layer.in_features + 2) * U * (np.abs(x64) @ np.abs(w64) + np.abs(conv.bias.detach().numpy()))
        assert np.all(np.abs(y.numpy() - exact) <= 2 * bound)


def test_a_converted_gpt2_is_within_its_references_bound():
    model = tiny_gpt2()
    ref = copy.deepcopy(model)
    emb = ref.transformer.wte.weight.detach().clone()  # GPT-2 ties lm_head to it
    quantize_(model, "f4E2M1FN")
    summary = dequantize_(ref, "f4E2M1FN")
    assert summary.conv1d == CONV1D
    assert torch.equal(ref.transformer.wte.weight, emb)
    c_fc = ref.transformer.h[0].mlp.c_fc
    assert torch.equal(c_fc.weight, model.transformer.h[0].mlp.c_fc.dequantized_weight().T)
    ids = prompt()
    lb = logit_bound(ref, ids)
    with torch.inference_mode():
        assert lb.check(model(ids).logits) <= 1.0
    np.testing.assert_array_equal(greedy(model, ids, 8), greedy(ref, ids, 8))


def test_linear_layers_it_keeps_are_reported_with_why():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(64, 4, batch_first=True)
            self.proj = torch.nn.Linear(64, 64)
            self.odd = torch.nn.Linear(40, 8)

    net = Net()
    with pytest.warns(UserWarning, match=r"kept 2 linear layer\(s\): attn.out_proj \(Non") as w:
        summary = quantize_(net, "f4E2M1FN")
    assert summary.converted == ["proj"] and type(net.attn.out_proj) is not MXLinear
    assert "subclass of nn.Linear" in summary.skipped["attn.out_proj"]
    assert summary.skipped["odd"] == "in_features 40 is not a multiple of block_size 32"
    assert "kept attn.out_proj: NonDynamicallyQuantizableLinear is a subclass" in str(summary)
    assert "odd (in_features 40" in str(w[0].message)
    # what filter_fn leaves out is the caller's choice: not reported
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s2 = quantize_(Net(), "f4E2M1FN", filter_fn=lambda m, n: n == "proj")
    assert s2.converted == ["proj"] and s2.skipped == {}
