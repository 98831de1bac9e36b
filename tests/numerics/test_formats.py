"""Element and scale formats: the table, and every code's decoding."""

import math

import ml_dtypes
import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.numerics import (
    ELEMENT_FORMATS,
    SCALE_DTYPE,
    SCALE_TYPE,
    MXArray,
    decode_elements,
    decode_scales,
    element_bits,
    element_format,
    finite_codes,
)

FLOAT_FORMATS = [n for n, f in ELEMENT_FORMATS.items() if not f.is_int]

EXPECTED = {
    # name: (dtype, bits, emax, max_normal)
    "f8E4M3FN": (ml_dtypes.float8_e4m3fn, 8, 8, 448.0),
    "f8E5M2": (ml_dtypes.float8_e5m2, 8, 15, 57344.0),
    "f6E2M3FN": (ml_dtypes.float6_e2m3fn, 6, 2, 7.5),
    "f6E3M2FN": (ml_dtypes.float6_e3m2fn, 6, 4, 28.0),
    "f4E2M1FN": (ml_dtypes.float4_e2m1fn, 4, 2, 6.0),
    "i8": (np.int8, 8, 0, 127 / 64),
}


def all_codes(name):
    """Every code of the format, as an array of its dtype."""
    fmt = element_format(name)
    if fmt.is_int:
        return np.arange(-128, 128, dtype=np.int16).astype(np.int8)
    return np.arange(1 << fmt.bits, dtype=np.uint8).view(fmt.dtype)


