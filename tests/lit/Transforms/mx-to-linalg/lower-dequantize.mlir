// RUN: mx-opt %s --mx-to-linalg=subbyte-storage=unpacked | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg=subbyte-storage=unpacked --one-shot-bufferize="bufferize-function-boundaries=1" | FileCheck %s --check-prefix=BUF

// dequantize_block: ONE elementwise linalg.generic; the scale is read through
// `d_axis floordiv B`; payload extf, extf, mulf (i8: sitofp, mulf 2^-6).

// CHECK-DAG: #[[ID2:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[SC2:.*]] = affine_map<(d0, d1) -> (d0, d1 floordiv 32)>
// CHECK-DAG: #[[SC2AX0:.*]] = affine_map<(d0, d1) -> (d0 floordiv 32, d1)>
// CHECK-DAG: #[[ID3:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG: #[[SC3AX1:.*]] = affine_map<(d0, d1, d2) -> (d0, d1 floordiv 16, d2)>
// CHECK-DAG: #[[ID1:.*]] = affine_map<(d0) -> (d0)>
// CHECK-DAG: #[[SC1:.*]] = affine_map<(d0) -> (d0 floordiv 32)>

// CHECK-LABEL: func.func @dequantize(
// CHECK-SAME:    %[[M:.*]]: tensor<32x64xf8E4M3FN>, %[[S:.*]]: tensor<32x2xf8E8M0FNU>) -> tensor<32x64xf32>
// CHECK:         %[[E:.*]] = tensor.empty() : tensor<32x64xf32>
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[ID2]], #[[SC2]], #[[ID2]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[M]], %[[S]] : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>) outs(%[[E]] : tensor<32x64xf32>)
// CHECK:         ^bb0(%[[IN:.*]]: f8E4M3FN, %[[SC:.*]]: f8E8M0FNU, %{{.*}}: f32):
// CHECK-NEXT:      %[[A:.*]] = arith.extf %[[IN]] : f8E4M3FN to f32
// CHECK-NEXT:      %[[B:.*]] = arith.extf %[[SC]] : f8E8M0FNU to f32
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[A]], %[[B]] : f32
// CHECK-NEXT:      linalg.yield %[[P]] : f32
// CHECK:         return %[[R]] : tensor<32x64xf32>
// CHECK-NOT:     mx.
// CHECK-NOT:     unrealized_conversion_cast
func.func @dequantize(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) -> tensor<32x64xf32> {
  %r = mx.dequantize_block %t : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}

// Block axis 0: the scale is tensor<2x48x...> and its map divides d0.
// CHECK-LABEL: func.func @dequantize_axis0(
// CHECK-SAME:    tensor<64x48xf4E2M1FN>, %{{.*}}: tensor<2x48xf8E8M0FNU>) -> tensor<64x48xf32>
// CHECK:         linalg.generic {indexing_maps = [#[[ID2]], #[[SC2AX0]], #[[ID2]]]
// CHECK:         arith.extf %{{.*}} : f4E2M1FN to f32
func.func @dequantize_axis0(%t: !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>) -> tensor<64x48xf32> {
  %r = mx.dequantize_block %t : !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0> -> tensor<64x48xf32>
  return %r : tensor<64x48xf32>
}

// Rank 3, blocked along the middle axis with block size 16.
// CHECK-LABEL: func.func @dequantize_rank3(
// CHECK-SAME:    tensor<2x32x4xf6E3M2FN>, %{{.*}}: tensor<2x2x4xf8E8M0FNU>) -> tensor<2x32x4xf32>
// CHECK:         linalg.generic {indexing_maps = [#[[ID3]], #[[SC3AX1]], #[[ID3]]], iterator_types = ["parallel", "parallel", "parallel"]}
func.func @dequantize_rank3(%t: !mx.tensor<2x32x4xf6E3M2FN, block_size = 16, scale_type = f8E8M0FNU, axis = 1>) -> tensor<2x32x4xf32> {
  %r = mx.dequantize_block %t : !mx.tensor<2x32x4xf6E3M2FN, block_size = 16, scale_type = f8E8M0FNU, axis = 1> -> tensor<2x32x4xf32>
  return %r : tensor<2x32x4xf32>
}

// MXINT8: code * 2^-6 is exact in f32, then ONE multiply by the scale.
// CHECK-LABEL: func.func @dequantize_i8(
// CHECK-SAME:    tensor<64xi8>, %{{.*}}: tensor<2xf8E8M0FNU>) -> tensor<64xf32>
// CHECK:         linalg.generic {indexing_maps = [#[[ID1]], #[[SC1]], #[[ID1]]], iterator_types = ["parallel"]}
// CHECK:           %[[C:.*]] = arith.sitofp %{{.*}} : i8 to f32
// CHECK-NEXT:      %[[K:.*]] = arith.constant 1.562500e-02 : f32
// CHECK-NEXT:      %[[V:.*]] = arith.mulf %[[C]], %[[K]] : f32
// CHECK-NEXT:      %[[S:.*]] = arith.extf %{{.*}} : f8E8M0FNU to f32
// CHECK-NEXT:      arith.mulf %[[V]], %[[S]] : f32
func.func @dequantize_i8(%t: !mx.tensor<64xi8, block_size = 32, scale_type = f8E8M0FNU>) -> tensor<64xf32> {
  %r = mx.dequantize_block %t : !mx.tensor<64xi8, block_size = 32, scale_type = f8E8M0FNU> -> tensor<64xf32>
  return %r : tensor<64xf32>
}

// BUF-LABEL: func.func @dequantize(
// BUF-SAME:    memref<32x64xf8E4M3FN, {{.*}}>, %{{.*}}: memref<32x2xf8E8M0FNU, {{.*}}>) -> memref<32x64xf32>
// BUF:         %[[ALLOC:.*]] = memref.alloc() {{.*}} : memref<32x64xf32>
// BUF:         linalg.generic
// BUF-SAME:      outs(%[[ALLOC]] : memref<32x64xf32>)
// BUF-NOT:     bufferization.to_tensor
// BUF-NOT:     memref.copy
// BUF:         return %[[ALLOC]]
