"""A bf16 / f16 input of a separate ``MXLinear`` by address (issue 51,
``MXLinear._by_address``): converted to f32 once in its own shape, the result
made in its leading shape (no reshape on either side), the bias added in f32
and the result rounded once to the input's dtype: bit for bit the exact path
(``mlir_mx.Linear`` on the f32 values of the 2-D rows), special values
included; non-contiguous inputs take the reshaping path with the same bits."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

import mlir_mx  # noqa: E402
from mlir_mx import oracle  # noqa: E402
from mlir_mx.linear import Linear, amx_linear  # noqa: E402
from mlir_mx.linear.amx import amx_bf16_usable  # noqa: E402
from mlir_mx.torch import MXLinear  # noqa: E402

K, N = 64, 80


def _layer(bias: bool, threads: int) -> MXLinear:
    rng = np.random.default_rng(3)
    w = oracle.quantize(rng.standard_normal((N, K)).astype(np.float32), "f4E2M1FN", 32)
    b = torch.from_numpy(rng.standard_normal(N).astype(np.float32)) if bias else None
    return MXLinear(w, b, threads=threads)


def _input(shape, dtype, seed=0) -> torch.Tensor:
    """N(0, 1) values in ``dtype``; the first row holds +-Inf, NaN, -0 and a
    denormal of ``dtype``, the second a denormal beside large values."""
    torch.manual_seed(seed)
    x = torch.randn(shape).to(dtype)
    rows = x.view(-1, K)
    if rows.shape[0] >= 2:
        tiny = torch.finfo(dtype).smallest_normal / 4  # a denormal in dtype
        rows[0, :5] = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, tiny])
        rows[1, :3] = torch.tensor([tiny, 3e4, -tiny])
    return x


def _exact(lin: MXLinear, x: torch.Tensor, threads: int) -> torch.Tensor:
    """The exact path on ``x``'s f32 values as 2-D rows, the bias in f32,
    rounded once to ``x``'s dtype, in ``x``'s leading shape."""
    rows = x.reshape(-1, K).float().contiguous().numpy()
    y = torch.from_numpy(mlir_mx.Linear(lin.weight(), threads=threads)(rows, threads=threads))
    if lin.bias is not None:
        y = y + lin.bias.float()
    return y.to(x.dtype).reshape(*x.shape[:-1], N)


class _Into:
    """Records the row counts of the calls made by address (``Linear.call_into``)."""

    def __init__(self, monkeypatch):
        self.rows, raw = [], Linear.call_into

        def counted(lin, x_addr, m, *args):
            self.rows.append(m)
            return raw(lin, x_addr, m, *args)

        monkeypatch.setattr(Linear, "call_into", counted)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16),
                                                                      b.view(torch.int16))  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape,bias", [((5, K), True), ((2, 3, K), False), ((K,), True),
                                        ((1, 4, K), True)])  # fmt: skip
def test_a_half_input_by_address_gives_the_exact_path_bits(monkeypatch, threads, dtype, shape, bias):
    lin = _layer(bias, threads)
    x = _input(shape, dtype)
    into = _Into(monkeypatch)
    with torch.inference_mode():
        y = lin(x)
    assert into.rows == [int(np.prod(shape[:-1]))]  # one call by address, all the rows
    assert y.is_contiguous() and _same_bits(y, _exact(lin, x, threads))
    if x.dim() > 1 and x.shape[-2] >= 2:
        assert torch.isnan(y.view(-1, N)[0]).all()  # the NaN / Inf row


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_non_contiguous_half_input_gives_the_same_bits(dtype):
    """A transposed / strided input is copied to contiguous rows first (the
    path that reshapes): the bits of its contiguous copy."""
    lin = _layer(True, 1)
    base = _input((K, 6), dtype, seed=1)
    with torch.inference_mode():
        for x in (base.t(), _input((3, 2 * K), dtype)[:, ::2], _input((4, 2, K), dtype)[:, 1]):
            assert not x.is_contiguous()
            y = lin(x)
            assert _same_bits(y, lin(x.contiguous()))
            assert _same_bits(y, _exact(lin, x, 1))


@pytest.mark.slow  # compiles the AMX path's kernels (2-3 s)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,special", [((1, 40, K), False), ((2, 20, K), False),
                                           ((33, K), False), ((1, 40, K), True)])  # fmt: skip
def test_bf16_rows_on_amx_by_address_give_the_exact_path_bits(threads, shape, special):
    """32 rows or more of a bf16 input: the AMX path (where the CPU has it),
    the exact path's bits in the input's leading shape; a row of Inf / NaN
    breaks the AMX path's per-call condition: the exact path, same bits."""
    lin = _layer(True, threads)
    x = torch.randn(shape).to(torch.bfloat16)
    if special:
        x.view(-1, K)[3, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), 1e-40])
    with torch.inference_mode():
        y = lin(x)
    assert _same_bits(y, _exact(lin, x, threads))
    if amx_bf16_usable():
        assert amx_linear.last_path(lin.linear) == ("exact" if special else "amx")
