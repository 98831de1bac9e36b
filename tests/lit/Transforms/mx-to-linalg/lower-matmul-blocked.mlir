// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=blocked subbyte-storage=unpacked" | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=blocked subbyte-storage=unpacked" | FileCheck %s --check-prefix=NOFLOOR
// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=blocked subbyte-storage=unpacked" --one-shot-bufferize="bufferize-function-boundaries=1" | FileCheck %s --check-prefix=BUF

// block_matmul, block-factored form: K is split into (K/B, B) by
// tensor.expand_shape, so every indexing map is a projected permutation.
//   1. partial products over (d0, d1, d2, d3) = (m, n, kb, kk) into a
//      zero-filled (M, K/B, N) tensor, p = p + a * b (contracted: one FMA) on
//      the exact element values: 2 FLOPs per (m, n, k) point;
//   2. c = c + p * (sa * sb) (contracted) accumulated over kb into the
//      accumulator (outs, in place): 2 (mx x f32) or 3 (mx x mx) FLOPs per block.
// These f32 operations define the matmul's numerics (docs/numerics.md);
// mx-matmul-kernels replaces the pair by a kernel doing the same ones.

// NOFLOOR-NOT: floordiv

// CHECK-DAG: #[[PA:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
// CHECK-DAG: #[[PB:.*]] = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
// CHECK-DAG: #[[PP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1)>
// CHECK-DAG: #[[SP:.*]] = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
// CHECK-DAG: #[[SA:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[SB:.*]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG: #[[C:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>

// CHECK-LABEL: func.func @matmul(
// CHECK-SAME:    %[[AM:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[ASC:[^:]*]]: tensor<32x2xf8E8M0FNU>, %[[BB:[^:]*]]: tensor<64x64xf32>, %[[ACC:[^:]*]]: tensor<32x64xf32>) -> tensor<32x64xf32>
// CHECK:         %[[A3:.*]] = tensor.expand_shape %[[AM]] {{\[}}[0], [1, 2]] output_shape [32, 2, 32] : tensor<32x64xf8E4M3FN> into tensor<32x2x32xf8E4M3FN>
// CHECK:         %[[B3:.*]] = tensor.expand_shape %[[BB]] {{\[}}[0, 1], [2]] output_shape [2, 32, 64] : tensor<64x64xf32> into tensor<2x32x64xf32>
// CHECK:         %[[E:.*]] = tensor.empty() : tensor<32x2x64xf32>
// CHECK:         %[[Z:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E]] : tensor<32x2x64xf32>)
// CHECK:         %[[P:.*]] = linalg.generic {indexing_maps = [#[[PA]], #[[PB]], #[[PP]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[A3]], %[[B3]] : tensor<32x2x32xf8E4M3FN>, tensor<2x32x64xf32>) outs(%[[Z]] : tensor<32x2x64xf32>) attrs = {mx.kernel = "block_partials"}
// CHECK:         ^bb0(%[[IA:.*]]: f8E4M3FN, %[[IB:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK-NEXT:      %[[X:.*]] = arith.extf %[[IA]] : f8E4M3FN to f32
// CHECK-NEXT:      %[[M:.*]] = arith.mulf %[[X]], %[[IB]] fastmath<contract> : f32
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[OUT]], %[[M]] fastmath<contract> : f32
// CHECK-NEXT:      linalg.yield %[[S]] : f32
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[SP]], #[[SA]], #[[C]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[P]], %[[ASC]] : tensor<32x2x64xf32>, tensor<32x2xf8E8M0FNU>) outs(%[[ACC]] : tensor<32x64xf32>) attrs = {mx.kernel = "block_scales"}
// CHECK:         ^bb0(%[[IP:.*]]: f32, %[[IS:.*]]: f8E8M0FNU, %[[OUT:.*]]: f32):
// CHECK-NEXT:      %[[Y:.*]] = arith.extf %[[IS]] : f8E8M0FNU to f32
// CHECK-NEXT:      %[[T:.*]] = arith.mulf %[[IP]], %[[Y]] fastmath<contract> : f32
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[OUT]], %[[T]] fastmath<contract> : f32
// CHECK-NEXT:      linalg.yield %[[S]] : f32
// CHECK:         return %[[R]] : tensor<32x64xf32>

