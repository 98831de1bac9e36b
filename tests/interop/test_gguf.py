"""GGUF (ggml MXFP4) interop, checked against the oracle and against gguf's own decoder.

* ggml's value table and its "half" E8M0 decode equal OCP E2M1 codes times E8M0
  scales, for all 16 codes x a sweep of scale codes (bit for bit, but for the sign
  of zero of code 8, and for scale 255 which is rejected);
* a GGUF file written with the gguf package and read back is bit-identical to
  quantize() of the same f32 data, and gguf's decoder gives dequantize()'s values;
* ggml's reference quantizer differs from OCP's only in -0 codes and in ties;
* the transposed right-hand side of a weight, and every rejected input.
"""

import ml_dtypes
import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.interop import transpose, weight_to_rhs
from mlir_mx.interop.gguf import (
    GGML_KVALUES,
    ggml_e8m0_half,
    mxfp4_from_ggml,
    mxfp4_to_ggml,
    read_gguf,
    write_gguf,
)
from mlir_mx.numerics import MXArray, decode_elements, decode_scales

gguf = pytest.importorskip("gguf", reason="GGUF interop needs the gguf package (mlir-mx[gguf])")
from gguf import quants  # noqa: E402

MXFP4 = gguf.GGMLQuantizationType.MXFP4
ALL_CODES = np.arange(16, dtype=np.uint8)
SCALE_SWEEP = [0, 1, 2, 3, 64, 120, 126, 127, 128, 129, 200, 250, 252, 253, 254]


