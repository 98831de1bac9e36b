"""INT8 activations quantized in the dot kernels straight to their integer
steps (issue 54, ``kernels/dot/prep.py``: ``_round_steps`` and
``_Words.store_steps``): the grouped quantizer hands ``q = clamp(rne(p *
64), -127, 127)`` to the word store instead of the element value ``q / 64``
(which the store multiplied by 64 again).  The bits must not change: the
steps equal the oracle's element values times 64 on every quantization rule,
and ``Linear(..., activations="i8")`` on MXFP4 and NVFP4 weights equals the
oracle's blocked order on the oracle-quantized activations, at 1 and 2
threads, under the AVX2 masks, with ragged M and K holding whole groups
of 16 blocks and a tail of single blocks (N a multiple of 64: a ragged N
is not held as records, and its A is quantized outside the kernel).
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import AVX2_MASKS, mask_avx2, same_bits
from format_cases import NON_INTEGRAL
from test_dot_quantize import _blocks, _q_module

import mlir_mx
from mlir_mx import oracle
from mlir_mx.numerics import MXArray


def _steps_module(rows: int, block: int) -> str:
    """``@q(x, steps, scales)``: ``quantize_groups`` with INT8's steps stored as f32."""
    from mlir_mx.kernels.dot.prep import _round_steps
    from mlir_mx.kernels.dot.prep_groups import GROUP, Targets, factors_buffer, quantize_groups

    def body(kb, x, steps, scales):
        store = lambda v, row, col: kb.vstore(v, steps, [row, col])  # noqa: E731
        out = Targets(store, scales, factors_buffer(kb), _round_steps)
        with kb.loop(0, rows, 1) as r:
            quantize_groups(kb, x, "i8", block, out, r.iv, GROUP)
        kb.dealloc(out.factors)

    k = GROUP * block
    return _q_module(([rows, k], [rows, k], [rows, GROUP]), body)


@pytest.mark.parametrize("block", [16, 32])
def test_int8_steps_are_the_oracle_values_times_64(block):
    from mlir_mx.execution import Runner
    from mlir_mx.pipelines import load_pipeline

    rng = np.random.default_rng(3)
    blocks = _blocks("i8", rng).reshape(-1, block)
    blocks = np.concatenate([blocks, rng.permutation(blocks)])
    x = np.ascontiguousarray(blocks.reshape(-1, 16 * block))
    steps, scales = np.zeros_like(x), np.zeros((x.shape[0], 16), np.float32)
    Runner(_steps_module(x.shape[0], block), load_pipeline("memref-to-llvm")).invoke(
        "q", x, steps, scales
    )
    q = oracle.quantize(x, "i8", block)
    assert same_bits(scales, q.scale_values().astype(np.float32)).all()
    want = q.element_values().astype(np.float64) * 64
    assert np.array_equal(steps.astype(np.int64), want.astype(np.int64))
    assert np.abs(steps).max() == 127 and (steps == np.round(steps)).all()


def _x(m: int, k: int, seed: int) -> np.ndarray:
    """Rows over a wide exponent range with the quantizer's edge rows."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-20, 20, (m, 1)))).astype(np.float32)
    x[0, :16] = 0.0  # a zero block
    x[1, 3] = np.nan  # a NaN block: its row's outputs NaN
    x[2, 16:32] = np.arange(16) * 2 + 1  # ties at the scale's steps
    x[2, 40] = 3e38
    x[3, :16] = -1.996  # p * 64 rounds to -128: saturates at -127
    x[3, 32:48] = np.linspace(0.5, 1.996, 16)  # and to 128: 127
    return x


def _want(w: MXArray, x: np.ndarray) -> np.ndarray:
    """The oracle: ``x`` quantized to MXINT8 in ``w``'s blocks, times ``W.T``
    in the blocked order (the global scale divided last)."""
    a = oracle.quantize(x, "i8", w.block_size, axis=1)
    name = "nvfp4" if w.global_scale is not None else w.element
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), name, w.block_size, axis=0,
                global_scale=w.global_scale)  # fmt: skip
    return oracle.blocked_order(a, b, np.zeros((x.shape[0], w.shape[0]), np.float32))


def _check(fmt: str, threads=(1, 2), m: int = 7, n: int = 128, k: int = 608, seed=11) -> None:
    # K = 608: 38 blocks of 16 (two groups of 16, 6 single), 19 of 32 (one group, 3 single).
    # N a multiple of 64: the weight held as dot records, A quantized in the kernel.
    rng = np.random.default_rng(seed)
    w = mlir_mx.quantize(rng.standard_normal((n, k), dtype=np.float32), fmt, axis=1)
    x = _x(m, k, seed=seed + 1)
    want = _want(w, x)
    lin = mlir_mx.Linear(w, threads=max(threads), activations="i8")
    assert lin.records_unit is not None and lin.schedule(x).startswith("int-")
    for t in threads:
        got = lin(x, threads=t)
        assert same_bits(got, want).all(), (t, np.argwhere(~same_bits(got, want))[:5])
        assert np.isnan(got[1]).all() and not np.isnan(np.delete(got, 1, axis=0)).any()


@pytest.mark.parametrize("fmt, threads", [("mxfp4", 2), ("nvfp4", 1)])
def test_linear_i8_equals_the_oracle(fmt, threads):
    """One kernel each (a compilation is most of a case); both formats at
    both thread counts: the slow campaign."""
    _check(fmt, threads=(threads,))


def test_linear_i8_equals_the_oracle_under_the_avx2_mask(monkeypatch):
    mask_avx2(monkeypatch, "avx2")
    _check("nvfp4", threads=(2,), m=5, n=64)


@pytest.mark.parametrize("fmt", NON_INTEGRAL)  # FP8: the bf16 unit
def test_linear_i8_on_fp8_weights_equals_the_oracle(fmt):
    """FP8 weights with INT8 activations run on the ``bf16`` unit, which takes
    A's values, not its integer steps (session 56's review: the steps were
    stored into the bf16 words and every output was NaN)."""
    rng = np.random.default_rng(0)
    w = mlir_mx.quantize(rng.standard_normal((128, 512), dtype=np.float32), fmt, axis=1)
    x = rng.standard_normal((7, 512)).astype(np.float32)
    lin = mlir_mx.Linear(w, threads=1, activations="i8")
    got = lin(x)
    assert same_bits(got, _want(w, x)).all(), lin.schedule(x)


@pytest.mark.slow
@pytest.mark.parametrize("mask", [None, *AVX2_MASKS])
def test_linear_i8_campaign(monkeypatch, mask):
    """Seeds, thread counts, formats and shapes (the prefill schedule at M = 256)."""
    if mask is not None:
        mask_avx2(monkeypatch, mask)
    for fmt in ("mxfp4", "nvfp4"):
        for seed, (m, n, k) in enumerate(((4, 64, 512), (33, 192, 1056), (256, 256, 2048))):
            _check(fmt, (1, 2), m, n, k, seed=20 + seed)
