// RUN: not mx-runner %s -e main --entry-point-result=void 2>&1 | FileCheck %s
// Was: a traceback from mx-to-linalg's documented failure on scf.if; now its diagnostic.
// CHECK-NOT: Traceback
// CHECK: runner-scf-if-mx-traceback.mlir:{{[0-9]+}}:{{[0-9]+}}: error: mx-to-linalg: an !mx.tensor value is still used by 'scf.yield'
func.func private @printMemrefF32(tensor<*xf32>)
func.func @main() {
  %c = arith.constant true
  %x = arith.constant dense<2.0> : tensor<4x32xf32>
  %q = mx.quantize_block %x : tensor<4x32xf32> -> !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %r = scf.if %c -> (!mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) {
    scf.yield %q : !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  } else {
    scf.yield %q : !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  }
  %d = mx.dequantize_block %r : !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<4x32xf32>
  %u = tensor.cast %d : tensor<4x32xf32> to tensor<*xf32>
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
