"""quantize / dequantize edge cases, each with explicitly constructed expectations."""

import ml_dtypes
import numpy as np
import pytest
from format_cases import BY_BEHAVIOUR

from mlir_mx import oracle
from mlir_mx.numerics import (
    ELEMENT_FORMATS,
    SCALE_DTYPE,
    MXArray,
    block_amax,
    decode_elements,
    element_format,
    f32_exponent,
    finite_codes,
    round_to_element,
    scale_shape,
    shared_exponent,
)

ALL = list(ELEMENT_FORMATS)
FLOATS = [n for n in ALL if not ELEMENT_FORMATS[n].is_int]


def f32(*v):
    return np.array(v, dtype=np.float32)


def scale_codes(q):
    return q.scales.view(np.uint8)


def code_bits(q):
    return q.codes.view(np.uint8)


def values(q):
    """Unscaled element values (float64)."""
    return decode_elements(q.codes, q.element)


def magnitude_table(name):
    """Sorted non-negative finite element magnitudes and their codes."""
    fc = finite_codes(name)
    v = decode_elements(fc, name)
    keep = (v >= 0) & ~np.signbit(v)
    order = np.argsort(v[keep], kind="stable")
    return v[keep][order], fc[keep][order]


def is_even_code(code):
    """The code's least significant bit is 0 (the mantissa LSB; for i8 the integer itself)."""
    return int(np.asarray(code).view(np.uint8)) % 2 == 0


# ----------------------------------------------------------------------------- ties / RNE


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("shared", [0, -100, 60, -127, "top"])
def test_ties_at_every_rounding_boundary(name, shared):
    """Every midpoint between adjacent magnitudes rounds to the even code; its f32
    neighbours round to the nearer value.  The anchor max_normal * X pins the scale."""
    fmt = element_format(name)
    if shared == "top":
        shared = 127 - fmt.emax
    mags, codes = magnitude_table(name)
    a, b = mags[:-1], mags[1:]
    mid = (a + b) / 2
    n = mid.size
    X = 2.0**shared
    assert np.array_equal((mid * X).astype(np.float32), mid * X)  # midpoints are exact in f32
    # nearest f32 neighbours of the scaled midpoint, in element units
    up = np.nextafter((mid * X).astype(np.float32), np.float32(np.inf)).astype(np.float64) / X
    down = np.nextafter((mid * X).astype(np.float32), np.float32(0)).astype(np.float64) / X
    assert np.all((a < down) & (down < mid) & (mid < up) & (up < b))
    # blocks of 8: [anchor, mid, -mid, up, down, -up, -down, 0]
    blocks = np.stack(
        [np.full(n, fmt.max_normal), mid, -mid, up, down, -up, -down, np.zeros(n)], axis=1
    )
    x = (blocks * X).astype(np.float32)
    assert np.array_equal(x.astype(np.float64), blocks * X)  # every probe exact in f32
    q = oracle.quantize(x, name, block_size=8, axis=1)
    assert np.all(scale_codes(q) == shared + 127)
    v = values(q)
    even_is_b = np.array([is_even_code(c) for c in codes[1:]])
    for i in range(n):
        assert is_even_code(codes[i]) != even_is_b[i]  # adjacent codes alternate parity
    expected_mid = np.where(even_is_b, b, a)
    assert np.array_equal(v[:, 0], np.full(n, fmt.max_normal))
    assert np.array_equal(v[:, 1], expected_mid)
    assert np.array_equal(v[:, 2], -expected_mid)
    assert np.array_equal(v[:, 3], b) and np.array_equal(v[:, 5], -b)
    assert np.array_equal(v[:, 4], a) and np.array_equal(v[:, 6], -a)
    # round trip of the grid values through dequantize is exact
    d = oracle.dequantize(q)
    assert np.array_equal(d.astype(np.float64), v * X)


