// RUN: mx-opt %s --split-input-file --mx-fuse-scales | FileCheck %s --check-prefix=FUSE
// RUN: mx-opt %s --split-input-file --mx-fuse-scales --canonicalize | FileCheck %s

// mx-fuse-scales: the opt-in rewrites that skip fold_scale's requantization
// (docs/passes/mx-fuse-scales.md).  Not exact, never run by --canonicalize.

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>

// Two stacked fold_scales with constant alphas: 4 * 8 -> 32.
// FUSE-LABEL: func.func @fold_two
// FUSE-NEXT:     arith.constant 3.200000e+01 : f32
// FUSE-NEXT:     mx.fold_scale %arg0
// FUSE-NEXT:     return
// CHECK-LABEL: func.func @fold_two
// CHECK-NEXT:    %[[C:.*]] = arith.constant 3.200000e+01 : f32
// CHECK-NEXT:    %[[R:.*]] = mx.fold_scale %arg0, %[[C]] : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f32 -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK-NEXT:    return %[[R]]
func.func @fold_two(%t: !t) -> !t {
  %c4 = arith.constant 4.0 : f32
  %c8 = arith.constant 8.0 : f32
  %0 = mx.fold_scale %t, %c4 : !t, f32 -> !t
  %1 = mx.fold_scale %0, %c8 : !t, f32 -> !t
  return %1 : !t
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// A chain 2, 4, 8 -> 64.
// CHECK-LABEL: func.func @fold_chain
// CHECK-NEXT:    %[[C:.*]] = arith.constant 6.400000e+01 : f32
// CHECK-NEXT:    %[[R:.*]] = mx.fold_scale %arg0, %[[C]]
// CHECK-NEXT:    return %[[R]]
func.func @fold_chain(%t: !t) -> !t {
  %c2 = arith.constant 2.0 : f32
  %c4 = arith.constant 4.0 : f32
  %c8 = arith.constant 8.0 : f32
  %0 = mx.fold_scale %t, %c2 : !t, f32 -> !t
  %1 = mx.fold_scale %0, %c4 : !t, f32 -> !t
  %2 = mx.fold_scale %1, %c8 : !t, f32 -> !t
  return %2 : !t
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// dequantize(fold_scale(t, c)) -> mulf(dequantize(t), splat(c)); upstream
// folds the splat of a constant into a dense constant.
// CHECK-LABEL: func.func @dequant_const
// CHECK-DAG:     %[[C:.*]] = arith.constant dense<4.000000e+00> : tensor<32x64xf32>
// CHECK-DAG:     %[[D:.*]] = mx.dequantize_block %arg0 : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
// CHECK:         %[[M:.*]] = arith.mulf %[[D]], %[[C]] : tensor<32x64xf32>
// CHECK-NEXT:    return %[[M]]
// FUSE-LABEL: func.func @dequant_const
// FUSE: tensor.splat
// FUSE: arith.mulf
// FUSE-NOT: mx.fold_scale
// FUSE: return
func.func @dequant_const(%t: !t) -> tensor<32x64xf32> {
  %c4 = arith.constant 4.0 : f32
  %0 = mx.fold_scale %t, %c4 : !t, f32 -> !t
  %1 = mx.dequantize_block %0 : !t -> tensor<32x64xf32>
  return %1 : tensor<32x64xf32>
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// The same with a runtime alpha.
// CHECK-LABEL: func.func @dequant_runtime
// CHECK-DAG:     %[[D:.*]] = mx.dequantize_block %arg0
// CHECK-DAG:     %[[S:.*]] = tensor.splat %arg1 : tensor<32x64xf32>
// CHECK:         %[[M:.*]] = arith.mulf %[[D]], %[[S]] : tensor<32x64xf32>
// CHECK-NEXT:    return %[[M]]
func.func @dequant_runtime(%t: !t, %alpha: f32) -> tensor<32x64xf32> {
  %0 = mx.fold_scale %t, %alpha : !t, f32 -> !t
  %1 = mx.dequantize_block %0 : !t -> tensor<32x64xf32>
  return %1 : tensor<32x64xf32>
}

