"""A tiled B's decode reading several blocks in turn (``StreamConfig.blocks``, issue 51).

``decode`` of one-byte codes from a tiled B (``mlir_mx.Linear``'s stored
form) on Intel AVX-512 reads each column tile of ``TILED_STREAMS`` blocks in
turn, without software prefetch; on AMD Zen 5 (family 26 on) so does a
decode of FP8 or packed MXFP4 at 2 threads or more (``_zen5_streams``; at
1 thread one run, prefetched: ``_zen5_one_thread_prefetch``). Each
block's partials start from zero and every column's C update stays in block
order, so the bits are the blocked order's: checked against the oracle for 2
and 4 blocks side by side, f32 and MX activations, NaN codes, 1 and 2
threads, block counts that the stream count divides and ones it does not
(``adapt`` then keeps 1).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from matmul_cases import case
from mlir import ir

import mlir_mx.kernels.common.problem as kernel_problem
import mlir_mx.kernels.matmul.stream_config as stream_config
from mlir_mx import host, oracle
from mlir_mx.dialect import load_dialect
from mlir_mx.execution import Runner
from mlir_mx.kernels import Problem, kernel_module, plan_kernel
from mlir_mx.kernels.common.problem import tile_b_codes
from mlir_mx.kernels.matmul.stream import TILED_PREFETCH, TILED_STREAMS
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, pack_codes
from mlir_mx.pipelines import kernel_library_pipeline

#: One-byte element formats (E4M3, E5M2, INT8): the ones ``adapt`` streams.
ONE_BYTE = [n for n, f in ELEMENT_FORMATS.items() if not f.is_sub_byte]


@pytest.fixture(autouse=True)
def _split_small_work(monkeypatch):
    """Small problems: let 2 threads really start 2 tasks."""
    monkeypatch.setattr(kernel_problem, "MIN_TASK_MACS", 1)


def _runner(prob: Problem, threads: int, blocks: int, prefetch: int = 0) -> Runner:
    with ir.Context() as ctx, ir.Location.unknown():
        load_dialect(ctx)
        plan = plan_kernel(prob, "decode", threads)
        cfg = dataclasses.replace(plan.config, blocks=blocks, prefetch=prefetch)
        text = str(kernel_module(prob, dataclasses.replace(plan, config=cfg)))
    return Runner(text, kernel_library_pipeline(threads))


def _with_nan_codes(qb, rng):
    """E4M3 codes with NaN codes of both signs at scattered rows and columns."""
    if qb.element != "f8E4M3FN":
        return qb
    codes = np.array(qb.codes).view(np.uint8)
    k, n = codes.shape
    cols = np.arange(0, n, 5)
    codes[rng.integers(0, k, cols.size), cols] = np.where(cols % 2, 0xFF, 0x7F)
    return MXArray(codes.view(qb.format.dtype), qb.scales, qb.element, 32, axis=0)


def test_adapt_streams_one_byte_codes_of_a_tiled_decode_on_intel():
    """On an Intel AVX-512 host ``adapt`` gives a tiled one-byte decode
    ``TILED_STREAMS`` blocks and no prefetch when they divide the block count;
    1 block and the prefetch otherwise, and for packed FP4 and row groups."""
    if not (host.has_features("avx512f") and host.software_prefetch()):
        pytest.skip("the side-by-side blocks are chosen on Intel AVX-512 hosts only")
    fp8 = next(n for n, f in ELEMENT_FORMATS.items() if not f.is_sub_byte and not f.is_int)
    fp4 = next(n for n, f in ELEMENT_FORMATS.items() if f.group == (2, 1) and not f.is_int)
    k = 32 * TILED_STREAMS
    for prob, want in [
        (Problem(1, 128, k, 32, None, fp8, b_tiled=True), (TILED_STREAMS, 0)),
        (Problem(1, 128, k + 32, 32, None, fp8, b_tiled=True), (1, TILED_PREFETCH)),
        (Problem(1, 128, k, 32, None, fp4, b_packed=True, b_tiled=True), (1, TILED_PREFETCH)),
        (Problem(4, 128, k, 32, None, fp8, b_tiled=True), (1, TILED_PREFETCH)),
    ]:
        cfg = plan_kernel(prob, "decode" if prob.m == 1 else "small", 1).config
        assert (cfg.blocks, cfg.prefetch) == want, prob


@pytest.mark.parametrize("element", ONE_BYTE)
def test_blocks_side_by_side_give_the_blocked_order_bits(element):
    """2 and 4 blocks in turn: the oracle's blocked order bit for bit."""
    rng = np.random.default_rng(5)
    n = 192  # 3 tiles: 2 threads take 2 and 1
    for k, ea, threads in [(128, None, 1), (128, "f8E4M3FN", 2), (256, None, 2)]:
        args, acc, _exact, _bound = case(1, k, n, ea or "f8E4M3FN", element)
        qa, qb = args[0], _with_nan_codes(args[1], rng)
        ref = oracle.blocked_order(qa if ea else oracle.dequantize(qa), qb, acc)
        b = tile_b_codes(np.array(qb.codes).view(np.uint8), 32, element, False)
        a = (np.array(qa.codes), np.array(qa.scales)) if ea else (oracle.dequantize(qa),)
        prob = Problem(1, n, k, 32, ea, element, b_tiled=True)
        ok = ~np.isnan(ref)
        assert ok.sum() > n // 2
        for blocks in (2, 4):  # 1: tests/passes/kernels/test_lane_table.py
            c = acc.copy()
            _runner(prob, threads, blocks).matmul(*a, b, np.array(qb.scales), c)
            where = str((element, k, ea, threads, blocks))
            np.testing.assert_array_equal(np.isnan(c), np.isnan(ref), err_msg=where)
            np.testing.assert_array_equal(
                c[ok].view(np.uint32), ref[ok].view(np.uint32), err_msg=where
            )