@pytest.mark.parametrize("name", ALL)
def test_saturation_band_of_each_format(name):
    """Values in [max_normal, 2^(emax+1)) * X saturate to max_normal, sign kept."""
    fmt = element_format(name)
    top = 2.0 ** (fmt.emax + 1)
    band = np.linspace(fmt.max_normal, top, 41)[:-1]
    band = np.append(band, np.nextafter(np.float32(top), np.float32(0)))
    for s in (0, -50, 90):
        x = np.stack([band, -band], axis=1) * 2.0**s
        q = oracle.quantize(x.astype(np.float32), name, block_size=1, axis=1)
        assert np.all(scale_codes(q) == s + 127)
        assert np.all(values(q)[:, 0] == fmt.max_normal)
        assert np.all(values(q)[:, 1] == -fmt.max_normal)
    # 2^(emax+1) itself moves to the next scale and is exact there
    q = oracle.quantize(f32(top), name, block_size=1)
    assert scale_codes(q)[0] == 128 and values(q)[0] == 2.0**fmt.emax


def test_e4m3_448_to_512_band():
    x = f32(448, 449, 464, 479.9, 480, 500, 511.99997, -511.99997, 512)
    q = oracle.quantize(x, "f8E4M3FN", block_size=1)
    assert scale_codes(q).tolist() == [127] * 8 + [128]
    assert code_bits(q).tolist() == [0x7E] * 7 + [0xFE, 0x78]  # 448, -448, 256 (x 2)
    assert oracle.dequantize(q).tolist() == [448.0] * 7 + [-448.0, 512.0]
    # the raw ml_dtypes cast would have produced NaN for these
    assert np.isnan(np.float32(480).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))


def test_e5m2_saturates_never_inf():
    x = f32(57344, 61439, 61440, 65535, -65535, 2.0**-14 * 61440)
    q = oracle.quantize(x, "f8E5M2", block_size=1)
    v = values(q)
    assert np.all(np.isfinite(v))
    assert np.all(np.abs(v) == 57344.0)
    assert code_bits(q).tolist() == [0x7B, 0x7B, 0x7B, 0x7B, 0xFB, 0x7B]
    assert scale_codes(q).tolist() == [127] * 5 + [113]
    # the raw ml_dtypes cast gives Inf for 61440 (the RNE tie with "65536")
    assert np.isinf(np.float32(61440).astype(ml_dtypes.float8_e5m2).astype(np.float32))


@pytest.mark.parametrize("name", ALL)
def test_subnormal_elements(name):
    fmt = element_format(name)
    s = fmt.min_subnormal
    anchor = 2.0**fmt.emax
    probes = [
        s,
        s / 2,
        np.nextafter(np.float32(s / 2), np.float32(1)),
        s / 4,
        -s / 2,
        1.5 * s,
        2.5 * s,
    ]
    q = oracle.quantize(f32(anchor, *probes, 0.0), name, block_size=9)
    assert scale_codes(q)[0] == 127
    # s/2 is a tie between 0 and s -> even (0); 1.5 s ties 1 s / 2 s -> 2 s; 2.5 s -> 2 s
    assert values(q).tolist() == [anchor, s, 0.0, s, 0.0, -0.0, 2 * s, 2 * s, 0.0]
    if not fmt.is_int:
        assert np.signbit(values(q)[5])  # -s/2 -> -0, sign kept
        assert code_bits(q)[5] == fmt.sign_bit


