"""Packed storage of sub-byte codes (mlir_mx.numerics.packing).

* the bit layout, pinned on hand-computed bytes and on an independent bit-stream
  reference (element k at bits [bits*k, bits*k + bits) of the little-endian stream);
* unpack(pack(c)) == c bit for bit for every code at every position of a group, and
  for random shapes of rank 1..3 with odd and even numbers of groups (hypothesis,
  derandomized);
* lengths that are not a multiple of the group size are rejected with ValueError.
"""

import ml_dtypes
import numpy as np
import pytest
from format_cases import SUB_BYTE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mlir_mx import oracle
from mlir_mx.numerics import (
    ELEMENT_FORMATS,
    MXArray,
    element_format,
    is_packed_storage,
    pack_codes,
    packed_shape,
    packing_group,
    unpack_codes,
    unpacked_shape,
)

PROPS = settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def bitstream_reference(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack one row bit by bit: element k's bit b goes to stream bit bits*k + b."""
    nbits = codes.size * bits
    out = np.zeros(nbits // 8, np.uint8)
    for k, c in enumerate(codes.tolist()):
        for b in range(bits):
            if (c >> b) & 1:
                pos = bits * k + b
                out[pos // 8] |= 1 << (pos % 8)
    return out


# ------------------------------------------------------------------ the layout, pinned


def test_fp4_even_element_in_low_nibble():
    codes = np.array([0x1, 0x2, 0x3, 0xF, 0x8, 0x0], np.uint8)
    assert pack_codes(codes, "f4E2M1FN").tolist() == [0x21, 0xF3, 0x08]


def test_fp6_little_endian_24_bit_words():
    # w = 0x01 | 0x02 << 6 | 0x03 << 12 | 0x3f << 18 = 0xFC3081
    codes = np.array([0x01, 0x02, 0x03, 0x3F], np.uint8)
    assert pack_codes(codes, "f6E2M3FN").tolist() == [0x81, 0x30, 0xFC]
    assert pack_codes(codes, "f6E3M2FN").tolist() == [0x81, 0x30, 0xFC]


@pytest.mark.parametrize("name", SUB_BYTE)
def test_layout_equals_bitstream_reference(name):
    fmt = element_format(name)
    rng = np.random.default_rng(7)
    codes = rng.integers(0, fmt.num_codes, size=48, dtype=np.uint8)
    assert np.array_equal(pack_codes(codes, name), bitstream_reference(codes, fmt.bits))


def test_codes_are_ml_dtypes_values():
    """Packing works on the ml_dtypes codes of quantize(): 1.0 is E2M1 code 2, -6.0 code 15."""
    x = np.array([[1.0, -6.0] + [0.0] * 30], np.float32)
    q = oracle.quantize(x, "f4E2M1FN", 32)
    assert q.scales.view(np.uint8)[0, 0] == 127
    assert pack_codes(q.codes, "f4E2M1FN")[0, 0] == 0xF2
    back = unpack_codes(pack_codes(q.codes, "f4E2M1FN"), "f4E2M1FN")
    assert back.dtype == np.dtype(ml_dtypes.float4_e2m1fn)
    assert np.array_equal(back.astype(np.float32), q.codes.astype(np.float32))


# ------------------------------------------------------------------ exact inverses


@pytest.mark.parametrize("name", SUB_BYTE)
def test_every_code_at_every_position(name):
    fmt = element_format(name)
    n, (group, _) = fmt.num_codes, packing_group(name)
    ramp = np.arange(n, dtype=np.uint8)
    # Column p runs through every code; the other columns hold other permutations.
    rows = np.stack([(ramp * (2 * p + 1) + p) % n for p in range(group)], axis=-1)
    for p in range(group):
        grid = np.roll(rows, p, axis=-1).astype(np.uint8)
        assert sorted(grid[:, p].tolist()) == list(range(n))
        codes = grid.view(fmt.dtype)
        packed = pack_codes(codes, name)
        assert packed.shape == packed_shape(codes.shape, name)
        back = unpack_codes(packed, name)
        assert back.dtype == fmt.dtype
        assert np.array_equal(back.view(np.uint8), grid)


@st.composite
def code_arrays(draw):
    name = draw(st.sampled_from(SUB_BYTE))
    fmt = element_format(name)
    group = packing_group(name)[0]
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    ngroups = draw(st.integers(1, 9))  # odd and even numbers of groups (and bytes)
    shape = tuple(lead) + (ngroups * group,)
    raw = draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, fmt.num_codes - 1)))
    return name, raw


