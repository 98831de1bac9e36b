// RUN: not mx-runner %s -e main --entry-point-result=void 2>&1 | FileCheck %s
// Was: SIGABRT (upstream bufferization of tensor<2x!mx.tensor<..>>); now the verifier's error.
// CHECK-NOT: Traceback
// CHECK: runner-tensor-of-mx-abort.mlir:{{[0-9]+}}:{{[0-9]+}}: error: !mx.tensor cannot be nested inside another type
func.func @f(%m: tensor<2x!mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>>) {
  return
}
func.func @main() {
  return
}
