// RUN: not mx-opt %s --one-shot-bufferize="bufferize-function-boundaries=1" 2>&1 | FileCheck %s
// RUN: not mx-opt %s 2>&1 | FileCheck %s
// Was: SIGABRT in upstream bufferization (memref<2x!mx.tensor<...>> is not a type).
// The verifier now rejects an !mx.tensor nested inside another type, before any pass.
// CHECK: opt-bufferize-tensor-of-mx-abort.mlir:[[@LINE+1]]:17: error: !mx.tensor cannot be nested inside another type, got tensor<2x!mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>>
func.func @main(%m: tensor<2x!mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>>) {
  return
}
