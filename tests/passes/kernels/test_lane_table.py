"""The 8-bit table widening in lane order (``kernels/common/lane_table.py``, issue 51).

The f32 stream kernels (``decode``, ``small``) widen 64 E4M3/E5M2 codes
without reordering them and put their partial sums in column order once per
block.  Against the ordered widening (``StreamConfig.lanes = False``) and the
oracle's blocked order: the same bits, NaN codes of both signs and every
code included, for a row-major B (the Runner's sweep) and a tiled one
(``mlir_mx.Linear``'s), f32 and MX activations, row groups, a column tail,
1 and 2 threads, and under the AVX2 mask (where the lane order is not used).
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from matmul_cases import case
from mlir import ir

import mlir_mx.kernels.common.problem as kernel_problem
from mlir_mx import oracle
from mlir_mx.dialect import load_dialect
from mlir_mx.execution import Runner
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.kernels.common.lane_table import LANE_COLUMN, LaneTable, lane_order
from mlir_mx.kernels.common.problem import tile_b_codes
from mlir_mx.kernels.common.widen import decoder
from mlir_mx.kernels.registry import shape_class
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, decode_elements
from mlir_mx.pipelines import kernel_library_pipeline

#: The one-byte float formats (E4M3, E5M2): the ones the lane order serves.
BYTE_FLOATS = [n for n, f in ELEMENT_FORMATS.items() if not f.is_sub_byte and not f.is_int]
NO_AVX512 = (
    "-avx512f -avx512bw -avx512vl -avx512vbmi -avx512_vnni -avx512_bf16 -avx512_fp16 -avx_vnni"
)


@pytest.fixture(autouse=True)
def _split_small_work(monkeypatch):
    """Small problems: let 2 threads really start 2 tasks."""
    monkeypatch.setattr(kernel_problem, "MIN_TASK_MACS", 1)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def _runner(prob: Problem, threads: int, lanes: bool) -> Runner:
    """The f32 stream kernel of ``prob``'s shape class, lane order on or off."""
    name = shape_class(prob.m)
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        plan = plan_kernel(prob, name, threads)
        assert plan.config.lanes is True  # the registry's default
        plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, lanes=lanes))
        text = str(kernel_module(prob, plan))
    return Runner(text, kernel_library_pipeline(threads))


def test_lane_order_serves_the_one_byte_float_tables_only():
    """A :class:`LaneTable` for E4M3/E5M2 with the VBMI tables and 64-column
    tiles; no change for other formats, other tiles or without the tables;
    its lanes hold each of the 64 columns once."""
    assert sorted(c for v in LANE_COLUMN for c in v) == list(range(64))
    assert BYTE_FLOATS
    for name, fmt in ELEMENT_FORMATS.items():
        for vbmi in (True, False):
            dec = decoder(name, vbmi=vbmi)
            for nv in (1, 2, 4):
                got, lanes = lane_order(dec, nv)
                want = vbmi and nv == 4 and name in BYTE_FLOATS
                assert lanes is want and isinstance(got, LaneTable) is want, (name, vbmi, nv)
                assert got.fmt is fmt
    assert lane_order(None, 4) == (None, False)


def _with_nan_codes(qb, rng):
    """``qb`` (E4M3) with NaN codes of both signs at scattered rows and columns."""
    if qb.element != "f8E4M3FN":
        return qb
    codes = np.array(qb.codes).view(np.uint8)
    k, n = codes.shape
    cols = np.arange(0, n, 7)
    codes[rng.integers(0, k, cols.size), cols] = np.where(cols % 2, 0xFF, 0x7F)
    return MXArray(codes.view(qb.format.dtype), qb.scales, qb.element, 32, axis=0)


#: (M, tiled B, A's MX element or None for f32, threads): decode from a
#: row-major B (the sweep) and a tiled one, row groups (``small``).
_CASES = [
    (1, False, None, 2),
    (1, False, "f8E4M3FN", 1),
    (1, True, None, 1),
    (1, True, "f8E4M3FN", 2),
    (5, False, None, 2),
    (5, False, "f8E4M3FN", 1),
]


@pytest.mark.parametrize("features", ["", NO_AVX512], ids=["host", "avx2"])
@pytest.mark.parametrize("element", BYTE_FLOATS)
def test_lane_order_gives_the_blocked_order_bits(element, features, monkeypatch):
    """decode (row-major: the sweep; tiled) and small, f32 and MX (E4M3)
    activations, 1 and 2 threads, N with a tail where B is row-major, NaN
    codes of both signs: the oracle's blocked order bit for bit, as the
    ordered widening gives it (``test_matmul_kernels``); under the AVX2 mask
    (no lane order) the same bits."""
    monkeypatch.setenv("MLIR_MX_CPU_FEATURES", features)
    rng = np.random.default_rng(3)
    k = 96
    for m, tiled, ea, threads in _CASES:
        n = 192 if tiled else 200
        args, acc, _exact, _bound = case(m, k, n, ea or "f8E4M3FN", element)
        qa, qb = args[0], _with_nan_codes(args[1], rng)
        ref = oracle.blocked_order(qa if ea else oracle.dequantize(qa), qb, acc)
        b = np.array(qb.codes)
        if tiled:
            b = tile_b_codes(b.view(np.uint8), 32, element, False)
        a = (np.array(qa.codes), np.array(qa.scales)) if ea else (oracle.dequantize(qa),)
        prob = Problem(m, n, k, 32, ea, element, b_tiled=tiled)
        c = acc.copy()
        _runner(prob, threads, True).matmul(*a, b, np.array(qb.scales), c)
        where = str((m, tiled, ea, threads))
        np.testing.assert_array_equal(np.isnan(c), np.isnan(ref), err_msg=where)
        ok = ~np.isnan(ref)
        assert ok.sum() > c.size // 2
        np.testing.assert_array_equal(_bits(c[ok]), _bits(ref[ok]), err_msg=where)


def test_every_code_in_every_lane():
    """Every E4M3/E5M2 code in every one of the 64 lane positions (row 0 of
    a block, the rest zero, A ones, scales 1): each column its code's value,
    NaN for NaN codes, through the row-major sweep and a tiled B."""
    for element in BYTE_FLOATS:
        fmt = ELEMENT_FORMATS[element]
        n = 256 * 2
        codes = np.zeros((32, n), np.uint8)
        codes[0] = (np.arange(n) * 5 + np.arange(n) // 256) % 256  # each code at 2 lanes
        values = decode_elements(codes[0].view(fmt.dtype), fmt).astype(np.float32)
        scales = np.full((1, n), 127, np.uint8).view(ml_dtypes.float8_e8m0fnu)
        for tiled in (False, True):
            b = tile_b_codes(codes, 32, element, False) if tiled else codes.view(fmt.dtype)
            c = np.zeros((1, n), np.float32)
            prob = Problem(1, n, 32, 32, None, element, b_tiled=tiled)
            _runner(prob, 1, True).matmul(np.ones((1, 32), np.float32), b, scales, c)
            nan = np.isnan(values)
            np.testing.assert_array_equal(np.isnan(c[0]), nan)
            np.testing.assert_array_equal(_bits(c[0][~nan]), _bits(np.float32(0) + values[~nan]))
