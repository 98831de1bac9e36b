"""``mx-fuse-scales`` from Python: the constant chain is rounded to f32 once,
``dequantize(fold_scale(t, a))`` becomes ``dequantize(t) * a`` for a runtime
``a``, and the fused form computes the f32 product (not fold_scale's MX
rounding: the reason the pass is opt-in).  The IR shapes are pinned by
``tests/lit/Transforms/mx-fuse-scales.mlir``."""

from __future__ import annotations

import numpy as np
from mlir import ir

from mlir_mx import oracle
from mlir_mx.dialect import parse_module
from mlir_mx.execution import Runner
from mlir_mx.ir_utils import collect, constant_float
from mlir_mx.passes.pipeline import run_pipeline
from mlir_mx.pipelines import load_pipeline

T = "!mx.tensor<2x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>"
X = "tensor<2x32xf32>"

CHAIN = f"""
func.func @chain(%t: {T}) -> {T} {{
  %a = arith.constant 1.1 : f32
  %b = arith.constant 3.3 : f32
  %0 = mx.fold_scale %t, %a : {T}, f32 -> {T}
  %1 = mx.fold_scale %0, %b : {T}, f32 -> {T}
  return %1 : {T}
}}
"""

SCALED = f"""
func.func @scaled(%t: {T}, %a: f32) -> {X} {{
  %0 = mx.fold_scale %t, %a : {T}, f32 -> {T}
  %1 = mx.dequantize_block %0 : {T} -> {X}
  return %1 : {X}
}}
"""


def fused(text: str) -> ir.Module:
    module = parse_module(text, ir.Context())
    run_pipeline(module, "mx-fuse-scales")
    return module


def test_a_constant_chain_becomes_one_fold_scale_with_the_f32_product():
    module = fused(CHAIN)
    (fs,) = collect(module, lambda o: o.name == "mx.fold_scale")
    assert constant_float(fs.operands[1]) == float(np.float32(1.1) * np.float32(3.3))


def test_dequantize_of_fold_scale_becomes_a_multiply():
    module = fused(SCALED)
    names = [o.name for o in collect(module, lambda o: o.name.startswith(("mx.", "arith.mulf")))]
    assert names == ["mx.dequantize_block", "arith.mulf"]


def test_the_fused_form_is_the_f32_product_not_the_mx_rounding():
    """1.125 x 3 in E4M3: fold_scale requantizes to 3.5, the fused form
    gives 3.375 = f32(dequantize(t)) * f32(alpha), bit for bit."""
    x = np.full((2, 32), 1.125, np.float32)
    x[1] = np.linspace(-4, 4, 32, dtype=np.float32)
    t = oracle.quantize(x, "f8E4M3FN", 32)
    llvm = load_pipeline("lower-to-llvm")
    defined = Runner(SCALED, "mx-to-linalg," + llvm).invoke("scaled", t, 3.0)
    fast = Runner(SCALED, "mx-fuse-scales,mx-to-linalg," + llvm).invoke("scaled", t, 3.0)
    expected = oracle.dequantize(t).astype(np.float32) * np.float32(3.0)
    assert np.array_equal(fast.view(np.uint32), expected.view(np.uint32))
    assert fast[0, 0] == 3.375 and defined[0, 0] == 3.5
    want = oracle.dequantize(oracle.fold_scale(t, 3.0)).astype(np.float32)
    assert np.array_equal(defined.view(np.uint32), want.view(np.uint32))
