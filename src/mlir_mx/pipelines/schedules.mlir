// Transform schedules for the mx kernels, shipped as data.
//
// Load with  --transform-preload-library='transform-library-paths=<this file>'
// and run one entry point with --transform-interpreter='entry-point=NAME'.
// The default entry point (@__transform_main) is the v1 tiling schedule.
module attributes {transform.with_named_sequence} {

  // v1: tile the block matmul [0, 32, 32] over (m, n, k).  M is not tiled;
  // the K tile equals the block size, so each tile reads one scale column.
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    transform.include @mx_tile failures(propagate) (%root) : (!transform.any_op) -> ()
    transform.yield
  }

  // Tile every 3-loop contraction generic (the block matmul) [0, 32, 32].
  transform.named_sequence @mx_tile(%root: !transform.any_op {transform.readonly}) {
    %matmul = transform.structured.match ops{["linalg.generic"]}
        attributes {iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>]} in %root
      : (!transform.any_op) -> !transform.any_op
    %tiled, %loop_n, %loop_k =
      transform.structured.tile_using_for %matmul tile_sizes [0, 32, 32]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }

  // The execution tiling: also tile M by 8, so each tile's vectors are
  // 8x32x32 (the v1 tiling leaves M whole: 32x32x32 at the v1 shape, and
  // M x 32 x 32 in general, which compiles slowly for large M).  K stays
  // equal to the block size.
  transform.named_sequence @mx_tile_exec(%root: !transform.any_op {transform.readonly}) {
    %matmul = transform.structured.match ops{["linalg.generic"]}
        attributes {iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>]} in %root
      : (!transform.any_op) -> !transform.any_op
    %tiled, %loop_m, %loop_n, %loop_k =
      transform.structured.tile_using_for %matmul tile_sizes [8, 32, 32]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }

  // Vectorize the tiled block matmul (run after mx-pin-map-constants; without
  // it the vectorizer refuses the floordiv map: "Attempted to vectorize, but
  // failed").
  transform.named_sequence @mx_vectorize(%root: !transform.any_op {transform.readonly}) {
    %ops = transform.structured.match ops{["linalg.generic"]}
        attributes {iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>]} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %ops : !transform.any_op
    transform.yield
  }

  // Lower the vector ops convert-vector-to-llvm does not handle
  // (multi_reduction, broadcasting transfer permutation maps).
  // FIXME(upstream): vector.lower_broadcast together with canonicalization
  // in ONE apply_patterns rewrites forever (memory grows until the process
  // dies) on the M = 1 tile, so broadcasts are lowered in their own step.
  // (Leaving them to convert-vector-to-llvm works but compiles ~5x slower.)
  // No upstream issue found (searched 2026-12-01).
  transform.named_sequence @mx_lower_vectors(%root: !transform.any_op {transform.readonly}) {
    %funcs = transform.structured.match ops{["func.func"]} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerreduction"
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.lower_broadcast
    } : !transform.any_op
    transform.yield
  }
}
