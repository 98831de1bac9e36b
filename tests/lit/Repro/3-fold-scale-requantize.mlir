// RUN: mx-runner %s -e main --entry-point-result=f32 | FileCheck %s
// RUN: mx-opt %s --canonicalize | mx-runner - -e main --entry-point-result=f32 | FileCheck %s
// RUN: mx-opt %s --canonicalize | FileCheck %s --check-prefix=CANON
// RUN: mx-opt %s --mx-fuse-scales | mx-runner - -e main --entry-point-result=f32 | FileCheck %s --check-prefix=FUSED
// A canonicalization must not change what a program computes: fold_scale by 3.0
// requantizes (docs/dialect.md), with and without --canonicalize (it was 3.375
// after --canonicalize: dequant fusion, now the opt-in mx-fuse-scales).
// CHECK: 3.5
// CANON: mx.fold_scale
// FUSED: 3.375
// dequantize(fold_scale(t, 3.0)).  The seed defines this only through its
// canonicalization DequantizeFoldScaleFusion: dequantize(t) * splat(3.0)
// (exact f32 scaling); the seed's --mx-to-linalg has NO fold_scale pattern.
// Python lowers fold_scale with a non-power-of-two alpha by requantizing
// dequantize(t) * alpha, which rounds to f8E4M3FN again.
// x[0,0] = 1.125 (mantissa 288, scale 2^-8, exact); 1.125 * 3 = 3.375.
// Requantized: scale 2^-7, 3.375 * 128 = 432 -> rounds to 448 -> 3.5.
func.func @main() -> f32 {
  %v0 = arith.constant 1.125 : f32
  %ones = arith.constant dense<1.0> : tensor<1x32xf32>
  %c0 = arith.constant 0 : index
  %x = tensor.insert %v0 into %ones[%c0, %c0] : tensor<1x32xf32>
  %t = mx.quantize_block %x : tensor<1x32xf32> -> !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %alpha = arith.constant 3.0 : f32
  %s = mx.fold_scale %t, %alpha : !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f32 -> !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %d = mx.dequantize_block %s : !mx.tensor<1x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<1x32xf32>
  %v = tensor.extract %d[%c0, %c0] : tensor<1x32xf32>
  return %v : f32
}
