// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=blocked subbyte-storage=unpacked" | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=fused subbyte-storage=unpacked" | FileCheck %s --check-prefix=FUSED
// RUN: mx-opt %s --mx-to-linalg --one-shot-bufferize="bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map" --mx-matmul-kernels="threads=1" | FileCheck %s --check-prefix=KERNEL

// mx.block_matmul with an NVFP4 rhs (issue 54; numerics.md, "NVFP4 in the
// matmul"): the matmul runs from a zero-filled C with the rhs's E4M3 scales
// as sb (the tagged pair mx-matmul-kernels replaces), then one elementwise
// generic acc + c / g into the accumulator (one f32 division, one addition).

// CHECK-LABEL: func.func @mm
// CHECK-SAME:    (%[[A:.*]]: tensor<4x32xf8E4M3FN>, %[[SA:.*]]: tensor<4x2xf8E8M0FNU>, %[[B:.*]]: tensor<32x8xf4E2M1FN>, %[[SB:.*]]: tensor<2x8xf8E4M3FN>, %[[ACC:.*]]: tensor<4x8xf32>, %[[G:.*]]: f32) -> tensor<4x8xf32>
// CHECK:       %[[Z:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x8xf32>)
// CHECK:       %[[P:.*]] = linalg.generic {{.*}} attrs = {mx.kernel = "block_partials_subbyte"}
// CHECK:       %[[C:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[SA]], %[[SB]] : tensor<4x2x8xf32>, tensor<4x2xf8E8M0FNU>, tensor<2x8xf8E4M3FN>) outs(%[[Z]] : tensor<4x8xf32>) attrs = {mx.kernel = "block_scales"}
// CHECK:         arith.extf %{{.*}} : f8E4M3FN to f32
// CHECK:       %[[G0:.*]] = tensor.from_elements %[[G]] : tensor<f32>
// CHECK:       %[[R:.*]] = linalg.generic {{.*}} ins(%[[C]], %[[G0]] : tensor<4x8xf32>, tensor<f32>) outs(%[[ACC]] : tensor<4x8xf32>)
// CHECK:         %[[Q:.*]] = arith.divf %{{.*}}, %{{.*}} : f32
// CHECK:         arith.addf %{{.*}}, %[[Q]] : f32
// CHECK:       return %[[R]]

// FUSED-LABEL: func.func @mm
// FUSED:       %[[Z:.*]] = linalg.fill
// FUSED:       %[[C:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]{{.*}} outs(%[[Z]] : tensor<4x8xf32>)
// FUSED:         arith.extf %{{.*}} : f8E4M3FN to f32
// FUSED:       linalg.generic {{.*}} ins(%[[C]], %{{.*}} : tensor<4x8xf32>, tensor<f32>)
// FUSED:         arith.divf

// KERNEL-LABEL: func.func @mm
// KERNEL-SAME:    %{{[^:]*}}: memref<2x8xf8E4M3FN>, %[[ACC:[^:]*]]: memref<4x8xf32>, %{{[^:]*}}: f32)
// KERNEL:         %[[Z:.*]] = memref.alloc() {{.*}} : memref<4x8xf32>
// KERNEL:         linalg.fill ins(%{{.*}} : f32) outs(%[[Z]] : memref<4x8xf32>)
// KERNEL-NOT:     mx.kernel
// KERNEL:         vector.fma
// KERNEL:         linalg.generic {{.*}} ins(%[[Z]], %{{.*}} : memref<4x8xf32>, memref<f32>) outs(%[[ACC]] : memref<4x8xf32>)
// KERNEL:           arith.divf
// KERNEL:         return %[[ACC]]
func.func @mm(%a: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>,
              %b: !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>,
              %acc: tensor<4x8xf32>, %g: f32) -> tensor<4x8xf32> {
  %r = mx.block_matmul %a, %b, %acc, %g : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32>, f32 -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
