// RUN: mx-opt %s --split-input-file --mx-pin-map-constants | FileCheck %s

// The tiled v1 block matmul: the K tile (32) equals the block size, so
// d2 floordiv 32 is 0 on the whole tile and is pinned to the literal 0.
// CHECK: #[[SCALE:.*]] = affine_map<(d0, d1, d2) -> (d0, 0)>
// CHECK-LABEL: func.func @tiled_k32_block32
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[SCALE]], #{{.*}}, #{{.*}}]
func.func @tiled_k32_block32(%a: tensor<32x32xf8E4M3FN>, %s: tensor<32x1xf8E8M0FNU>, %b: tensor<32x32xf32>, %c: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d0, d2 floordiv 32)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %s, %b : tensor<32x32xf8E4M3FN>, tensor<32x1xf8E8M0FNU>, tensor<32x32xf32>) outs(%c : tensor<32x32xf32>) {
  ^bb0(%x: f8E4M3FN, %y: f8E8M0FNU, %z: f32, %o: f32):
    %1 = arith.extf %x : f8E4M3FN to f32
    %2 = arith.extf %y : f8E8M0FNU to f32
    %3 = arith.mulf %1, %2 : f32
    %4 = arith.mulf %3, %z : f32
    %5 = arith.addf %o, %4 : f32
    linalg.yield %5 : f32
  } -> tensor<32x32xf32>
  return %0 : tensor<32x32xf32>
}

// -----

// Untiled: d2 runs 0..63, the ends are 0 and 1: unchanged.
// CHECK: affine_map<(d0, d1, d2) -> (d0, d2 floordiv 32)>
// CHECK-NOT: (d0, 0)
// CHECK-LABEL: func.func @untiled
func.func @untiled(%a: tensor<32x64xf8E4M3FN>, %s: tensor<32x2xf8E8M0FNU>, %b: tensor<64x64xf32>, %c: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d0, d2 floordiv 32)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %s, %b : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>, tensor<64x64xf32>) outs(%c : tensor<32x64xf32>) {
  ^bb0(%x: f8E4M3FN, %y: f8E8M0FNU, %z: f32, %o: f32):
    %1 = arith.extf %x : f8E4M3FN to f32
    %2 = arith.extf %y : f8E8M0FNU to f32
    %3 = arith.mulf %1, %2 : f32
    %4 = arith.mulf %3, %z : f32
    %5 = arith.addf %o, %4 : f32
    linalg.yield %5 : f32
  } -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}

// -----

// A K tile of 32 over blocks of 16 straddles two blocks (ends 0 and 1).
// CHECK: affine_map<(d0, d1, d2) -> (d0, d2 floordiv 16)>
// CHECK-LABEL: func.func @straddle_k32_block16
func.func @straddle_k32_block16(%a: tensor<8x32xf8E4M3FN>, %s: tensor<8x2xf8E8M0FNU>, %b: tensor<32x8xf32>, %c: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d0, d2 floordiv 16)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %s, %b : tensor<8x32xf8E4M3FN>, tensor<8x2xf8E8M0FNU>, tensor<32x8xf32>) outs(%c : tensor<8x8xf32>) {
  ^bb0(%x: f8E4M3FN, %y: f8E8M0FNU, %z: f32, %o: f32):
    %1 = arith.extf %x : f8E4M3FN to f32
    %2 = arith.extf %y : f8E8M0FNU to f32
    %3 = arith.mulf %1, %2 : f32
    %4 = arith.mulf %3, %z : f32
    %5 = arith.addf %o, %4 : f32
    linalg.yield %5 : f32
  } -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A K tile of 64 over blocks of 32 also straddles.
// CHECK: affine_map<(d0, d1) -> (d0, d1 floordiv 32)>
// CHECK-LABEL: func.func @straddle_k64_block32
func.func @straddle_k64_block32(%a: tensor<4x64xf32>, %s: tensor<4x2xf32>, %c: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1 floordiv 32)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a, %s : tensor<4x64xf32>, tensor<4x2xf32>) outs(%c : tensor<4x64xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %1 = arith.mulf %x, %y : f32
    linalg.yield %1 : f32
  } -> tensor<4x64xf32>
  return %0 : tensor<4x64xf32>
}

// -----

// mod is not monotone: left alone even though both ends give 0
// (d1 mod 32 at d1 = 0 and d1 = 32 is 0, but not in between).
// CHECK: affine_map<(d0, d1) -> (d1 mod 32)>
// CHECK-LABEL: func.func @mod
func.func @mod(%a: tensor<33xf32>, %s: tensor<32xf32>, %c: tensor<4x33xf32>) -> tensor<4x33xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d1 mod 32)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a, %s : tensor<33xf32>, tensor<32xf32>) outs(%c : tensor<4x33xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %1 = arith.mulf %x, %y : f32
    linalg.yield %1 : f32
  } -> tensor<4x33xf32>
  return %0 : tensor<4x33xf32>
}

// -----

// A negative coefficient is not provably monotone (non-decreasing): left alone.
// CHECK: affine_map<(d0, d1) -> ((-d1 + 31) floordiv 32)>
// CHECK-LABEL: func.func @negative
func.func @negative(%a: tensor<32xf32>, %s: tensor<1xf32>, %c: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> ((31 - d1) floordiv 32)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a, %s : tensor<32xf32>, tensor<1xf32>) outs(%c : tensor<4x32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %1 = arith.mulf %x, %y : f32
    linalg.yield %1 : f32
  } -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

// Dynamic shapes: a result using a loop of unknown (dynamic) range is left
// alone; one using only static loops is still pinned.
// CHECK: affine_map<(d0, d1) -> (d0 floordiv 32, 0)>
// CHECK-LABEL: func.func @dynamic
func.func @dynamic(%a: tensor<?x32xf32>, %s: tensor<?x1xf32>, %c: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0 floordiv 32, d1 floordiv 32)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a, %s : tensor<?x32xf32>, tensor<?x1xf32>) outs(%c : tensor<?x32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %1 = arith.mulf %x, %y : f32
    linalg.yield %1 : f32
  } -> tensor<?x32xf32>
  return %0 : tensor<?x32xf32>
}

// -----

// Memref form (after bufferization) is handled the same way; an offset that
// stays inside one block is pinned too: (d1 + 3) floordiv 8 over d1 in [0, 4).
// CHECK: affine_map<(d0, d1) -> (d0, 0)>
// CHECK-LABEL: func.func @memref_offset
func.func @memref_offset(%a: memref<4x4xf32>, %s: memref<4x1xf32>, %c: memref<4x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, (d1 + 3) floordiv 8)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%a, %s : memref<4x4xf32>, memref<4x1xf32>) outs(%c : memref<4x4xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %1 = arith.mulf %x, %y : f32
    linalg.yield %1 : f32
  }
  return
}
