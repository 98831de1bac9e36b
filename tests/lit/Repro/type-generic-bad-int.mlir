// RUN: not mx-opt %s 2>&1 | FileCheck %s
// Was: a traceback (ValueError) in the generic-form type parser.
// CHECK-NOT: Traceback
// CHECK: type-generic-bad-int.mlir:[[@LINE+1]]:29: error: a dimension must be an integer, got '3-2'
func.func @f(%a: !mx.tensor<array<i64: 3-2>, f8E4M3FN, 32 : i64, f8E8M0FNU, 0 : i64>) {
  return
}