def realistic_weight(shape, seed):
    """Normal(0, 0.02) weights with 0.2% outliers at 10-50x, as in LLM linear layers."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
    outliers = rng.random(shape) < 0.002
    w[outliers] *= rng.uniform(10, 50, size=int(outliers.sum())).astype(np.float32)
    return w


def f32_bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


# ------------------------------------------------------------------ value tables


def test_kvalues_are_twice_the_e2m1_values():
    e2m1 = decode_elements(ALL_CODES.view(ml_dtypes.float4_e2m1fn), "f4E2M1FN")
    assert np.array_equal(GGML_KVALUES.astype(np.float64), 2 * e2m1)  # -0 == 0
    assert np.array_equal(GGML_KVALUES, np.array(quants.MXFP4.kvalues, np.int8))


def test_half_scale_is_half_the_e8m0_value():
    e = np.arange(256, dtype=np.uint8)
    half = ggml_e8m0_half(e)
    assert np.array_equal(f32_bits(half), f32_bits(quants.MXFP4.e8m0_to_fp32_half(e)))
    ocp = decode_scales(e[:255].view(ml_dtypes.float8_e8m0fnu))
    assert np.array_equal(2.0 * half[:255].astype(np.float64), ocp)  # exact, 2**-127 included
    assert half[0] == np.float32(2.0**-128) and half[1] == np.float32(2.0**-127)
    assert (
        half[255] == np.float32(2.0**127)
        and np.isnan(decode_scales(e[255:].view(ml_dtypes.float8_e8m0fnu)))[0]
    )


def all_codes_array(scale_codes):
    """One 32-block per scale code, each holding all 16 codes twice (in two orders)."""
    rows = np.concatenate([ALL_CODES, ALL_CODES[::-1]])
    codes = np.tile(rows, (len(scale_codes), 1))
    scales = np.array(scale_codes, np.uint8).reshape(-1, 1)
    return MXArray(codes, scales, "f4E2M1FN", 32, axis=-1)


def test_every_code_times_every_scale_decodes_like_ggml():
    a = all_codes_array(SCALE_SWEEP)
    raw = mxfp4_to_ggml(a)
    assert raw.shape == (len(SCALE_SWEEP), 17)
    with np.errstate(over="ignore"):  # 12 * 2**126 overflows to Inf, as 6 * 2**127 does
        theirs = quants.dequantize(raw, MXFP4).reshape(a.shape)
    ours = oracle.dequantize(a)
    assert np.isinf(ours).any()
    assert np.array_equal(theirs, ours)
    # Bit for bit too, except that ggml decodes code 8 (-0) as +0.0.
    neg_zero = a.codes.view(np.uint8) == 8
    same = f32_bits(theirs) == f32_bits(ours)
    assert same[~neg_zero].all()
    assert (f32_bits(theirs)[neg_zero] == 0).all() and (
        f32_bits(ours)[neg_zero] == 0x80000000
    ).all()
    # The products are exact: the smallest magnitude is 0.5 * 2**-127, an f32 subnormal.
    assert ours[0, 1] == np.float32(2.0**-128)


# ------------------------------------------------------------------ block layout


def test_block_layout_scale_byte_then_split_half_nibbles():
    codes = (np.arange(32, dtype=np.uint8) * 7) % 16
    a = MXArray(codes.reshape(1, 32), np.array([[131]], np.uint8), "f4E2M1FN", 32)
    raw = mxfp4_to_ggml(a)[0]
    assert raw[0] == 131
    for j in range(16):
        assert raw[1 + j] == codes[j] | (codes[j + 16] << 4)
    assert mxfp4_from_ggml(raw, (1, 32)).bitwise_equal(a)


@pytest.mark.parametrize("shape", [(32,), (3, 64), (2, 4, 96)])
def test_raw_conversion_round_trips(shape):
    q = oracle.quantize(realistic_weight(shape, 1), "f4E2M1FN", 32, axis=-1)
    raw = mxfp4_to_ggml(q)
    assert raw.shape == shape[:-1] + (shape[-1] // 32 * 17,)
    back = mxfp4_from_ggml(raw, shape)
    assert back.bitwise_equal(q)
    assert back.codes.flags.c_contiguous and back.scales.flags.c_contiguous


# ------------------------------------------------------------------ GGUF files


def test_gguf_file_round_trip_is_bit_exact(tmp_path):
    xs = {
        "blk.0.ffn_up.weight": realistic_weight((96, 256), 2),  # (n_out, n_in)
        "blk.0.ffn_gate_exps.weight": realistic_weight((2, 16, 64), 3),  # MoE experts
        "vec": realistic_weight((64,), 4),
        "one_block": realistic_weight((32,), 5),
    }
    qs = {k: oracle.quantize(x, "f4E2M1FN", 32, axis=-1) for k, x in xs.items()}
    path = tmp_path / "w.gguf"
    write_gguf(
        path, qs, metadata={"mlir_mx.seed": 2, "mlir_mx.note": "test", "x.f": 0.5, "x.b": True}
    )

    back = read_gguf(path)
    assert list(back) == list(qs)
    for k in qs:
        assert back[k].bitwise_equal(qs[k]), k
        # new arrays: nothing points into the reader's memory map (which is closed)
        for held in (back[k].packed_codes(), back[k].scales):
            while held.base is not None:
                held = held.base
            assert isinstance(held, np.ndarray) and held.flags.owndata, k

    # The file as gguf itself sees it: MXFP4 tensors with ne = numpy shape reversed,
    # decoding (with ggml's tables) to the oracle's values.
    reader = gguf.GGUFReader(path)
    assert reader.fields["general.architecture"].contents() == "mlir-mx"
    assert reader.fields["mlir_mx.seed"].contents() == 2
    assert reader.fields["mlir_mx.note"].contents() == "test"
    for t in reader.tensors:
        assert t.tensor_type == MXFP4
        assert tuple(int(d) for d in t.shape) == tuple(reversed(xs[t.name].shape))
        decoded = quants.dequantize(t.data, MXFP4).reshape(xs[t.name].shape)
        assert np.array_equal(decoded, oracle.dequantize(qs[t.name]))


def test_read_selected_names_and_skip_other_types(tmp_path):
    path = tmp_path / "mixed.gguf"
    w = gguf.GGUFWriter(path, "test")
    q = oracle.quantize(realistic_weight((8, 64), 5), "f4E2M1FN", 32)
    w.add_tensor("norm.weight", np.ones(64, np.float32))
    w.add_tensor("proj.weight", mxfp4_to_ggml(q), raw_dtype=MXFP4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert list(read_gguf(path)) == ["proj.weight"]
    assert read_gguf(path, "proj.weight")["proj.weight"].bitwise_equal(q)
    with pytest.raises(ValueError, match=r"tensor 'norm.weight' is F32, not MXFP4"):
        read_gguf(path, ["norm.weight"])
    with pytest.raises(ValueError, match=r"no tensor 'nope' \(MXFP4 tensors: proj.weight\)"):
        read_gguf(path, ["nope"])


def test_ggml_reference_quantizer_differs_only_in_negative_zero():
    """gguf's (= ggml's) quantizer on realistic data: same scales, same codes but -0."""
    x = realistic_weight((64, 512), 6)
    theirs = quants.quantize(x, MXFP4).reshape(-1, 17)
    ours = mxfp4_to_ggml(oracle.quantize(x, "f4E2M1FN", 32)).reshape(-1, 17)
    assert np.array_equal(theirs[:, 0], ours[:, 0])
    t = np.concatenate([theirs[:, 1:] & 15, theirs[:, 1:] >> 4], axis=1)
    o = np.concatenate([ours[:, 1:] & 15, ours[:, 1:] >> 4], axis=1)
    differ = t != o
    assert differ.any()  # small negative values: OCP keeps -0, ggml writes +0
    assert (o[differ] == 8).all() and (t[differ] == 0).all()


def test_ggml_rounds_ties_to_the_smaller_magnitude():
    """OCP rounds ties to even; ggml's first-minimum search picks the smaller magnitude."""
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, -3.5]
    x = np.zeros((1, 32), np.float32)
    x[0, : len(ties)] = ties
    x[0, 31] = 4.0  # amax 4: scale 2**0, the tie points above are exact halfway values
    ours = oracle.quantize(x, "f4E2M1FN", 32)
    theirs = mxfp4_from_ggml(quants.quantize(x, MXFP4), x.shape)
    assert np.array_equal(ours.scales.view(np.uint8), theirs.scales.view(np.uint8))
    got_ours = ours.codes.astype(np.float32)[0, : len(ties)].tolist()
    got_theirs = theirs.codes.astype(np.float32)[0, : len(ties)].tolist()
    assert got_ours == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0, -4.0]
    assert got_theirs == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.5, -3.0]


