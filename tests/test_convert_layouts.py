"""Every array layout, wherever an array crosses into native code: the oracle's
bits, or an ``MXError`` naming the argument before any kernel runs.

Layouts (``mlir_mx_testing.convert_fuzz``): any byte strides (not a multiple
of the item size, negative, zero, smaller than the item), fields of
structured arrays at any byte offset, data at an odd address, of every float
dtype ``mlir_mx.quantize`` takes (f32, f16, f64, bf16).  Property tests for
``mlir_mx.quantize`` / ``dequantize``; point tests for ``Linear``, the
Runner, ``MXLinear``, GGUF and torchao.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mlir_mx
from mlir_mx import oracle
from mlir_mx.errors import MXValueError
from mlir_mx.numerics import ELEMENT_FORMATS
from mlir_mx_testing.convert_fuzz import (
    DTYPES,
    field_of,
    layout_array,
    over_bytes,
    random_values,
    same_f32,
    same_mx,
)

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@st.composite
def blocked(draw):
    """(shape, axis, block, element, dtype name, threads) of a valid quantize call."""
    rank = draw(st.integers(1, 3))
    axis = draw(st.integers(0, rank - 1))
    block = draw(st.sampled_from((1, 2, 3, 32)))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    shape[axis] = block * draw(st.integers(1, 2))
    element = draw(st.sampled_from(list(ELEMENT_FORMATS)))
    return shape, axis, block, element, draw(st.sampled_from(list(DTYPES))), draw(st.integers(1, 2))


def check_quantize(x, element, block, axis, threads) -> None:
    """Compiled quantize (and dequantize of the oracle's array) == the oracle."""
    want = oracle.quantize(x, element, block, axis)
    got = mlir_mx.quantize(x, element, block, axis, threads=threads)
    assert same_mx(got, want) is None, same_mx(got, want)
    assert same_f32(mlir_mx.dequantize(want, threads), oracle.dequantize(want))


def _fill(x: np.ndarray, seed: int) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        x[...] = random_values(x.shape, np.random.default_rng(seed)).astype(x.dtype)
    return x


@SETTINGS
@given(call=blocked(), data=st.data())
def test_every_byte_stride(call, data):
    """Any byte stride per dimension, from -3 items to +3 items (zero and
    strides smaller than the item: overlapping elements), any byte offset."""
    shape, axis, block, element, dtype, threads = call
    item = DTYPES[dtype].itemsize
    strides = [data.draw(st.integers(-3 * item - 1, 3 * item + 1)) for _ in shape]
    offset = data.draw(st.integers(0, item - 1))
    x = over_bytes(shape, DTYPES[dtype], strides, offset)
    x.base[...] = np.random.default_rng(len(shape)).integers(0, 256, x.base.size, np.uint8)
    check_quantize(x, element, block, axis, threads)


@SETTINGS
@given(call=blocked(), before=st.integers(0, 9), after=st.integers(0, 9), seed=st.integers(0, 9))
def test_structured_array_fields(call, before, after, seed):
    """A field of a structured array: the record's size as the stride, the
    field anywhere in the record (r3_quantize_odd_strides: all-zero codes)."""
    shape, axis, block, element, dtype, threads = call
    x = _fill(field_of(shape, DTYPES[dtype], before, after), seed)
    check_quantize(x, element, block, axis, threads)
    check_quantize(x[::-1], element, block, axis, threads)  # and read backwards


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_each_layout_kind(dtype):
    """Each layout of the conversion suite once per dtype, every format."""
    rng = np.random.default_rng(3)
    for n, layout in enumerate(("negative", "misaligned", "overlap", "broadcast", "field")):
        x = layout_array([3, 32], dtype, layout, rng)
        element = list(ELEMENT_FORMATS)[n % 6]
        check_quantize(x, element, 32, 1, 2)
        check_quantize(x, element, 3 if x.shape[0] == 3 else 1, 0, 1)


def test_copies_only_what_it_must():
    """An input whose strides are whole elements (steps, negative, transposed,
    zero) is passed in place, no copy; only the other layouts are copied, to
    C-contiguous aligned arrays of the same values."""
    from mlir_mx.convert import _readable

    x = np.zeros((4, 64), np.float32)
    for view in (x, x[:, ::2], x[::-1], x.T, np.broadcast_to(x[0], (3, 64))):
        assert _readable(view) is view
    for view in (field_of((4, 32), np.float32, 2, 0), over_bytes((4, 32), np.float32, (128, 4), 1)):
        copy = _readable(view)
        assert copy is not view and copy.flags.c_contiguous and copy.flags.aligned
        np.testing.assert_array_equal(copy, view)


def test_dequantize_out_layouts():
    """``out=``: written when C-contiguous, aligned and apart from ``a``; else
    refused naming ``out``, nothing written."""
    from mlir_mx.numerics import MXArray

    a = oracle.quantize(_fill(np.empty((4, 64), np.float32), 1), "f4E2M1FN", 32)
    want = oracle.dequantize(a)
    mis = over_bytes((4, 64), np.float32, (256, 4), 1)
    with pytest.raises(MXValueError, match="out: must be C-contiguous, aligned and writeable"):
        mlir_mx.dequantize(a, out=mis)
    with pytest.raises(MXValueError, match="out: must be C-contiguous"):
        mlir_mx.dequantize(a, out=np.empty((4, 128), np.float32)[:, ::2])
    raw = np.zeros(4 * 64 * 4, np.uint8)
    codes = raw[: a.packed_codes().nbytes].reshape(a.packed_codes().shape)
    codes[...] = a.packed_codes()
    shared = MXArray.from_packed(codes, np.array(a.scales), a.element, 32, 1, copy=False)
    with pytest.raises(MXValueError, match="out: overlaps the memory of a's codes"):
        mlir_mx.dequantize(shared, out=raw.view(np.float32).reshape(4, 64))
    assert np.array_equal(codes, a.packed_codes())
    assert same_f32(mlir_mx.dequantize(shared, out=np.empty((4, 64), np.float32)), want)


# --------------------------------------------------------------------------- the users


@pytest.mark.parametrize("layout", ["field", "negative", "byte-strides", "misaligned", "overlap"])
def test_linear_activations_and_weights(layout):
    """``Linear``: activations of any layout give the bits of their contiguous
    copy (f32 and f32 quantized per call); a float weight of any layout
    quantizes to the oracle's MXArray."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    x = layout_array([3, 64], "f32", layout, rng)
    x[...] = np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-2.0)  # finite activations
    for acts in (None, "f8E4M3FN"):
        lin = mlir_mx.Linear(oracle.quantize(w, "f4E2M1FN", 32), threads=2, activations=acts)
        np.testing.assert_array_equal(lin(x), lin(np.array(x)))
    wv = field_of(w.shape, np.float32, 3, 1)
    wv[...] = w
    lin = mlir_mx.Linear(wv, element="f6E3M2FN", threads=1)
    assert lin.weight().bitwise_equal(oracle.quantize(w, "f6E3M2FN", 32))


def test_runner_refuses_layouts_it_cannot_pass():
    """The Runner passes C-contiguous, aligned buffers only: a structured
    field, a negative-stride view and misaligned data are refused naming the
    argument (no copy: a function may write its arguments)."""
    from mlir_mx.execution import Runner

    src = (
        "func.func @neg(%x: memref<4x8xf32>) {\n"
        "  %c0 = arith.constant 0 : index\n"
        "  %v = memref.load %x[%c0, %c0] : memref<4x8xf32>\n"
        "  %w = arith.negf %v : f32\n  memref.store %w, %x[%c0, %c0] : memref<4x8xf32>\n"
        "  return\n}\n"
    )
    r = Runner(src)
    where = r"neg: argument 1 \('%arg0'\)"
    field = field_of((4, 8), np.float32, 1, 1)
    for bad, why in (
        (field, "not C-contiguous"),
        (np.zeros((4, 8), np.float32)[::-1], "not C-contiguous"),
        (over_bytes((4, 8), np.float32, (32, 4), 2), "not aligned"),
    ):
        bad[...] = 1.0
        with pytest.raises(MXValueError, match=f"{where}: array (is|data is) {why}"):
            r.neg(bad)
        assert (bad == 1.0).all()
    good = np.ones((4, 8), np.float32)
    r.neg(good)
    assert good[0, 0] == -1.0


def test_mxlinear_layouts():
    """``MXLinear``: strided / transposed torch inputs and weights give the
    bits of their contiguous copies (torch strides are whole elements; the
    layer makes ``x`` contiguous, the quantizer the weight)."""
    torch = pytest.importorskip("torch", reason="torch is not installed (the optional torch extra)")
    from mlir_mx.torch import MXLinear

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    lin.weight = torch.nn.Parameter(torch.randn(64, 32).t())  # (32, 64), not contiguous
    assert not lin.weight.is_contiguous()
    layer = MXLinear.from_linear(lin, "f4E2M1FN", 32, threads=2)
    ref = oracle.quantize(lin.weight.detach().numpy().copy(), "f4E2M1FN", 32)
    assert layer.weight().bitwise_equal(ref)
    x = torch.randn(5, 128)[:, ::2]
    assert not x.is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(layer(x), layer(x.contiguous()), rtol=0, atol=0)
        xt = torch.randn(64, 5).t()
        torch.testing.assert_close(layer(xt), layer(xt.contiguous()), rtol=0, atol=0)


def test_gguf_writes_any_layout(tmp_path):
    """``write_gguf`` quantizes float weights of any layout to the oracle's bits."""
    pytest.importorskip("gguf", reason="gguf is not installed (the optional gguf extra)")
    from mlir_mx.interop.gguf import read_gguf, write_gguf

    w = np.random.default_rng(8).standard_normal((4, 64)).astype(np.float32)
    f = field_of(w.shape, np.float32, 2, 0)
    f[...] = w
    neg = over_bytes(w.shape, np.float32, (-260, 4), 2)
    neg[...] = w
    write_gguf(tmp_path / "w.gguf", {"field": f, "neg": neg[:, :]})
    got = read_gguf(tmp_path / "w.gguf")
    want = oracle.quantize(w, "f4E2M1FN", 32)
    assert got["field"].bitwise_equal(want) and got["neg"].bitwise_equal(want)


def test_torchao_round_trip_of_a_strided_quantization():
    """torchao interop passes MXArrays (byte arrays, held C-contiguous) and
    contiguous tensors only; an MXTensor made from a strided input's
    quantization round-trips bit for bit."""
    pytest.importorskip("torchao", reason="torchao is not installed")
    from mlir_mx.interop.torchao import from_mxtensor, to_mxtensor

    x = field_of((4, 64), np.float32, 1, 3)
    _fill(x, 4)
    a = mlir_mx.quantize(x, "f8E4M3FN", 32)
    assert a.bitwise_equal(oracle.quantize(x, "f8E4M3FN", 32))
    assert from_mxtensor(to_mxtensor(a)).bitwise_equal(a)
