"""``mx-canonicalize`` from Python: what each pattern rewrites and leaves, and
that the rewrites are exact (the same bits as the oracle and as the module
without the pass).  The IR shapes are pinned by
``tests/lit/Transforms/mx-canonicalize.mlir``."""

from __future__ import annotations

import numpy as np
from mlir import ir

from mlir_mx import oracle
from mlir_mx.dialect import parse_module
from mlir_mx.execution import Runner
from mlir_mx.ir_utils import collect
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import load_pipeline

T = "!mx.tensor<4x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
X = "tensor<4x64xf32>"

# q -> dq -> q2 (requantization of a quantize_block: exact) -> fold_scale 1.0
# (exact) -> dq2; plus a dead quantize_block.
ROUNDTRIP = f"""
func.func @f(%x: {X}) -> {X} {{
  %one = arith.constant 1.0 : f32
  %q = mx.quantize_block %x : {X} -> {T}
  %dead = mx.quantize_block %x : {X} -> {T}
  %d = mx.dequantize_block %q : {T} -> {X}
  %q2 = mx.quantize_block %d : {X} -> {T}
  %s = mx.fold_scale %q2, %one : {T}, f32 -> {T}
  %d2 = mx.dequantize_block %s : {T} -> {X}
  return %d2 : {X}
}}
"""

# quantize(dequantize(t)) of an ARGUMENT is kept: t may be non-canonical.
ARGUMENT = f"""
func.func @g(%t: {T}) -> {T} {{
  %d = mx.dequantize_block %t : {T} -> {X}
  %q = mx.quantize_block %d : {X} -> {T}
  return %q : {T}
}}
"""


def names_after(text: str, pipeline: str) -> list[str]:
    ctx = ir.Context()
    module = parse_module(text, ctx)
    run_pipeline(module, pipeline)
    return [o.name for o in collect(module, lambda o: o.name.startswith("mx."))]


def test_patterns_fold_to_one_quantize_and_one_dequantize():
    assert names_after(ROUNDTRIP, "mx-canonicalize") == ["mx.quantize_block", "mx.dequantize_block"]


def test_requantizing_an_argument_is_not_folded():
    assert names_after(ARGUMENT, "mx-canonicalize") == ["mx.dequantize_block", "mx.quantize_block"]


def test_canonicalize_runs_the_mx_patterns_first():
    assert names_after(ROUNDTRIP, "canonicalize") == ["mx.quantize_block", "mx.dequantize_block"]


def test_the_rewrites_are_exact():
    """With and without the pass: the same bits, and the oracle's
    dequantize(quantize(x)), on values that hit NaN, Inf, overflow and
    subnormal blocks."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((4, 64)) * 2.0 ** rng.integers(-140, 130, (4, 64))).astype(np.float32)
    x[0, 3], x[1, 40], x[2, 0] = np.nan, np.inf, -0.0
    llvm = load_pipeline("lower-to-llvm")
    plain = Runner(ROUNDTRIP, "mx-to-linalg," + llvm).invoke("f", x)
    canon = Runner(ROUNDTRIP, "mx-canonicalize,mx-to-linalg," + llvm).invoke("f", x)
    want = oracle.dequantize(oracle.quantize(x, "f8E4M3FN", 32)).astype(np.float32)
    assert np.array_equal(canon.view(np.uint32), plain.view(np.uint32))
    assert np.array_equal(canon.view(np.uint32), want.view(np.uint32))
