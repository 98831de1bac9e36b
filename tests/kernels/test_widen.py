"""Exact widening of codes and scales (``mlir_mx.kernels.common.widen``), every code.

Each decoder is compiled into a tiny kernel that widens every code of a
format (and every E8M0 scale code) and compared bit for bit with the oracle
(``decode_elements`` times the decoder's power of two).  Packed FP4/FP6
unpacking is checked against ``mlir_mx.numerics.unpack_codes``.  Both the
VBMI table path and the f16 path run when the machine has VBMI; otherwise the
f16 path only.  FP4's AVX2 path (``Decoder(shuf16=True)``: ``vpshufb``
tables of f16 high bytes for plain codes, of bf16 bytes for packed ones)
runs where the machine has AVX2 and F16C.
"""

from __future__ import annotations

import numpy as np
import pytest
from format_cases import SUB_BYTE
from mlir import ir
from mlir.dialects import func

from mlir_mx.execution import Runner
from mlir_mx.host import has_features
from mlir_mx.kernels.common.builder import KernelBuilder
from mlir_mx.kernels.common.widen import PAIR_ORDER, Decoder, decode_scale_tile, decode_scales
from mlir_mx.numerics import ELEMENT_FORMATS, decode_elements, pack_codes, unpack_codes
from mlir_mx.numerics import decode_scales as oracle_scales
from mlir_mx.pipelines import load_pipeline

FLOATS = tuple(n for n, f in ELEMENT_FORMATS.items() if not f.is_int)  # the table
PATHS = [False] + ([True] if has_features("avx512f", "avx512bw", "avx512vbmi") else [])
#: FP4's AVX2 path (pshufb + vcvtph2ps).
SHUF16 = has_features("avx2", "f16c")
FP4 = tuple(n for n, f in ELEMENT_FORMATS.items() if f.widening == "values")


