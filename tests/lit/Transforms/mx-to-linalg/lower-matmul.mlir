// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=fused" | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg=matmul-lowering=fused | FileCheck %s

// block_matmul, fused form (v1): ONE linalg.generic over (d0, d1, d2) = (m, n, k)
// writing the accumulator directly (no tensor.empty); the mx operand is
// rebuilt in the payload.  The function goes from 3 arguments to 4 (mx x f32)
// or 5 (mx x mx).

// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[AS:.*]] = affine_map<(d0, d1, d2) -> (d0, d2 floordiv 32)>
// CHECK-DAG: #[[B:.*]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG: #[[BS:.*]] = affine_map<(d0, d1, d2) -> (d2 floordiv 32, d1)>
// CHECK-DAG: #[[C:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>

// CHECK-LABEL: func.func @matmul(
// CHECK-SAME:    %[[AM:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[ASC:[^:]*]]: tensor<32x2xf8E8M0FNU>, %[[BB:[^:]*]]: tensor<64x64xf32>, %[[ACC:[^:]*]]: tensor<32x64xf32>) -> tensor<32x64xf32>
// CHECK-NOT:     tensor.empty
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[A]], #[[AS]], #[[B]], #[[C]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[AM]], %[[ASC]], %[[BB]] : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>, tensor<64x64xf32>) outs(%[[ACC]] : tensor<32x64xf32>)
// CHECK:         ^bb0(%[[IA:.*]]: f8E4M3FN, %[[IS:.*]]: f8E8M0FNU, %[[IB:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK-NEXT:      %[[X:.*]] = arith.extf %[[IA]] : f8E4M3FN to f32
// CHECK-NEXT:      %[[Y:.*]] = arith.extf %[[IS]] : f8E8M0FNU to f32
// CHECK-NEXT:      %[[AV:.*]] = arith.mulf %[[X]], %[[Y]] : f32
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[AV]], %[[IB]] : f32
// CHECK-NEXT:      %[[SUM:.*]] = arith.addf %[[OUT]], %[[P]] : f32
// CHECK-NEXT:      linalg.yield %[[SUM]] : f32
// CHECK:         return %[[R]] : tensor<32x64xf32>
func.func @matmul(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}

// mx x mx: B is blocked along K (axis = 0); its scale map divides d2 in the
// first result.
// CHECK-LABEL: func.func @matmul_mx_mx(
// CHECK-SAME:    %[[AM:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[ASC:[^:]*]]: tensor<32x2xf8E8M0FNU>, %[[BM:[^:]*]]: tensor<64x16xf8E5M2>, %[[BSC:[^:]*]]: tensor<2x16xf8E8M0FNU>, %[[ACC:[^:]*]]: tensor<32x16xf32>) -> tensor<32x16xf32>
// CHECK:         linalg.generic {indexing_maps = [#[[A]], #[[AS]], #[[B]], #[[BS]], #[[C]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[AM]], %[[ASC]], %[[BM]], %[[BSC]] : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>, tensor<64x16xf8E5M2>, tensor<2x16xf8E8M0FNU>) outs(%[[ACC]] : tensor<32x16xf32>)
// CHECK:         ^bb0(%[[IA:.*]]: f8E4M3FN, %[[SA:.*]]: f8E8M0FNU, %[[IB:.*]]: f8E5M2, %[[SB:.*]]: f8E8M0FNU, %[[OUT:.*]]: f32):
// CHECK-NEXT:      %[[X:.*]] = arith.extf %[[IA]] : f8E4M3FN to f32
// CHECK-NEXT:      %[[Y:.*]] = arith.extf %[[SA]] : f8E8M0FNU to f32
// CHECK-NEXT:      %[[AV:.*]] = arith.mulf %[[X]], %[[Y]] : f32
// CHECK-NEXT:      %[[U:.*]] = arith.extf %[[IB]] : f8E5M2 to f32
// CHECK-NEXT:      %[[V:.*]] = arith.extf %[[SB]] : f8E8M0FNU to f32
// CHECK-NEXT:      %[[BV:.*]] = arith.mulf %[[U]], %[[V]] : f32
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[AV]], %[[BV]] : f32
// CHECK-NEXT:      %[[SUM:.*]] = arith.addf %[[OUT]], %[[P]] : f32
// CHECK-NEXT:      linalg.yield %[[SUM]] : f32
func.func @matmul_mx_mx(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: !mx.tensor<64x16xf8E5M2, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, %acc: tensor<32x16xf32>) -> tensor<32x16xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x16xf8E5M2, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<32x16xf32> -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}

// MXINT8 lhs: sitofp then the exact 2^-6 before the scale multiply.
// CHECK-LABEL: func.func @matmul_i8(
// CHECK:         ^bb0(%[[IA:.*]]: i8, %{{.*}}: f8E8M0FNU, %{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT:      arith.sitofp %[[IA]] : i8 to f32
// CHECK-NEXT:      arith.constant 1.562500e-02 : f32
// CHECK-NEXT:      arith.mulf
// CHECK-NEXT:      arith.extf %{{.*}} : f8E8M0FNU to f32
func.func @matmul_i8(%a: !mx.tensor<4x32xi8, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<32x8xf32>, %acc: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<4x32xi8, block_size = 32, scale_type = f8E8M0FNU>, tensor<32x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
