"""The CPU's dot-product instructions, emitted through ``llvm.call_intrinsic``.

The smallest working example of each instruction the dot kernels use
(``vpdpbusd``, ``vpdpwssd``, ``vpmaddubsw``, ``vpmaddwd``, ``vdpbf16ps``; LLVM
22 signatures, i8-vector VNNI operands), lowered by ``memref-to-llvm`` and run
by the JIT, against numpy; and the facts about ``vdpbf16ps`` the bf16 kernels
rest on (``bench/results/dot-units-findings-2026-12-01.md``): odd product
first, two RNE roundings, DAZ/FTZ, and the swapped-pair chain over an MX
block equal to the in-order f32 FMA chain.  Each test skips, with the
reason, on a CPU without the instruction.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mlir_mx.execution import Runner
from mlir_mx.host import has_features
from mlir_mx.numerics import ELEMENT_FORMATS, decode_elements, finite_codes
from mlir_mx.pipelines import load_pipeline

VNNI = pytest.mark.skipif(
    not has_features("avx512_vnni"), reason="the CPU has no AVX512-VNNI (vpdpbusd/vpdpwssd)"
)
BW = pytest.mark.skipif(
    not has_features("avx512bw"), reason="the CPU has no AVX512BW (vpmaddubsw/vpmaddwd)"
)
BF16 = pytest.mark.skipif(
    not has_features("avx512_bf16"), reason="the CPU has no AVX512_BF16 (vdpbf16ps)"
)


def _run_binary(name, acc_t, a_t, n_acc, n_a, acc, a, b):
    """``out = name([acc,] a, b)`` on one vector each, through the JIT."""
    with_acc = acc is not None
    operands = ("%c, " if with_acc else "") + "%a, %b"
    types = (f"{acc_t}, " if with_acc else "") + f"{a_t}, {a_t}"
    src = f"""
