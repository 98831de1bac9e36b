"""MXLinear against mlir_mx.Linear and the oracle: shapes, dtypes, grad, threads, memory."""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR

torch = pytest.importorskip("torch", reason="torch not installed (pip install 'mlir-mx[test]')")

from memory_cases import referenced_bytes  # noqa: E402

import mlir_mx  # noqa: E402
from mlir_mx import oracle  # noqa: E402
from mlir_mx.errors import MXError  # noqa: E402
from mlir_mx.torch import InferenceOnlyError, MXLinear, quantize_weight  # noqa: E402

U = 2.0**-24


def _layer(n_in=96, n_out=80, bias=True, seed=0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out, bias=bias)


@pytest.mark.parametrize("element", BY_BEHAVIOUR)
def test_equals_the_library_linear_bit_for_bit(element):
    layer = _layer()
    mx = MXLinear.from_linear(layer, element, threads=1)
    w = oracle.quantize(layer.weight.detach().numpy(), element, 32, axis=1)
    assert mx.weight().bitwise_equal(w)  # quantize_weight is the oracle's quantize
    x = torch.randn(7, 96)
    with torch.no_grad():
        y = mx(x)
    want = mlir_mx.Linear(w, threads=1)(x.numpy()) + layer.bias.detach().numpy()
    np.testing.assert_array_equal(y.numpy().view(np.uint32), want.view(np.uint32))
    # and within the matmul's bound of the exact product with the dequantized weight
    w64 = oracle.dequantize(w).astype(np.float64)
    x64 = x.numpy().astype(np.float64)
    exact = x64 @ w64.T + layer.bias.detach().numpy()
    bound = 98 * U * (np.abs(x64) @ np.abs(w64.T) + np.abs(layer.bias.detach().numpy()))
    assert np.all(np.abs(y.numpy() - exact) <= bound)


def test_eager_calls_hand_the_kernel_the_tensors_addresses(monkeypatch):
    """An eager call passes its tensors' addresses to the bound kernel
    (``Linear.call_into``: no numpy views, no second checks): a view at an
    offset and a non-contiguous input give the numpy path's bits; with
    ``activations=`` too where a dot kernel quantizes x itself (AVX-512 VNNI),
    else the Linear's own call (a separate quantizing kernel first) runs."""
    from mlir_mx.linear.activations import Activations
    from mlir_mx.linear.layer import Linear

    taken = []
    real = Linear.call_into
    monkeypatch.setattr(Linear, "call_into", lambda s, *a: taken.append(real(s, *a)) or taken[-1])
    layer = _layer()
    mx = MXLinear.from_linear(layer, threads=1)
    base = torch.randn(9, 96)
    for x in (base[2:5], torch.randn(96, 4).t(), base[:1]):
        with torch.inference_mode():
            y = mx(x)
        want = mlir_mx.Linear(mx.weight(), threads=1)(x.contiguous().numpy())
        want = want + layer.bias.detach().numpy()
        np.testing.assert_array_equal(y.numpy().view(np.uint32), want.view(np.uint32))
    assert taken == [True, True, True]
    w8 = MXLinear.from_linear(layer, activations="i8", threads=1)
    with torch.inference_mode():
        y = w8(base)
    want = mlir_mx.Linear(w8.weight(), activations="i8", threads=1)(base.numpy())
    want = want + layer.bias.detach().numpy()
    np.testing.assert_array_equal(y.numpy().view(np.uint32), want.view(np.uint32))
    in_kernel = w8._linear._bound(Activations(None, False, "i8"), 9, 1) is not None
    assert taken[-1] is in_kernel
    # the output the kernel writes is f32 whatever torch's default dtype
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.inference_mode():
            y64 = mx(base)
    finally:
        torch.set_default_dtype(default)
    with torch.inference_mode():
        assert y64.dtype == torch.float32 and torch.equal(y64, mx(base))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(96,), (3, 96), (2, 5, 96), (2, 1, 3, 96), (0, 96)])
def test_any_leading_shape_and_dtype(dtype, shape):
    mx = MXLinear.from_linear(_layer(), threads=1)
    x = torch.randn(shape).to(dtype)
    with torch.inference_mode():
        y = mx(x)
        # exact widening, the f32 result plus bias in f32, one rounding to x's dtype
        want = mx(x.to(torch.float32)).to(dtype)
    assert y.dtype == dtype and y.shape == shape[:-1] + (80,)
    assert torch.equal(y, want)
    rows = x.reshape(-1, 96)
    if rows.shape[0]:
        with torch.no_grad():
            one = mx(rows[-1:])  # a row's result does not depend on its batch
        assert torch.equal(y.reshape(-1, 80)[-1:], one)


