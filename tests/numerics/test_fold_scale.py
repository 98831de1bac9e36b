"""oracle.fold_scale: the one meaning of mx.fold_scale (docs/numerics.md)."""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx import numerics as N
from mlir_mx import oracle


def _array(elem="f8E4M3FN", seed=0, scales=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    a = oracle.quantize(x, elem, 32)
    if scales is not None:
        a = N.MXArray(a.codes, np.asarray(scales, np.uint8).view(N.SCALE_DTYPE), elem, 32)
    return a


def _codes(a):
    return a.codes.view(np.uint8), a.scales.view(np.uint8).astype(int)


def test_one_is_the_identity_bit_for_bit_nan_blocks_included():
    a = _array()
    codes = a.codes.view(np.uint8).copy()
    codes[0, :] = 0x7F  # element NaN codes in a block
    sc = a.scales.view(np.uint8).copy()
    sc[1, 0] = 255  # a NaN block with non-zero element codes
    a = N.MXArray(codes.view(a.codes.dtype), sc.view(N.SCALE_DTYPE), a.element, 32)
    assert oracle.fold_scale(a, 1.0).bitwise_equal(a)


@pytest.mark.parametrize("p", [1, -3, 100, -100, 127, -149])
def test_power_of_two_moves_scale_codes_in_range_and_requantizes_the_rest(p):
    a = _array(scales=[[0, 1], [127, 128], [253, 254], [255, 120]])
    got = oracle.fold_scale(a, 2.0**p)
    codes, sc = _codes(a)
    gcodes, gsc = _codes(got)
    with np.errstate(over="ignore"):
        req = oracle.quantize(oracle.dequantize(a) * np.float32(2.0**p), a.element, 32)
    rcodes, rsc = _codes(req)
    for (i, j), c in np.ndenumerate(sc):
        block = np.s_[i, 32 * j : 32 * j + 32]
        if c == 255:
            assert gsc[i, j] == 255 and np.array_equal(gcodes[block], codes[block])
        elif 0 <= c + p <= 254:
            assert gsc[i, j] == c + p and np.array_equal(gcodes[block], codes[block])
        else:
            assert gsc[i, j] == rsc[i, j] and np.array_equal(gcodes[block], rcodes[block])


@pytest.mark.parametrize("alpha", [3.0, -2.0, 0.0, -0.0, 1.5, float("nan"), float("inf"), 0.3])
def test_other_alphas_requantize(alpha):
    a = _array(seed=3)
    with np.errstate(all="ignore"):
        want = oracle.quantize(oracle.dequantize(a) * np.float32(alpha), a.element, 32)
    assert oracle.fold_scale(a, alpha).bitwise_equal(want)


def test_the_reproducer_values():
    # semantics/3-fold-scale-requantize.mlir: 1.125 x 3 in E4M3 is requantized to 3.5
    x = np.ones((1, 32), np.float32)
    x[0, 0] = 1.125
    a = oracle.quantize(x, "f8E4M3FN", 32)
    assert oracle.dequantize(oracle.fold_scale(a, 3.0))[0, 0] == 3.5
    # reliability/fold-scale-const-vs-runtime.py: 2.0 x 2^127 = 2^128 exactly -> +Inf
    b = oracle.quantize(np.full((4, 32), 2.0, np.float32), "f8E4M3FN", 32)
    assert np.isposinf(oracle.dequantize(oracle.fold_scale(b, 2.0**127))).all()


def test_bad_arguments():
    a = _array()
    with pytest.raises(TypeError, match="alpha"):
        oracle.fold_scale(a, "2")
    with pytest.raises(TypeError, match="MXArray"):
        oracle.fold_scale(np.ones(4), 2.0)