def test_adapt_streams_a_two_thread_decode_on_amd_zen5(monkeypatch):
    """``adapt`` on an AMD AVX-512 host (vendor and family stood in): a tiled
    FP8 or packed MXFP4 (block 32) decode at 2 threads reads ``TILED_STREAMS``
    blocks side by side on family 26 (Zen 5); at 1 thread one run,
    prefetched 8 KiB ahead there (``_zen5_one_thread_prefetch``: 4 FP8 tiles,
    8 FP4 tiles); on family 25 (Zen 4) one run, no prefetch; FP6, NVFP4's
    block of 16 (its own prefetch) and a block count the streams do not
    divide keep one run."""
    if not host.has_features("avx512f"):
        pytest.skip("the decode streams are chosen on AVX-512 hosts only")
    monkeypatch.setattr(stream_config, "software_prefetch", lambda: False)
    monkeypatch.setattr(stream_config, "cpu_vendor", lambda: "AuthenticAMD")
    k = 32 * TILED_STREAMS
    fp8 = Problem(1, 128, k, 32, None, "f8E4M3FN", b_tiled=True)
    e5m2 = Problem(1, 128, k, 32, None, "f8E5M2", b_tiled=True)
    fp4 = Problem(1, 128, k, 32, None, "f4E2M1FN", b_packed=True, b_tiled=True)
    nvfp4 = Problem(1, 128, k, 16, None, "f4E2M1FN", b_packed=True, b_tiled=True,
                    b_scale_type="f8E4M3FN")  # fmt: skip
    fp6 = Problem(1, 128, k, 32, None, "f6E2M3FN", b_tiled=True)
    fp8_16 = Problem(1, 128, k, 16, None, "f8E4M3FN", b_tiled=True)
    odd = Problem(1, 128, k + 32, 32, None, "f8E4M3FN", b_tiled=True)
    short = stream_config.SHORT_BLOCK_PREFETCH
    for family, threads, prob, want in [
        (26, 2, fp8, (TILED_STREAMS, 0)),
        (26, 2, fp4, (TILED_STREAMS, 0)),
        (27, 2, fp8, (TILED_STREAMS, 0)),
        (26, 1, fp8, (1, TILED_PREFETCH)),
        (26, 1, e5m2, (1, TILED_PREFETCH)),
        (27, 1, fp8, (1, TILED_PREFETCH)),
        (26, 1, fp4, (1, short)),
        (26, 1, fp6, (1, 0)),
        (26, 1, fp8_16, (1, 0)),
        (26, 1, nvfp4, (1, short)),
        (25, 1, fp8, (1, 0)),
        (25, 1, fp4, (1, 0)),
        (25, 2, fp8, (1, 0)),
        (25, 2, fp4, (1, 0)),
        (26, 2, nvfp4, (1, short)),
        (26, 2, fp6, (1, 0)),
        (26, 2, odd, (1, 0)),
    ]:
        monkeypatch.setattr(stream_config, "cpu_family", lambda f=family: f)
        cfg = plan_kernel(prob, "decode", threads).config
        assert (cfg.blocks, cfg.prefetch) == want, (family, threads, prob)


