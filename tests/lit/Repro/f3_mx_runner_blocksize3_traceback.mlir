// RUN: mx-runner %s -e main --entry-point-result=void 2>&1 | FileCheck %s
// Round 2, f3_mx_runner_blocksize3_traceback: block size 3 (not a power of two) at M = 64
// takes the prefill kernel, whose K chunk was a fixed 512: "kc must be a multiple of 3"
// and a traceback.  The chunk is now rounded to whole blocks.  Each output element is
// sum over 96 of 1.5 * 1.0 = 144.
// CHECK-NOT: Traceback
// CHECK: {{\[}}[144, 144, 144, 144]]
!A = !mx.tensor<64x96xf8E4M3FN, block_size = 3, scale_type = f8E8M0FNU>
func.func private @printMemrefF32(tensor<*xf32>)
func.func @main() {
  %x = arith.constant dense<1.5> : tensor<64x96xf32>
  %b = arith.constant dense<1.0> : tensor<96x16xf32>
  %acc = arith.constant dense<0.0> : tensor<64x16xf32>
  %a = mx.quantize_block %x : tensor<64x96xf32> -> !A
  %c = mx.block_matmul %a, %b, %acc : !A, tensor<96x16xf32>, tensor<64x16xf32> -> tensor<64x16xf32>
  %s = tensor.extract_slice %c[0, 0] [1, 4] [1, 1] : tensor<64x16xf32> to tensor<1x4xf32>
  %u = tensor.cast %s : tensor<1x4xf32> to tensor<*xf32>
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