@PROPS
@given(code_arrays())
def test_unpack_pack_is_identity(case):
    name, raw = case
    fmt = element_format(name)
    packed = pack_codes(raw.view(fmt.dtype), name)
    group, nbytes = packing_group(name)
    assert packed.dtype == np.uint8 and packed.flags.c_contiguous
    assert packed.shape == raw.shape[:-1] + (raw.shape[-1] // group * nbytes,)
    assert unpacked_shape(packed.shape, name) == raw.shape
    assert np.array_equal(unpack_codes(packed, name).view(np.uint8), raw)
    # raw uint8 code bytes pack the same way as the typed codes
    assert np.array_equal(pack_codes(raw, name), packed)


@PROPS
@given(hnp.arrays(np.uint8, st.tuples(st.integers(1, 3), st.integers(1, 8))))
def test_pack_unpack_is_identity_on_bytes(packed):
    """Every FP4 byte string is a valid packing, so the other direction is exact too."""
    assert np.array_equal(pack_codes(unpack_codes(packed, "f4E2M1FN"), "f4E2M1FN"), packed)


def test_every_byte_string_round_trips():
    # A group's bytes hold exactly its codes (FP6: 3 bytes = four 6-bit codes,
    # FP4: 1 byte = two nibbles): every byte string is valid.
    rng = np.random.default_rng(3)
    packed = rng.integers(0, 256, size=(64, 12), dtype=np.uint8)
    for name in SUB_BYTE:
        codes, nbytes = ELEMENT_FORMATS[name].group
        assert codes * ELEMENT_FORMATS[name].bits == 8 * nbytes
        assert np.array_equal(pack_codes(unpack_codes(packed, name), name), packed)


def test_non_contiguous_input_is_packed_by_logical_order():
    raw = np.arange(32, dtype=np.uint8).reshape(4, 8) % 16
    t = raw.T  # (8, 4), not C-contiguous
    assert np.array_equal(
        pack_codes(t, "f4E2M1FN"), pack_codes(np.ascontiguousarray(t), "f4E2M1FN")
    )


@pytest.mark.parametrize("name", [n for n in ELEMENT_FORMATS if n not in SUB_BYTE])
def test_eight_bit_formats_are_stored_as_is(name):
    fmt = ELEMENT_FORMATS[name]
    raw = np.arange(-3, 5, dtype=np.int8) if fmt.is_int else np.arange(8, dtype=np.uint8)
    codes = raw.view(fmt.dtype)
    packed = pack_codes(codes, name)
    assert packed.dtype == np.uint8 and np.array_equal(packed, raw.view(np.uint8))
    assert np.array_equal(unpack_codes(packed, name).view(np.uint8), raw.view(np.uint8))
    assert packed.base is None or not np.shares_memory(packed, codes)


# ------------------------------------------------------------------ rejected input


@pytest.mark.parametrize(
    "name,length,group",
    [
        (n, length, g)
        for n in SUB_BYTE
        for g in [ELEMENT_FORMATS[n].group[0]]
        for length in (1, g + 1, 8 * g + 1)
    ],
)
def test_axis_length_not_multiple_of_group_is_rejected(name, length, group):
    codes = np.zeros((2, length), np.uint8)
    with pytest.raises(
        ValueError, match=rf"packed \(last\) axis has length {length}, not a multiple of {group}"
    ):
        pack_codes(codes, name)
    with pytest.raises(ValueError, match="not a multiple"):
        packed_shape((2, length), name)


def test_packed_byte_count_not_multiple_of_three_is_rejected_for_fp6():
    with pytest.raises(
        ValueError,
        match=r"last axis has 4 bytes, not a multiple of 3: f6E2M3FN packs 4 codes into 3 bytes",
    ):
        unpack_codes(np.zeros((1, 4), np.uint8), "f6E2M3FN")


def test_codes_with_high_bits_set_are_rejected():
    with pytest.raises(ValueError, match="must fit in the low 4 bits"):
        pack_codes(np.array([0x10, 0], np.uint8), "f4E2M1FN")
    with pytest.raises(ValueError, match="must fit in the low 6 bits"):
        pack_codes(np.array([0x40, 0, 0, 0], np.uint8), "f6E3M2FN")


def test_bad_dtypes_and_ranks():
    with pytest.raises(TypeError, match="expected dtype float4_e2m1fn"):
        pack_codes(np.zeros(2, np.float32), "f4E2M1FN")
    with pytest.raises(TypeError, match="expected a uint8 array"):
        unpack_codes(np.zeros(2, np.int8), "f4E2M1FN")
    with pytest.raises(ValueError, match="rank >= 1"):
        pack_codes(np.uint8(1), "f4E2M1FN")
    with pytest.raises(ValueError, match="rank >= 1"):
        unpack_codes(np.uint8(1), "f4E2M1FN")
    with pytest.raises(ValueError, match="unknown MX element format"):
        pack_codes(np.zeros(2, np.uint8), "f4")


# ------------------------------------------------------------------ MXArray storage

STORAGE_CASES = [
    # (element, shape, axis, packed?)
    ("f4E2M1FN", (4, 64), 1, True),
    ("f4E2M1FN", (64, 6), 0, True),
    ("f4E2M1FN", (64, 5), 0, False),  # odd last axis: one code per byte
    ("f6E2M3FN", (2, 96), 1, True),
    ("f6E3M2FN", (64, 8), 0, True),
    ("f6E2M3FN", (64, 3), 0, False),  # 3 bytes could be 4 packed codes: the scales decide
    ("f8E4M3FN", (4, 64), 1, False),
    ("i8", (4, 64), 1, False),
]


@pytest.mark.parametrize("element, shape, axis, packed", STORAGE_CASES)
def test_mxarray_storage_round_trip(element, shape, axis, packed):
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    a = oracle.quantize(x, element, 32, axis=axis)
    assert a.is_packed == packed == is_packed_storage(shape, element)
    stored = a.packed_codes()
    assert stored.dtype == np.uint8
    if packed:
        assert stored.shape == packed_shape(shape, element)
        np.testing.assert_array_equal(stored, pack_codes(a.codes, element))
    else:
        assert stored.shape == shape
        np.testing.assert_array_equal(stored, a.codes.view(np.uint8))
    assert a.nbytes == stored.size + a.scales.size
    b = MXArray.from_packed(stored, a.scales, element, 32, axis)
    assert b.bitwise_equal(a)


def test_mxfp4_stores_4_25_bits_per_element():
    a = oracle.quantize(np.ones((8, 4096), np.float32), "f4E2M1FN", 32)
    assert a.nbytes * 8 / a.codes.size == 4.25


def test_from_packed_rejects_wrong_bytes():
    a = oracle.quantize(np.ones((4, 64), np.float32), "f4E2M1FN", 32)
    with pytest.raises(ValueError, match=r"expected shape \(4, 32\)"):
        MXArray.from_packed(np.zeros((4, 30), np.uint8), a.scales, "f4E2M1FN", 32)
    with pytest.raises(TypeError, match="uint8"):
        MXArray.from_packed(np.zeros((4, 32), np.int16), a.scales, "f4E2M1FN", 32)
    with pytest.raises(ValueError, match="rank"):
        MXArray.from_packed(np.zeros((128,), np.uint8), a.scales, "f4E2M1FN", 32)


def test_packed_codes_are_the_stored_bytes():
    a = oracle.quantize(np.ones((4, 64), np.float32), "f4E2M1FN", 32)
    assert a.packed_codes() is a.packed_codes()  # held, not packed on each call
    raw = a.packed_codes().copy()
    b = MXArray.from_packed(raw, a.scales, "f4E2M1FN", 32, copy=False)
    assert b.held_buffers()[0] is raw  # the given bytes, taken over: not a re-pack
    assert np.shares_memory(b.packed_codes(), raw) and not b.packed_codes().flags.writeable
    c = MXArray.from_packed(raw, a.scales, "f4E2M1FN", 32)  # default: a writeable input is copied
    assert not np.shares_memory(c.packed_codes(), raw) and c.bitwise_equal(b)
