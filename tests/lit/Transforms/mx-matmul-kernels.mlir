// RUN: mx-opt %s --mx-to-linalg --one-shot-bufferize="bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map" --mx-matmul-kernels="threads=2" | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg --one-shot-bufferize="bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map" --mx-matmul-kernels="threads=1 schedule=prefill" | FileCheck %s --check-prefix=ONE
// RUN: not mx-opt %s --mx-matmul-kernels="schedule=fast" 2>&1 | FileCheck %s --check-prefix=BAD

// mx-matmul-kernels replaces the two generics of the blocked lowering (partial
// products into an (M, K/B, N) buffer, then the per-block scales) by one
// generated kernel: A widened once into an f32 buffer, B streamed or packed,
// vector FMAs, the accumulator updated in place, no partials buffer.

// CHECK-LABEL: func.func @decode(
// CHECK-SAME:    %[[A:[^:]*]]: memref<1x2048xf8E4M3FN>, %{{[^:]*}}: memref<1x64xf8E8M0FNU>, %{{[^:]*}}: memref<2048x2048xf8E4M3FN>, %{{[^:]*}}: memref<64x2048xf8E8M0FNU>, %[[C:[^:]*]]: memref<1x2048xf32>)
// CHECK-NOT:     linalg.generic
// CHECK-NOT:     memref<1x64x2048xf32>
// CHECK:         memref.alloc() {{.*}} : memref<1x{{2048|2064}}xf32>
// CHECK:         scf.parallel
// CHECK:           vector.fma
// CHECK:           vector.store {{.*}}, %[[C]]
// CHECK:         memref.dealloc
// CHECK:         return %[[C]]
func.func @decode(%a: !mx.tensor<1x2048xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>,
                  %b: !mx.tensor<2048x2048xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>,
                  %acc: tensor<1x2048xf32>) -> tensor<1x2048xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<1x2048xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<2048x2048xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<1x2048xf32> -> tensor<1x2048xf32>
  return %0 : tensor<1x2048xf32>
}

// The packed schedule: a per-panel f32 buffer of widened B (nc/nr x kc x nr),
// the microkernel's accumulators carried through the block loop.
// ONE-LABEL: func.func @prefill(
// ONE-NOT:     scf.parallel
// ONE-NOT:     linalg.generic
// ONE:         memref.alloc() {{.*}} : memref<{{[0-9]+}}x64xf32>
// ONE:         memref.alloc() {{.*}} : memref<{{[0-9]+}}x64x{{16|32|48|64}}xf32>
// ONE:         scf.for
// ONE:           vector.fma
// ONE:         memref.dealloc
func.func @prefill(%a: !mx.tensor<64x64xf8E5M2, block_size = 32, scale_type = f8E8M0FNU>,
                   %b: tensor<64x96xf32>, %acc: tensor<64x96xf32>) -> tensor<64x96xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<64x64xf8E5M2, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x96xf32>, tensor<64x96xf32> -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}

// BAD: option 'schedule': 'fast' is not one of: auto, decode, small, prefill
