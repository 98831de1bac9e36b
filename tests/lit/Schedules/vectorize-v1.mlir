// The v1 block matmul through the v1 schedule (tile [0, 32, 32]) and the
// structured vectorizer: mlir-mx v1's first gap (the scale's floordiv map stopped
// vectorization), closed.
//
// Without mx-pin-map-constants the vectorizer refuses the floordiv map, with
// upstream's message:
// RUN: not mx-opt %s --mx-to-linalg="matmul-lowering=fused" --transform-preload-library="transform-library-paths=%mx_pipelines/schedules.mlir" --transform-interpreter="entry-point=mx_tile" --transform-interpreter="entry-point=mx_vectorize" 2>&1 | FileCheck %s --check-prefix=NOPIN
//
// With it, the tiled op vectorizes (no unit-dim folding; v1 had to edit the
// map to the form (d0, 0) by hand):
// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=fused" --transform-preload-library="transform-library-paths=%mx_pipelines/schedules.mlir" --transform-interpreter="entry-point=mx_tile" --mx-pin-map-constants --transform-interpreter="entry-point=mx_vectorize" | FileCheck %s --check-prefix=VEC
//
// After tiling and pinning, unit-dim folding drops the scale's unit axis
// (v1's second hand-edited form: map (d0) over a rank-1 slice):
// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=fused" --transform-preload-library="transform-library-paths=%mx_pipelines/schedules.mlir" --transform-interpreter="entry-point=mx_tile" --mx-pin-map-constants --linalg-fold-unit-extent-dims | FileCheck %s --check-prefix=FOLD
//
// The default entry point is the v1 tiling schedule, so the original
// two-tool pipe works in one tool:
// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=fused" --transform-preload-library="transform-library-paths=%mx_pipelines/schedules.mlir" --transform-interpreter | FileCheck %s --check-prefix=TILE
// ... and piping into upstream mlir-opt still works:
// RUN: mx-opt %s --mx-to-linalg="matmul-lowering=fused" | mlir-opt --transform-preload-library="transform-library-paths=%mx_pipelines/schedules.mlir" --transform-interpreter | FileCheck %s --check-prefix=TILE

// NOPIN: error: Attempted to vectorize, but failed

// VEC-DAG: #[[AMAP:.*]] = affine_map<(d0, d1) -> (d0, 0, d1)>
// VEC-DAG: #[[SMAP:.*]] = affine_map<(d0, d1) -> (d0, 0, 0)>
// VEC-DAG: #[[BMAP:.*]] = affine_map<(d0, d1) -> (0, d1, d0)>
// VEC-LABEL: func.func @block_matmul
// VEC: affine.apply #{{.*}}(%{{.*}})
// VEC: vector.transfer_read %{{.*}}, %{{.*}} {permutation_map = #[[AMAP]]} : tensor<32x32xf8E4M3FN>, vector<32x32x32xf8E4M3FN>
// VEC: vector.transfer_read %{{.*}}, %{{.*}} {permutation_map = #[[SMAP]]} : tensor<32x1xf8E8M0FNU>, vector<32x32x32xf8E8M0FNU>
// VEC: vector.transfer_read %{{.*}}, %{{.*}} {permutation_map = #[[BMAP]]} : tensor<32x32xf32>, vector<32x32x32xf32>
// VEC: vector.multi_reduction <add>, %{{.*}}, %{{.*}} [2] : vector<32x32x32xf32> to vector<32x32xf32>
// VEC-NOT: linalg.generic

// FOLD-DAG: #[[S:.*]] = affine_map<(d0, d1, d2) -> (d0)>
// FOLD-LABEL: func.func @block_matmul
// FOLD: linalg.generic {indexing_maps = [#{{.*}}, #[[S]], #{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<32x32xf8E4M3FN>, tensor<32xf8E8M0FNU>, tensor<32x32xf32>)

// TILE-DAG: #[[BLK:.*]] = affine_map<(d0) -> (d0 floordiv 32)>
// TILE-DAG: #[[SC:.*]] = affine_map<(d0, d1, d2) -> (d0, d2 floordiv 32)>
// TILE-LABEL: func.func @block_matmul
// TILE: scf.for
// TILE: scf.for
// TILE: %[[B:.*]] = affine.apply #[[BLK]](%{{.*}})
// TILE: tensor.extract_slice %{{.*}}[0, %[[B]]] [32, 1] [1, 1] : tensor<32x2xf8E8M0FNU> to tensor<32x1xf8E8M0FNU>
// TILE: linalg.generic {indexing_maps = [#{{.*}}, #[[SC]], #{{.*}}, #{{.*}}]

func.func @block_matmul(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>,
                        %b: tensor<64x64xf32>, %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = mx.block_matmul %a, %b, %acc : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return %0 : tensor<32x64xf32>
}
