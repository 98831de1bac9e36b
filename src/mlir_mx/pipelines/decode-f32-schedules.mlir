// Baseline for bench/decode_gemv.py: a plain f32 matmul (one linalg.generic
// over (m, n, k), the `f32` variant of mlir_mx.roofline.variants) tiled and
// vectorized with the same stock transforms and the same register tile as
// the blocked mx partials (schedules-blocked.mlir): interchange to
// (m, k, n), tile [1, 8, 32], vector<1x8x32>, k reduced by elementwise adds.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @f32_matmul_vectorize(%root: !transform.any_op {transform.readonly}) {
    %mm = transform.structured.match ops{["linalg.generic"]} in %root
      : (!transform.any_op) -> !transform.any_op
    %i = transform.structured.interchange %mm iterator_interchange = [0, 2, 1]
      : (!transform.any_op) -> !transform.any_op
    %t, %l0, %l1, %l2 = transform.structured.tile_using_for %i tile_sizes [1, 8, 32]
      : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.structured.vectorize %t vector_sizes [1, 8, 32] : !transform.any_op
    %funcs = transform.structured.match ops{["func.func"]} in %root
      : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.lower_masked_transfers
      transform.apply_patterns.vector.lower_masks
    } : !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerparallel"
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.sink_ops
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.yield
  }
}
