// Transform schedules for the block-factored matmul (mx-to-linalg{matmul-lowering=blocked}).
//
// The blocked lowering has no floordiv in any indexing map, so stock upstream
// tiling and vectorization apply as they are.  Its two generics are tagged by
// mx-to-linalg with a discardable attribute:
//   mx.kernel = "block_partials"          partial products over (m, n, kb, kk)
//   mx.kernel = "block_partials_subbyte"  the same with an f4/f6 mantissa
//   mx.kernel = "block_scales"            scale x partial, accumulated over kb
//
// Entry point @mx_blocked_vectorize (used by mx-vectorize-blocked.txt):
//   partials: interchange to (m, kb, kk, n), tile [1, 1, 8, 32], vectorize:
//     vector<1x1x8x32>; n (contiguous in B and in the partials) is the vector
//     dimension, kk is reduced by elementwise adds (multi_reduction,
//     "innerparallel") in chunks of 8 (an scf.for over kk / 8 carrying the
//     partial tile).  Measured (bench/decode_gemv.py): a whole 32x32 tile
//     (kk untiled) converts 1024 codes before the first multiply and spills
//     ~30 zmm registers to the stack per tile; 8 rows x 32 keep everything in
//     registers: 1x4096x4096 mx x mx 1.5x faster.  kk = 4 / n = 64 are within
//     noise; kk = 8, n = 128 and n = 64, kk = 8 spill again.
//   scales: interchange to (m, kb, n), tile [1, 1, 32], vectorize: vector<1x1x32>.
//   sub-byte partials: interchange and tile only, NOT vectorized: vector
//     loads of f4/f6 memrefs are wrong on the CPU (LLVM packs <N x i4> in
//     memory, the memref holds one code per byte), so these stay scalar.
module attributes {transform.with_named_sequence} {

  transform.named_sequence @mx_blocked_vectorize(%root: !transform.any_op {transform.readonly}) {
    %partials = transform.structured.match ops{["linalg.generic"]}
        attributes {mx.kernel = "block_partials"} in %root
      : (!transform.any_op) -> !transform.any_op
    %p_i = transform.structured.interchange %partials iterator_interchange = [0, 2, 3, 1]
      : (!transform.any_op) -> !transform.any_op
    %p_t, %p_l0, %p_l1, %p_l2, %p_l3 = transform.structured.tile_using_for %p_i tile_sizes [1, 1, 8, 32]
      : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.structured.vectorize %p_t vector_sizes [1, 1, 8, 32] : !transform.any_op

    %sub = transform.structured.match ops{["linalg.generic"]}
        attributes {mx.kernel = "block_partials_subbyte"} in %root
      : (!transform.any_op) -> !transform.any_op
    %s_i = transform.structured.interchange %sub iterator_interchange = [0, 2, 3, 1]
      : (!transform.any_op) -> !transform.any_op

    %scales = transform.structured.match ops{["linalg.generic"]}
        attributes {mx.kernel = "block_scales"} in %root
      : (!transform.any_op) -> !transform.any_op
    %c_i = transform.structured.interchange %scales iterator_interchange = [0, 2, 1]
      : (!transform.any_op) -> !transform.any_op
    %c_t, %c_l0, %c_l1, %c_l2 = transform.structured.tile_using_for %c_i tile_sizes [1, 1, 32]
      : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.structured.vectorize %c_t vector_sizes [1, 1, 32] : !transform.any_op

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
