// RUN: mx-opt %s --mx-to-linalg=subbyte-storage=unpacked | FileCheck %s

// quantize_block: three generics.
//   1. block amax: tensor.expand_shape splits the block axis into (nblocks, B);
//      a reduction from 0.0 with absf + maximumf (maximumf propagates NaN, so
//      a NaN or Inf block has a non-finite amax).
//   2. scale: E8M0 code = max(exponent field of |amax| - emax, 0), 255 when the
//      field is 255 (non-finite), all integer ops on the f32 bits (the
//      kernels' codec: mlir_mx.kernels.common.codec.e8m0_code).
//   3. mantissa: x * 2^-shared_exp (an f32 built from its bits), clamped to
//      +-max_normal, 0 in NaN blocks, truncf (i8: roundeven, clamp, fptosi).

// CHECK-DAG: #[[ID3:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[RED:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[ID2:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[SC2:.*]] = affine_map<(d0, d1) -> (d0, d1 floordiv 32)>
// CHECK-DAG: #[[RED0:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[SC2AX0:.*]] = affine_map<(d0, d1) -> (d0 floordiv 32, d1)>

// CHECK-LABEL: func.func @quantize(
// CHECK-SAME:    %[[X:.*]]: tensor<32x64xf32>) -> (tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)
// CHECK:         %[[EX:.*]] = tensor.expand_shape %[[X]] {{\[\[}}0], [1, 2]] output_shape [32, 2, 32] : tensor<32x64xf32> into tensor<32x2x32xf32>
// CHECK:         %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         %[[INIT:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<32x2xf32>)
// CHECK:         %[[AMAX:.*]] = linalg.generic {indexing_maps = [#[[ID3]], #[[RED]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[EX]] : tensor<32x2x32xf32>) outs(%[[INIT]] : tensor<32x2xf32>)
// CHECK:           %[[ABS:.*]] = math.absf
// CHECK-NEXT:      %[[MAX:.*]] = arith.maximumf %{{.*}}, %[[ABS]] : f32
// CHECK-NEXT:      linalg.yield %[[MAX]]
// CHECK:         %[[SCALE:.*]] = linalg.generic {indexing_maps = [#[[ID2]], #[[ID2]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[AMAX]] : tensor<32x2xf32>) outs(%{{.*}} : tensor<32x2xf8E8M0FNU>)
// CHECK:           arith.bitcast %{{.*}} : f32 to i32
// CHECK:           arith.andi
// CHECK:           arith.shrui
// CHECK:           %[[EMAX:.*]] = arith.constant 8 : i32
// CHECK-NEXT:      arith.subi %{{.*}}, %[[EMAX]] : i32
// CHECK:           arith.maxsi
// CHECK:           arith.cmpi eq
// CHECK:           arith.select
// CHECK:           arith.trunci %{{.*}} : i32 to i8
// CHECK-NEXT:      %[[CODE:.*]] = arith.bitcast %{{.*}} : i8 to f8E8M0FNU
// CHECK-NEXT:      linalg.yield %[[CODE]] : f8E8M0FNU
// CHECK:         %[[MANT:.*]] = linalg.generic {indexing_maps = [#[[ID2]], #[[SC2]], #[[ID2]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[X]], %[[SCALE]] : tensor<32x64xf32>, tensor<32x2xf8E8M0FNU>) outs(%{{.*}} : tensor<32x64xf8E4M3FN>)
// CHECK:           arith.bitcast %{{.*}} : f8E8M0FNU to i8
// CHECK:           arith.extui %{{.*}} : i8 to i32
// CHECK:           arith.shli
// CHECK:           %[[POW:.*]] = arith.bitcast %{{.*}} : i32 to f32
// CHECK-NEXT:      arith.mulf %{{.*}}, %[[POW]] : f32
// CHECK:           arith.constant -4.480000e+02 : f32
// CHECK-NEXT:      arith.maximumf
// CHECK:           arith.constant 4.480000e+02 : f32
// CHECK-NEXT:      arith.minimumf
// CHECK:           arith.select
// CHECK-NEXT:      %[[T:.*]] = arith.truncf %{{.*}} : f32 to f8E4M3FN
// CHECK-NEXT:      linalg.yield %[[T]] : f8E4M3FN
// CHECK:         return %[[MANT]], %[[SCALE]] : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>
// CHECK-NOT:     math.log2
// CHECK-NOT:     math.exp2
func.func @quantize(%x: tensor<32x64xf32>) -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> {
  %r = mx.quantize_block %x : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  return %r : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
}

// Block axis 0 (B of a matmul): the reduction runs over d1 of (nblocks, B, N).
// CHECK-LABEL: func.func @quantize_axis0(
// CHECK-SAME:    %[[X:.*]]: tensor<64x48xf32>) -> (tensor<64x48xf4E2M1FN>, tensor<2x48xf8E8M0FNU>)
// CHECK:         tensor.expand_shape %[[X]] {{\[\[}}0, 1], [2]] output_shape [2, 32, 48] : tensor<64x48xf32> into tensor<2x32x48xf32>
// CHECK:         linalg.generic {indexing_maps = [#[[ID3]], #[[RED0]]], iterator_types = ["parallel", "reduction", "parallel"]}
// CHECK:         %[[EMAX:.*]] = arith.constant 2 : i32
// CHECK-NEXT:    arith.subi %{{.*}}, %[[EMAX]] : i32
// CHECK:         linalg.generic {indexing_maps = [#[[ID2]], #[[SC2AX0]], #[[ID2]]]
// CHECK:           arith.constant -6.000000e+00 : f32
// CHECK:           arith.truncf %{{.*}} : f32 to f4E2M1FN
func.func @quantize_axis0(%x: tensor<64x48xf32>) -> !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0> {
  %r = mx.quantize_block %x : tensor<64x48xf32> -> !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
  return %r : !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
}

// MXINT8 (emax 0): code = clamp(roundeven(x * 2^-e * 64), -127, 127).
// CHECK-LABEL: func.func @quantize_i8(
// CHECK-SAME:    tensor<64xf32>) -> (tensor<64xi8>, tensor<2xf8E8M0FNU>)
// CHECK:           arith.constant 6.400000e+01 : f32
// CHECK-NEXT:      arith.mulf
// CHECK-NEXT:      math.roundeven
// CHECK-NEXT:      arith.constant -1.270000e+02 : f32
// CHECK-NEXT:      arith.maximumf
// CHECK-NEXT:      arith.constant 1.270000e+02 : f32
// CHECK-NEXT:      arith.minimumf
// CHECK:           arith.fptosi %{{.*}} : f32 to i8
func.func @quantize_i8(%x: tensor<64xf32>) -> !mx.tensor<64xi8, block_size = 32, scale_type = f8E8M0FNU> {
  %r = mx.quantize_block %x : tensor<64xf32> -> !mx.tensor<64xi8, block_size = 32, scale_type = f8E8M0FNU>
  return %r : !mx.tensor<64xi8, block_size = 32, scale_type = f8E8M0FNU>
}
