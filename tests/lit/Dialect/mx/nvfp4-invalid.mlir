// RUN: mx-opt %s --split-input-file --verify-diagnostics
// NVFP4's rules (issue 54): which (element, scale, block) triples take
// f8E4M3FN scales (reported at the type), and the global_scale operand
// (reported at the op).

// expected-error@+1 {{scaleType f8E4M3FN scales take block_size 16 only (NVFP4), got 32}}
func.func @e4m3_block_32(%t: !mx.tensor<64xf4E2M1FN, block_size = 32, scale_type = f8E4M3FN>) {
  return
}

// -----

// expected-error@+1 {{scaleType f8E4M3FN scales take f4E2M1FN (nvfp4) elements only, got f8E4M3FN}}
func.func @e4m3_fp8_elements(%t: !mx.tensor<64xf8E4M3FN, block_size = 16, scale_type = f8E4M3FN>) {
  return
}

// -----

// expected-error@+1 {{scaleType f8E4M3FN scales take f4E2M1FN (nvfp4) elements only, got f6E2M3FN}}
func.func @e4m3_fp6_elements(%t: !mx.tensor<64xf6E2M3FN, block_size = 16, scale_type = f8E4M3FN>) {
  return
}

// -----

// expected-error@+1 {{scaleType f8E5M2 is not supported: block scales are f8E8M0FNU (OCP MX) or f8E4M3FN (NVFP4)}}
func.func @e5m2_scales(%t: !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E5M2>) {
  return
}

// -----

func.func @missing_global_scale(%x: tensor<64xf32>) {
  // expected-error@+1 {{'mx.quantize_block' op result has f8E4M3FN scales (NVFP4): a global_scale operand (f32) is required}}
  %q = mx.quantize_block %x : tensor<64xf32> -> !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
  return
}

// -----

func.func @dequantize_missing_global_scale(%t: !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>) {
  // expected-error@+1 {{'mx.dequantize_block' op input has f8E4M3FN scales (NVFP4): a global_scale operand (f32) is required}}
  %d = mx.dequantize_block %t : !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN> -> tensor<64xf32>
  return
}

// -----

func.func @global_scale_on_e8m0(%x: tensor<64xf32>, %g: f32) {
  // expected-error@+1 {{'mx.quantize_block' op global_scale is only for f8E4M3FN-scaled tensors, result has f8E8M0FNU scales}}
  %q = mx.quantize_block %x, %g : tensor<64xf32>, f32 -> !mx.tensor<64xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
  return
}

// -----

func.func @global_scale_not_f32(%t: !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, %g: f16) {
  // expected-error@+1 {{'mx.dequantize_block' op global_scale must be an f32 scalar, got f16}}
  %d = mx.dequantize_block %t, %g : !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, f16 -> tensor<64xf32>
  return
}

// -----

func.func @global_scale_tensor(%x: tensor<64xf32>, %g: tensor<1xf32>) {
  // expected-error@+1 {{'mx.quantize_block' op global_scale must be an f32 scalar, got tensor<1xf32>}}
  %q = mx.quantize_block %x, %g : tensor<64xf32>, tensor<1xf32> -> !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
  return
}

// -----

func.func @three_operands(%x: tensor<64xf32>, %g: f32) {
  // expected-error@+1 {{'mx.quantize_block' expects 1 or 2 operands, got 3}}
  %q = mx.quantize_block %x, %g, %g : tensor<64xf32>, f32, f32 -> !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
  return
}

// -----

func.func @fold_scale_nvfp4(%t: !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, %a: f32) {
  // expected-error@+1 {{'mx.fold_scale' op input has f8E4M3FN scales (NVFP4), which fold_scale does not take: fold alpha into its global_scale}}
  %r = mx.fold_scale %t, %a : !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, f32 -> !mx.tensor<64xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>
  return
}

// -----

func.func @matmul_nvfp4_lhs(%a: !mx.tensor<4x32xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, %b: tensor<32x8xf32>, %c: tensor<4x8xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op lhs has f8E4M3FN scales (NVFP4), which block_matmul takes as rhs only (the NVFP4 operand is the rhs)}}
  %r = mx.block_matmul %a, %b, %c : !mx.tensor<4x32xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN>, tensor<32x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul_missing_global_scale(%a: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, %b: !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, %c: tensor<4x8xf32>) {
  // expected-error@+1 {{'mx.block_matmul' op rhs has f8E4M3FN scales (NVFP4): a global_scale operand (f32) is required}}
  %r = mx.block_matmul %a, %b, %c : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul_global_scale_e8m0_rhs(%a: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, %b: !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E8M0FNU, axis = 0>, %c: tensor<4x8xf32>, %g: f32) {
  // expected-error@+1 {{'mx.block_matmul' op global_scale is only for an f8E4M3FN-scaled rhs, rhs has f8E8M0FNU scales}}
  %r = mx.block_matmul %a, %b, %c, %g : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E8M0FNU, axis = 0>, tensor<4x8xf32>, f32 -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul_global_scale_f32_rhs(%a: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, %b: tensor<32x8xf32>, %c: tensor<4x8xf32>, %g: f32) {
  // expected-error@+1 {{'mx.block_matmul' op global_scale is only for an f8E4M3FN-scaled rhs, rhs has an f32 tensor}}
  %r = mx.block_matmul %a, %b, %c, %g : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, tensor<32x8xf32>, tensor<4x8xf32>, f32 -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul_global_scale_f64(%a: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, %b: !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, %c: tensor<4x8xf32>, %g: f64) {
  // expected-error@+1 {{'mx.block_matmul' op global_scale must be an f32 scalar, got f64}}
  %r = mx.block_matmul %a, %b, %c, %g : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32>, f64 -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul_five_operands(%a: !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, %b: !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, %c: tensor<4x8xf32>, %g: f32) {
  // expected-error@+1 {{'mx.block_matmul' expects 3 or 4 operands, got 5}}
  %r = mx.block_matmul %a, %b, %c, %g, %g : !mx.tensor<4x32xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>, !mx.tensor<32x8xf4E2M1FN, block_size = 16, scale_type = f8E4M3FN, axis = 0>, tensor<4x8xf32>, f32, f32 -> tensor<4x8xf32>
  return
}
