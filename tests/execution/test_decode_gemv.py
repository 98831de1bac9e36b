"""Decode-GEMV pipelines of bench/decode_gemv.py, end to end on small shapes.

* ``mx-vectorize-blocked`` (partials tiled [1, 1, 8, 32]: kk reduced in
  chunks of 8 carried by an scf.for) at decode-like M (1, 3) with N a
  multiple of 32 and not (masked vectors), mx x mx and mx x f32, against
  the f64 oracle with the bound ``(K + 2) * 2^-24 * sum_k |a_ik| |b_kj|``.
* ``decode-f32-vectorize`` (the f32 baseline) on the plain f32 matmul.
"""

from __future__ import annotations

import numpy as np
import pytest

from mlir_mx import oracle
from mlir_mx.execution import Runner
from mlir_mx.pipelines import load_pipeline
from mlir_mx.roofline.variants import parse_shape, variant_module_text

LLVM = load_pipeline("lower-to-llvm")


def _check(got, da, db, acc):
    exact = acc.astype(np.float64) + da.astype(np.float64) @ db.astype(np.float64)
    k = da.shape[1]
    bound = (k + 2) * 2.0**-24 * (np.abs(acc) + np.abs(da).astype(np.float64) @ np.abs(db))
    assert np.all(np.abs(got - exact) <= bound)


@pytest.mark.parametrize("shape", ["1x64x96", "3x40x64", "1x96x128"])
@pytest.mark.parametrize("variant", ["mx-ab", "mx-a"])
def test_blocked_vectorized_decode(shape, variant):
    s = parse_shape(shape)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((s.M, s.K)).astype(np.float32)
    b = rng.standard_normal((s.K, s.N)).astype(np.float32)
    # Block scales spread over 2^-10..2^10.
    a *= np.repeat(np.exp2(rng.integers(-10, 11, (s.M, s.K // 32))), 32, axis=1)
    b *= np.repeat(np.exp2(rng.integers(-10, 11, (s.K // 32, s.N))), 32, axis=0)
    qa = oracle.quantize(a, "f8E4M3FN", 32)
    da = oracle.dequantize(qa)
    if variant == "mx-ab":
        qb = oracle.quantize(b, "f8E4M3FN", 32, axis=0)
        db = oracle.dequantize(qb)
    else:
        qb = db = b
    acc = rng.standard_normal((s.M, s.N)).astype(np.float32)
    r = Runner(variant_module_text(variant, s), load_pipeline("mx-vectorize-blocked") + LLVM)
    _check(r.invoke("kernel", qa, qb, acc.copy()), da, db, acc)
    # @bench twice on the same accumulator = acc + 2 A B.
    got = r.invoke("bench", qa, qb, acc.copy(), 2)
    _check(got, np.concatenate([da, da], axis=1), np.concatenate([db, db], axis=0), acc)


@pytest.mark.parametrize("shape", ["1x64x96", "3x40x64"])
def test_f32_baseline(shape):
    s = parse_shape(shape)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((s.M, s.K)).astype(np.float32)
    b = rng.standard_normal((s.K, s.N)).astype(np.float32)
    acc = rng.standard_normal((s.M, s.N)).astype(np.float32)
    r = Runner(variant_module_text("f32", s), load_pipeline("decode-f32-vectorize") + LLVM)
    _check(r.invoke("kernel", a, b, acc.copy()), a, b, acc)
