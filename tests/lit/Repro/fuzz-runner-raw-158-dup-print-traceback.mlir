// RUN: not mx-runner %s -e main --entry-point-result=void 2>&1 | FileCheck %s
// A fuzzer mutant (a duplicated print): was a traceback (MLIRError); now the diagnostic.
// CHECK-NOT: Traceback
// CHECK: fuzz-runner-raw-158-dup-print-traceback.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'tensor.cast' op not bufferizable under the given constraints: cannot avoid RaW conflict
// The v1 run-roundtrip program: quantize then dequantize a 32x64 splat of 2.0
// and print it.  2.0 has exponent 1, so the E4M3 block scale is 2^(1-8) = 2^-7
// and every mantissa is 2.0 / 2^-7 = 256; dequantizing gives 2.0 back.
//   mx-runner examples/run-roundtrip.mlir -e main --entry-point-result=void
func.func private @printMemrefF32(tensor<*xf32>)

func.func @main() {
  %two = arith.constant dense<2.0> : tensor<32x64xf32>
  %q = mx.quantize_block %two : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %d = mx.dequantize_block %q : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
  %u = tensor.cast %d : tensor<32x64xf32> to tensor<*xf32>
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