// BUF-LABEL: func.func @matmul(
// BUF-SAME:    %{{[^:]*}}: memref<32x64xf8E4M3FN, {{[^>]*}}>>, %[[AS:[^:]*]]: memref<32x2xf8E8M0FNU, {{[^>]*}}>>, %{{[^:]*}}: memref<64x64xf32, {{[^>]*}}>>, %[[ACC:[^:]*]]: memref<32x64xf32, {{[^>]*}}>>)
// BUF-NOT:     memref.copy
// BUF:         memref.expand_shape
// BUF:         memref.expand_shape
// BUF:         %[[T:.*]] = memref.alloc() {{.*}}: memref<32x2x64xf32>
// BUF-NOT:     memref.copy
// BUF:         linalg.generic
// BUF-SAME:      outs(%[[T]] : memref<32x2x64xf32>)
// BUF-NOT:     memref.copy
// BUF:         linalg.generic
// BUF-SAME:      ins(%[[T]], %[[AS]] :
// BUF-SAME:      outs(%[[ACC]] :
// BUF-NOT:     memref.copy
// BUF:         return %[[ACC]]
func.func @matmul(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}

// mx x mx: B (K x N, blocked along K = axis 0) is expanded to (K/B, B, N);
// both mantissas are widened in the partial product, both scales multiply
// the partial once per block.
// CHECK-LABEL: func.func @matmul_mx_mx(
// CHECK-SAME:    %[[AM:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[ASC:[^:]*]]: tensor<32x2xf8E8M0FNU>, %[[BM:[^:]*]]: tensor<64x16xf8E5M2>, %[[BSC:[^:]*]]: tensor<2x16xf8E8M0FNU>, %[[ACC:[^:]*]]: tensor<32x16xf32>) -> tensor<32x16xf32>
// CHECK:         %[[A3:.*]] = tensor.expand_shape %[[AM]] {{\[}}[0], [1, 2]] output_shape [32, 2, 32]
// CHECK:         %[[B3:.*]] = tensor.expand_shape %[[BM]] {{\[}}[0, 1], [2]] output_shape [2, 32, 16] : tensor<64x16xf8E5M2> into tensor<2x32x16xf8E5M2>
// CHECK:         %[[P:.*]] = linalg.generic {indexing_maps = [#[[PA]], #[[PB]], #[[PP]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[A3]], %[[B3]] : tensor<32x2x32xf8E4M3FN>, tensor<2x32x16xf8E5M2>) outs(%{{.*}} : tensor<32x2x16xf32>)
// CHECK:         ^bb0(%[[IA:.*]]: f8E4M3FN, %[[IB:.*]]: f8E5M2, %[[OUT:.*]]: f32):
// CHECK-NEXT:      %[[X:.*]] = arith.extf %[[IA]] : f8E4M3FN to f32
// CHECK-NEXT:      %[[Y:.*]] = arith.extf %[[IB]] : f8E5M2 to f32
// CHECK-NEXT:      %[[M:.*]] = arith.mulf %[[X]], %[[Y]] fastmath<contract> : f32
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[OUT]], %[[M]] fastmath<contract> : f32
// CHECK-NEXT:      linalg.yield %[[S]] : f32
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[SP]], #[[SA]], #[[SB]], #[[C]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[P]], %[[ASC]], %[[BSC]] : tensor<32x2x16xf32>, tensor<32x2xf8E8M0FNU>, tensor<2x16xf8E8M0FNU>) outs(%[[ACC]] : tensor<32x16xf32>)
// CHECK:         ^bb0(%[[IP:.*]]: f32, %[[U:.*]]: f8E8M0FNU, %[[V:.*]]: f8E8M0FNU, %[[OUT:.*]]: f32):
// The scales one after the other, never sa * sb: t = p * sb (not
// contracted), then c + t * sa (contracted into one FMA).
// CHECK-NEXT:      %[[VF:.*]] = arith.extf %[[V]] : f8E8M0FNU to f32
// CHECK-NEXT:      %[[T0:.*]] = arith.mulf %[[IP]], %[[VF]] : f32
// CHECK-NEXT:      %[[UF:.*]] = arith.extf %[[U]] : f8E8M0FNU to f32
// CHECK-NEXT:      %[[T:.*]] = arith.mulf %[[T0]], %[[UF]] fastmath<contract> : f32
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[OUT]], %[[T]] fastmath<contract> : f32
// CHECK-NEXT:      linalg.yield %[[S]] : f32
// CHECK:         return %[[R]] : tensor<32x16xf32>

