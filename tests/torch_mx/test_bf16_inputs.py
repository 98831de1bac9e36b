"""bf16 in torch: a bf16 input takes the bf16 kernels with no option (its bits
are the exact path's), and ``activations="bf16"`` on ``MXLinear``,
``quantize_`` (``MXConfig``) and ``MXExperts`` rounds f32 inputs to bf16 first.
The bf16 dot kernels are chosen as on AMD here (``host.bf16_dot_pays``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from mlir_mx import oracle  # noqa: E402
from mlir_mx.host import has_features  # noqa: E402
from mlir_mx.torch import MXConfig, MXExperts, MXLinear, quantize_  # noqa: E402

DOT = has_features("avx512_bf16", "avx512bw")


@pytest.fixture(autouse=True)
def amd(monkeypatch):
    from mlir_mx import host

    monkeypatch.setattr(host, "cpu_vendor", lambda: "AuthenticAMD")


def _bf16_calls(linear) -> bool:
    """Whether a kernel for bf16 activations was bound (``Linear._calls`` keys):
    the bf16 dot kernels, chosen for bf16 inputs where they run (M > 1)."""
    return any(key[0].quantize_to == "bf16" for key in linear._calls)


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32))


@pytest.mark.parametrize("m", [1, 6, 60])
def test_a_bf16_input_takes_the_bf16_kernels_with_the_exact_bits(m):
    w = oracle.quantize(np.random.default_rng(0).standard_normal((96, 64)).astype(np.float32),
                        "f4E2M1FN", 32)  # fmt: skip
    lin = MXLinear(w, torch.randn(96), threads=2)
    x = torch.randn(m, 64).to(torch.bfloat16)
    got = lin(x)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, lin(x.float()).to(torch.bfloat16))
    assert _bf16_calls(lin.linear) == (m > 1 and DOT)  # the bf16 dot kernels where they run


def test_quantize_with_bf16_activations_rounds_first():
    x = torch.randn(7, 64) * 3
    model, exact = _mlp(), _mlp()
    quantize_(model, MXConfig("f8E4M3FN", "bf16"))
    quantize_(exact, MXConfig("f8E4M3FN"))
    assert all(m.activations == "bf16" for m in model if isinstance(m, MXLinear))
    with torch.no_grad():
        got = model(x)
        # the second layer rounds the ReLU's output too
        h = exact[1](exact[0](x.to(torch.bfloat16).float()))
        want = exact[2](h.to(torch.bfloat16).float())
    assert torch.equal(got, want)
    assert MXConfig("i8", "bf16").activations == "bf16"


def _experts(activations=None, e=4, h=64, i=32, seed=0):
    rng = np.random.default_rng(seed)
    q = lambda *s: oracle.quantize(rng.standard_normal(s).astype(np.float32), "f4E2M1FN", 32)  # noqa: E731
    return MXExperts([q(2 * i, h) for _ in range(e)], [q(h, i) for _ in range(e)],
                     threads=2, activations=activations)  # fmt: skip


@pytest.mark.parametrize("tokens", [1, 9])
def test_experts_bf16_hidden_states_and_activations(tokens):
    torch.manual_seed(1)
    x = torch.randn(tokens, 64)
    idx = torch.randint(0, 4, (tokens, 2))
    w = torch.rand(tokens, 2)
    exact = _experts()
    with torch.no_grad():
        # a bf16 model's hidden states: gate_up on the bf16 kernels, the exact bits
        xb = x.to(torch.bfloat16)
        assert torch.equal(exact(xb, idx, w), exact(xb.float(), idx, w).to(torch.bfloat16))
        used = [_bf16_calls(layer.linear) for layer in exact.gate_up]
        assert any(used) == (tokens > 1 and DOT)
        # activations="bf16": every projection rounds its f32 input first
        rounded = _experts("bf16")
        got = rounded(x, idx, w)
    assert all(layer.activations == "bf16" for layer in (*rounded.gate_up, *rounded.down))
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    lin = rounded.gate_up[0].linear
    xs = x.numpy()
    ref = exact.gate_up[0].linear(xs.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert np.array_equal(lin(xs).view(np.uint32), ref.view(np.uint32))
