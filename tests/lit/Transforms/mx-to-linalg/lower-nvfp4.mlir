// RUN: mx-opt %s --mx-to-linalg=subbyte-storage=unpacked | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg=subbyte-storage=unpacked | FileCheck %s --check-prefix=NOTAG

// NVFP4 (f8E4M3FN scales, issue 54): the global_scale operand enters each
// generic as a rank-0 tensor (an empty map); compressed-tensors' arithmetic,
// one f32 rounding a step (docs/numerics.md, "NVFP4"):
//   1. block amax: as for E8M0 scales;
//   2. scale: g * (amax / 6), at most 448, truncf to E4M3; 0.125 where that
//      is zero; E4M3 NaN (0x7f) where amax is not finite;
//   3. codes: x / (extf(s) / g), +0 where zero or NaN, clamped to +-6, truncf;
//   dequantize: extf(code) * (extf(s) / g).
// No kernel tags: mx-quantize-kernels' kernels are E8M0 ones.
// NOTAG-NOT: mx.kernel

// CHECK-LABEL: func.func @q
// CHECK-SAME:    (%[[X:.*]]: tensor<4x32xf32>, %[[G:.*]]: f32) -> (tensor<4x32xf4E2M1FN>, tensor<4x2xf8E4M3FN>)
// CHECK:       %[[G0:.*]] = tensor.from_elements %[[G]] : tensor<f32>
// CHECK:       %[[AMAX:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK:         arith.maximumf
// CHECK:       %[[S:.*]] = linalg.generic {{.*}} ins(%[[AMAX]], %[[G0]] : tensor<4x2xf32>, tensor<f32>) outs(%{{.*}} : tensor<4x2xf8E4M3FN>)
// CHECK:         arith.divf
// CHECK:         arith.mulf
// CHECK:         arith.minimumf %{{.*}}, %{{.*}} : f32
// CHECK:         arith.truncf %{{.*}} : f32 to f8E4M3FN
// CHECK:         arith.cmpf oeq
// CHECK:         arith.cmpf olt
// CHECK:         arith.constant 127 : i8
// CHECK:       %[[C:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[S]], %[[G0]] : tensor<4x32xf32>, tensor<4x2xf8E4M3FN>, tensor<f32>) outs(%{{.*}} : tensor<4x32xf4E2M1FN>)
// CHECK:         %[[E:.*]] = arith.extf %{{.*}} : f8E4M3FN to f32
// CHECK:         %[[F:.*]] = arith.divf %[[E]], %{{.*}} : f32
// CHECK:         arith.divf %{{.*}}, %[[F]] : f32
// CHECK:         arith.cmpf one
// CHECK:         arith.truncf %{{.*}} : f32 to f4E2M1FN
// CHECK:       return %[[C]], %[[S]]
func.func @q(%x: tensor<4x32xf32>, %g: f32) -> !mx.tensor<4x32xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN> {
  %t = mx.quantize_block %x, %g : tensor<4x32xf32>, f32 -> !mx.tensor<4x32xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
  return %t : !mx.tensor<4x32xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
}

// CHECK-LABEL: func.func @d
// CHECK-SAME:    (%[[M:.*]]: tensor<4x32xf4E2M1FN>, %[[SC:.*]]: tensor<4x2xf8E4M3FN>, %[[G:.*]]: f32) -> tensor<4x32xf32>
// CHECK:       %[[G0:.*]] = tensor.from_elements %[[G]] : tensor<f32>
// CHECK:       linalg.generic {{.*}} ins(%[[M]], %[[SC]], %[[G0]] : tensor<4x32xf4E2M1FN>, tensor<4x2xf8E4M3FN>, tensor<f32>)
// CHECK:         arith.extf %{{.*}} : f4E2M1FN to f32
// CHECK:         arith.extf %{{.*}} : f8E4M3FN to f32
// CHECK:         arith.divf
// CHECK:         arith.mulf
func.func @d(%t: !mx.tensor<4x32xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, %g: f32) -> tensor<4x32xf32> {
  %d = mx.dequantize_block %t, %g : !mx.tensor<4x32xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, f32 -> tensor<4x32xf32>
  return %d : tensor<4x32xf32>
}
