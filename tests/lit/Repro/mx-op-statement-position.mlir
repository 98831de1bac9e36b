// RUN: not mx-opt %s 2>&1 | FileCheck %s
// Was: "<unknown>: error: Unable to parse module assembly".
// CHECK-NOT: <unknown>
// CHECK: mx-op-statement-position.mlir:[[@LINE+1]]:1: error: 'mx.block_matmul' produces a result
mx.block_matmul
/