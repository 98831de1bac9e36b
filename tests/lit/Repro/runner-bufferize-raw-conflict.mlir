// RUN: not mx-runner %s -e main --entry-point-result=void 2>&1 | FileCheck %s
// Was: a traceback (MLIRError) from the lowering; now the located diagnostic, exit 1.
// CHECK-NOT: Traceback
// CHECK: runner-bufferize-raw-conflict.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'tensor.cast' op not bufferizable under the given constraints: cannot avoid RaW conflict
func.func private @printMemrefF32(tensor<*xf32>)
func.func @main() {
  %x = arith.constant dense<2.0> : tensor<4x32xf32>
  %u = tensor.cast %x : tensor<4x32xf32> to tensor<*xf32>
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  call @printMemrefF32(%u) : (tensor<*xf32>) -> ()
  return
}
