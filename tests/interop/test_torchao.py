"""torchao MXTensor interop: code and scale bytes, values and layouts against the oracle.

Needs torch and torchao (the optional ``torch`` extra); CI does not install them,
so this module skips there with that reason.  Run it with
``pip install 'mlir-mx[torch]'`` (CPU torch is enough).
"""

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.interop import transpose
from mlir_mx.numerics import pack_codes

torch = pytest.importorskip("torch", reason="torchao interop needs torch (mlir-mx[torch])")
pytest.importorskip(
    "torchao.prototype.mx_formats.mx_tensor",
    reason="torchao interop needs torchao (mlir-mx[torch])",
)
from torchao.prototype.mx_formats.kernels import pack_uint4  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import MXTensor  # noqa: E402

from mlir_mx.interop.torchao import from_mxtensor, to_mxtensor  # noqa: E402
from mlir_mx.numerics import ELEMENT_FORMATS  # noqa: E402

FORMATS = [n for n, f in ELEMENT_FORMATS.items() if not f.is_int]  # the table


def realistic(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.0, size=shape).astype(np.float32)
    out = rng.random(shape) < 0.01
    x[out] *= 30
    return x


def to_f32_bits(t):
    return t.detach().to(torch.float32).contiguous().numpy().view(np.uint32)


@pytest.mark.parametrize("name", FORMATS)
def test_round_trip_is_bit_exact(name):
    q = oracle.quantize(realistic((4, 3, 64), 1), name, 32)
    t = to_mxtensor(q)
    assert isinstance(t, MXTensor) and tuple(t.shape) == q.shape and t.dtype == torch.float32
    assert from_mxtensor(t).bitwise_equal(q)


@pytest.mark.parametrize("name", FORMATS)
def test_torchao_dequantize_equals_the_oracle(name):
    q = oracle.quantize(realistic((8, 128), 2), name, 32)
    ours = oracle.dequantize(q)
    theirs = to_mxtensor(q).dequantize(torch.float32)
    assert np.array_equal(to_f32_bits(theirs), ours.view(np.uint32))


@pytest.mark.parametrize("name", FORMATS)
def test_torchao_quantize_floor_equals_the_oracle(name):
    """torchao's to_mx (FLOOR scale rule) and quantize() agree bit for bit on this data."""
    x = realistic((16, 256), 3)
    elem = {
        "f8E4M3FN": torch.float8_e4m3fn,
        "f8E5M2": torch.float8_e5m2,
        "f6E2M3FN": "fp6_e2m3",
        "f6E3M2FN": "fp6_e3m2",
        "f4E2M1FN": torch.float4_e2m1fn_x2,
    }[name]
    t = MXTensor.to_mx(torch.from_numpy(x), elem, 32)
    assert from_mxtensor(t).bitwise_equal(oracle.quantize(x, name, 32))


def test_fp4_packing_is_torchaos():
    q = oracle.quantize(realistic((4, 64), 4), "f4E2M1FN", 32)
    unpacked = torch.from_numpy(q.codes.view(np.uint8).copy())
    assert np.array_equal(pack_uint4(unpacked).numpy(), pack_codes(q.codes, "f4E2M1FN"))
    assert np.array_equal(to_mxtensor(q).qdata.numpy(), pack_codes(q.codes, "f4E2M1FN"))


@pytest.mark.parametrize("name", ["f8E4M3FN", "f6E3M2FN", "f4E2M1FN"])
def test_torch_gets_copies_an_mxarray_stays_a_value(name):
    # A torch tensor cannot be read-only, so sharing memory with one would let
    # a write through torch change an MXArray behind a prepared Linear's back.
    q = oracle.quantize(realistic((2, 64), 5), name, 32)
    t = to_mxtensor(q)
    assert not np.shares_memory(t.qdata.view(torch.uint8).numpy(), q.packed_codes())
    assert not np.shares_memory(t.scale.view(torch.uint8).numpy(), q.scales)
    back = from_mxtensor(t)
    assert back.bitwise_equal(q)
    t.qdata.view(torch.uint8).fill_(0)
    t.scale.view(torch.uint8).fill_(0)
    assert back.bitwise_equal(q)  # nothing of back is torch's memory
    assert not back.packed_codes().flags.writeable and not back.scales.flags.writeable


@pytest.mark.parametrize("name", ["f8E4M3FN", "f4E2M1FN"])
def test_axis0_weights_map_to_transposed_mxtensors(name):
    w = realistic((48, 128), 6)  # torch.nn.Linear weight (n_out, n_in)
    t = MXTensor.to_mx(
        torch.from_numpy(w), torch.float8_e4m3fn if name[1] == "8" else torch.float4_e2m1fn_x2, 32
    )
    b = from_mxtensor(t.t())  # B = W^T: (K, N) blocked along K
    assert b.shape == (128, 48) and b.axis == 0
    assert b.bitwise_equal(oracle.quantize(w.T, name, 32, axis=0))
    tb = to_mxtensor(b)
    assert tuple(tb.shape) == (128, 48) and not tb.qdata.is_contiguous()
    assert from_mxtensor(tb).bitwise_equal(b)
    want = oracle.dequantize(b).view(np.uint32)
    assert np.array_equal(to_f32_bits(tb.dequantize(torch.float32)), want)
    assert transpose(b).bitwise_equal(from_mxtensor(t))


def test_unsupported_inputs_are_rejected():
    with pytest.raises(ValueError, match="no i8 element type"):
        to_mxtensor(oracle.quantize(realistic((2, 32), 7), "i8", 32))
    with pytest.raises(ValueError, match="blocks along the last dimension"):
        to_mxtensor(oracle.quantize(realistic((2, 64, 3), 7), "f8E4M3FN", 32, axis=1))
    with pytest.raises(TypeError, match="expected an MXArray"):
        to_mxtensor(torch.zeros(2))
    with pytest.raises(TypeError, match="expected a torchao MXTensor"):
        from_mxtensor(np.zeros(2))
    t = MXTensor.to_mx(
        torch.from_numpy(realistic((128, 128), 8)), torch.float8_e4m3fn, 32, is_swizzled_scales=True
    )
    with pytest.raises(ValueError, match="swizzled"):
        from_mxtensor(t)