def same_f32(a, b):
    """Bitwise float32 equality, any NaN equal to any NaN."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    nan = np.isnan(a) & np.isnan(b)
    return bool(np.all(nan | (a.view(np.uint32) == b.view(np.uint32))))


def test_table():
    assert list(ELEMENT_FORMATS) == list(EXPECTED)
    for name, (dtype, bits, emax, max_normal) in EXPECTED.items():
        fmt = ELEMENT_FORMATS[name]
        assert fmt.name == name
        assert fmt.dtype == np.dtype(dtype)
        assert (fmt.bits, fmt.emax, fmt.max_normal) == (bits, emax, max_normal)
        # emax_elem is the exponent of the largest normal's binade.
        assert math.floor(math.log2(fmt.max_normal)) == fmt.emax
        if fmt.is_int:
            assert fmt.min_subnormal == 2.0**-6
        else:
            fi = ml_dtypes.finfo(dtype)
            assert float(fi.max) == fmt.max_normal
            assert float(fi.smallest_subnormal) == fmt.min_subnormal
            assert fi.nmant == fmt.mbits
            assert 1 + fmt.ebits + fmt.mbits == fmt.bits
    assert SCALE_TYPE == "f8E8M0FNU"
    assert SCALE_DTYPE == np.dtype(ml_dtypes.float8_e8m0fnu)


def test_element_format_lookup_errors():
    assert element_format("f4E2M1FN") is ELEMENT_FORMATS["f4E2M1FN"]
    assert element_format(ELEMENT_FORMATS["i8"]) is ELEMENT_FORMATS["i8"]
    with pytest.raises(ValueError, match="unknown MX element format 'f8E4M3'.*f8E4M3FN.*i8"):
        element_format("f8E4M3")
    with pytest.raises(TypeError, match="element"):
        element_format(8)


@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_every_float_code_decodes_like_ml_dtypes(name):
    codes = all_codes(name)
    ours = decode_elements(codes, name)
    theirs = codes.astype(np.float32).astype(np.float64)
    assert ours.dtype == np.float64
    assert np.array_equal(ours, theirs, equal_nan=True)
    # signed zeros are distinct codes and keep their sign
    fmt = element_format(name)
    assert np.signbit(ours[fmt.sign_bit]) and ours[fmt.sign_bit] == 0
    assert not np.signbit(ours[0]) and ours[0] == 0
    # the largest finite code is max_normal
    assert np.nanmax(np.where(np.isinf(ours), np.nan, ours)) == fmt.max_normal


def test_every_i8_code_decodes_to_c_over_64():
    codes = all_codes("i8")
    ours = decode_elements(codes, "i8")
    assert np.array_equal(ours, np.arange(-128, 128) / 64.0)
    assert ours[0] == -2.0  # code -128: never produced, but decodes as -2.0


def test_every_e8m0_code():
    codes = np.arange(256, dtype=np.uint8).view(SCALE_DTYPE)
    ours = decode_scales(codes)
    assert ours[0] == 2.0**-127 and ours[0] != 0
    assert np.float32(ours[0]) == np.float32(2.0**-127)  # exact as an f32 subnormal
    assert np.isnan(ours[255])
    assert np.array_equal(ours[:255], np.ldexp(1.0, np.arange(255) - 127))
    assert np.array_equal(ours, codes.astype(np.float32).astype(np.float64), equal_nan=True)


def test_finite_codes():
    counts = {"f8E4M3FN": 254, "f8E5M2": 248, "f6E2M3FN": 64, "f6E3M2FN": 64, "f4E2M1FN": 16}
    for name, n in counts.items():
        fc = finite_codes(name)
        assert fc.dtype == element_format(name).dtype and fc.size == n
        assert np.all(np.isfinite(fc.astype(np.float32)))
    fc = finite_codes("i8")
    assert fc.size == 255 and fc.min() == -127 and fc.max() == 127


def test_element_bits():
    codes = np.array([-6.0, -0.0, 0.5], dtype=ml_dtypes.float4_e2m1fn)
    assert element_bits(codes, "f4E2M1FN").tolist() == [0xF, 0x8, 0x1]
    assert element_bits(np.array([-1, 127], np.int8), "i8").tolist() == [0xFF, 0x7F]
    with pytest.raises(TypeError, match="codes: expected dtype"):
        element_bits(np.zeros(2, np.uint8), "f8E4M3FN")


@pytest.mark.parametrize("name", list(ELEMENT_FORMATS))
def test_dequantize_every_code_times_every_scale_is_one_f32_multiply(name):
    """dequantize == IEEE f32 multiply of the f32-extended element and scale (extf, extf, mulf)."""
    codes = all_codes(name)
    n = codes.size
    scale_codes = np.arange(256, dtype=np.uint8)
    # one element per block: block_size 1, codes[i, j] with scale[i, j]
    c2 = np.broadcast_to(codes[None, :], (256, n)).copy()
    s2 = np.broadcast_to(scale_codes[:, None], (256, n)).copy().view(SCALE_DTYPE)
    got = oracle.dequantize(MXArray(c2, s2, name, block_size=1, axis=1))
    assert got.dtype == np.float32
    if name == "i8":
        elem_f32 = c2.astype(np.float32) * np.float32(2.0**-6)  # exact
    else:
        elem_f32 = c2.astype(np.float32)
    scale_f32 = s2.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = elem_f32 * scale_f32
    assert same_f32(got, expected)
    # code 255 of the scale makes the whole block NaN, even for a zero element
    assert np.all(np.isnan(got[255]))
    # E8M0 code 0 is never flushed: the smallest nonzero element times 2^-127 is nonzero
    fmt = element_format(name)
    smallest = got[0][np.abs(decode_elements(codes, name)) == fmt.min_subnormal]
    assert np.all(np.abs(smallest) == np.float32(fmt.min_subnormal * 2.0**-127))
    assert np.all(smallest != 0)


def test_mx_names_are_the_ocp_names():
    names = {n: f.mx_name for n, f in ELEMENT_FORMATS.items()}
    assert set(names.values()) == {"MXFP8", "MXFP6", "MXFP4", "MXINT8"}
    assert names["i8"] == "MXINT8" and names["f4E2M1FN"] == "MXFP4"


@pytest.mark.parametrize("name", list(ELEMENT_FORMATS))
def test_behaviour_fields_agree_with_the_layout(name):
    """group, widening and int_exp2 (what code reads instead of names and
    widths) are consistent with the format's bits and values."""
    f = ELEMENT_FORMATS[name]
    codes, nbytes = f.group
    assert codes * f.bits == 8 * nbytes  # a packing group fills its bytes
    assert f.is_sub_byte == (codes > 1)
    assert f.widening in ("values", "f16", "int")
    assert (f.widening == "int") == f.is_int
    assert f.widening != "values" or f.num_codes <= 16  # one 16-entry register
    if f.int_exp2 is not None:
        v = decode_elements(finite_codes(name), name) * 2.0**f.int_exp2
        assert np.array_equal(v, np.round(v)) and np.abs(v).max() < 2 ** (f.int_bits - 1)
