// RUN: not mx-opt %s --one-shot-bufferize="bufferize-function-boundaries=1" 2>&1 | FileCheck %s
// Upstream mlir-opt aborts here (no mx type: llvm-project#114730, fixed after 22.1.8 by #173692).
// FIXME(upstream): mx-opt guards every *bufferize pass and reports it instead of aborting.
// CHECK: upstream-bufferize-tensor-of-transform-abort.mlir:[[@LINE+1]]:14: error: cannot bufferize a value of type tensor<2x!transform.any_op>
func.func @f(%m: tensor<2x!transform.any_op>) {
  return
}
