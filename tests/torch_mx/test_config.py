"""MXConfig: quantize_'s format, activations and block size as one checked,
frozen value, and an ElementFormat taken wherever a format name is."""

from __future__ import annotations

import dataclasses
import pickle
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from mlir_mx import oracle  # noqa: E402
from mlir_mx.errors import MXArgTypeError, MXValueError  # noqa: E402
from mlir_mx.numerics import ELEMENT_FORMATS, element_format  # noqa: E402
from mlir_mx.torch import MXConfig, MXExperts, MXLinear, quantize_, quantize_weight  # noqa: E402


def _mlp(seed=0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32))


def _layers(model) -> list[MXLinear]:
    return [m for m in model if isinstance(m, MXLinear)]


def test_a_config_holds_names_and_its_format():
    fp8 = ELEMENT_FORMATS["f8E4M3FN"]
    c = MXConfig(fp8, element_format("i8"), 16)
    assert (c.element, c.activations, c.block_size) == ("f8E4M3FN", "i8", 16)
    assert c.format is fp8
    assert repr(c) == "MXConfig(element='f8E4M3FN', activations='i8', block_size=16)"
    assert dataclasses.asdict(c) == {"element": "f8E4M3FN", "activations": "i8", "block_size": 16}
    assert c == MXConfig("f8E4M3FN", "i8", 16) and hash(c) == hash(MXConfig("f8E4M3FN", "i8", 16))
    assert MXConfig() == MXConfig("f4E2M1FN", None, 32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.block_size = 32
    back = pickle.loads(pickle.dumps(c))
    assert back == c and back.format is fp8
    assert dataclasses.replace(c, element="f4E2M1FN").format is ELEMENT_FORMATS["f4E2M1FN"]


@pytest.mark.parametrize(
    "kw, error, match",
    [
        (dict(element="f7"), MXValueError, "element: unknown MX element format 'f7'"),
        (dict(element=4), MXArgTypeError, "element: expected a format name"),
        (dict(activations="f32"), MXValueError, "activations: .*unknown MX element format 'f32'"),
        (dict(block_size=0), MXValueError, "block_size: expected a positive int, got 0"),
        (dict(block_size=True), MXValueError, "block_size: expected a positive int, got True"),
        (dict(block_size="32"), MXValueError, "block_size: expected a positive int, got '32'"),
    ],
)
def test_a_config_is_checked_when_made(kw, error, match):
    with pytest.raises(error, match=match):
        MXConfig(**kw)


def test_quantize_with_a_config_is_quantize_with_its_keywords():
    a, b, c = _mlp(), _mlp(), _mlp()
    sa = quantize_(a, MXConfig("f8E4M3FN", "i8", 16), threads=1)
    sb = quantize_(b, "f8E4M3FN", "i8", 16, threads=1)
    sc = quantize_(c, element=ELEMENT_FORMATS["f8E4M3FN"], activations="i8", block_size=16)
    assert str(sa) == str(sb) == str(sc) and sa.element == "f8E4M3FN"
    x = torch.randn(5, 64)
    with torch.no_grad():
        ys = [m(x) for m in (a, b, c)]
    for la, lb, lc in zip(_layers(a), _layers(b), _layers(c), strict=True):
        assert la.weight().bitwise_equal(lb.weight()) and la.weight().bitwise_equal(lc.weight())
        assert (la.element, la.block_size, la.activations) == ("f8E4M3FN", 16, "i8")
        assert (lb.activations, lc.activations) == ("i8", "i8")
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], ys[2])


@pytest.mark.parametrize(
    "kw, named",
    [
        (dict(activations="i8"), "activations"),
        (dict(activations=None), "activations"),  # the default, given: refused all the same
        (dict(block_size=32), "block_size"),
        (dict(activations=None, block_size=32), "activations, block_size"),
    ],
)
def test_a_config_and_keywords_together_are_refused(kw, named):
    model = _mlp()
    with pytest.raises(MXValueError, match=f"^{named}: given beside an MXConfig"):
        quantize_(model, MXConfig(), **kw)
    assert not _layers(model)  # nothing converted


def test_an_element_format_is_taken_where_a_name_is():
    fmt = ELEMENT_FORMATS["f6E2M3FN"]
    layer = _mlp()[0]
    by_name = MXLinear.from_linear(layer, "f6E2M3FN", threads=1)
    by_value = MXLinear.from_linear(layer, fmt, threads=1)
    assert by_value.weight().bitwise_equal(by_name.weight()) and by_value.element == "f6E2M3FN"
    w = quantize_weight(layer.weight, fmt, 32, threads=1)
    assert w.format is fmt and w.element == "f6E2M3FN"
    assert w.bitwise_equal(oracle.quantize(layer.weight.detach().numpy(), "f6E2M3FN", 32, axis=1))
    experts = _Experts()
    a = MXExperts.from_experts(experts, fmt, threads=1)
    b = MXExperts.from_experts(experts, "f6E2M3FN", threads=1)
    for la, lb in zip(a.gate_up, b.gate_up, strict=True):
        assert la.weight().bitwise_equal(lb.weight())
    with pytest.raises(MXValueError, match="element: unknown MX element format 'f7'"):
        MXExperts.from_experts(experts, "f7")


class _Experts(torch.nn.Module):
    """A stacked-experts module as transformers 5 has Mixtral's: (E, 2I, H) and (E, H, I)."""

    def __init__(self, e=2, hidden=64, inter=32):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.gate_up_proj = torch.nn.Parameter(torch.randn(e, 2 * inter, hidden, generator=g))
        self.down_proj = torch.nn.Parameter(torch.randn(e, hidden, inter, generator=g))
        self.config = types.SimpleNamespace(hidden_act="silu")


def test_dequantize_takes_an_element_format_and_checks_it_first():
    from mlir_mx.torch import dequantize_

    a, b = _mlp(), _mlp()
    sa = dequantize_(a, ELEMENT_FORMATS["f4E2M1FN"])
    sb = dequantize_(b, "f4E2M1FN")
    assert sa.element == sb.element == "f4E2M1FN"
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    with pytest.raises(MXValueError, match="element: unknown MX element format 'f7'"):
        dequantize_(_mlp(), "f7")
    np.testing.assert_array_equal(a[0].bias.detach().numpy(), _mlp()[0].bias.detach().numpy())