def test_inference_only_and_argument_errors():
    mx = MXLinear.from_linear(_layer(), threads=1)
    x = torch.randn(2, 96, requires_grad=True)
    with pytest.raises(
        InferenceOnlyError, match="x: requires grad, but MXLinear is inference only"
    ) as err:
        mx(x)
    assert isinstance(err.value, MXError) and isinstance(err.value, RuntimeError)
    with torch.no_grad():
        mx(x)  # no graph is recorded: fine
    with pytest.raises(TypeError, match="x: expected dtype float32, bfloat16 or float16"):
        mx(torch.ones(2, 96, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., 96\)"):
        mx(torch.ones(2, 95))
    for other in (torch.ones(2, 96).to_sparse(), torch.ones(2, 96).to_mkldnn()):
        with torch.no_grad(), pytest.raises(TypeError, match="x: expected a dense .strided. tensor"):
            mx(other)
    with pytest.raises(ValueError, match="activations: element: unknown MX element format 'i4'"):
        MXLinear.from_linear(_layer(), activations="i4")
    with pytest.raises(
        ValueError, match="weight: in_features 95 is not a multiple of block_size 32"
    ):
        MXLinear.from_linear(_layer(95, 8))
    with pytest.raises(ValueError, match="weight: expected a 2-D MXArray"):
        MXLinear(oracle.quantize(np.ones((64, 32), np.float32), "f4E2M1FN", 32, axis=0))
    with pytest.raises(ValueError, match="bias: expected shape"):
        MXLinear(quantize_weight(_layer().weight, "f8E4M3FN", 32), torch.zeros(3))
    with pytest.raises(ValueError, match="threads"):
        MXLinear.from_linear(_layer(), threads=0)


def _call_threads(lin) -> set[int]:
    """The thread counts the Linear's calls have run at (its bound calls' keys)."""
    return {key[2] for key in lin._calls}


def test_threads_follow_torch_unless_set():
    mx = MXLinear.from_linear(_layer(), threads=None)
    x = torch.randn(1, 96)
    before = torch.get_num_threads()
    shared = mx._linear.threads
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            with torch.no_grad():
                mx(x)
            assert n in _call_threads(mx._linear)
        assert _call_threads(mx._linear) == {1, 2}
        mx.threads = 3
        torch.set_num_threads(1)
        with torch.no_grad():
            mx(x)
        assert _call_threads(mx._linear) == {1, 2, 3}
        assert mx._linear.threads == shared  # passed per call, never stored on the Linear
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("act", [None, "i8"])
def test_repr_and_memory_4_25_bits_per_weight(act):
    """Everything the module references (its buffers, its Linear and every
    array that one keeps: compiled calls included), each byte once, is 4.25
    bits per weight, before and after calls, with the stored codes or (W4A8)
    the dot kernels' records alone."""
    layer = _layer(256, 128, bias=False)
    mx = MXLinear.from_linear(layer, activations=act, threads=1)
    text = repr(mx)
    for part in ("weights=f4E2M1FN", "block_size=32", "nbytes=17408", "4.25 bits/weight"):
        assert part in text
    assert referenced_bytes(mx) * 8 / (256 * 128) == 4.25
    with torch.no_grad():
        for m in (1, 5, 70):
            mx(torch.randn(m, 256))
    assert referenced_bytes(mx) * 8 / (256 * 128) == 4.25 and mx.nbytes == 17408
    held = [getattr(mx, name) for name in mx._held_names]
    assert [t.data_ptr() for t in held] == [a.ctypes.data for a in mx._linear.held]
    assert not any(isinstance(v, mlir_mx.numerics.MXArray) for v in vars(mx).values())


@pytest.mark.parametrize(
    "element, n_out, act",
    [
        ("f4E2M1FN", 128, ""),
        ("f8E4M3FN", 80, ""),
        ("f6E3M2FN", 96, ""),
        ("f4E2M1FN", 80, "i8"),
        ("f6E2M3FN", 128, "i8"),  # records beside the stored codes where VNNI serves i8
    ],
)
def test_the_op_on_other_tensors_builds_a_linear_over_them(element, n_out, act):
    """An exported program's own copies of the buffers: Linear.from_stored (or,
    for the dot kernels' records, Linear.from_records) over them, no copy."""
    mx = MXLinear.from_linear(
        _layer(96, n_out, bias=False), element, threads=1, activations=act or None
    )
    unit = mx._linear.records_unit or ""
    stored = ("codes", "scales") if mx._linear.holds_stored else ()
    assert mx._held_names == stored + (("records",) if unit else ())
    x = torch.randn(3, 96)
    held = [getattr(mx, name).clone() for name in mx._held_names]
    with torch.no_grad():
        y = torch.ops.mlir_mx.linear(x, held, element, 32, 96, n_out, 1, act, unit)
        assert torch.equal(y, mx(x))
    name = "codes" if stored else "records"
    with pytest.raises(ValueError, match=rf"{name}: expected a \w+ array of shape \("):
        bad = [held[0][:-1].clone(), *held[1:]]
        torch.ops.mlir_mx.linear(x, bad, element, 32, 96, n_out, 1, act, unit)


@pytest.mark.parametrize("act", ["i8", "f4E2M1FN", "f8E4M3FN"])
def test_quantized_activations_equal_linear_on_quantized_x(act):
    """``activations=F``: the module quantizes x per call, as
    ``mlir_mx.Linear(w, activations=F)`` does: the same bits as the kernels on
    ``quantize(x, F, 32)``, plus the bias."""
    import mlir_mx

    layer = _layer()
    mx = MXLinear.from_linear(layer, "f4E2M1FN", threads=1, activations=act)
    x = torch.randn(5, 96)
    with torch.no_grad():
        y = mx(x)
        want = (
            torch.from_numpy(
                mlir_mx.Linear(mx.weight(), threads=1)(oracle.quantize(x.numpy(), act, 32))
            )
            + layer.bias
        )
    np.testing.assert_array_equal(y.numpy().view(np.uint32), want.numpy().view(np.uint32))
