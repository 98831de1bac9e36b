// RUN: mx-opt %s --split-input-file | FileCheck %s
// Round trip through the printer and the parser again:
// RUN: mx-opt %s --split-input-file | mx-opt --split-input-file | FileCheck %s
// The generic op form parses back to the same custom form:
// RUN: mx-opt %s --split-input-file --mlir-print-op-generic | mx-opt --split-input-file | FileCheck %s
// RUN: mx-opt %s --split-input-file --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC
// NVFP4: f4E2M1FN codes, f8E4M3FN scales in blocks of 16 (issue 54), and the
// f32 global_scale operand of quantize_block / dequantize_block.

// CHECK-LABEL: func.func @nvfp4
// CHECK-SAME: (%[[X:.*]]: tensor<4x64xf32>, %[[G:.*]]: f32)
// CHECK: %[[Q:.*]] = mx.quantize_block %[[X]], %[[G]] : tensor<4x64xf32>, f32 -> !mx.tensor<4x64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
// CHECK: mx.dequantize_block %[[Q]], %[[G]] : !mx.tensor<4x64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, f32 -> tensor<4x64xf32>
// GENERIC-LABEL: "func.func"
// GENERIC: "mx.quantize_block"(%{{.*}}, %{{.*}}) : (tensor<4x64xf32>, f32) -> !mx.tensor<4x64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
// GENERIC: "mx.dequantize_block"(%{{.*}}, %{{.*}}) : (!mx.tensor<4x64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, f32) -> tensor<4x64xf32>
func.func @nvfp4(%x: tensor<4x64xf32>, %g: f32) -> tensor<4x64xf32> {
  %q = mx.quantize_block %x, %g : tensor<4x64xf32>, f32 -> !mx.tensor<4x64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
  %d = mx.dequantize_block %q, %g : !mx.tensor<4x64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, f32 -> tensor<4x64xf32>
  return %d : tensor<4x64xf32>
}

// -----

// Blocked along axis 0, as a function argument and result; the generic
// spelling of the type is accepted on input.
// CHECK-LABEL: func.func @axis0
// CHECK-SAME: !mx.tensor<32x3xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>
// GENERIC: !mx.tensor<32x3xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>
func.func @axis0(%t: !mx.tensor<array<i64: 32, 3>, f4E2M1FN, 16 : i64, f8E4M3FN, 0 : i64>, %g: f32) -> tensor<32x3xf32> {
  %d = mx.dequantize_block %t, %g : !mx.tensor<32x3xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, f32 -> tensor<32x3xf32>
  return %d : tensor<32x3xf32>
}

// -----

// block_matmul with an NVFP4 rhs: the rhs's f32 global_scale is the fourth
// operand (acc + (lhs x rhs') / g, docs/dialect.md).
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:.*]]: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, %[[B:.*]]: !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, %[[C:.*]]: tensor<4x8xf32>, %[[G:.*]]: f32)
// CHECK: mx.block_matmul %[[A]], %[[B]], %[[C]], %[[G]] : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32>, f32 -> tensor<4x8xf32>
// GENERIC: "mx.block_matmul"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32>, f32) -> tensor<4x8xf32>
func.func @matmul(%a: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, %b: !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, %c: tensor<4x8xf32>, %g: f32) -> tensor<4x8xf32> {
  %r = mx.block_matmul %a, %b, %c, %g : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32>, f32 -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