func.func @f(%pa: memref<{n_a}>, %pb: memref<{n_a}>, %pc: memref<{n_acc}>) {{
  %z = arith.constant 0 : index
  %a = vector.load %pa[%z] : memref<{n_a}>, {a_t}
  %b = vector.load %pb[%z] : memref<{n_a}>, {a_t}
  %c = vector.load %pc[%z] : memref<{n_acc}>, {acc_t}
  %r = llvm.call_intrinsic "{name}"({operands}) : ({types}) -> {acc_t}
  vector.store %r, %pc[%z] : memref<{n_acc}>, {acc_t}
  return
}}"""
    out = acc.copy() if with_acc else np.zeros(int(n_acc.split("x")[0]), _DT[n_acc])
    Runner(src, load_pipeline("memref-to-llvm")).invoke("f", a, b, out)
    return out


_DT = {"16xi32": np.int32, "32xi16": np.int16, "16xf32": np.float32}


@VNNI
def test_vpdpbusd_u8_times_s8_quads():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, 64).astype(np.uint8)
    b = rng.integers(-128, 128, 64).astype(np.int8)
    acc = rng.integers(-(2**20), 2**20, 16).astype(np.int32)
    got = _run_binary(
        "llvm.x86.avx512.vpdpbusd.512", "vector<16xi32>", "vector<64xi8>",
        "16xi32", "64xi8", acc, a.view(np.int8), b,
    )  # fmt: skip
    want = acc + (a.astype(np.int32) * b).reshape(16, 4).sum(1)
    np.testing.assert_array_equal(got, want)


@VNNI
def test_vpdpwssd_s16_pairs():
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-(2**15), 2**15, 32).astype(np.int16) for _ in range(2))
    acc = rng.integers(-(2**20), 2**20, 16).astype(np.int32)
    got = _run_binary(
        "llvm.x86.avx512.vpdpwssd.512", "vector<16xi32>", "vector<32xi16>",
        "16xi32", "32xi16", acc, a, b,
    )  # fmt: skip
    want = acc + (a.astype(np.int64) * b).reshape(16, 2).sum(1).astype(np.int32)
    np.testing.assert_array_equal(got, want)


@BW
def test_vpmaddubsw_saturates_and_vpmaddwd_does_not():
    a = np.full(64, 255, np.uint8)
    b = np.tile(np.array([127, 127, 12, 12], np.int8), 16)
    got = _run_binary(
        "llvm.x86.avx512.pmaddubs.w.512", "vector<32xi16>", "vector<64xi8>",
        "32xi16", "64xi8", None, a.view(np.int8), b,
    )  # fmt: skip
    # 255*127*2 = 64770 saturates to 32767; 255*12*2 = 6120 is exact.
    np.testing.assert_array_equal(got, np.tile(np.array([32767, 6120], np.int16), 16))
    x = np.tile(np.array([-32768, 32767], np.int16), 16)
    got = _run_binary(
        "llvm.x86.avx512.pmaddw.d.512", "vector<16xi32>", "vector<32xi16>",
        "16xi32", "32xi16", None, x, x,
    )  # fmt: skip
    np.testing.assert_array_equal(got, np.full(16, 32768**2 + 32767**2, np.int64))


def _dpbf16(acc, a, b):
    return _run_binary(
        "llvm.x86.avx512bf16.dpbf16ps.512", "vector<16xf32>", "vector<32xbf16>",
        "16xf32", "32xbf16", np.asarray(acc, np.float32),
        np.asarray(a, np.float32).astype(ml_dtypes.bfloat16),
        np.asarray(b, np.float32).astype(ml_dtypes.bfloat16),
    )  # fmt: skip


@BF16
@pytest.mark.parametrize(
    "acc, even, odd, want",
    [
        (2.0**24, 1.0, 1.0, 2.0**24),  # two roundings (one would give 2^24 + 2)
        (1.0, -(2.0**24), 2.0**24, 0.0),  # odd first (even first gives 1)
        (1.0, 2.0**24, -(2.0**24), 1.0),  # odd first (even first gives 0)
        (1.0 + 2.0**-23, 0.0, 2.0**-24, 1.0 + 2.0**-22),  # ties to even
        (2.0**-126, 2.0**-126, -(2.0**-127), 2.0**-126),  # FTZ after each FMA
        (2.0**-130, 0.0, 0.0, 0.0),  # DAZ on the accumulator
        (0.0, -(2.0**200), 2.0**200, np.inf),  # products exact inside the FMAs
    ],
)
def test_vdpbf16ps_is_odd_first_fma_then_even_fma(acc, even, odd, want):
    """Lane 0: ``fma(a0, b0, fma(a1, b1, acc))`` with DAZ in, FTZ out, RNE."""

    def factors(p):  # p = x * y with x, y exact in bf16
        if p == 0 or abs(p) < 2.0**-120:
            return (p * 2.0**60, 2.0**-60) if p else (0.0, 0.0)
        e = int(np.floor(np.log2(abs(p)))) // 2
        return p / 2.0**e, 2.0**e

    ae, be = factors(even)
    ao, bo = factors(odd)
    a = np.zeros(32, np.float32)
    b = np.zeros(32, np.float32)
    a[0], b[0], a[1], b[1] = ae, be, ao, bo
    accv = np.zeros(16, np.float32)
    accv[0] = acc
    got = _dpbf16(accv, a, b)[0]
    assert got == np.float32(want) and np.signbit(got) == np.signbit(np.float32(want))


def _chains_module(nk: int) -> str:
    """``@chains``: the swapped-pair vdpbf16ps chain and the in-order FMA chain."""
    j = nk // 2
    return f"""
