// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=fused" --one-shot-bufferize="bufferize-function-boundaries=1" | FileCheck %s

// After the split only upstream IR is left, and stock one-shot-bufferize turns
// each (mantissa, scale) tensor pair into a memref pair.  The matmul updates
// its accumulator argument in place: no copy, no allocation, no to_tensor.

// CHECK-NOT: bufferization.to_tensor

// CHECK-LABEL: func.func @matmul(
// CHECK-SAME:    %[[AM:[^:]*]]: memref<32x64xf8E4M3FN, {{[^>]*}}>>, %[[AS:[^:]*]]: memref<32x2xf8E8M0FNU, {{[^>]*}}>>, %[[B:[^:]*]]: memref<64x64xf32, {{[^>]*}}>>, %[[ACC:[^:]*]]: memref<32x64xf32, {{[^>]*}}>>)
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     memref.copy
// CHECK:         linalg.generic
// CHECK-SAME:      ins(%[[AM]], %[[AS]], %[[B]] :
// CHECK-SAME:      outs(%[[ACC]] :
// CHECK-NOT:     memref.copy
// CHECK:         return %[[ACC]]
func.func @matmul(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}

// CHECK-LABEL: func.func @matmul_mx_mx(
// CHECK-SAME:    memref<32x64xf8E4M3FN, {{[^>]*}}>>, %{{[^:]*}}: memref<32x2xf8E8M0FNU, {{[^>]*}}>>, %{{[^:]*}}: memref<64x16xf8E4M3FN, {{[^>]*}}>>, %{{[^:]*}}: memref<2x16xf8E8M0FNU, {{[^>]*}}>>, %[[ACC:[^:]*]]: memref<32x16xf32, {{[^>]*}}>>)
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     memref.copy
// CHECK:         linalg.generic
// CHECK-SAME:      outs(%[[ACC]] :
// CHECK:         return %[[ACC]]
func.func @matmul_mx_mx(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: !mx.tensor<64x16xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, %acc: tensor<32x16xf32>) -> tensor<32x16xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x16xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<32x16xf32> -> tensor<32x16xf32>
  return %0 : tensor<32x16xf32>
}

// quantize returns a fresh (mantissa, scale) memref pair.
// CHECK-LABEL: func.func @quantize(
// CHECK-SAME:    memref<32x64xf32, {{[^>]*}}>>) -> (memref<32x64xf8E4M3FN>, memref<32x2xf8E8M0FNU>)
// CHECK:         memref.expand_shape
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT:     memref.copy
// CHECK:         return %{{.*}}, %{{.*}} : memref<32x64xf8E4M3FN>, memref<32x2xf8E8M0FNU>
func.func @quantize(%x: tensor<32x64xf32>) -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> {
  %r = mx.quantize_block %x : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  return %r : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
}

// dequantize reads the pair and writes one new f32 buffer.
// CHECK-LABEL: func.func @dequantize(
// CHECK-SAME:    memref<32x64xf8E4M3FN, {{[^>]*}}>>, %{{[^:]*}}: memref<32x2xf8E8M0FNU, {{[^>]*}}>>) -> memref<32x64xf32>
// CHECK:         memref.alloc
// CHECK:         linalg.generic
// CHECK-NOT:     memref.copy
// CHECK:         return
func.func @dequantize(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) -> tensor<32x64xf32> {
  %r = mx.dequantize_block %t : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}

// CHECK-NOT: bufferization.to_tensor