@pytest.mark.parametrize("name", ALL)
def test_f32_subnormal_amax(name):
    """A block of f32 subnormals: exponent field 0 reads as -127, shared exp clamps to -127."""
    x = f32(2.0**-149, 3 * 2.0**-149, -(2.0**-130), 1.5 * 2.0**-127)
    assert np.all(x != 0)
    assert np.all(f32_exponent(np.abs(x)) == -127)
    assert shared_exponent(np.float32(2.0**-130), name) == -127
    q = oracle.quantize(x, name, block_size=4)
    assert scale_codes(q).tolist() == [0]
    # P = x * 2^127 exactly: 2^-22, 3*2^-22, -2^-3, 1.5
    eighth = 0.0 if name == "f4E2M1FN" else 0.125  # E2M1's smallest subnormal is 0.5
    assert values(q).tolist() == [0.0, 0.0, -eighth, 1.5]
    # dequantize of the result keeps f32 subnormals exactly
    d = oracle.dequantize(q)
    assert d[3] == np.float32(1.5 * 2.0**-127) and d[3] != 0
    assert d[2] == np.float32(-eighth * 2.0**-127)


@pytest.mark.parametrize("name", ALL)
def test_zero_and_negative_zero_blocks(name):
    fmt = element_format(name)
    x = f32(0, 0, 0, 0, -0.0, -0.0, -0.0, -0.0, 0, -0.0, 0, -0.0)
    q = oracle.quantize(x, name, block_size=4)
    assert scale_codes(q).tolist() == [0, 0, 0]
    d = oracle.dequantize(q)
    assert np.all(d == 0)
    if fmt.is_int:
        assert np.all(code_bits(q) == 0)
        assert not np.any(np.signbit(d))
    else:
        sb = fmt.sign_bit
        assert code_bits(q).tolist() == [0] * 4 + [sb] * 4 + [0, sb, 0, sb]
        assert np.array_equal(np.signbit(d), np.signbit(x))
    # -0 next to nonzero values keeps its sign too (x / X keeps the sign of zero)
    q = oracle.quantize(f32(1.0, -0.0), name, block_size=2)
    assert np.signbit(values(q)[1]) == (not fmt.is_int)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_blocks(name, bad):
    x = f32(1, 2, bad, 4, 1, 2, 3, 4, 0, 0, 0, -(2.0**100))
    q = oracle.quantize(x, name, block_size=4)
    assert scale_codes(q)[0] == 255
    assert np.all(code_bits(q)[:4] == 0)
    assert scale_codes(q)[1] == 2 - element_format(name).emax + 127
    assert scale_codes(q)[2] == 100 - element_format(name).emax + 127
    d = oracle.dequantize(q)
    assert np.all(np.isnan(d[:4]))
    assert not np.any(np.isnan(d[4:]))
    assert np.array_equal(block_amax(x, 4)[1:], f32(4, 2.0**100))


def test_float64_overflow_becomes_nan_block():
    x = np.array([1e39, 1.0, 1.0, 1.0], dtype=np.float64)  # 1e39 -> +Inf in float32
    q = oracle.quantize(x, "f8E4M3FN", block_size=2)
    assert scale_codes(q).tolist() == [255, 119]


@pytest.mark.parametrize("name", ALL)
def test_clamp_at_minus_127(name):
    emax = element_format(name).emax
    # amax = 2^(e) with e - emax below, at and above -127
    for e, code in [(-127 + emax - 3, 0), (-127 + emax - 1, 0), (-127 + emax, 0), (-126 + emax, 1)]:
        q = oracle.quantize(f32(2.0**e), name, block_size=1)
        assert scale_codes(q)[0] == code, (e, code)
        # element = 2^e / 2^-127 when clamped: smaller than 2^emax, still exact
        assert values(q)[0] == 2.0 ** (e - (code - 127))
        assert oracle.dequantize(q)[0] == np.float32(2.0**e)


@pytest.mark.parametrize("name", ALL)
def test_largest_f32_values(name):
    fmt = element_format(name)
    fmax = np.finfo(np.float32).max
    x = f32(fmax, -fmax, 2.0**127, 1.0)
    q = oracle.quantize(x, name, block_size=1)
    assert scale_codes(q).tolist() == [254 - fmt.emax] * 3 + [127 - fmt.emax]
    assert np.all(scale_codes(q) <= 254)
    # fmax / 2^(127-emax) = (2 - 2^-23) * 2^emax saturates to max_normal
    assert values(q)[:3].tolist() == [fmt.max_normal, -fmt.max_normal, 2.0**fmt.emax]
    d = oracle.dequantize(q)
    assert np.all(np.isfinite(d))
    assert d[0] == np.float32(fmt.max_normal * 2.0 ** (127 - fmt.emax))


