// RUN: mx-opt %s --mx-to-linalg | sed '$d' > %t.plain.mlir
// RUN: cat %S/Inputs/5-main.mlir.part >> %t.plain.mlir
// RUN: mx-runner %t.plain.mlir -e main --entry-point-result=f32 | FileCheck %s
// RUN: mx-opt %s --canonicalize --mx-to-linalg | sed '$d' > %t.canon.mlir
// RUN: cat %S/Inputs/5-main.mlir.part >> %t.canon.mlir
// RUN: mx-runner %t.canon.mlir -e main --entry-point-result=f32 | FileCheck %s
// With 5-main.mlir.part (a main calling @f with an element NaN code): element
// [0,0] is NaN with and without --canonicalize; quantize(dequantize(t)) -> t
// no longer fires on an arbitrary t (it kept 1.0).
// CHECK: nan
// dequantize(quantize(dequantize(t))) where one element of t is NaN.
// Seed --canonicalize: no pattern for quantize(dequantize(t)); the requantize
// sees amax = NaN (arith.maximumf propagates NaN), so the whole block gets a
// NaN scale -> result[0,0] = NaN (Python without --canonicalize agrees: NaN).
// Python --canonicalize folds quantize(dequantize(t)) -> t -> result[0,0] = 1.0.
func.func @f(%t: !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) -> tensor<1x32xf32> {
  %d = mx.dequantize_block %t : !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<1x32xf32>
  %q = mx.quantize_block %d : tensor<1x32xf32> -> !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %r = mx.dequantize_block %q : !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<1x32xf32>
  return %r : tensor<1x32xf32>
}