// BUF-LABEL: func.func @matmul_mx_mx(
// BUF-SAME:    %[[ACC:[^:]*]]: memref<32x16xf32, {{[^>]*}}>>)
// BUF-NOT:     memref.copy
// BUF:         linalg.generic
// BUF-NOT:     memref.copy
// BUF:         linalg.generic
// BUF-SAME:      outs(%[[ACC]] :
// BUF-NOT:     memref.copy
// BUF:         return %[[ACC]]
func.func @matmul_mx_mx(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: !mx.tensor<64x16xf8E5M2, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, %acc: tensor<32x16xf32>) -> tensor<32x16xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x16xf8E5M2, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<32x16xf32> -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}

// MXINT8 (both operands): the exact element values (sitofp of the code times
// 2^-6) in the partial product; their products are exact.  f4 mantissas are
// tagged so that the stock vectorizing schedule leaves them scalar.
// CHECK-LABEL: func.func @matmul_i8(
// CHECK:         linalg.generic
// CHECK-SAME:      attrs = {mx.kernel = "block_partials"}
// CHECK:         ^bb0(%[[IA:.*]]: i8, %[[IB:.*]]: i8, %[[OUT:.*]]: f32):
// CHECK-NEXT:      %[[CA:.*]] = arith.sitofp %[[IA]] : i8 to f32
// CHECK-NEXT:      %[[F:.*]] = arith.constant 1.562500e-02 : f32
// CHECK-NEXT:      %[[VA:.*]] = arith.mulf %[[CA]], %[[F]] : f32
// CHECK-NEXT:      %[[CB:.*]] = arith.sitofp %[[IB]] : i8 to f32
// CHECK-NEXT:      %[[F2:.*]] = arith.constant 1.562500e-02 : f32
// CHECK-NEXT:      %[[VB:.*]] = arith.mulf %[[CB]], %[[F2]] : f32
// CHECK-NEXT:      %[[M:.*]] = arith.mulf %[[VA]], %[[VB]] fastmath<contract> : f32
// CHECK-NEXT:      arith.addf %[[OUT]], %[[M]] fastmath<contract> : f32
// CHECK:         ^bb0(%[[P:.*]]: f32, %{{.*}}: f8E8M0FNU, %{{.*}}: f8E8M0FNU, %[[O:.*]]: f32):
// CHECK-NEXT:      %[[SB:.*]] = arith.extf
// CHECK-NEXT:      %[[T0:.*]] = arith.mulf %[[P]], %[[SB]] : f32
// CHECK-NEXT:      %[[SA:.*]] = arith.extf
// CHECK-NEXT:      %[[T:.*]] = arith.mulf %[[T0]], %[[SA]] fastmath<contract> : f32
// CHECK-NEXT:      arith.addf %[[O]], %[[T]] fastmath<contract> : f32
func.func @matmul_i8(%a: !mx.tensor<4x32xi8, block_size = 32, scale_type = f8E8M0FNU>, %b: !mx.tensor<32x8xi8, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, %acc: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<4x32xi8, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<32x8xi8, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @matmul_f4(
// CHECK:         linalg.generic
// CHECK-SAME:      attrs = {mx.kernel = "block_partials_subbyte"}
// CHECK:           arith.extf %{{.*}} : f4E2M1FN to f32
// CHECK:         ^bb0(%{{.*}}: f32, %{{.*}}: f8E8M0FNU, %{{.*}}: f32):
// CHECK-NEXT:      arith.extf
// CHECK-NEXT:      arith.mulf {{.*}} fastmath<contract>
// CHECK-NEXT:      arith.addf {{.*}} fastmath<contract>
func.func @matmul_f4(%a: !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x8xf32>, %acc: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
