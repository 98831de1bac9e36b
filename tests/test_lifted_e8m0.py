"""The lifted block step for E8M0 block scales (``mlir_mx.kernels.dot.biased``,
``Problem.b_lift``): ``mlir_mx.Linear`` takes it in its expanding integer
dot kernels (``int-small``, ``int-prefill``) when every scale of its records
is at most ``2^105`` (or NaN), and the plain step otherwise; an activation
block scaled by ``2^127`` routes the call to the plain step.  Every case
gives the oracle's bits (``oracle.blocked_order`` on the oracle-quantized
activations), at 1 and 2 threads, on this CPU's kernels and under the AVX2
and AVX-VNNI masks.
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import AVX2_MASKS, mask_avx2, same_bits
from format_cases import INTEGRAL

import mlir_mx
from mlir_mx import oracle
from mlir_mx.kernels import Problem
from mlir_mx.kernels.dot.biased import LIFT_E8M0_MAX, lifted
from mlir_mx.kernels.dot.isa import DotISA
from mlir_mx.kernels.dot.units import KINDS
from mlir_mx.linear import weight_form
from mlir_mx.numerics import MXArray

WIDE = DotISA("avx512-vnni", True, True, False)


def _prob(element="f4E2M1FN", block=32, b_lift=True, b_dot="i8"):
    return Problem(None, 128, 4096, block, None, element, a_quant="i8", b_dot=b_dot, b_lift=b_lift)


def test_e8m0_lifted_only_with_b_lift_and_a_partial_below_2_to_the_22():
    i8 = KINDS["i8"]
    assert lifted(_prob(), i8, WIDE, expand=True)
    assert not lifted(_prob(b_lift=False), i8, WIDE, expand=True)
    assert not lifted(_prob(), i8, WIDE, expand=False)  # decode: the plain step
    assert lifted(_prob("i8"), i8, WIDE, expand=True)  # 32 * 128 * 128 < 2^22
    assert not lifted(_prob("i8", block=256), i8, WIDE, expand=True)  # 256 * 128 * 128 = 2^22
    with pytest.raises(ValueError, match="b_lift"):
        _prob(b_dot=None)


def _weight(top_code: int, n=128, k=96, fmt="f4E2M1FN") -> MXArray:
    """Random MX weight (n, k) whose block scale codes are random around 127,
    one of them ``top_code``; one NaN scale (code 255) too."""
    rng = np.random.default_rng(top_code)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), fmt, 32, axis=1)
    scales = rng.integers(112, 135, w.scales.shape, dtype=np.uint8)
    scales[5, 1] = top_code
    scales[9, 2] = 255
    return MXArray(w.codes, scales.view(w.scales.dtype), fmt, 32, axis=1)


def _oracle(w: MXArray, x: np.ndarray) -> np.ndarray:
    a = oracle.quantize(x, "i8", 32, axis=1)
    b = MXArray(w.codes.T.copy(), w.scales.T.copy(), w.format.name, 32, axis=0)
    return oracle.blocked_order(a, b, np.zeros((x.shape[0], w.shape[0]), np.float32))


def test_linear_reads_its_records_scales_once_per_kernel():
    g = weight_form.Geometry.of(mlir_mx.numerics.element_format("f4E2M1FN"), 32, 96, 128)
    for top, want in ((LIFT_E8M0_MAX, True), (LIFT_E8M0_MAX + 1, False), (254, False)):
        lin = mlir_mx.Linear(_weight(top), activations="i8")
        assert weight_form.lifts(lin.held[-1], g) is want, top


def _activations(m=70, k=96) -> np.ndarray:
    """Random rows, a zero row, rows near the bottom of the f32 range (E8M0
    scales near ``2^-127``), and a row of large values (``2^100``)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[1] = 0.0
    x[2] = np.float32(2.0**-140)
    x[3, :32] *= np.float32(2.0**-126)
    x[4] *= np.float32(2.0**100)
    return x


@pytest.mark.parametrize("cpu", ["host", "avx2", "avx-vnni"])
@pytest.mark.parametrize("top", [LIFT_E8M0_MAX, 254])
@pytest.mark.parametrize("fmt", INTEGRAL)
def test_lifted_and_plain_steps_equal_the_oracle(monkeypatch, cpu, top, fmt):
    """Every format of the integer dot units; scales up to ``2^105``: the
    lifted step; one of ``2^127``: the plain step; both the oracle's bits, with and without an activation block at
    ``2^127`` (the route's plain form), 1 and 2 threads."""
    if cpu in AVX2_MASKS:
        mask_avx2(monkeypatch, cpu)
    w, x = _weight(top, fmt=fmt), _activations()
    huge = x.copy()
    huge[6, 32:64] = np.float32(1.5 * 2.0**127)
    lin = mlir_mx.Linear(w, activations="i8", threads=2)
    for xs in (x, huge):
        want = _oracle(w, xs)
        assert np.isfinite(want[:6]).sum() > 0
        for m in (70, 5):  # int-prefill, int-small
            for threads in (1, 2):
                got = lin(xs[:m], threads=threads)
                assert same_bits(got, want[:m]).all(), (cpu, lin.schedule(xs[:m]), m, threads)