def _module(n_in: int, body) -> str:
    """``@f(%in: memref<n_in x i8>, %out: memref<64 x f32|i8>)`` around ``body(kb, v)``."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.create()
        i8 = ir.IntegerType.get_signless(8)
        with ir.InsertionPoint(module.body):
            out_elem = body.out_elem()
            ftype = ir.FunctionType.get(
                [ir.MemRefType.get([n_in], i8), ir.MemRefType.get([64], out_elem)], []
            )
            fn = func.FuncOp("f", ftype)
            entry = fn.add_entry_block()
            with ir.InsertionPoint(entry):
                anchor = func.ReturnOp([])
                kb = KernelBuilder(ir.InsertionPoint(anchor))
                with ir.InsertionPoint(anchor):
                    v = kb.vload(entry.arguments[0], [0], n_in)
                    for i, w in enumerate(body(kb, v)):
                        width = ir.VectorType(w.type).shape[0]
                        kb.vstore(w, entry.arguments[1], [i * width])
        return str(module)


class _Decode:
    def __init__(self, dec):
        self.dec = dec

    def out_elem(self):
        return ir.F32Type.get()

    def __call__(self, kb, v):
        return self.dec.decode(kb, v)


class _Pairs(_Decode):
    def __call__(self, kb, v):
        return self.dec.decode_pairs(kb, v)


class _InOrder(_Decode):
    def __call__(self, kb, v):
        return self.dec.in_order(kb, self.dec.decode_pairs(kb, v))


class _Unpack(_Decode):
    def out_elem(self):
        return ir.IntegerType.get_signless(8)

    def __call__(self, kb, v):
        return [self.dec.unpack(kb, v)]


def _run(text: str, data: np.ndarray, out_dtype) -> np.ndarray:
    out = np.zeros(64, out_dtype)
    Runner(text, load_pipeline("memref-to-llvm")).f(data.view(np.int8), out)
    return out


#: (table, word_nan): the f16 path with its NaN test on the code byte or (as
#: without AVX-512) on the f16 word, and the VBMI table path where it runs.
_WIDENINGS = [(False, False), (False, True)] + [(True, False) for t in PATHS if t]


@pytest.mark.parametrize(
    "table,word_nan", _WIDENINGS, ids=lambda x: None if isinstance(x, bool) else str(x)
)
@pytest.mark.parametrize("element", FLOATS + ("i8",))
def test_every_code_widens_exactly(element, table, word_nan):
    fmt = ELEMENT_FORMATS[element]
    dec = Decoder(fmt, table=table and not fmt.is_int, word_nan=word_nan)
    text = _module(64, _Decode(dec))
    for start in range(0, fmt.num_codes, 64):
        raw = ((np.arange(64) + start) % fmt.num_codes).astype(np.uint8)
        got = _run(text, raw, np.float32)
        want = decode_elements(raw.view(fmt.dtype), fmt).astype(np.float32)  # exact values
        nan = np.isnan(want)  # any NaN encoding (payloads differ between paths)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def _check_values(got: np.ndarray, codes: np.ndarray, fmt) -> None:
    """``got`` (f32) holds the exact values of ``codes``, any NaN for a NaN code."""
    want = decode_elements(codes.view(fmt.dtype), fmt).astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.skipif(not SHUF16, reason="FP4's vpshufb path needs AVX2 and F16C")
@pytest.mark.parametrize("element", FP4)
def test_fp4_pshufb_path_widens_every_code_exactly(element):
    """Every FP4 code, plain (4 x 16 codes) and packed (32 bytes: each byte's
    low nibble an even column, its high nibble the odd one, every pair of
    codes), the packed vectors' lanes holding columns ``16 v + PAIR_ORDER``
    (the bf16-byte route), which ``in_order`` puts back."""
    fmt = ELEMENT_FORMATS[element]
    dec = Decoder(fmt, shuf16=True)
    codes = (np.arange(64) % 16).astype(np.uint8)
    _check_values(_run(_module(64, _Decode(dec)), codes, np.float32), codes, fmt)
    lo, hi = np.arange(256) % 16, np.arange(256) // 16
    packed = (lo | hi << 4).astype(np.uint8)
    by_column = np.stack([lo, hi], axis=1).reshape(-1, 32)  # per 16 bytes: columns 0..31
    lane_column = np.concatenate([np.array(PAIR_ORDER), 16 + np.array(PAIR_ORDER)])
    for pairs, columns in ((_Pairs(dec), lane_column), (_InOrder(dec), np.arange(32))):
        got = np.concatenate(
            [_run(_module(32, pairs), packed[i : i + 32], np.float32) for i in range(0, 256, 32)]
        ).reshape(-1, 32)
        _check_values(got.ravel(), by_column[:, columns].ravel().astype(np.uint8), fmt)


@pytest.mark.parametrize("table", PATHS, ids=lambda t: "vbmi" if t else "generic")
@pytest.mark.parametrize("element", SUB_BYTE)
def test_packed_codes_unpack_exactly(element, table):
    fmt = ELEMENT_FORMATS[element]
    dec = Decoder(fmt, table=table)
    rng = np.random.default_rng(0)
    codes = rng.integers(0, fmt.num_codes, 64).astype(np.uint8).view(fmt.dtype)
    packed = pack_codes(codes, element)
    got = _run(_module(packed.size, _Unpack(dec)), packed, np.int8)
    np.testing.assert_array_equal(got.view(np.uint8), unpack_codes(packed, element).view(np.uint8))


def test_every_scale_code_decodes_exactly():
    class _Scales(_Decode):
        def __call__(self, kb, v):
            return [decode_scales(kb, v)]

    text = _module(64, _Scales(None))
    for start in range(0, 256, 64):
        raw = (np.arange(64) + start).astype(np.uint8)
        got = _run(text, raw, np.float32)
        want = oracle_scales(raw.view(ml_dtypes_e8m0())).astype(np.float32)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("features", ["", "-avx512vbmi"], ids=["host", "no-vbmi"])
def test_a_tile_of_e4m3_scales_widens_as_each_16_do(features, monkeypatch):
    """NVFP4's block scales, 64 at once (``decode_scale_tile``: the VBMI table
    path where the CPU has it) and 16 at a time (``decode_scales``: the f16
    path): the exact value of every E4M3 code, NaN for the NaN codes (their
    payloads differ, 0x7FC00000 from the table: no result's meaning includes
    a payload, docs/numerics.md)."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", features)
    e4m3 = ELEMENT_FORMATS["f8E4M3FN"]

    class _Tile(_Decode):
        def __call__(self, kb, v):
            return decode_scale_tile(kb, v, e4m3.name)

    class _Each16(_Decode):
        def __call__(self, kb, v):
            return [decode_scales(kb, kb.slice(v, i, 16), e4m3.name) for i in range(0, 64, 16)]

    tile, each = _module(64, _Tile(None)), _module(64, _Each16(None))
    # (The features as this test sets them: an outer MLIR_MX_CPU_FEATURES mask,
    # under which PATHS was read at import, no longer applies here.)
    table = not features and has_features("avx512f", "avx512bw", "avx512vbmi")
    assert ("vpermi2var" in tile) == table
    for start in range(0, 256, 64):
        raw = (np.arange(64) + start).astype(np.uint8)
        want = decode_elements(raw.view(e4m3.dtype), e4m3).astype(np.float32)
        nan = np.isnan(want)
        assert nan.sum() == (start % 128 == 64)  # 0x7F and 0xFF
        for got in (_run(tile, raw, np.float32), _run(each, raw, np.float32)):
            np.testing.assert_array_equal(np.isnan(got), nan)
            np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def ml_dtypes_e8m0():
    import ml_dtypes

    return ml_dtypes.float8_e8m0fnu
