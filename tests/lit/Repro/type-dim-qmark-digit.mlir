// RUN: not mx-opt %s 2>&1 | FileCheck %s
// Was: a Python traceback (ValueError, int('?32')) in the type parser.
// CHECK-NOT: Traceback
// CHECK: type-dim-qmark-digit.mlir:[[@LINE+1]]:29: error: !mx.tensor requires a static shape; '?' is not allowed
func.func @f(%a: !mx.tensor<?32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) {
  return
}
