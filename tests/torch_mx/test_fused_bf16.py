"""A fused weight's bf16 / f16 inputs (``FusedWeight.output_narrow``, issue 51):
one f32 copy of the input and one kernel call for the siblings, each part's
columns converted straight from the fused result: the separate layers' bits,
the AMX path where the rows allow it, and sameness checked on the input's own
bytes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from mlir_mx.linear import Linear, amx_linear  # noqa: E402
from mlir_mx.linear.amx import amx_bf16_usable  # noqa: E402
from mlir_mx.torch import quantize_  # noqa: E402

NAMES = ("q_proj", "k_proj", "v_proj")


class Attention(torch.nn.Module):
    """Three projections of one input (fused: 160 columns, a multiple of 16)."""

    def __init__(self, bias):
        super().__init__()
        torch.manual_seed(0)
        for name, n in zip(NAMES, (96, 40, 24), strict=True):
            setattr(self, name, torch.nn.Linear(64, n, bias=bias))


def _pair(dtype, bias=False):
    """The same three layers in ``dtype``, converted separately and fused."""
    a, b = Attention(bias).to(dtype), Attention(bias).to(dtype)
    quantize_(a, "f4E2M1FN")
    assert quantize_(b, "f4E2M1FN", fuse=True).fused == [list(NAMES)]
    return a, b


class _Calls:
    """Counts the kernel calls that ran from addresses (``Linear.call_into``)."""

    def __init__(self, monkeypatch):
        self.n, raw = 0, Linear.call_into

        def counted(lin, *args):
            ran = raw(lin, *args)
            self.n += ran
            return ran

        monkeypatch.setattr(Linear, "call_into", counted)


@pytest.mark.parametrize("dtype,rows,bias", [
    (torch.bfloat16, 3, True), (torch.float16, 33, True),
    # the AMX path (bf16, 32 rows or more): compiles the bf16 prefill kernels (2-3 s)
    pytest.param(torch.bfloat16, 40, False, marks=pytest.mark.slow)])  # fmt: skip
def test_bf16_inputs_give_the_separate_layers_bits_in_one_call(monkeypatch, dtype, rows, bias):
    a, b = _pair(dtype, bias)
    calls = _Calls(monkeypatch)
    with torch.inference_mode():
        x = torch.randn(1, rows, 64).to(dtype)
        want = [getattr(a, n)(x) for n in NAMES]
        calls.n = 0
        got = [getattr(b, n)(x) for n in NAMES]
    assert calls.n == 1  # one kernel call for the three parts
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype and g.is_contiguous() and g.shape == w.shape
        assert torch.equal(g.view(torch.int16), w.view(torch.int16))
    if dtype == torch.bfloat16 and rows >= amx_linear.MIN_ROWS and amx_bf16_usable():
        assert amx_linear.last_path(b.q_proj.linear) == "amx"


def test_a_bf16_input_is_compared_by_its_own_bytes(monkeypatch):
    """An inference tensor has no version counter: the copy kept for the
    siblings is of the bf16 input (2 bytes a value, not its f32 form's 4); one
    changed value misses; an f32 call of the same layer never takes it."""
    a, b = _pair(torch.bfloat16)
    calls = _Calls(monkeypatch)
    kept = b.q_proj.fused._kept
    with torch.inference_mode():
        x = torch.randn(2, 3, 64).to(torch.bfloat16)
        b.q_proj(x)
        assert kept.n == x.numel() * 2
        x[1, 2, 63] += 1.0  # the copy's last value
        want = {n: getattr(a, n)(x) for n in NAMES}
        calls.n = 0
        assert torch.equal(b.k_proj(x), want["k_proj"]) and calls.n == 1
        assert torch.equal(b.v_proj(x), want["v_proj"]) and calls.n == 1  # k_proj's call kept
        assert torch.equal(b.q_proj(x), want["q_proj"]) and calls.n == 1  # every part taken
        assert kept.y is None
        b.q_proj(x)
        x32 = x.float()  # its values, in f32: another key (the f32 path's), not a hit
        assert torch.equal(b.k_proj(x32), a.k_proj(x32)) and calls.n == 4
