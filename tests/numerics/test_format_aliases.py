"""The names users type for our formats (``mxfp4``, ``mxfp8_e5m2``, torch's and
torchao's dtype names, MLX's modes): each is an alias in the format table and
gives the very ElementFormat of its MLIR type name."""

import numpy as np
import pytest

import mlir_mx
from mlir_mx import oracle
from mlir_mx.dialect.types import MXTensorType
from mlir_mx.errors import MXArgTypeError, MXTypeError, MXValueError
from mlir_mx.numerics import (
    ELEMENT_FORMATS,
    FORMAT_ALIASES,
    MXArray,
    element_bits,
    element_format,
    format_names,
)

ALIASES = sorted(FORMAT_ALIASES.items())


def test_the_aliases_people_type():
    torch_and_torchao = ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2", "fp6_e2m3", "fp6_e3m2")
    typed = {
        a: n for a, n in FORMAT_ALIASES.items() if a.startswith("mx") or a in torch_and_torchao
    }
    assert typed == {
        # OCP / MLX (mode="mxfp4", "mxfp8") / AMD Quark; mxfp6 is E2M3 by default
        "mxfp4": "f4E2M1FN",
        "mxfp4_e2m1": "f4E2M1FN",
        "mxfp6": "f6E2M3FN",
        "mxfp6_e2m3": "f6E2M3FN",
        "mxfp6_e3m2": "f6E3M2FN",
        "mxfp8": "f8E4M3FN",
        "mxfp8_e4m3": "f8E4M3FN",
        "mxfp8_e5m2": "f8E5M2",
        "mxint8": "i8",
        # torch dtype names, torchao's elem_dtype strings
        "float8_e4m3fn": "f8E4M3FN",
        "float8_e5m2": "f8E5M2",
        "float4_e2m1fn_x2": "f4E2M1FN",
        "fp6_e2m3": "f6E2M3FN",
        "fp6_e3m2": "f6E3M2FN",
    }


def test_aliases_live_in_the_table_and_name_no_format():
    assert FORMAT_ALIASES == {a: f.name for f in ELEMENT_FORMATS.values() for a in f.aliases}
    assert all(a == a.lower() for a in FORMAT_ALIASES)
    assert not set(FORMAT_ALIASES) & {n.lower() for n in ELEMENT_FORMATS}
    n_aliases = sum(len(f.aliases) for f in ELEMENT_FORMATS.values())
    assert len(FORMAT_ALIASES) == n_aliases  # no alias names two formats


@pytest.mark.parametrize("alias,name", ALIASES)
def test_an_alias_gives_the_canonical_format_in_any_case(alias, name):
    fmt = ELEMENT_FORMATS[name]
    for spelling in (alias, alias.upper(), alias.capitalize()):
        assert element_format(spelling) is fmt
    assert fmt.name == name


@pytest.mark.parametrize("alias,name", ALIASES)
def test_quantize_with_an_alias_is_quantize_with_the_name(alias, name):
    x = np.random.default_rng(len(alias)).normal(0, 3, (4, 64)).astype(np.float32)
    want = oracle.quantize(x, name, 32)
    for quantize in (oracle.quantize, mlir_mx.quantize):
        got = quantize(x, alias.upper(), 32)
        assert got.element == name
        assert np.array_equal(element_bits(got.codes, name), element_bits(want.codes, name))
        assert np.array_equal(got.scales.view(np.uint8), want.scales.view(np.uint8))


def test_an_mxarray_made_with_an_alias_holds_the_name():
    a = oracle.quantize(np.ones((2, 32), np.float32), "MXFP4", 32)
    b = MXArray(a.codes, a.scales, "mxfp4", 32)
    assert b.element == "f4E2M1FN" and b.format is element_format("f4E2M1FN")


def test_torch_dtypes_are_aliases():
    torch = pytest.importorskip("torch")
    assert element_format(torch.float8_e4m3fn) is ELEMENT_FORMATS["f8E4M3FN"]
    assert element_format(torch.float8_e5m2) is ELEMENT_FORMATS["f8E5M2"]
    assert element_format(torch.float4_e2m1fn_x2) is ELEMENT_FORMATS["f4E2M1FN"]
    with pytest.raises(MXValueError, match="unknown MX element format 'torch.float32'.*mxfp4"):
        element_format(torch.float32)


def test_errors_list_the_names_and_the_aliases():
    listed = format_names()
    for name, fmt in ELEMENT_FORMATS.items():
        assert name in listed
        for alias in fmt.aliases:
            assert alias in listed
    assert "f6E2M3FN (mxfp6, mxfp6_e2m3," in listed
    with pytest.raises(MXValueError) as err:
        element_format("mxfp5")
    assert str(err.value) == f"element: unknown MX element format 'mxfp5'; valid names: {listed}"
    with pytest.raises(MXArgTypeError, match="mxint8"):
        element_format(8)


@pytest.mark.parametrize("bad", ["mxfp", "mxfp8_e4m3fn", "fp8", "F8E4M3FN", " mxfp4", ""])
def test_unknown_names_are_still_refused(bad):
    with pytest.raises(MXValueError, match="unknown MX element format"):
        element_format(bad)


def test_the_ir_takes_no_alias():
    ok = "!mx.tensor<64xf4E2M1FN, block_size=32, scale_type=f8E8M0FNU>"
    assert MXTensorType.parse(ok).element_type == "f4E2M1FN"
    for alias in ("mxfp4", "float4_e2m1fn"):
        with pytest.raises(MXTypeError):
            MXTensorType.parse(ok.replace("f4E2M1FN", alias))


def test_linear_takes_aliases():
    w = np.random.default_rng(0).normal(0, 1, (64, 64)).astype(np.float32)
    x = np.random.default_rng(1).normal(0, 1, (2, 64)).astype(np.float32)
    lin = mlir_mx.Linear(w, threads=1, element="mxfp4", activations="MXINT8")
    ref = mlir_mx.Linear(w, threads=1, element="f4E2M1FN", activations="i8")
    assert (lin.element, lin.activations) == ("f4E2M1FN", "i8")
    assert np.array_equal(lin(x), ref(x))
    got = mlir_mx.matmul(x, w, threads=1, element="MxFp8")
    assert np.array_equal(got, mlir_mx.matmul(x, w, threads=1, element="f8E4M3FN"))


def test_quantize_model_takes_aliases():
    torch = pytest.importorskip("torch")
    from mlir_mx.torch import MXConfig, MXLinear, quantize_

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 32))

    a, b = model(), model()
    quantize_(a, "mxfp6_e3m2", activations="mxfp8")
    quantize_(b, MXConfig("f6E3M2FN", "f8E4M3FN"))
    assert isinstance(a[0], MXLinear) and a[0].element == "f6E3M2FN"
    assert MXConfig("MXFP4", torch.float8_e4m3fn) == MXConfig("f4E2M1FN", "f8E4M3FN")
    assert MXLinear.from_linear(model()[0], "mxint8").element == "i8"
    x = torch.randn(3, 64)
    assert torch.equal(a(x), b(x))
