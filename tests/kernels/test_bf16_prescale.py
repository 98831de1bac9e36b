"""Prescaled chunks of the bf16 dot kernels (:mod:`mlir_mx.kernels.dot.prescale`).

A chunk whose E8M0 scales the call's activations allow is expanded with each
bf16 value times its scale, and its block step is ``c + acc`` (no multiply);
every other chunk runs the plain step.  Checked here:

* ordinary calls take the prescaled chunks (an exponent add made wrong on
  purpose changes their bits) and keep the exact path's bits; calls of
  fewer than ``MIN_ROWS`` rows do not;
* scales at the edges (code 0 over nonzero values, 1, 2, 254, the NaN code
  255, all-zero blocks) and activations near the denormals and near the top
  of the range keep the exact path's bits;
* the bounds are needed: with every chunk forced prescaled, calls whose
  scaled products fall below 2^-126 (``vdpbf16ps`` flushes them) or whose
  scaled partial sums overflow leave the exact path's bits;
* ``scale_limits`` and ``scale_bounds``' formulas for every format.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from dot_cases import same_bits
from format_cases import ALL, BY_BEHAVIOUR, NON_INTEGRAL, SUB_BYTE
from test_bf16_activations import amd, bf16, needs_bf16, run_bf16  # noqa: F401 (fixture)

from mlir_mx import oracle
from mlir_mx.kernels import SCHEDULES
from mlir_mx.kernels.dot import codes as dot_codes
from mlir_mx.kernels.dot import prescale as dot_prescale
from mlir_mx.kernels.dot.prescale import MIN_ROWS, has_specials, scale_limits
from mlir_mx.kernels.dot.units import bf16_floor
from mlir_mx.numerics import ELEMENT_FORMATS, MXArray, decode_elements

E8M0 = ml_dtypes.float8_e8m0fnu
#: The bf16 dot schedules (small, prefill).
BF16_SCHEDULES = [s.name for s in SCHEDULES.values() if s.unit == "bf16"]
#: A packed FP4/FP6 format and an FP8 one.
TWO = (SUB_BYTE[0], NON_INTEGRAL[0])
#: The bf16 dot kernels chosen as on AMD (``amd``, test_bf16_activations.py).
pytestmark = pytest.mark.usefixtures("amd")


def _weights(element, k, n, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)) * np.exp2(rng.integers(-4, 4, (1, n)))
    return oracle.quantize(w.astype(np.float32), element, 32, axis=0)


def _with_scales(qb: MXArray, scales: np.ndarray, codes=None) -> MXArray:
    """``qb`` with its E8M0 scale codes (uint8, blocks x N) replaced."""
    codes = qb.codes if codes is None else codes
    return MXArray(codes, scales.astype(np.uint8).view(E8M0), qb.element, 32, axis=0)


def _check(x, qb, acc, schedule, threads=1, **cfg):
    """Same bits as the exact path, per output; B tiled (``Linear``'s) where
    N allows, else row-major (the Runner's; a ragged last panel)."""
    tiled = qb.shape[1] % 64 == 0
    got = run_bf16(x, qb, acc, schedule, threads, tiled, **cfg)
    want = oracle.blocked_order(bf16(x), qb, acc)
    return same_bits(got, want)


def _open_bounds(monkeypatch):
    """Every chunk prescaled, whatever its scales and the call's A."""
    monkeypatch.setattr(
        dot_prescale, "scale_bounds", lambda kb, e, span: (kb.const(0, kb.i8), kb.const(255, kb.i8))
    )


@needs_bf16
@pytest.mark.parametrize("element", TWO)
def test_ordinary_calls_run_prescaled(monkeypatch, element):
    """The exact path's bits; with the exponent add one too large, other bits
    (so the prescaled chunks ran)."""
    rng = np.random.default_rng(1)
    qb = _weights(element, 128, 130)
    x = rng.standard_normal((MIN_ROWS + 1, 128)).astype(np.float32)
    acc = np.zeros((MIN_ROWS + 1, 130), np.float32)
    assert _check(x, qb, acc, "bf16-prefill", 2).all()
    real = dot_codes.exponent_adds

    def one_more(kb, scales):
        return real(kb, [kb.fmul(s, kb.const(2.0, s.type)) for s in scales])

    monkeypatch.setattr(dot_codes, "exponent_adds", one_more)
    assert not _check(x, qb, acc, "bf16-prefill", 2).any()
    # Fewer than MIN_ROWS rows keep the plain chunks: the wrong add is not run.
    assert _check(x[: MIN_ROWS - 1], qb, acc[: MIN_ROWS - 1], "bf16-small", 2).all()


def _edge_weights(element, seed=2):
    """4 blocks x 130 columns: block 0 ordinary, block 1 scale code 0 over
    nonzero values and all-zero columns, block 2 codes 1, 2, 254 and the NaN
    code, block 3 ordinary but for one column at code 250."""
    qb = _weights(element, 128, 130, seed)
    scales = qb.scales.view(np.uint8).copy()
    codes = qb.codes.copy()
    scales[1, :40] = 0
    codes[32:64, 40:60] = 0
    scales[1, 40:60] = 0  # all-zero columns of the block, code 0 (what quantize gives)
    scales[2, :10], scales[2, 10:20], scales[2, 20:30], scales[2, 30:32] = 1, 2, 254, 255
    scales[3, 129] = 250
    return _with_scales(qb, scales, codes)


@needs_bf16
@pytest.mark.parametrize("element", BY_BEHAVIOUR)
@pytest.mark.parametrize("schedule", BF16_SCHEDULES)
def test_scale_edges_keep_the_bits(element, schedule):
    """Chunks of one block (``kcb=1``): the ordinary ones prescaled, those
    with an edge scale plain; A ordinary, near the floor, or large."""
    qb = _edge_weights(element)
    rng = np.random.default_rng(3)
    acc = rng.standard_normal((MIN_ROWS + 1, 130)).astype(np.float32)
    floor = bf16_floor(element)
    for lo_exp, hi_exp in [(-8, 8), (floor + 2, floor + 10), (90, 100), (floor + 2, 100)]:
        mags = np.exp2(rng.uniform(lo_exp, hi_exp, (MIN_ROWS + 1, 128)))
        x = (rng.choice([-1.0, 1.0], mags.shape) * mags).astype(np.float32)
        ok = _check(x, qb, acc, schedule, 1, kcb=1)
        assert ok.all(), (lo_exp, hi_exp, np.argwhere(~ok)[:5])


def _flush_case(element):
    """Products that are normal before the scale and denormal after it: the
    exact path keeps ``t = p * 2^-30`` (a denormal), a flushing chain loses it."""
    qb = _weights(element, 64, 64, 4)
    scales = np.full(qb.scales.shape, 127 - 30, np.uint8)
    qb = _with_scales(qb, scales)
    x = np.full((MIN_ROWS, 64), 2.0 ** (bf16_floor(element) + 12), np.float32)
    x[1] *= -1
    return x, qb, np.zeros((MIN_ROWS, 64), np.float32)


def _overflow_case(element):
    """A pair ``+a, -a`` whose scaled products overflow and cancel: the exact
    path's partial is 0 before the scale, an overflowing chain gives NaN."""
    qb = _weights(element, 64, 64, 5)
    top = ELEMENT_FORMATS[element].max_normal
    codes = np.zeros(qb.shape, np.float32)
    codes[:2] = top
    qb2 = oracle.quantize(codes, element, 32, axis=0)
    scales = np.full(qb.scales.shape, 127 + 28, np.uint8)
    qb2 = _with_scales(qb2, scales)
    x = np.zeros((MIN_ROWS, 64), np.float32)
    x[:, 0], x[:, 1] = 2.0**100, -(2.0**100)
    return x, qb2, np.zeros((MIN_ROWS, 64), np.float32)


@needs_bf16
@pytest.mark.parametrize("element", TWO)
@pytest.mark.parametrize("case", [_flush_case, _overflow_case])
def test_the_bounds_are_needed(monkeypatch, element, case):
    """With the bounds: the exact path's bits.  Forced prescaled: other bits
    (``vdpbf16ps`` flushes the scaled products, or the scaled chain overflows)."""
    x, qb, acc = case(element)
    assert _check(x, qb, acc, "bf16-small").all()
    _open_bounds(monkeypatch)
    assert not _check(x, qb, acc, "bf16-small").all()


def test_scale_limits_of_every_format():
    """``(log2 q, eb)``: ``2^log2q`` is the format's smallest positive value
    and every finite magnitude lies below ``2^(eb + 1)``, the largest at
    least ``2^eb``; the formats with Inf or NaN codes are the FP8 ones."""
    for element in ALL:
        fmt = ELEMENT_FORMATS[element]
        log2q, eb = scale_limits(element)
        codes = np.arange(fmt.num_codes, dtype=np.uint8).view(fmt.dtype)
        values = np.abs(decode_elements(codes, element).astype(np.float64))
        finite = values[np.isfinite(values)]
        assert 2.0**log2q == finite[finite > 0].min() == fmt.min_subnormal, element
        assert 2.0**eb <= finite.max() < 2.0 ** (eb + 1), element
    assert tuple(e for e in ALL if has_specials(e)) == NON_INTEGRAL
