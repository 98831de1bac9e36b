// RUN: not mx-opt %s 2>&1 | FileCheck %s
// Was: "<unknown>: error: Unable to parse module assembly" (upstream gives no location
// for an IRDL op without custom assembly in statement position).
// CHECK-NOT: <unknown>
func.func @f(%t: !mx.tensor<16x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %a: f32) {
  // CHECK: mx-op-no-result.mlir:[[@LINE+1]]:3: error: 'mx.fold_scale' produces a result: bind it, as in '%r = mx.fold_scale ...'
  mx.fold_scale %t, %a
  return
}
