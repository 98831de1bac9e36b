"""mx-expand-narrow-floats, executed: bit-exact against ml_dtypes.

Every code of every narrow format is widened, and an f32 sweep (all
representable values, every rounding tie and its neighbours, overflow
boundaries, narrow subnormals, +-0, +-Inf, NaN, f32 subnormals, random bits)
is narrowed, through the full lower-to-llvm pipeline and the JIT.
"""

from __future__ import annotations

import ml_dtypes as md
import numpy as np
import pytest
from mlir import ir

from mlir_mx.execution import Runner
from mlir_mx.numerics.formats import ELEMENT_FORMATS, SCALE_BITS, SCALE_DTYPE, SCALE_TYPE
from mlir_mx.pipelines import load_pipeline

#: Every narrow float of the format table (the float element formats and the
#: E8M0 scale): its numpy dtype and its width in bits.
FORMATS = {f.name: f.dtype.type for f in ELEMENT_FORMATS.values() if not f.is_int}
FORMATS[SCALE_TYPE] = SCALE_DTYPE.type
WIDTH = {f.name: f.bits for f in ELEMENT_FORMATS.values() if not f.is_int}
WIDTH[SCALE_TYPE] = SCALE_BITS

_GENERIC = """
#id = affine_map<(d0) -> (d0)>
func.func @ext(%x: tensor<?x{NT}>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x{NT}>
  %e = tensor.empty(%n) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<?x{NT}>) outs(%e : tensor<?xf32>) {
  ^bb0(%a: {NT}, %b: f32):
    %c = arith.extf %a : {NT} to f32
    linalg.yield %c : f32
  } -> tensor<?xf32>
  return %r : tensor<?xf32>
}
func.func @trunc(%x: tensor<?xf32>) -> tensor<?x{NT}> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?x{NT}>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<?xf32>) outs(%e : tensor<?x{NT}>) {
  ^bb0(%a: f32, %b: {NT}):
    %c = arith.truncf %a : f32 to {NT}
    linalg.yield %c : {NT}
  } -> tensor<?x{NT}>
  return %r : tensor<?x{NT}>
}
func.func @sext(%x: tensor<?x{NT}>, %s: tensor<?xf8E8M0FNU>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x{NT}>
  %e = tensor.empty(%n) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %s : tensor<?x{NT}>, tensor<?xf8E8M0FNU>) outs(%e : tensor<?xf32>) {
  ^bb0(%a: {NT}, %sc: f8E8M0FNU, %b: f32):
    %c = arith.scaling_extf %a, %sc : {NT}, f8E8M0FNU to f32
    linalg.yield %c : f32
  } -> tensor<?xf32>
  return %r : tensor<?xf32>
}
func.func @strunc(%x: tensor<?xf32>, %s: tensor<?xf8E8M0FNU>) -> tensor<?x{NT}> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?x{NT}>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %s : tensor<?xf32>, tensor<?xf8E8M0FNU>) outs(%e : tensor<?x{NT}>) {
  ^bb0(%a: f32, %sc: f8E8M0FNU, %b: {NT}):
    %c = arith.scaling_truncf %a, %sc : f32, f8E8M0FNU to {NT}
    linalg.yield %c : {NT}
  } -> tensor<?x{NT}>
  return %r : tensor<?x{NT}>
}
"""


def _pipeline(f16_widening: bool):
    return load_pipeline("lower-to-llvm").with_options(
        "mx-expand-narrow-floats", f16_widening=f16_widening
    )


_RUNNERS: dict = {}


def runner(nt: str, f16_widening: bool = True) -> Runner:
    key = (nt, f16_widening)
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(_GENERIC.replace("{NT}", nt), _pipeline(f16_widening))
    return _RUNNERS[key]


def all_codes(nt: str) -> np.ndarray:
    return np.arange(1 << WIDTH[nt], dtype=np.uint8).view(FORMATS[nt])