@pytest.mark.parametrize("name", ALL)
def test_quotients_below_f32_normal_range_round_to_zero(name):
    """When x/X < 2^-126 the f32 quotient may be inexact, but every element format's
    half-min-subnormal (>= 2^-17) is far above, so the element is a signed zero."""
    x = f32(2.0**100, 1.5 * 2.0**-50, -(2.0**-60) * 1.75, 2.0**-149)
    q = oracle.quantize(x, name, block_size=4)
    p = x.astype(np.float64) / 2.0 ** (100 - element_format(name).emax)
    assert np.all(np.abs(p[1:]) < 2.0**-126)
    assert values(q)[1:].tolist() == [0.0, 0.0, 0.0]
    if name != "i8":
        assert np.signbit(values(q)[1:]).tolist() == [False, True, False]


@pytest.mark.parametrize("name", FLOATS)
def test_round_to_element_is_nearest_code(name):
    """The oracle's element rounding, whatever the ml_dtypes version (0.5/0.6 rounded
    float64 casts through float32, twice; the oracle never casts float64 directly):
    against a nearest-value search over the format's finite values, ties to the
    even code, for every value, tie and tie neighbour, in float32 and float64."""
    fmt = element_format(name)
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    vals = codes.view(fmt.dtype).astype(np.float64)
    keep = np.isfinite(vals) & ~((vals == 0) & np.signbit(vals))
    table, tcodes = vals[keep], codes[keep]
    order = np.argsort(table)
    table, tcodes = table[order], tcodes[order]
    pos = table[table >= 0]
    mids = (pos[:-1] + pos[1:]) / 2
    p32 = np.concatenate([pos, mids])
    p32 = np.concatenate([p32, np.nextafter(p32.astype(np.float32), np.float32(np.inf))])
    p32 = np.concatenate([p32, np.nextafter(mids.astype(np.float32), np.float32(0))])
    p = np.concatenate([p32, -p32[p32 > 0]]).astype(np.float32)
    p = p[np.abs(p) <= fmt.max_normal]
    dist = np.abs(p.astype(np.float64)[:, None] - table[None, :])
    best = dist.min(axis=1, keepdims=True)
    cand = dist == best
    # ties: the candidate whose code has an even mantissa (the lowest code bit clear)
    even = cand & ((tcodes[None, :] & 1) == 0)
    pick = np.where(even.any(axis=1), even.argmax(axis=1), cand.argmax(axis=1))
    want = table[pick]
    for dt in (np.float32, np.float64):
        got = round_to_element(p.astype(dt), name).astype(np.float64)
        np.testing.assert_array_equal(np.abs(got), np.abs(want), err_msg=f"{name} {dt.__name__}")


# ----------------------------------------------------------------------------- MXINT8


def test_mxint8_conventions():
    # amax 1.5 -> shared 0; codes = rint(x * 64), ties to even, clamp to +-127
    x = f32(1.5, 1.0 / 128, 3.0 / 128, -5.0 / 128, 1.99, -1.99, 0.5, -0.0)
    q = oracle.quantize(x, "i8", block_size=8)
    assert scale_codes(q)[0] == 127
    assert q.codes.tolist() == [96, 0, 2, -2, 127, -127, 32, 0]
    assert q.codes.dtype == np.int8
    # -128 is never produced but decodes to -2.0 * X
    a = MXArray(np.array([-128], np.int8), np.array([130], np.uint8), "i8", 1)
    assert oracle.dequantize(a).tolist() == [-16.0]


