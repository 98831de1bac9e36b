// RUN: mx-opt %s --split-input-file --canonicalize | FileCheck %s
// RUN: mx-opt %s --split-input-file --mx-canonicalize | FileCheck %s --check-prefix=MX

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>

// Every canonicalization is exact (docs/dialect.md).  Two stacked fold_scales
// are NOT folded into one: each is defined with its own requantization, so
// the product can differ (the opt-in mx-fuse-scales folds them).
// CHECK-LABEL: func.func @fold_two_stays
// CHECK:         mx.fold_scale %arg0
// CHECK:         mx.fold_scale
// CHECK:         return
func.func @fold_two_stays(%t: !t) -> !t {
  %c4 = arith.constant 4.0 : f32
  %c3 = arith.constant 3.0 : f32
  %0 = mx.fold_scale %t, %c4 : !t, f32 -> !t
  %1 = mx.fold_scale %0, %c3 : !t, f32 -> !t
  return %1 : !t
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
// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// dequantize(fold_scale(t, a)) is not fused into dequantize(t) * a: fold_scale
// requantizes for a non-power-of-two alpha (3.5, not 3.375, for 1.125 x 3 in
// E4M3; semantics/3-fold-scale-requantize.mlir).  mx-fuse-scales does it.
// CHECK-LABEL: func.func @dequant_of_fold_stays
// CHECK:         %[[S:.*]] = mx.fold_scale %arg0, %arg1
// CHECK:         mx.dequantize_block %[[S]]
// CHECK-NOT:     arith.mulf
// MX-LABEL: func.func @dequant_of_fold_stays
// MX:         mx.fold_scale
// MX-NOT:     tensor.splat
func.func @dequant_of_fold_stays(%t: !t, %alpha: f32) -> tensor<32x64xf32> {
  %0 = mx.fold_scale %t, %alpha : !t, f32 -> !t
  %1 = mx.dequantize_block %0 : !t -> tensor<32x64xf32>
  return %1 : tensor<32x64xf32>
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// quantize(dequantize(t)) -> t when t comes from a quantize_block of the same
// type: that encoding is canonical, requantizing reproduces it bit for bit.
// CHECK-LABEL: func.func @requantize_of_quantize
// CHECK-NEXT:    %[[Q:.*]] = mx.quantize_block %arg0
// CHECK-NEXT:    return %[[Q]]
func.func @requantize_of_quantize(%x: tensor<32x64xf32>) -> !t {
  %q = mx.quantize_block %x : tensor<32x64xf32> -> !t
  %0 = mx.dequantize_block %q : !t -> tensor<32x64xf32>
  %1 = mx.quantize_block %0 : tensor<32x64xf32> -> !t
  return %1 : !t
}

// -----

!t = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// ... but not for an arbitrary t (an argument): a NaN element code makes the
// requantized block NaN, a non-canonical block gets other codes
// (semantics/5-qdq-fold-nan.mlir).
// CHECK-LABEL: func.func @requantize_argument_stays
// CHECK:         mx.dequantize_block %arg0
// CHECK:         mx.quantize_block
func.func @requantize_argument_stays(%t: !t) -> !t {
  %0 = mx.dequantize_block %t : !t -> tensor<32x64xf32>
  %1 = mx.quantize_block %0 : tensor<32x64xf32> -> !t
  return %1 : !t
}

// -----

!n = !mx.tensor<4x64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
// NVFP4 (issue 54): not even for a t from quantize_block with the same
// global_scale: its encoding is not canonical (a negative value that rounds
// to zero is the code -0, dequantized -0.0, requantized +0), so the pair
// stays, its global_scale operands carried; the dead dequantize is erased.
// CHECK-LABEL: func.func @nvfp4_requantize_stays
// CHECK-NEXT:    %[[Q:.*]] = mx.quantize_block %arg0, %arg1
// CHECK-NEXT:    %[[D:.*]] = mx.dequantize_block %[[Q]], %arg1
// CHECK-NEXT:    %[[R:.*]] = mx.quantize_block %[[D]], %arg1
// CHECK-NEXT:    return %[[R]]
func.func @nvfp4_requantize_stays(%x: tensor<4x64xf32>, %g: f32) -> !n {
  %q = mx.quantize_block %x, %g : tensor<4x64xf32>, f32 -> !n
  %0 = mx.dequantize_block %q, %g : !n, f32 -> tensor<4x64xf32>
  %1 = mx.quantize_block %0, %g : tensor<4x64xf32>, f32 -> !n
  %dead = mx.dequantize_block %1, %g : !n, f32 -> tensor<4x64xf32>
  return %1 : !n
}
