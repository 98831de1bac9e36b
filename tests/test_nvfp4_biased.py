"""NVFP4's block step on the integer dot units in one FMA (a biased
accumulator, ``mlir_mx.kernels.dot.biased``): where it is taken, and the
oracle's bits at its edges (issue 54):

* the largest partial a block can hold (``|P| = 16 * 127 * 12``, every
  code +-6 against saturated int8 activations, the largest E4M3 scale);
* zero block scales under negative partials (where ``f32(P) * sb`` is
  ``-0`` and the FMA gives ``+0``: the sign never reaches C);
* activations near the bottom of the f32 range (E8M0 scales near
  ``2^-127``), zero and negative-zero rows, random rows;

at 1 and 2 threads, on this CPU's kernels and under the AVX2 and AVX-VNNI
masks (the 256-bit dot kernels), tiled prefill and decode/small shapes.
The expanding kernels (``int-small``, ``int-prefill``) take the lifted step
on x86 (session 64): where, and an activation block scaled by ``2^127``,
which routes the call back to the biased step.
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import AVX2_MASKS, mask_avx2, nvfp4_i8_oracle, same_bits

import mlir_mx
from mlir_mx import oracle
from mlir_mx.kernels import Problem
from mlir_mx.kernels.dot.biased import BIAS, biased
from mlir_mx.kernels.dot.units import KINDS
from mlir_mx.numerics import MXArray
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE

FP4 = "f4E2M1FN"


def _prob(block=16, scale_type=E4M3_SCALE_TYPE, b_dot="i8", a_quant="i8"):
    return Problem(
        None, 128, 4096, block, None, FP4, a_quant=a_quant, b_dot=b_dot, b_scale_type=scale_type
    )


def test_biased_only_where_its_bound_holds():
    """E4M3 scales, an integer unit, B as records and ``block * max|a| *
    max|b| < 2^22``; never for E8M0 scales (1.5 * 2^23 * 2^127 overflows),
    the bf16 unit, B as codes or a block whose partial could reach 2^22."""
    assert biased(_prob(), KINDS["i8"]) == BIAS
    assert biased(_prob(), KINDS["i16"]) == BIAS
    assert biased(_prob(scale_type="f8E8M0FNU"), KINDS["i8"]) == 0
    assert biased(_prob(), KINDS["bf16"]) == 0
    assert biased(_prob(b_dot=None), KINDS["i8"]) == 0
    assert biased(_prob(block=2048), KINDS["i8"]) == BIAS  # 2048 * 128 * 12 < 2^22
    assert biased(_prob(block=4096), KINDS["i8"]) == 0  # 4096 * 128 * 12 > 2^22


def _weight(n=128, k=64) -> MXArray:
    """NVFP4 weight (n, k) with edge blocks: row 0 all +6 at scale 448, row 1
    all -6 at scale 448, rows 2-3 nonzero codes at scale 0 (and -0), the rest
    random (some zero blocks too)."""
    w = oracle.quantize(
        np.random.default_rng(5).standard_normal((n, k)).astype(np.float32), "nvfp4", axis=1
    )
    codes, scales = w.codes.view(np.uint8).copy(), w.scales.view(np.uint8).copy()
    codes[0], scales[0] = 0x7, 0x7E  # +6, 448
    codes[1], scales[1] = 0xF, 0x7E  # -6, 448
    codes[2:4] = 0xF  # -6 under a zero scale: P < 0, f32(P) * 0 = -0
    scales[2], scales[3] = 0x00, 0x80  # +0 and -0 scales
    scales[5:9, 1] = 0x00  # zero blocks among random ones
    return MXArray(
        codes.view(w.codes.dtype), scales.view(w.scales.dtype), "nvfp4", 16, axis=1,
        global_scale=w.global_scale,
    )  # fmt: skip


def _activations(m=70, k=64) -> np.ndarray:
    """Rows that quantize to int8 127 everywhere (|P| the largest), -127,
    near the f32 range's bottom (tiny scales), zero and -0, random."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0] = 1.984375  # 127 / 64: every int8 code 127
    x[1] = -1.984375
    x[2] = np.float32(2.0**-126) * rng.standard_normal(k).astype(np.float32)
    x[3] = np.float32(2.0**-140)  # subnormal: E8M0 scale at its floor
    x[4] = 0.0
    x[5] = -0.0
    x[6:10] *= np.float32(2.0**-100)
    return x


