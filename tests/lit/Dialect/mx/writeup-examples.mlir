// Complete IR examples of mlir-mx v1's published syntax (every form its dialect printed) parse and
// round-trip through mx-opt.
// RUN: mx-opt %s --split-input-file | mx-opt --split-input-file | FileCheck %s

// The v1 tiling schedule.
// CHECK-LABEL: transform.named_sequence @__transform_main
// CHECK: transform.structured.tile_using_for %{{.*}} tile_sizes [0, 32, 32]
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %matmul = transform.structured.match ops{["linalg.generic"]} in %root
      : (!transform.any_op) -> !transform.any_op
    %tiled, %loop_n, %loop_k =
      transform.structured.tile_using_for %matmul tile_sizes [0, 32, 32]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// The vectorize-only schedule.
// CHECK-LABEL: transform.named_sequence @__transform_main
// CHECK: transform.structured.vectorize
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %g = transform.structured.match ops{["linalg.generic"]} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %g : !transform.any_op
    transform.yield
  }
}

// -----

// probe-f8-extf.mlir
// CHECK-LABEL: func.func @extf_e4m3
// CHECK: arith.extf %{{.*}} : f8E4M3FN to f32
// CHECK-LABEL: func.func @extf_e8m0
// CHECK: arith.extf %{{.*}} : f8E8M0FNU to f32
func.func @extf_e4m3(%x: f8E4M3FN) -> f32 {
  %0 = arith.extf %x : f8E4M3FN to f32
  return %0 : f32
}
func.func @extf_e8m0(%y: f8E8M0FNU) -> f32 {
  %0 = arith.extf %y : f8E8M0FNU to f32
  return %0 : f32
}

// -----

// The v1 input of lower-matmul (mx syntax) and the v1 canonicalization inputs
// are covered by ops.mlir, canonicalize.mlir and the mx-to-linalg tests.
// CHECK-LABEL: func.func @lower_matmul
// CHECK: mx.block_matmul %arg0, %arg1, %arg2 : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
func.func @lower_matmul(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}
