"""quantize_ on whole (tiny) models: W4A8 (activations="i8") layer by layer
against the library on the same quantized activations, a bf16 model, and one
layer called from two Python threads with different thread counts."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from llama_cases import prompt, tiny_llama  # noqa: E402
from memory_cases import referenced_bytes  # noqa: E402

import mlir_mx  # noqa: E402
from mlir_mx import oracle  # noqa: E402
from mlir_mx.kernels.dot.units import KINDS, dot_kind  # noqa: E402
from mlir_mx.torch import MXLinear, quantize_  # noqa: E402


def _record_layers(model) -> tuple[dict, list]:
    """Forward hooks on every MXLinear: name -> [(input, output), ...]."""
    seen: dict[str, list] = {}
    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, MXLinear):

            def hook(module, inputs, out, name=name):
                seen.setdefault(name, []).append((inputs[0].detach().clone(), out.detach().clone()))

            hooks.append(m.register_forward_hook(hook))
    return seen, hooks


_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaNs and signed zeros included)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.view(_BITS[a.dtype]), b.view(_BITS[b.dtype]))
    )


def test_w4a8_llama_each_layer_is_the_library_on_quantized_activations():
    """quantize_(model, activations="i8"): every layer's output, in the prompt's
    prefill and in decode steps, is bit for bit ``mlir_mx.Linear(w)(quantize(x,
    "i8", 32))`` (the weight's own kernels on the activations quantized by the
    oracle), whichever form the layer holds (records or stored codes)."""
    model = tiny_llama()
    summary = quantize_(model, "f4E2M1FN", activations="i8", threads=1)
    layers = dict(model.named_modules())
    assert {type(layers[n]) for n in summary.converted} == {MXLinear}
    units = {layers[n]._linear.records_unit for n in summary.converted}
    # the records where the dot units serve i8 (VNNI); k/v_proj (32 columns): stored codes
    i8_unit = dot_kind("i8", "f4E2M1FN", 32) == KINDS["i8"]  # VNNI, or AVX2's vpmaddubsw
    assert units == ({None, "i8"} if i8_unit else {None})
    seen, hooks = _record_layers(model)
    try:
        with torch.inference_mode():
            out = model(prompt(), use_cache=True)
            model(out.logits[:, -1].argmax(-1, keepdim=True), cache=out.cache, use_cache=True)
    finally:
        for h in hooks:
            h.remove()
    assert set(seen) == set(summary.converted)
    for name, calls in seen.items():
        ref = mlir_mx.Linear(layers[name].weight(), threads=1)
        assert [tuple(x.shape[:-1]) for x, _ in calls] == [(1, 16), (1, 1)]
        for x, y in calls:
            x2 = x.reshape(-1, x.shape[-1]).numpy()
            want = torch.from_numpy(ref(oracle.quantize(x2, "i8", 32))).reshape(y.shape)
            assert _same_bits(y, want), name
    # what the layers hold: 4.25 bits per weight, as the summary said
    bits = 8 * referenced_bytes(*(layers[n] for n in summary.converted))
    params = sum(layers[n].in_features * layers[n].out_features for n in summary.converted)
    assert bits / params == 4.25 and summary.bytes_after * 8 / params == 4.25


def test_a_bf16_model_is_quantized_from_its_bf16_weights_and_runs_in_bf16():
    model = tiny_llama().to(torch.bfloat16)
    weights = {n: m.weight.detach().float().numpy().copy()
               for n, m in model.named_modules() if type(m) is torch.nn.Linear}  # fmt: skip
    summary = quantize_(model, "f4E2M1FN", threads=1)
    assert summary.bytes_before == 2 * sum(w.size for w in weights.values())
    layers = dict(model.named_modules())
    for name, w in weights.items():  # the oracle's bits of the (exactly widened) bf16 weight
        assert layers[name].weight().bitwise_equal(oracle.quantize(w, "f4E2M1FN", 32, axis=1)), name
    seen, hooks = _record_layers(model)
    try:
        with torch.inference_mode():
            logits = model(prompt()).logits
    finally:
        for h in hooks:
            h.remove()
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    for name, calls in seen.items():
        ref = mlir_mx.Linear(layers[name].weight(), threads=1)
        for x, y in calls:  # x widened exactly, the f32 result rounded once to bf16
            assert x.dtype == y.dtype == torch.bfloat16
            want = torch.from_numpy(ref(x.reshape(-1, x.shape[-1]).float().numpy()))
            assert _same_bits(y, want.to(torch.bfloat16).reshape(y.shape)), name


@pytest.mark.parametrize("act", [None, "i8"])
def test_one_layer_from_two_python_threads_with_their_own_thread_counts(act):
    """The op passes its thread count to the call: nothing shared changes, so
    two threads with different counts each run theirs, with the right bits."""
    torch.manual_seed(0)
    mx = MXLinear.from_linear(torch.nn.Linear(256, 128, bias=False), activations=act, threads=1)
    x = torch.randn(70, 256)
    with torch.no_grad():
        want = {m: mx(x[:m]) for m in (1, 5, 70)}
    held = [getattr(mx, name) for name in mx._held_names]
    args = ("f4E2M1FN", 32, 256, 128)
    errors: list[str] = []

    def work(threads: int) -> None:
        for _ in range(5):
            for m, y in want.items():
                got = torch.ops.mlir_mx.linear(x[:m], held, *args, threads, act or "",
                                               mx._linear.records_unit or "")  # fmt: skip
                if not torch.equal(got, y):
                    errors.append(f"{threads} threads, M = {m}")

    workers = [threading.Thread(target=work, args=(t,)) for t in (1, 2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    assert mx._linear.threads == 1 and {key[2] for key in mx._linear._calls} == {1, 2}
    np.testing.assert_array_equal(mx(x[:5]).numpy(), want[5].numpy())


def test_quantize_passes_its_threads_to_the_quantizer(monkeypatch):
    """quantize_(threads=n) quantizes on n threads; None: torch.get_num_threads()."""
    import mlir_mx.convert

    seen: list = []
    quantize = mlir_mx.convert.quantize

    def spy(*args, threads=None, **kw):
        seen.append(threads)
        return quantize(*args, threads=threads, **kw)

    monkeypatch.setattr(mlir_mx.convert, "quantize", spy)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32))
    quantize_(net, "f8E4M3FN", threads=1)
    assert seen == [1, 1]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        quantize_(torch.nn.Sequential(torch.nn.Linear(64, 64)), "f8E4M3FN")
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 1, 2]
