// RUN: mx-opt %s --mx-to-linalg | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg=subbyte-storage=unpacked | FileCheck %s --check-prefix=UNPACKED
// RUN: mx-opt %s --mx-to-linalg --one-shot-bufferize="bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map" --mx-matmul-kernels=threads=1 | FileCheck %s --check-prefix=KERNEL

// subbyte-storage=packed (the default): FP4/FP6 codes whose last axis holds
// whole packing groups cross function boundaries as packed i8 bytes
// (numerics.pack_codes); inside, an "unpack_codes" / "pack_codes" generic
// converts. Other shapes and 8-bit formats keep the element type.

!f4 = !mx.tensor<2x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
!f6 = !mx.tensor<2x64xf6E3M2FN, block_size = 32, scale_type = f8E8M0FNU>
!odd = !mx.tensor<64x3xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
!f8 = !mx.tensor<2x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>

// CHECK-LABEL: func.func @arg_f4(
// CHECK-SAME:    %[[P:.*]]: tensor<2x32xi8>, %[[S:.*]]: tensor<2x2xf8E8M0FNU>) -> tensor<2x64xf32>
// CHECK:         %[[G:.*]] = tensor.expand_shape %[[P]] {{\[}}[0], [1, 2]] output_shape [2, 32, 1]
// CHECK:         %[[U:.*]] = linalg.generic {{.*}} ins(%[[G]] : tensor<2x32x1xi8>) outs(%{{.*}} : tensor<2x32x2xf4E2M1FN>) attrs = {mx.kernel = "unpack_codes"}
// CHECK:           linalg.index 2
// CHECK:           arith.shrui
// CHECK:           arith.trunci %{{.*}} : i32 to i4
// CHECK:           arith.bitcast %{{.*}} : i4 to f4E2M1FN
// CHECK:         %[[C:.*]] = tensor.collapse_shape %[[U]] {{\[}}[0], [1, 2]] : tensor<2x32x2xf4E2M1FN> into tensor<2x64xf4E2M1FN>
// CHECK:         linalg.generic {{.*}} ins(%[[C]], %[[S]] :
// UNPACKED-LABEL: func.func @arg_f4(
// UNPACKED-SAME:    tensor<2x64xf4E2M1FN>, %{{.*}}: tensor<2x2xf8E8M0FNU>)
// UNPACKED-NOT:     unpack_codes
func.func @arg_f4(%a: !f4) -> tensor<2x64xf32> {
  %0 = mx.dequantize_block %a : !f4 -> tensor<2x64xf32>
  return %0 : tensor<2x64xf32>
}

// A result is packed: four FP6 codes into three bytes.
// CHECK-LABEL: func.func @result_f6(
// CHECK-SAME:    -> (tensor<2x48xi8>, tensor<2x2xf8E8M0FNU>)
// CHECK:         %[[G6:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] output_shape [2, 16, 4] : tensor<2x64xf6E3M2FN> into tensor<2x16x4xf6E3M2FN>
// CHECK:         %[[P6:.*]] = linalg.generic {{.*}} ins(%[[G6]], %[[G6]], %[[G6]], %[[G6]] : {{.*}}) outs(%{{.*}} : tensor<2x16x3xi8>) attrs = {mx.kernel = "pack_codes"}
// CHECK:         %[[B6:.*]] = tensor.collapse_shape %[[P6]] {{\[}}[0], [1, 2]] : tensor<2x16x3xi8> into tensor<2x48xi8>
// CHECK:         return %[[B6]], %{{.*}} : tensor<2x48xi8>, tensor<2x2xf8E8M0FNU>
func.func @result_f6(%x: tensor<2x64xf32>) -> !f6 {
  %0 = mx.quantize_block %x : tensor<2x64xf32> -> !f6
  return %0 : !f6
}

// A call packs its operands and unpacks its results; odd last axes and 8-bit
// formats are not packed.
// CHECK-LABEL: func.func private @callee(tensor<2x32xi8>, tensor<2x2xf8E8M0FNU>, tensor<64x3xf4E2M1FN>, tensor<2x3xf8E8M0FNU>, tensor<2x64xf8E4M3FN>, tensor<2x2xf8E8M0FNU>) -> (tensor<2x32xi8>, tensor<2x2xf8E8M0FNU>)
// CHECK-LABEL: func.func @caller(
// CHECK-SAME:    %{{.*}}: tensor<2x32xi8>, %{{.*}}: tensor<2x2xf8E8M0FNU>, %{{.*}}: tensor<64x3xf4E2M1FN>, %{{.*}}: tensor<2x3xf8E8M0FNU>, %{{.*}}: tensor<2x64xf8E4M3FN>, %{{.*}}: tensor<2x2xf8E8M0FNU>)
// CHECK:         mx.kernel = "unpack_codes"
// CHECK:         mx.kernel = "pack_codes"
// CHECK:         %[[R:.*]]:2 = call @callee(
// CHECK:         mx.kernel = "unpack_codes"
// CHECK:         mx.kernel = "pack_codes"
// CHECK:         return
func.func private @callee(!f4, !odd, !f8) -> !f4
func.func @caller(%a: !f4, %b: !odd, %c: !f8) -> !f4 {
  %0 = func.call @callee(%a, %b, %c) : (!f4, !odd, !f8) -> !f4
  return %0 : !f4
}

// mx-matmul-kernels reads the packed bytes: no unpacking is left.
!wa = !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
!wb = !mx.tensor<64x32xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
// KERNEL-LABEL: func.func @mm(
// KERNEL-SAME:    %[[A:.*]]: memref<4x32xi8>, %{{.*}}: memref<4x2xf8E8M0FNU>, %[[B:.*]]: memref<64x16xi8>
// KERNEL-NOT:     unpack_codes
// KERNEL:         vector.load %[[A]]
// KERNEL-NOT:     unpack_codes
// KERNEL:         return
func.func @mm(%a: !wa, %b: !wb, %c: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %0 = mx.block_matmul %a, %b, %c : !wa, !wb, tensor<4x32xf32> -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}