def f32(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def assert_f32_equal(got: np.ndarray, want: np.ndarray, what: str):
    """Bit-for-bit, except that any NaN equals any NaN."""
    g, w = got.view(np.uint32), want.view(np.uint32)
    bad = (g != w) & ~(np.isnan(got) & np.isnan(want))
    assert not bad.any(), (
        f"{what}: {bad.sum()} mismatches, first inputs at {np.flatnonzero(bad)[:8]}: got {[hex(v) for v in g[bad][:8]]} want {[hex(v) for v in w[bad][:8]]}"
    )


def assert_codes_equal(got: np.ndarray, want: np.ndarray, inputs: np.ndarray, what: str):
    g, w = got.view(np.uint8), want.view(np.uint8)
    bad = g != w
    assert not bad.any(), (
        f"{what}: {bad.sum()} mismatches: inputs {[hex(v) for v in inputs.view(np.uint32)[bad][:8]]} got {[hex(v) for v in g[bad][:8]]} want {[hex(v) for v in w[bad][:8]]}"
    )


def sweep(nt: str) -> np.ndarray:
    """f32 inputs hitting every representable value, tie and boundary of ``nt``."""
    rng = np.random.default_rng(1234)
    vals = all_codes(nt).astype(np.float64)
    fin = np.unique(vals[np.isfinite(vals)])
    mids = (fin[:-1] + fin[1:]) / 2
    top = fin[-1]
    step = top - fin[-2] if nt != SCALE_TYPE else top
    extra = [top + step / 2, top + step, 2 * top, 1e30, 3.4e38, 0.0, -0.0, np.inf, -np.inf]
    with np.errstate(over="ignore"):
        base = np.concatenate([fin, mids, extra, [fin[fin > 0].min() / 2]]).astype(np.float32)
    base = np.concatenate([base, -base])
    neigh = np.concatenate(
        [np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))]
    )
    specials = f32(
        [
            0x7FC00000,
            0xFFC00000,
            0x7F800001,
            0xFFFFFFFF,
            1,
            0x00400000,
            0x00400001,
            0x003FFFFF,
            0x007FFFFF,
            0x00600000,
            0x7F7FFFFF,
            0x7F400000,
            0x7F3FFFFF,
        ]
    )
    rand_bits = f32(rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32))
    scale = float(np.abs(fin).max())
    rand_vals = (rng.standard_normal(2000) * scale / 3).astype(np.float32)
    if nt == SCALE_TYPE:
        k = np.arange(-150, 128, dtype=np.float64)
        rand_vals = np.concatenate(
            [rand_vals, (2.0**k * 1.5).astype(np.float32), (2.0**k).astype(np.float32)]
        )
    return np.concatenate([base, neigh, specials, rand_bits, rand_vals]).astype(np.float32)


@pytest.mark.parametrize("nt", list(FORMATS))
def test_extf_all_codes(nt):
    codes = all_codes(nt)
    got = runner(nt).ext(codes)
    assert_f32_equal(got, codes.astype(np.float32), f"extf {nt}")


@pytest.mark.parametrize("nt", [n for n in FORMATS if n != SCALE_TYPE])
def test_extf_all_codes_integer_path(nt):
    codes = all_codes(nt)
    got = runner(nt, f16_widening=False).ext(codes)
    assert_f32_equal(got, codes.astype(np.float32), f"extf {nt} (f16-widening=0)")


def test_extf_e8m0_code0_is_2_pow_minus_127():
    got = runner("f8E8M0FNU").ext(np.array([0, 255, 127], np.uint8).view(md.float8_e8m0fnu))
    assert got.view(np.uint32)[0] == 0x00400000
    assert np.isnan(got[1]) and got[2] == 1.0


def e8m0_nearest(x: np.ndarray) -> np.ndarray:
    """f32 -> E8M0 codes, the rule of docs/numerics.md written out in float64: the
    nearest power of two, ties away from zero, never below 2^-127 (code 0); 0,
    negatives, Inf, NaN and results above 2^127 give the NaN code 255."""
    with np.errstate(invalid="ignore"):
        v = x.astype(np.float64)
        ok = np.isfinite(v) & (v > 0)
    f, e = np.frexp(np.where(ok, v, 1.0))  # v = f * 2^e, f in [0.5, 1)
    code = (e - 1 + 127) + (2 * f >= 1.5)
    code = np.maximum(code, 0)
    return np.where(ok & (code <= 254), code, 255).astype(np.uint8).view(md.float8_e8m0fnu)