func.func @chains(%ap: memref<{j}x32xbf16>, %bp: memref<{j}x32xbf16>,
                  %af: memref<{nk}x16xf32>, %bf: memref<{nk}x16xf32>,
                  %o1: memref<16xf32>, %o2: memref<16xf32>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cj = arith.constant {j} : index
  %ck = arith.constant {nk} : index
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %p1 = scf.for %i = %c0 to %cj step %c1 iter_args(%p = %zero) -> vector<16xf32> {{
    %a = vector.load %ap[%i, %c0] : memref<{j}x32xbf16>, vector<32xbf16>
    %b = vector.load %bp[%i, %c0] : memref<{j}x32xbf16>, vector<32xbf16>
    %r = llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"(%p, %a, %b)
        : (vector<16xf32>, vector<32xbf16>, vector<32xbf16>) -> vector<16xf32>
    scf.yield %r : vector<16xf32>
  }}
  %p2 = scf.for %k = %c0 to %ck step %c1 iter_args(%p = %zero) -> vector<16xf32> {{
    %a = vector.load %af[%k, %c0] : memref<{nk}x16xf32>, vector<16xf32>
    %b = vector.load %bf[%k, %c0] : memref<{nk}x16xf32>, vector<16xf32>
    %r = vector.fma %a, %b, %p : vector<16xf32>
    scf.yield %r : vector<16xf32>
  }}
  vector.store %p1, %o1[%c0] : memref<16xf32>, vector<16xf32>
  vector.store %p2, %o2[%c0] : memref<16xf32>, vector<16xf32>
  return
}}"""


def _swapped_pairs(v: np.ndarray) -> np.ndarray:
    """(K, 16) values -> (K/2, 32) bf16: pair j of lane l holds element 2j in
    the odd slot (2l + 1) and element 2j + 1 in the even slot (2l)."""
    k = v.shape[0]
    out = np.empty((k // 2, 32), np.float32)
    out[:, 1::2] = v[0::2]
    out[:, 0::2] = v[1::2]
    return out.astype(ml_dtypes.bfloat16)


def _element_values(elem: str, rng, shape, mode: str) -> np.ndarray:
    codes = finite_codes(elem)
    if mode == "special" and ELEMENT_FORMATS[elem].has_nan:
        fmt = ELEMENT_FORMATS[elem]
        codes = np.arange(fmt.num_codes, dtype=np.uint8).view(fmt.dtype)
    vals = decode_elements(codes, elem)
    if mode == "extreme":
        fin = np.abs(vals[np.isfinite(vals) & (vals != 0)])
        vals = np.array([fin.max(), fin.min(), -fin.max(), -fin.min()])
    return rng.choice(vals, shape).astype(np.float32)


@BF16
@pytest.mark.parametrize("ea", ["f8E4M3FN", "f8E5M2", "f6E3M2FN", "i8"])
@pytest.mark.parametrize("eb", ["f8E4M3FN", "f8E5M2", "f4E2M1FN"])
def test_swapped_pair_chain_equals_in_order_fma_chain(ea, eb):
    """Over blocks of 32 MX element values (random, extreme magnitudes,
    cancelling pairs, NaN/Inf codes) the swapped-pair ``vdpbf16ps`` chain is
    the in-order ``p = fma(a[k], b[k], p)`` chain bit for bit."""
    rng = np.random.default_rng(3)
    runner = Runner(_chains_module(32), load_pipeline("memref-to-llvm"))
    for trial, mode in enumerate(["random", "extreme", "cancel", "special"] * 25):
        a = _element_values(ea, rng, (32, 16), mode)
        b = _element_values(eb, rng, (32, 16), "extreme" if mode == "extreme" else mode)
        if mode == "cancel":
            a[1::2], b[1::2] = -a[0::2], b[0::2]
        o1, o2 = np.zeros(16, np.float32), np.zeros(16, np.float32)
        runner.invoke("chains", _swapped_pairs(a), _swapped_pairs(b), a, b, o1, o2)
        same = (o1.view(np.uint32) == o2.view(np.uint32)) | (np.isnan(o1) & np.isnan(o2))
        assert same.all(), (trial, mode, o1[~same], o2[~same])
