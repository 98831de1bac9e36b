// RUN: mx-opt %s --verify-diagnostics
// RUN: not mx-opt %s 2>&1 | FileCheck %s
// A fuzzer mutant: '6?4' in a dimension list was a traceback under --verify-diagnostics.
// CHECK-NOT: Traceback
// A v1-style block matmul (own test input).
func.func @mm(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  // expected-error@+2 {{!mx.tensor requires a static shape; '?' is not allowed}}
  // CHECK: fuzz-opt-verify-traceback-817.mlir:[[@LINE+1]]:50: error: !mx.tensor requires a static shape; '?' is not allowed
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x6?4xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}