def _ml_dtypes_at_least(major: int, minor: int) -> bool:
    return tuple(int(p) for p in md.__version__.split(".")[:2]) >= (major, minor)


@pytest.mark.parametrize("nt", list(FORMATS))
def test_truncf_sweep(nt):
    x = sweep(nt)
    got = runner(nt).trunc(x)
    with np.errstate(all="ignore"):
        ml = x.astype(FORMATS[nt])
    if nt == SCALE_TYPE:
        # The rule itself, independent of the ml_dtypes version (0.5/0.6 rounded
        # every f32 subnormal above 2^-127 up to 2^-126; 0.7 follows the rule).
        assert_codes_equal(got, e8m0_nearest(x), x, "truncf f32 -> E8M0 (the rule)")
        if not _ml_dtypes_at_least(0, 7):
            return
    assert_codes_equal(got, ml, x, f"truncf f32 -> {nt} (ml_dtypes {md.__version__})")


def test_truncf_e8m0_f32_subnormals():
    # The nearest of 2^-127 (code 0) and 2^-126 (code 1); the tie 1.5 * 2^-127 goes up.
    bits = [0x1, 0x3FFFFF, 0x400000, 0x400001, 0x5FFFFF, 0x600000, 0x7FFFFF, 0x800000]
    got = runner("f8E8M0FNU").trunc(f32(bits)).view(np.uint8)
    assert list(got) == [0, 0, 0, 0, 0, 1, 1, 1]


def test_truncf_known_values():
    # RNE ties (upstream's f4 expansion rounds these up), E8M0 rounding.
    x = np.array([1.25, 2.5, 5.0, 0.25, 0.75, 7.0, np.nan], np.float32)
    got = runner("f4E2M1FN").trunc(x).astype(np.float32)
    np.testing.assert_array_equal(got[:6], [1.0, 2.0, 4.0, 0.0, 1.0, 6.0])
    assert got.view(np.uint32)[6] == 0x80000000  # +NaN -> -0.0, as ml_dtypes
    e = runner("f8E8M0FNU").trunc(np.array([1.5, 1.4, 3.0, 0.0, -1.0], np.float32))
    assert list(e.view(np.uint8)) == [128, 127, 129, 255, 255]
    o = runner("f8E4M3FN").trunc(np.array([464, 464.00003, -480], np.float32)).view(np.uint8)
    assert list(o) == [0x7E, 0x7F, 0xFF]


@pytest.mark.parametrize("nt", [n for n in FORMATS if n != SCALE_TYPE])
def test_scaling_ops(nt):
    rng = np.random.default_rng(7)
    codes = np.tile(all_codes(nt), 4)
    scales = rng.integers(100, 155, codes.size).astype(np.uint8).view(md.float8_e8m0fnu)
    got = runner(nt).sext(codes, scales)
    want = codes.astype(np.float32) * scales.astype(np.float32)
    assert_f32_equal(got, want, f"scaling_extf {nt}")
    x = (rng.standard_normal(codes.size) * 2.0 ** rng.integers(-10, 10, codes.size)).astype(
        np.float32
    )
    got = runner(nt).strunc(x, scales)
    with np.errstate(all="ignore"):
        want = (x / scales.astype(np.float32)).astype(FORMATS[nt])
    assert_codes_equal(got, want, x, f"scaling_truncf {nt}")


_VECTOR = """
func.func @vext(%x: memref<16xf8E4M3FN>, %y: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %a = vector.load %x[%c0] : memref<16xf8E4M3FN>, vector<16xf8E4M3FN>
  %a2 = vector.shape_cast %a : vector<16xf8E4M3FN> to vector<2x8xf8E4M3FN>
  %b2 = arith.extf %a2 : vector<2x8xf8E4M3FN> to vector<2x8xf32>
  %b = vector.shape_cast %b2 : vector<2x8xf32> to vector<16xf32>
  vector.store %b, %y[%c0] : memref<16xf32>, vector<16xf32>
  return
}
func.func @vtrunc(%x: memref<8xf32>, %y: memref<8xi8>, %z: memref<8xf8E8M0FNU>) {
  %c0 = arith.constant 0 : index
  %a = vector.load %x[%c0] : memref<8xf32>, vector<8xf32>
  %b = arith.truncf %a : vector<8xf32> to vector<8xf4E2M1FN>
  // An LLVM vector of i4 is bit-packed in memory, unlike memref<8xf4E2M1FN>
  // (one element per byte): store the codes widened to bytes.
  %bi = arith.bitcast %b : vector<8xf4E2M1FN> to vector<8xi4>
  %b8 = arith.extui %bi : vector<8xi4> to vector<8xi8>
  vector.store %b8, %y[%c0] : memref<8xi8>, vector<8xi8>
  %c = arith.truncf %a : vector<8xf32> to vector<8xf8E8M0FNU>
  vector.store %c, %z[%c0] : memref<8xf8E8M0FNU>, vector<8xf8E8M0FNU>
  return
}
"""