@pytest.mark.parametrize("cpu", ["host", "avx2", "avx-vnni"])
def test_edges_equal_the_oracle(monkeypatch, cpu):
    if cpu in AVX2_MASKS:
        mask_avx2(monkeypatch, cpu)
    w, x = _weight(), _activations()
    want = nvfp4_i8_oracle(w, x)
    lin = mlir_mx.Linear(w, activations="i8", threads=2)
    for m in (70, 5, 1):  # prefill, small, decode
        for threads in (1, 2):
            got = lin(x[:m], threads=threads)
            assert same_bits(got, want[:m]).all(), (cpu, lin.schedule(x[:m]), m, threads)
    assert np.signbit(want[:70, 2:4]).sum() == 0  # the -0 partials never reach C


def test_lifted_where_the_product_is_exact_in_the_expanding_x86_kernels():
    """The lifted step (``biased`` docstring): the biased step's problems,
    in the kernels that expand B's chunks, off NEON, while ``block * max|a|
    * max|b| < 2^20`` keeps ``P * sb`` exact."""
    from mlir_mx.kernels.dot.biased import lifted
    from mlir_mx.kernels.dot.isa import DotISA

    wide = DotISA("avx512-vnni", True, True, False)
    half = DotISA("avx2", False, False, True)
    neon = DotISA("neon-sdot", False, True, True, True)
    i8 = KINDS["i8"]
    assert lifted(_prob(), i8, wide, expand=True)
    assert lifted(_prob(), i8, half, expand=True)
    assert not lifted(_prob(), i8, wide, expand=False)  # decode keeps the biased step
    assert not lifted(_prob(), i8, neon, expand=True)
    assert not lifted(_prob(scale_type="f8E8M0FNU"), i8, wide, expand=True)
    assert not lifted(_prob(b_dot=None), i8, wide, expand=True)
    assert lifted(_prob(block=512), i8, wide, expand=True)  # 512 * 128 * 12 < 2^20
    assert not lifted(_prob(block=1024), i8, wide, expand=True)  # above 2^20, below 2^22
    assert biased(_prob(block=1024), i8) == BIAS


def _small_scale_weight(n=128, k=64) -> MXArray:
    """NVFP4 weight whose E4M3 block scales are all small (codes 0x01-0x04:
    2^-9 .. 2^-7, subnormal), so that activations near the top of the f32
    range still give finite outputs."""
    rng = np.random.default_rng(8)
    codes = rng.integers(0, 16, (n, k), dtype=np.uint8)
    scales = rng.integers(1, 5, (n, k // 16), dtype=np.uint8)
    w = oracle.quantize(np.ones((n, k), np.float32), "nvfp4", axis=1)
    return MXArray(
        codes.view(w.codes.dtype), scales.view(w.scales.dtype), "nvfp4", 16, axis=1,
        global_scale=w.global_scale,
    )  # fmt: skip


@pytest.mark.parametrize("cpu", ["host", "avx2", "avx-vnni"])
def test_an_a_scale_of_2_to_the_127_takes_the_biased_form(monkeypatch, cpu):
    """An activation block whose E8M0 scale is ``2^127`` (values from
    ``2^127`` to f32's max) makes the lift ``1.5 * 2^128`` overflow: the call
    takes the kernel's biased form and still gives the oracle's bits, as
    the calls without such a block (the lifted form) do; NaN and Inf rows
    give NaN either way."""
    if cpu in AVX2_MASKS:
        mask_avx2(monkeypatch, cpu)
    w = _small_scale_weight()
    rng = np.random.default_rng(9)
    x = rng.standard_normal((70, 64)).astype(np.float32)
    x[3, :16] = np.float32(1.5 * 2.0**127)  # E8M0 scale 2^127 in block 0 of row 3
    x[4] = 0.0
    x[4, 16:32] = np.float32(3.0e38) * np.sign(rng.standard_normal(16)).astype(np.float32)
    x[5, 20], x[6, 40] = np.nan, np.inf
    x[7] = np.float32(2.0**-140)  # the lift's bottom: scale 2^-127
    want = nvfp4_i8_oracle(w, x)
    assert np.isfinite(want[3:5]).all() and (np.abs(want[3:5]) > 2.0**100).any()
    assert np.isnan(want[5:7]).all()
    lin = mlir_mx.Linear(w, activations="i8", threads=2)
    for m in (70, 5):  # int-prefill, int-small: the expanding kernels
        for rows in (slice(0, m), slice(5, 5 + m)):  # with the 2^127 rows, and without
            for threads in (1, 2):
                got = lin(x[rows], threads=threads)
                assert same_bits(got, want[rows]).all(), (cpu, lin.schedule(x[rows]), m, threads)