#: The formats Zen 5's 1-thread decode prefetches: FP8 and packed FP4.
PREFETCHED = [n for n in ONE_BYTE if not ELEMENT_FORMATS[n].is_int] + [
    n for n, f in ELEMENT_FORMATS.items() if f.group == (2, 1) and not f.is_int
]


@pytest.mark.parametrize("element", PREFETCHED)
def test_a_one_thread_prefetched_decode_gives_the_blocked_order_bits(element):
    """Zen 5's 1-thread decode prefetching a tiled B 4 and 8 tiles ahead (the
    prefetch runs past the last tile and the last block): the oracle's
    blocked order bit for bit, f32 and MX activations, E4M3 NaN codes."""
    rng = np.random.default_rng(7)
    n, packed = 192, ELEMENT_FORMATS[element].is_sub_byte
    for k, ea in [(128, None), (96, "f8E4M3FN")]:
        args, acc, _exact, _bound = case(1, k, n, ea or "f8E4M3FN", element, seed=4)
        qa, qb = args[0], _with_nan_codes(args[1], rng)
        ref = oracle.blocked_order(qa if ea else oracle.dequantize(qa), qb, acc)
        codes = np.array(qb.codes).view(np.uint8)
        codes = pack_codes(codes, element) if packed else codes
        b = tile_b_codes(codes, 32, element, packed)
        a = (np.array(qa.codes), np.array(qa.scales)) if ea else (oracle.dequantize(qa),)
        prob = Problem(1, n, k, 32, ea, element, b_packed=packed, b_tiled=True)
        ok = ~np.isnan(ref)
        assert ok.sum() > n // 2
        for ahead in (TILED_PREFETCH, stream_config.SHORT_BLOCK_PREFETCH):
            c = acc.copy()
            _runner(prob, 1, 1, prefetch=ahead).matmul(*a, b, np.array(qb.scales), c)
            where = str((element, k, ea, ahead))
            np.testing.assert_array_equal(np.isnan(c), np.isnan(ref), err_msg=where)
            np.testing.assert_array_equal(
                c[ok].view(np.uint32), ref[ok].view(np.uint32), err_msg=where
            )


@pytest.mark.parametrize("threads", [1, 2])
def test_packed_fp4_blocks_side_by_side_give_the_blocked_order_bits(threads):
    """Packed MXFP4 read 4 blocks in turn (Zen 5's 2-thread decode): the
    oracle's blocked order bit for bit, f32 and MX activations."""
    n = 192
    for k, ea in [(128, None), (256, "f8E4M3FN")]:
        args, acc, _exact, _bound = case(1, k, n, ea or "f8E4M3FN", "f4E2M1FN", seed=3)
        qa, qb = args
        ref = oracle.blocked_order(qa if ea else oracle.dequantize(qa), qb, acc)
        codes = pack_codes(np.array(qb.codes).view(np.uint8), "f4E2M1FN")  # along N
        b = tile_b_codes(codes, 32, "f4E2M1FN", True)
        a = (np.array(qa.codes), np.array(qa.scales)) if ea else (oracle.dequantize(qa),)
        prob = Problem(1, n, k, 32, ea, "f4E2M1FN", b_packed=True, b_tiled=True)
        c = acc.copy()
        _runner(prob, threads, TILED_STREAMS).matmul(*a, b, np.array(qb.scales), c)
        np.testing.assert_array_equal(c.view(np.uint32), ref.view(np.uint32), err_msg=str((k, ea)))
