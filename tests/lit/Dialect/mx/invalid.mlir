// RUN: mx-opt %s --split-input-file --verify-diagnostics
// One case per verifier message: the type's rules (reported at the type)
// and each op's rules (reported at the op, with upstream's 'op' prefix).

// expected-error@+1 {{shape must have at least one dimension}}
func.func @empty_shape(%t: !mx.tensor<f8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{block_size must be positive, got 0}}
func.func @zero_block(%t: !mx.tensor<32xf8E4M3FN, block_size = 0, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{block_size must be positive, got -32}}
func.func @negative_block(%t: !mx.tensor<32xf8E4M3FN, block_size = -32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{last dimension (63) must be divisible by block_size (32)}}
func.func @not_divisible(%t: !mx.tensor<32x63xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{dimension 0 (48) must be divisible by block_size (32)}}
func.func @axis_not_divisible(%t: !mx.tensor<48x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>) {
  return
}

// -----

// expected-error@+1 {{axis 2 is out of range for a rank-2 shape}}
func.func @axis_range(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 2>) {
  return
}

// -----

// expected-error@+1 {{elementType must be a float type, got index}}
func.func @elem_not_float(%t: !mx.tensor<32xindex, block_size = 32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{elementType f16 is not an MX element type (expected one of f8E4M3FN, f8E5M2, f6E2M3FN, f6E3M2FN, f4E2M1FN, i8)}}
func.func @elem_not_mx(%t: !mx.tensor<32xf16, block_size = 32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{scaleType must be a float type, got i8}}
func.func @scale_not_float(%t: !mx.tensor<32xf8E4M3FN, block_size = 32, scale_type = i8>) {
  return
}

// -----

// expected-error@+1 {{scaleType f32 is not supported: block scales are f8E8M0FNU (OCP MX) or f8E4M3FN (NVFP4)}}
func.func @scale_not_e8m0(%t: !mx.tensor<32xf8E4M3FN, block_size = 32, scale_type = f32>) {
  return
}

// -----

// expected-error@+1 {{!mx.tensor requires a static shape; '?' is not allowed}}
func.func @dynamic(%t: !mx.tensor<?x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{unknown !mx.tensor parameter 'blocksize'}}
func.func @unknown_param(%t: !mx.tensor<32xf8E4M3FN, blocksize = 32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// expected-error@+1 {{missing parameter 'scale_type'}}
func.func @missing_param(%t: !mx.tensor<32xf8E4M3FN, block_size = 32>) {
  return
}

// -----

func.func @quantize_shape(%x: tensor<32x32xf32>) {
  // expected-error@+1 {{'mx.quantize_block' op input shape doesn't match result shape}}
  %q = mx.quantize_block %x : tensor<32x32xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  return
}

// -----

func.func @quantize_input_type(%x: tensor<32x64xf16>) {
  // expected-error@+1 {{'mx.quantize_block' op input must be a statically shaped f32 tensor, got tensor<32x64xf16>}}
  %q = mx.quantize_block %x : tensor<32x64xf16> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  return
}

// -----

func.func @quantize_result_type(%x: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.quantize_block' op result must be an !mx.tensor, got tensor<32x64xf32>}}
  %q = mx.quantize_block %x : tensor<32x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @dequantize_shape(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) {
  // expected-error@+1 {{'mx.dequantize_block' op input shape doesn't match result shape}}
  %d = mx.dequantize_block %t : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<64x32xf32>
  return
}

// -----

func.func @dequantize_result(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>) {
  // expected-error@+1 {{'mx.dequantize_block' op result must be a statically shaped f32 tensor, got tensor<?x64xf32>}}
  %d = mx.dequantize_block %t : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<?x64xf32>
  return
}

// -----

func.func @matmul_rank(%a: !mx.tensor<2x32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %c: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op all operands must be 2D}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<2x32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @matmul_k(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<32x64xf32>, %c: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op reduction dimension mismatch: lhs has K=64 but rhs has K=32}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<32x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @matmul_m(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %c: tensor<16x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op M dimension mismatch: lhs has M=32 but acc has M=16}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  return
}

// -----

func.func @matmul_n(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x48xf32>, %c: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op N dimension mismatch: rhs has N=48 but acc has N=64}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x48xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @matmul_result(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>, %c: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op acc shape doesn't match result shape}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<64x32xf32>
  return
}

// -----

func.func @matmul_lhs_axis(%a: !mx.tensor<64x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op lhs must be blocked along its last (contraction) axis, got axis = 0}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<64x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<64x64xf32>, tensor<64x64xf32> -> tensor<64x64xf32>
  return
}

// -----

func.func @matmul_rhs_axis(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: !mx.tensor<64x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %c: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op rhs must be blocked along the contraction axis (axis = 0), got axis = 1}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<32x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @matmul_block_sizes(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: !mx.tensor<64x64xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU, axis = 0>, %c: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op lhs and rhs block sizes differ (32 vs 16)}}
  %0 = mx.block_matmul %a, %b, %c : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x64xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU, axis = 0>, tensor<32x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @matmul_lhs_not_mx(%a: tensor<32x64xf32>, %b: tensor<64x64xf32>, %c: tensor<32x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op lhs must be an !mx.tensor, got tensor<32x64xf32>}}
  %0 = mx.block_matmul %a, %b, %c : tensor<32x64xf32>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @matmul_operands(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %b: tensor<64x64xf32>) {
  // expected-error@+1 {{'mx.block_matmul' expects 3 or 4 operands, got 2}}
  %0 = mx.block_matmul %a, %b : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @fold_scale_types(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %alpha: f32) {
  // expected-error@+1 {{'mx.fold_scale' op input and output types must be the same.}}
  %s = mx.fold_scale %t, %alpha : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f32 -> !mx.tensor<32x64xf8E5M2, block_size = 32, scale_type = f8E8M0FNU>
  return
}

// -----

func.func @fold_scale_alpha(%t: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, %alpha: f64) {
  // expected-error@+1 {{'mx.fold_scale' op alpha must be an f32 scalar, got f64}}
  %s = mx.fold_scale %t, %alpha : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f64 -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  return
}

// -----

func.func @unknown_op(%x: tensor<32xf32>) {
  // expected-error@+1 {{custom op 'mx.frobnicate' is unknown}}
  %q = mx.frobnicate %x : tensor<32xf32> -> tensor<32xf32>
  return
}
