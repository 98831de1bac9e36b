// The v1 run-roundtrip program (never ran in v1): quantize then dequantize a
// 32x64 splat of 2.0 and print it.  Every element must come back as 2.
// RUN: mx-runner %s -e main --entry-point-result=void | FileCheck %s

// CHECK: rank = 2 offset = 0 sizes = [32, 64] strides = [64, 1] data =
// CHECK-COUNT-32: {{^ ?\[?\[(2, +){63}2\]}}
// CHECK-NOT: {{[0-9]}}
func.func private @printMemrefF32(tensor<*xf32>)

func.func @main() {
  %two = arith.constant dense<2.0> : tensor<32x64xf32>
  %q = mx.quantize_block %two : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %d = mx.dequantize_block %q : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
  %u = tensor.cast %d : tensor<32x64xf32> to tensor<*xf32>
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