# ----------------------------------------------------------------------------- axes / ranks


def reference_last_axis(x, name, bs):
    return oracle.quantize(np.ascontiguousarray(x), name, bs, -1)


@pytest.mark.parametrize("name", BY_BEHAVIOUR)
def test_axes_and_ranks(name):
    rng = np.random.default_rng(1)
    x3 = (rng.standard_normal((4, 64, 6)) * np.exp2(rng.integers(-20, 20, (4, 64, 6)))).astype(
        np.float32
    )
    for axis in (0, 1, 2, -1, -2, -3):
        ax = axis % 3
        bs = {0: 2, 1: 32, 2: 3}[ax]
        q = oracle.quantize(x3, name, bs, axis)
        assert q.axis == ax and q.shape == x3.shape
        assert q.scale_shape == scale_shape(x3.shape, bs, axis)
        assert q.scales.shape[ax] == x3.shape[ax] // bs
        # same as quantizing with the blocked axis moved last
        r = reference_last_axis(np.moveaxis(x3, ax, -1), name, bs)
        assert np.array_equal(np.moveaxis(code_bits(q), ax, -1), code_bits(r))
        assert np.array_equal(np.moveaxis(scale_codes(q), ax, -1), scale_codes(r))
        d = oracle.dequantize(q)
        assert d.shape == x3.shape
        assert np.array_equal(np.moveaxis(d, ax, -1), oracle.dequantize(r))
    # explicit block structure on axis 1: scale of block j = from amax of x3[:, 32j:32j+32, :]
    q = oracle.quantize(x3, name, 32, 1)
    amax = np.abs(x3).reshape(4, 2, 32, 6).max(axis=2)
    assert np.array_equal(scale_codes(q).astype(int), shared_exponent(amax, name) + 127)
    # rank 1
    x1 = x3[0, :, 0].copy()
    q1 = oracle.quantize(x1, name, 16)
    assert q1.scale_shape == (4,)
    for j in range(4):
        qb = oracle.quantize(x1[16 * j : 16 * j + 16], name, 16)
        assert np.array_equal(code_bits(qb), code_bits(q1)[16 * j : 16 * j + 16])
        assert scale_codes(qb)[0] == scale_codes(q1)[j]


def test_input_dtypes():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(64)
    q64 = oracle.quantize(x, "f6E3M2FN")
    q32 = oracle.quantize(x.astype(np.float32), "f6E3M2FN")
    assert q64.bitwise_equal(q32)
    h = x.astype(np.float16)
    q16 = oracle.quantize(h, "f8E5M2")
    assert q16.bitwise_equal(oracle.quantize(h.astype(np.float32), "f8E5M2"))
    b = x.astype(ml_dtypes.bfloat16)
    assert oracle.quantize(b, "i8").bitwise_equal(oracle.quantize(b.astype(np.float32), "i8"))
    assert oracle.quantize(list(x), "f8E4M3FN").bitwise_equal(oracle.quantize(x, "f8E4M3FN"))


# ----------------------------------------------------------------------------- validation


def test_quantize_validation_messages():
    x = np.zeros((2, 30), np.float32)
    with pytest.raises(
        ValueError, match="x: blocked axis 1 has size 30, not a multiple of block_size 32"
    ):
        oracle.quantize(x)
    with pytest.raises(ValueError, match="x: MX quantization needs rank >= 1"):
        oracle.quantize(np.float32(1.0))
    with pytest.raises(TypeError, match="x: expected a float32 array.*int32"):
        oracle.quantize(np.zeros(32, np.int32))
    with pytest.raises(ValueError, match="element: unknown MX element format 'fp8'"):
        oracle.quantize(np.zeros(32, np.float32), "fp8")
    with pytest.raises(ValueError, match="axis: 2 is out of range for an array of rank 2"):
        oracle.quantize(x, block_size=2, axis=2)
    with pytest.raises(TypeError, match="axis: expected an int"):
        oracle.quantize(x, block_size=2, axis=1.0)
    with pytest.raises(ValueError, match="block_size: must be positive, got 0"):
        oracle.quantize(x, block_size=0)
    with pytest.raises(TypeError, match="block_size: expected a positive int"):
        oracle.quantize(x, block_size=True)
    with pytest.raises(TypeError, match="a: expected an MXArray"):
        oracle.dequantize(x)
    with pytest.raises(ValueError, match="shape: blocked axis 0 has size 5"):
        scale_shape((5, 4), 2, 0)
    assert scale_shape((6, 4), 2, 0) == (3, 4)
    assert scale_shape([64], 32, -1) == (2,)


