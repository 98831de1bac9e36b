// RUN: mx-opt %s --mx-to-linalg --one-shot-bufferize="bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map" --mx-quantize-kernels="threads=2" | FileCheck %s
// RUN: mx-opt %s --mx-to-linalg="subbyte-storage=unpacked" --one-shot-bufferize="bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map" --mx-quantize-kernels="threads=1" | FileCheck %s --check-prefix=ONE
// RUN: not mx-opt %s --mx-quantize-kernels="threads=-1" 2>&1 | FileCheck %s --check-prefix=BAD

// mx-quantize-kernels replaces the three generics of the quantize lowering
// (block amax into a filled f32 buffer, E8M0 codes, scaled and rounded
// elements) and the dequantize generic by generated kernels: no amax buffer,
// FP4 codes written and read packed (no pack_codes / unpack_codes generic).

// CHECK-LABEL: func.func @q(
// CHECK-SAME:    %[[X:[^:]*]]: memref<4x64xf32>) -> (memref<4x32xi8>, memref<4x2xf8E8M0FNU>)
// CHECK-NOT:     linalg.generic
// CHECK-NOT:     memref<4x2xf32>
// CHECK:         %[[S:.*]] = memref.alloc() {{.*}} : memref<4x2xf8E8M0FNU>
// CHECK:         %[[P:.*]] = memref.alloc() {{.*}} : memref<4x32x1xi8>
// CHECK:         memref.reinterpret_cast %[[P]] to offset: [0], sizes: [4, 32], strides: [32, 1]
// CHECK:         scf.parallel
// CHECK:           vector.reduction <maxui>
// CHECK:           vector.store
// CHECK-NOT:     linalg.generic
// CHECK:         return
func.func @q(%x: tensor<4x64xf32>) -> !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU> {
  %0 = mx.quantize_block %x : tensor<4x64xf32> -> !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
  return %0 : !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
}

// CHECK-LABEL: func.func @d(
// CHECK-SAME:    %[[C:[^:]*]]: memref<4x32xi8>, %{{[^:]*}}: memref<4x2xf8E8M0FNU>) -> memref<4x64xf32>
// CHECK-NOT:     linalg.generic
// CHECK:         memref.reinterpret_cast %[[C]]
// CHECK:         scf.parallel
// CHECK:           vector.store {{.*}} : memref<4x64xf32, strided<[64, 1]>>, vector<16xf32>
// CHECK-NOT:     linalg.generic
func.func @d(%a: !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>) -> tensor<4x64xf32> {
  %0 = mx.dequantize_block %a : !mx.tensor<4x64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}

// Blocks along axis 0 (the columns kernel: a lane-wise amax down the rows),
// one code per byte: the whole rank-3 tensor folds into (P, N, Q) = (1, 6, 8).
// CHECK-LABEL: func.func @q_axis0(
// CHECK-NOT:     linalg.generic
// CHECK:         memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [1, 6, 8], strides: [48, 8, 1]
// CHECK:         arith.maxui {{.*}} : vector<16xi32>
// ONE-LABEL: func.func @q_axis0(
// ONE-NOT:     scf.parallel
// ONE-NOT:     linalg.generic
// ONE:         return
func.func @q_axis0(%x: tensor<6x2x4xf32>) -> !mx.tensor<6x2x4xf8E5M2, block_size = 3, scale_type = f8E8M0FNU, axis = 0> {
  %0 = mx.quantize_block %x : tensor<6x2x4xf32> -> !mx.tensor<6x2x4xf8E5M2, block_size = 3, scale_type = f8E8M0FNU, axis = 0>
  return %0 : !mx.tensor<6x2x4xf8E5M2, block_size = 3, scale_type = f8E8M0FNU, axis = 0>
}

// BAD: error: {{.*}}threads must be >= 0, got -1
