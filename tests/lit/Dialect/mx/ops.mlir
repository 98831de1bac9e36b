// RUN: mx-opt %s --split-input-file | FileCheck %s
// Round trip through the printer and the parser again:
// RUN: mx-opt %s --split-input-file | mx-opt --split-input-file | FileCheck %s
// The generic op form parses back to the same custom form:
// RUN: mx-opt %s --split-input-file --mlir-print-op-generic | mx-opt --split-input-file | FileCheck %s
// RUN: mx-opt %s --split-input-file --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @quantize
// CHECK: %[[Q:.*]] = mx.quantize_block %{{.*}} : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK: %{{.*}} = mx.dequantize_block %[[Q]] : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
// GENERIC-LABEL: "func.func"
// GENERIC: "mx.quantize_block"(%{{.*}}) : (tensor<32x64xf32>) -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
func.func @quantize(%x: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %q = mx.quantize_block %x : tensor<32x64xf32> -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
  %d = mx.dequantize_block %q : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<32x64xf32>
  return %d : tensor<32x64xf32>
}

// -----

// Spaces around '=' are optional on input; the printer writes ' = '.
// The default axis (the last one) is not printed.
// CHECK-LABEL: func.func @spacing
// CHECK-SAME: (%{{.*}}: !mx.tensor<64xf8E5M2, block_size = 32, scale_type = f8E8M0FNU>)
func.func @spacing(%t: !mx.tensor<64xf8E5M2, block_size=32, scale_type=f8E8M0FNU, axis = 0>) {
  return
}

// -----

// Every MX element type.
// CHECK-LABEL: func.func @element_types
// CHECK-SAME: !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK-SAME: !mx.tensor<4x32xf8E5M2, block_size = 32, scale_type = f8E8M0FNU>
// CHECK-SAME: !mx.tensor<4x32xf6E2M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK-SAME: !mx.tensor<4x32xf6E3M2FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK-SAME: !mx.tensor<4x32xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK-SAME: !mx.tensor<4x32xi8, block_size = 32, scale_type = f8E8M0FNU>
func.func @element_types(
    %a: !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>,
    %b: !mx.tensor<4x32xf8E5M2, block_size = 32, scale_type = f8E8M0FNU>,
    %c: !mx.tensor<4x32xf6E2M3FN, block_size = 32, scale_type = f8E8M0FNU>,
    %d: !mx.tensor<4x32xf6E3M2FN, block_size = 32, scale_type = f8E8M0FNU>,
    %e: !mx.tensor<4x32xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU>,
    %f: !mx.tensor<4x32xi8, block_size = 32, scale_type = f8E8M0FNU>) {
  return
}

// -----

// Block axis 0 (the B operand of a matmul) and a middle axis of a rank-3 type.
// CHECK-LABEL: func.func @axes
// CHECK-SAME: !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
// CHECK-SAME: !mx.tensor<2x64x3xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU, axis = 1>
// CHECK-SAME: !mx.tensor<2x3x64xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU>
func.func @axes(%b: !mx.tensor<64x48xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>,
                %c: !mx.tensor<2x64x3xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU, axis = 1>,
                %d: !mx.tensor<2x3x64xf8E4M3FN, block_size = 16, scale_type = f8E8M0FNU, axis = 2>) {
  return
}

// -----

// Both matmul forms, with an attribute dictionary and explicit locations.
// CHECK-LABEL: func.func @matmul
// CHECK: mx.block_matmul %{{.*}}, %{{.*}}, %{{.*}} {tag = "a"} : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32>
// CHECK: mx.block_matmul %{{.*}}, %{{.*}}, %{{.*}} : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<32x64xf32> -> tensor<32x64xf32>
func.func @matmul(%a: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>,
                  %b: tensor<64x64xf32>,
                  %bq: !mx.tensor<64x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>,
                  %acc: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %0 = mx.block_matmul %a, %b, %acc {tag = "a"} : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, tensor<64x64xf32>, tensor<32x64xf32> -> tensor<32x64xf32> loc("matmul.py":1:1)
  %1 = mx.block_matmul %a, %bq, %0 : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<32x64xf32> -> tensor<32x64xf32> loc(#loc)
  return %1 : tensor<32x64xf32>
}
#loc = loc("here")

// -----

// Type aliases, fold_scale, block arguments and nested regions.
!mxa = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK-LABEL: func.func @nested
// CHECK: scf.for
// CHECK: mx.fold_scale %{{.*}}, %{{.*}} : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f32 -> !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK: scf.yield %{{.*}} : !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK: ^bb1(%{{.*}}: !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>):
func.func @nested(%t: !mxa, %alpha: f32, %n: index) -> !mxa {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %t) -> (!mxa) {
    %s = mx.fold_scale %acc, %alpha : !mxa, f32 -> !mxa
    scf.yield %s : !mxa
  }
  cf.br ^bb1(%r : !mxa)
^bb1(%x: !mxa):
  return %x : !mxa
}

// -----

// The generic form is accepted as input, including the positional type.
// CHECK-LABEL: func.func @generic_input
// CHECK: mx.quantize_block %{{.*}} : tensor<64x8xf32> -> !mx.tensor<64x8xf6E3M2FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
func.func @generic_input(%x: tensor<64x8xf32>) -> !mx.tensor<array<i64: 64, 8>, f6E3M2FN, 32 : i64, f8E8M0FNU, 0 : i64> {
  %q = "mx.quantize_block"(%x) : (tensor<64x8xf32>) -> !mx.tensor<array<i64: 64, 8>, f6E3M2FN, 32 : i64, f8E8M0FNU, 0 : i64>
  return %q : !mx.tensor<array<i64: 64, 8>, f6E3M2FN, 32 : i64, f8E8M0FNU, 0 : i64>
}

// -----

// An mx type inside an attribute dictionary (a TypeAttr).
// CHECK-LABEL: func.func @type_attr
// CHECK-SAME: attributes {mx.type = !mx.tensor<32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>}
func.func @type_attr() attributes {mx.type = !mx.tensor<32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>} {
  return
}