def test_mxarray_validation():
    codes = np.zeros((2, 64), ml_dtypes.float8_e4m3fn)
    scales = np.zeros((2, 2), SCALE_DTYPE)
    a = MXArray(codes, scales, "f8E4M3FN", 32, -1)
    assert a.axis == 1 and a.shape == (2, 64) and a.scale_shape == (2, 2)
    assert a.format is ELEMENT_FORMATS["f8E4M3FN"]
    # raw uint8 buffers are reinterpreted
    b = MXArray(np.zeros((2, 64), np.uint8), np.zeros((2, 2), np.uint8), "f8E4M3FN", 32, 1)
    assert b.codes.dtype == codes.dtype and b.scales.dtype == SCALE_DTYPE and b.bitwise_equal(a)
    with pytest.raises(ValueError, match=r"scales: expected shape \(2, 2\)"):
        MXArray(codes, np.zeros((2, 1), SCALE_DTYPE), "f8E4M3FN", 32)
    with pytest.raises(TypeError, match="scales: expected dtype"):
        MXArray(codes, np.zeros((2, 2), np.float32), "f8E4M3FN", 32)
    with pytest.raises(TypeError, match="codes: expected dtype int8 for i8"):
        MXArray(codes, scales, "i8", 32)
    with pytest.raises(
        ValueError, match="codes: blocked axis 1 has size 64, not a multiple of block_size 48"
    ):
        MXArray(codes, scales, "f8E4M3FN", 48)
    with pytest.raises(ValueError, match="codes: f4E2M1FN codes must fit in the low 4 bits"):
        MXArray(np.full(32, 0x10, np.uint8), np.zeros(1, np.uint8), "f4E2M1FN", 32)
    assert not a.bitwise_equal(MXArray(codes, np.zeros((2, 4), SCALE_DTYPE), "f8E4M3FN", 16))
    assert not a.bitwise_equal(MXArray(codes, np.ones((2, 2), SCALE_DTYPE), "f8E4M3FN", 32))


def test_dequantize_overflow_and_subnormal_results():
    # a (non-canonical) scale 2^127 times 448 overflows f32 -> Inf, as an f32 multiply would
    a = MXArray(
        np.array([448.0, -1.0], ml_dtypes.float8_e4m3fn),
        np.array([254, 254], np.uint8),
        "f8E4M3FN",
        1,
    )
    d = oracle.dequantize(a)
    assert np.isposinf(d[0]) and d[1] == -(2.0**127)
    # smallest E4M3 subnormal times 2^-127 = 2^-136, an f32 subnormal, kept exactly
    a = MXArray(
        np.array([2.0**-9], ml_dtypes.float8_e4m3fn), np.array([0], np.uint8), "f8E4M3FN", 1
    )
    assert oracle.dequantize(a)[0] == np.float32(2.0**-136) and oracle.dequantize(a)[0] != 0


def test_round_to_element_validation():
    with pytest.raises(ValueError, match="p: scaled values must be finite"):
        round_to_element(np.array([np.nan]), "f8E4M3FN")
    with pytest.raises(TypeError, match="p: expected float32 or float64"):
        round_to_element(np.array([1], np.int32), "f8E4M3FN")
