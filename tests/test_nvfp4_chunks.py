"""NVFP4's integer prefill over its K chunks (issue 54): ``chunk_blocks``
gives as many K values per chunk as MXFP4's, and the oracle's bits
(``oracle.blocked_order``) hold over one full K chunk and a tail chunk
(``int-prefill``) and in ``int-small`` (the lifted step,
``mlir_mx.kernels.dot.biased``) and at decode (the biased step), 1 and 2
threads, on this CPU's kernels and under the AVX2 and AVX-VNNI masks.
"""

from __future__ import annotations

import numpy as np
import pytest
from dot_cases import AVX2_MASKS, mask_avx2, nvfp4_i8_oracle, same_bits

import mlir_mx
from mlir_mx import oracle
from mlir_mx.kernels import Problem
from mlir_mx.kernels.dot.biased import BIAS, chunk_blocks
from mlir_mx.kernels.dot.units import KINDS
from mlir_mx.numerics import MXArray
from mlir_mx.numerics.formats import E4M3_SCALE_TYPE

FP4 = "f4E2M1FN"


def _prob(block=16, scale_type=E4M3_SCALE_TYPE, b_dot="i8", b_element=FP4):
    return Problem(
        None, 128, 4096, block, None, b_element, a_quant="i8", b_dot=b_dot,
        b_scale_type=scale_type,
    )  # fmt: skip


def test_nvfp4_l2_chunks_hold_as_many_k_values_as_mxfp4s():
    kind = KINDS["i8"]
    assert chunk_blocks(_prob(), kind, 128, True) == 256  # one chunk for K = 4096
    assert chunk_blocks(_prob(), kind, 8, True) == 8  # int-small's L1 chunks stay
    assert chunk_blocks(_prob(), kind, 128, False) == 128
    assert chunk_blocks(_prob(block=32, scale_type="f8E8M0FNU"), kind, 128, True) == 128
    assert chunk_blocks(_prob(block=32), kind, 128, True) == 128


def _weight(n: int, k: int) -> MXArray:
    """Random NVFP4 weight with rows of all +6 / all -6 at scale 448 (the
    largest partials), and a zero block."""
    rng = np.random.default_rng(11)
    w = oracle.quantize(rng.standard_normal((n, k)).astype(np.float32), "nvfp4", axis=1)
    codes, scales = w.codes.view(np.uint8).copy(), w.scales.view(np.uint8).copy()
    codes[0], scales[0] = 0x7, 0x7E
    codes[1], scales[1] = 0xF, 0x7E
    scales[4, 3] = 0x00
    return MXArray(
        codes.view(w.codes.dtype), scales.view(w.scales.dtype), "nvfp4", 16, axis=1,
        global_scale=w.global_scale,
    )  # fmt: skip


def _x(m: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(12)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0] = 1.984375  # every int8 code 127
    x[1] = -1.984375  # -127
    x[2] = 0.0
    return x


@pytest.mark.parametrize("cpu", ["host", "avx2", "avx-vnni"])
def test_one_chunk_and_a_tail_equal_the_oracle(monkeypatch, cpu):
    """K = 4096 + 48: one chunk of 256 blocks of 16 and a tail of 3 blocks
    (int-prefill, 53 rows: 9 row groups, the last a row tail), int-small and
    decode; 1 and 2 threads."""
    if cpu in AVX2_MASKS:
        mask_avx2(monkeypatch, cpu)
    k = 4096 + 48
    w, x = _weight(64, k), _x(53, k)
    want = nvfp4_i8_oracle(w, x)
    lin = mlir_mx.Linear(w, activations="i8", threads=2)
    for m, schedule in ((53, "int-prefill"), (5, "int-small"), (1, None)):
        if cpu == "host" and schedule is not None:
            assert lin.schedule(x[:m]) == schedule
        for threads in (1, 2):
            got = lin(x[:m], threads=threads)
            assert same_bits(got, want[:m]).all(), (cpu, lin.schedule(x[:m]), m, threads)
    assert BIAS == 0x4B400000
