// RUN: mx-opt %s --split-input-file | FileCheck %s
// RUN: mx-opt %s --split-input-file | mx-opt --split-input-file | FileCheck %s
// RUN: mx-opt %s --split-input-file --mlir-print-op-generic | mx-opt --split-input-file | FileCheck %s

// Adversarial inputs for the syntax layer (one tokenizer, dialect/syntax.py):
// comments and strings that contain mx syntax, affine sets with >=, aliases,
// nested regions, mx types inside other attributes.  CRLF line endings and
// debuginfo columns are covered by tests/dialect/test_syntax.py.

!t = !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>

// A // comment inside an op, between its operands and in its type list.
// CHECK-LABEL: func.func @comment_inside_op
// CHECK-NEXT:    %[[R:.*]] = mx.fold_scale %arg0, %arg1 : !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f32 -> !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
func.func @comment_inside_op(%t: !t, %a: f32) -> !t {
  %0 = mx.fold_scale %t, // the alpha follows: %a : !t, f32 -> !t
                     %a  // mx.quantize_block %x : tensor<4x32xf32> -> !t
       : !t,             // an operand type
         f32 -> !t
  return %0 : !t
}

// -----

!t = !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// Strings holding mx syntax (with '>' '<' '>=' '<=' '//' and quotes) are not translated.
// CHECK-LABEL: func.func @strings
// CHECK:         mx.dequantize_block %arg0 {note = "%r = mx.fold_scale %t, %a : !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f32 -> !mx.tensor<1xf32> // >= <= \22q\22"}
// CHECK-SAME:      : !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU> -> tensor<4x32xf32>
func.func @strings(%t: !t) -> tensor<4x32xf32> {
  %0 = mx.dequantize_block %t {note = "%r = mx.fold_scale %t, %a : !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>, f32 -> !mx.tensor<1xf32> // >= <= \"q\""} : !t -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

!t = !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
#set = affine_set<(d0)[s0] : (d0 - s0 >= 0, -d0 + 31 >= 0)>
// An affine_set with '>=' in the attribute dictionary of an mx op (the '>' of
// '>=' is not a closing bracket), an affine_map, and the set used by affine.if.
// CHECK-DAG:   #[[MAP:.*]] = affine_map<(d0, d1) -> (d0 floordiv 32, d1)>
// CHECK-DAG:   #[[SET:.*]] = affine_set<(d0) : (d0 - 3 >= 0, -d0 + 10 >= 0)>
// CHECK-LABEL: func.func @affine_attrs
// CHECK:         mx.quantize_block %arg0 {m = #[[MAP]], s = #[[SET]]} : tensor<4x32xf32> -> !mx.tensor<4x32xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
// CHECK:         affine.if
func.func @affine_attrs(%x: tensor<4x32xf32>, %i: index, %n: index) -> !t {
  %q = mx.quantize_block %x {s = affine_set<(d0) : (d0 - 3 >= 0, -d0 + 10 >= 0)>, m = affine_map<(d0, d1) -> (d0 floordiv 32, d1)>} : tensor<4x32xf32> -> !t
  affine.if #set(%i)[%n] {
    %d = mx.dequantize_block %q : !t -> tensor<4x32xf32>
  }
  return %q : !t
}

// -----

// Nested regions: mx ops inside scf.for and scf.if bodies, an mx type as an
// attribute value (TypeAttr) and inside a function type of a call.
!t = !mx.tensor<64x4xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
// CHECK-LABEL: func.func @nested
// CHECK:         scf.for
// CHECK:           scf.if
// CHECK:             mx.quantize_block %{{.*}} {kind = !mx.tensor<64x4xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>} : tensor<64x4xf32> -> !mx.tensor<64x4xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>
// CHECK:             call @sink(%{{.*}}) : (!mx.tensor<64x4xf4E2M1FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>) -> ()
func.func private @sink(!t)
func.func @nested(%x: tensor<64x4xf32>, %n: index, %c: i1) -> tensor<64x4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x) -> (tensor<64x4xf32>) {
    %y = scf.if %c -> (tensor<64x4xf32>) {
      %q = mx.quantize_block %acc {kind = !t} : tensor<64x4xf32> -> !t
      func.call @sink(%q) : (!t) -> ()
      %d = mx.dequantize_block %q : !t -> tensor<64x4xf32>
      scf.yield %d : tensor<64x4xf32>
    } else {
      scf.yield %acc : tensor<64x4xf32>
    }
    scf.yield %y : tensor<64x4xf32>
  }
  return %r : tensor<64x4xf32>
}

// -----

// The generic op form, results of multi-result ops (%r#1) as operands, and
// a generic-spelled !mx.tensor all read as the custom forms do.
// CHECK-LABEL: func.func @generic_and_multi_result
// CHECK:         %[[R:.*]]:2 = call @two
// CHECK:         mx.block_matmul %[[R]]#0, %[[R]]#1, %arg1 : !mx.tensor<8x64xi8, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x8xi8, block_size = 32, scale_type = f8E8M0FNU, axis = 0>, tensor<8x8xf32> -> tensor<8x8xf32>
func.func private @two() -> (!mx.tensor<8x64xi8, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<array<i64: 64, 8>, i8, 32 : i64, f8E8M0FNU, 0 : i64>)
func.func @generic_and_multi_result(%unused: f32, %acc: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %r:2 = call @two() : () -> (!mx.tensor<8x64xi8, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x8xi8, block_size = 32, scale_type = f8E8M0FNU, axis = 0>)
  %m = "mx.block_matmul"(%r#0, %r#1, %acc) : (!mx.tensor<8x64xi8, block_size = 32, scale_type = f8E8M0FNU>, !mx.tensor<64x8xi8, block_size=32, scale_type=f8E8M0FNU, axis=0>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %m : tensor<8x8xf32>
}
