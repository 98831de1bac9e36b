// RUN: mx-opt %s --split-input-file --canonicalize | FileCheck %s
// RUN: mx-opt %s --split-input-file --mx-canonicalize | FileCheck %s --check-prefix=MX

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>

// Two stacked fold_scales with constant alphas: 4 * 8 -> 32.
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
// A single fold_scale (the v1 hole: it reaches a return) stays as one op.
// CHECK-LABEL: func.func @single_stays
// CHECK-NEXT:    %[[C:.*]] = arith.constant 4.000000e+00 : f32
// CHECK-NEXT:    %[[R:.*]] = mx.fold_scale %arg0, %[[C]]
// CHECK-NEXT:    return %[[R]]
func.func @single_stays(%t: !t) -> !t {
  %c4 = arith.constant 4.0 : f32
  %0 = mx.fold_scale %t, %c4 : !t, f32 -> !t
  return %0 : !t
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// Runtime alphas are not folded together.
// CHECK-LABEL: func.func @runtime_chain
// CHECK:         mx.fold_scale %arg0, %arg1
// CHECK:         mx.fold_scale %{{.*}}, %arg2
func.func @runtime_chain(%t: !t, %a: f32, %b: f32) -> !t {
  %0 = mx.fold_scale %t, %a : !t, f32 -> !t
  %1 = mx.fold_scale %0, %b : !t, f32 -> !t
  return %1 : !t
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// fold_scale by exactly 1.0 is its input.
// CHECK-LABEL: func.func @identity
// CHECK-NEXT:    return %arg0
func.func @identity(%t: !t) -> !t {
  %c1 = arith.constant 1.0 : f32
  %0 = mx.fold_scale %t, %c1 : !t, f32 -> !t
  return %0 : !t
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
// MX-LABEL: func.func @dequant_const
// MX: tensor.splat
// MX: arith.mulf
// MX-NOT: mx.fold_scale
// MX: return
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

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// quantize(dequantize(t)) -> t when the types match.
// CHECK-LABEL: func.func @requantize
// CHECK-NEXT:    return %arg0
func.func @requantize(%t: !t) -> !t {
  %0 = mx.dequantize_block %t : !t -> tensor<32x64xf32>
  %1 = mx.quantize_block %0 : tensor<32x64xf32> -> !t
  return %1 : !t
}

// -----

// ... but not when the element type (or block size, or axis) differs.
// CHECK-LABEL: func.func @requantize_other_type
// CHECK:         mx.dequantize_block
// CHECK:         mx.quantize_block
func.func @requantize_other_type(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) -> !mx.tensor<32x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU> {
  %0 = mx.dequantize_block %t : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
  %1 = mx.quantize_block %0 : tensor<32x64xf32> -> !mx.tensor<32x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
  return %1 : !mx.tensor<32x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// A fold_scale that feeds a block_matmul stays (mx-to-linalg lowers it).
// CHECK-LABEL: func.func @fold_into_matmul
// CHECK:         %[[S:.*]] = mx.fold_scale %arg0, %arg1
// CHECK:         mx.block_matmul %[[S]], %arg2, %arg3
func.func @fold_into_matmul(%t: !t, %alpha: f32, %b: tensor<64x16xf32>, %c: tensor<32x16xf32>) -> tensor<32x16xf32> {
  %0 = mx.fold_scale %t, %alpha : !t, f32 -> !t
  %1 = mx.block_matmul %0, %b, %c : !t, tensor<64x16xf32>, tensor<32x16xf32> -> tensor<32x16xf32>
  return %1 : tensor<32x16xf32>
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// Dead mx ops are erased (they are pure; upstream DCE cannot see that).
// CHECK-LABEL: func.func @dead
// CHECK-NEXT:    return
func.func @dead(%t: !t, %x: tensor<32x64xf32>, %alpha: f32) {
  %0 = mx.quantize_block %x : tensor<32x64xf32> -> !t
  %1 = mx.dequantize_block %t : !t -> tensor<32x64xf32>
  %2 = mx.fold_scale %t, %alpha : !t, f32 -> !t
  return
}