def test_vector_path():
    r = Runner(_VECTOR)
    for codes in np.split(all_codes("f8E4M3FN"), 16):
        y = np.zeros(16, np.float32)
        r.vext(codes, y)  # y is written in place
        assert_f32_equal(y, codes.astype(np.float32), "vector extf")
    x = np.array([1.25, -2.5, 5.0, 0.3, 1e9, -0.0, 3.0, 1.5], np.float32)
    y = np.zeros(8, np.int8)
    z = np.zeros(8, md.float8_e8m0fnu)
    r.vtrunc(x, y, z)
    assert_codes_equal(y, x.astype(md.float4_e2m1fn), x, "vector truncf f4")
    assert_codes_equal(z, x.astype(md.float8_e8m0fnu), x, "vector truncf e8m0")


def test_other_wide_types():
    # Scalar narrow floats cannot cross the Runner boundary: use memrefs.
    src = """
    func.func @h(%x: memref<4xf16>, %y: memref<4xf8E4M3FN>, %a: memref<4xf8E4M3FN>,
                 %b: memref<4xbf16>, %c: memref<4xf64>) {
      %c0 = arith.constant 0 : index
      %vx = vector.load %x[%c0] : memref<4xf16>, vector<4xf16>
      %vy = vector.load %y[%c0] : memref<4xf8E4M3FN>, vector<4xf8E4M3FN>
      %ra = arith.truncf %vx : vector<4xf16> to vector<4xf8E4M3FN>
      %rb = arith.extf %vy : vector<4xf8E4M3FN> to vector<4xbf16>
      %rc = arith.extf %vy : vector<4xf8E4M3FN> to vector<4xf64>
      vector.store %ra, %a[%c0] : memref<4xf8E4M3FN>, vector<4xf8E4M3FN>
      vector.store %rb, %b[%c0] : memref<4xbf16>, vector<4xbf16>
      vector.store %rc, %c[%c0] : memref<4xf64>, vector<4xf64>
      return
    }
    """
    r = Runner(src)
    x = np.array([1.0625, 1.0634765625, 464, -0.001], np.float16)
    y = np.array([0x01, 0x7E, 0x7F, 0xB9], np.uint8).view(md.float8_e4m3fn)
    a = np.zeros(4, md.float8_e4m3fn)
    b = np.zeros(4, md.bfloat16)
    c = np.zeros(4, np.float64)
    r.h(x, y, a, b, c)
    assert_codes_equal(a, x.astype(md.float8_e4m3fn), x.astype(np.float32), "f16 -> e4m3")
    np.testing.assert_array_equal(b.astype(np.float32)[[0, 1, 3]], y.astype(np.float32)[[0, 1, 3]])
    np.testing.assert_array_equal(c[[0, 1, 3]], y.astype(np.float64)[[0, 1, 3]])
    assert np.isnan(b[2]) and np.isnan(c[2])


def test_f64_truncation_is_rejected():
    from mlir_mx.passes.pipeline import build_pass_manager

    with ir.Context() as ctx:
        m = ir.Module.parse(
            "func.func @f(%x: f64) -> f8E4M3FN {\n"
            "  %a = arith.truncf %x : f64 to f8E4M3FN\n  return %a : f8E4M3FN\n}"
        )
        pm = build_pass_manager("mx-expand-narrow-floats", ctx)
        with pytest.raises(ir.MLIRError, match="round twice"):
            pm.run(m.operation)