# ------------------------------------------------------------------ matmul layout


def test_weight_to_rhs_is_the_transposed_oracle(tmp_path):
    x = realistic_weight((48, 128), 7)  # W: (n_out, n_in)
    path = tmp_path / "w.gguf"
    write_gguf(path, {"w": oracle.quantize(x, "f4E2M1FN", 32)})
    w = read_gguf(path)["w"]
    b = weight_to_rhs(w)
    assert b.shape == (128, 48) and b.axis == 0 and b.scale_shape == (4, 48)
    assert b.bitwise_equal(oracle.quantize(x.T, "f4E2M1FN", 32, axis=0))
    assert np.array_equal(oracle.dequantize(b), oracle.dequantize(w).T)
    assert not np.shares_memory(b.codes, w.codes)  # the one copy
    assert transpose(b).bitwise_equal(w)


def test_weight_to_rhs_rejects_other_layouts():
    q = oracle.quantize(realistic_weight((64, 32), 8), "f4E2M1FN", 32, axis=0)
    with pytest.raises(
        ValueError,
        match=r"blocked along n_in \(axis 1\), got shape \(64, 32\) blocked along axis 0",
    ):
        weight_to_rhs(q)
    with pytest.raises(ValueError, match="2-D"):
        transpose(oracle.quantize(realistic_weight((64,), 8), "f4E2M1FN", 32))
    with pytest.raises(TypeError, match="expected an MXArray"):
        weight_to_rhs(np.zeros((2, 32)))


# ------------------------------------------------------------------ rejected input


def test_nan_scales_are_rejected_both_ways():
    x = realistic_weight((2, 64), 9)
    x[1, 40] = np.nan
    q = oracle.quantize(x, "f4E2M1FN", 32)
    with pytest.raises(
        ValueError, match=r"1 block\(s\) have scale byte 255 \(first at block index \(1, 1\)\)"
    ):
        mxfp4_to_ggml(q)
    raw = mxfp4_to_ggml(oracle.quantize(realistic_weight((2, 64), 9), "f4E2M1FN", 32))
    raw[0, 17] = 255
    with pytest.raises(ValueError, match="ggml as 2\\*\\*127"):
        mxfp4_from_ggml(raw, (2, 64))


def test_layouts_ggml_cannot_hold_are_rejected():
    x = realistic_weight((64, 64), 10)
    for q, what in [
        (oracle.quantize(x, "f8E4M3FN", 32), "got f8E4M3FN"),
        (oracle.quantize(x, "f4E2M1FN", 16), "blocks of 16"),
        (oracle.quantize(x, "f4E2M1FN", 32, axis=0), "along axis 0"),
    ]:
        with pytest.raises(ValueError, match=what):
            mxfp4_to_ggml(q)
    with pytest.raises(TypeError, match="expected an MXArray"):
        mxfp4_to_ggml(x)


def test_bad_raw_data_is_rejected():
    raw = np.zeros((2, 34), np.uint8)
    with pytest.raises(
        ValueError, match=r"68 bytes do not hold the 6 MXFP4 blocks of shape \(2, 96\)"
    ):
        mxfp4_from_ggml(raw, (2, 96))
    with pytest.raises(ValueError, match="multiple of 32"):
        mxfp4_from_ggml(raw, (2, 48))
    with pytest.raises(TypeError, match="raw uint8 bytes"):
        mxfp4_from_ggml(raw.astype(np.int16), (2, 64))


def test_bad_files_and_arguments(tmp_path):
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"this is not a gguf file at all")
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        read_gguf(bad)
    with pytest.raises(FileNotFoundError):
        read_gguf(tmp_path / "missing.gguf")
    q = oracle.quantize(realistic_weight((2, 64), 11), "f4E2M1FN", 32)
    with pytest.raises(ValueError, match="non-empty mapping"):
        write_gguf(tmp_path / "e.gguf", {})
    e8 = oracle.quantize(realistic_weight((2, 64), 11), "f8E4M3FN")
    with pytest.raises(ValueError, match=r"tensors\['w'\]: a: ggml MXFP4"):
        write_gguf(tmp_path / "e.gguf", {"w": e8})
    with pytest.raises(TypeError, match="'k' has a list"):
        write_gguf(tmp_path / "m.gguf", {"w": q}, metadata={"k": [1]})
    assert not (tmp_path / "e.gguf").exists()
