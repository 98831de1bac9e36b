// RUN: mx-opt %s --mx-to-linalg | FileCheck %s

// fold_scale always lowers, with one meaning (docs/dialect.md): alpha = 2^p
// adds p to each scale code that stays in [0, 254] (elements unchanged), keeps
// a NaN block (code 255) as it is, and requantizes the other blocks from
// dequantize(t) * alpha.  Any other alpha requantizes every block.  A constant
// alpha picks the route at compile time; a runtime alpha is tested per call
// (its p from the f32 bits, 65536 when it is not a power of two).

!t = !mx.tensor<8x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>

// CHECK-DAG: #[[ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[SC:.*]] = affine_map<(d0, d1) -> (d0, d1 floordiv 32)>
// CHECK-DAG: #[[SCALAR:.*]] = affine_map<(d0, d1) -> ()>

// CHECK-LABEL: func.func @power_of_two(
// CHECK-SAME:    %[[M:[^:]*]]: tensor<8x64xf8E4M3FN>, %[[S:[^:]*]]: tensor<8x2xf8E8M0FNU>) -> (tensor<8x64xf8E4M3FN>, tensor<8x2xf8E8M0FNU>)
// The requantized fallback: dequantize * alpha, then the quantize generics.
// CHECK:         %[[DQ:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[SC]], #[[SCALAR]], #[[ID]]]
// CHECK:         tensor.expand_shape %[[DQ]]
// CHECK:         %[[QS:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<8x2xf8E8M0FNU>)
// CHECK:         %[[QM:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<8x64xf8E4M3FN>)
// The exponent add: code + 3 when in [0, 254] and not 255; 255 kept.
// CHECK:         %[[NS:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ID]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[S]], %[[QS]] : tensor<8x2xf8E8M0FNU>, tensor<8x2xf8E8M0FNU>)
// CHECK-NEXT:    ^bb0(%[[IN:.*]]: f8E8M0FNU, %[[INQ:.*]]: f8E8M0FNU, %{{.*}}: f8E8M0FNU):
// CHECK:           %[[P:.*]] = arith.constant 3 : i32
// CHECK-NEXT:      %[[NC:.*]] = arith.addi %{{.*}}, %[[P]] : i32
// CHECK:           %[[NAN:.*]] = arith.cmpi eq
// CHECK:           arith.cmpi sge, %[[NC]]
// CHECK:           arith.cmpi sle, %[[NC]]
// CHECK:           arith.cmpi ne
// CHECK:           %[[ADDED:.*]] = arith.select %{{.*}}, %{{.*}}, %[[INQ]] : f8E8M0FNU
// CHECK-NEXT:      arith.select %[[NAN]], %[[IN]], %[[ADDED]] : f8E8M0FNU
// The elements: kept where the block took the exponent add or is NaN.
// CHECK:         %[[NM:.*]] = linalg.generic {indexing_maps = [#[[ID]], #[[ID]], #[[SC]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[M]], %[[QM]], %[[S]] :
// CHECK:           arith.ori
// CHECK-NEXT:      arith.select %{{.*}}, %{{.*}}, %{{.*}} : f8E4M3FN
// CHECK:         return %[[NM]], %[[NS]]
func.func @power_of_two(%t: !t) -> !t {
  %c = arith.constant 8.0 : f32
  %r = mx.fold_scale %t, %c : !t, f32 -> !t
  return %r : !t
}

// A negative power: p = -2.
// CHECK-LABEL: func.func @negative_power(
// CHECK:           arith.constant -2 : i32
func.func @negative_power(%t: !t) -> !t {
  %c = arith.constant 0.25 : f32
  %r = mx.fold_scale %t, %c : !t, f32 -> !t
  return %r : !t
}

// alpha = 1.0 is the identity: nothing is generated.
// CHECK-LABEL: func.func @one(
// CHECK-SAME:    %[[M:[^:]*]]: tensor<8x64xf8E4M3FN>, %[[S:[^:]*]]: tensor<8x2xf8E8M0FNU>)
// CHECK-NOT:     linalg.generic
// CHECK:         return %[[M]], %[[S]]
func.func @one(%t: !t) -> !t {
  %c = arith.constant 1.0 : f32
  %r = mx.fold_scale %t, %c : !t, f32 -> !t
  return %r : !t
}

// Runtime alpha: dequantize * alpha (alpha as a rank-0 tensor), requantize,
// and the exponent add with p read from alpha's bits (a rank-0 tensor too).
// CHECK-LABEL: func.func @runtime(
// CHECK-SAME:    %[[M:[^:]*]]: tensor<8x64xf8E4M3FN>, %[[S:[^:]*]]: tensor<8x2xf8E8M0FNU>, %[[A:[^:]*]]: f32)
// CHECK:         %[[A0:.*]] = tensor.from_elements %[[A]] : tensor<f32>
// CHECK:         linalg.generic {indexing_maps = [#[[ID]], #[[SC]], #[[SCALAR]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[M]], %[[S]], %[[A0]] :
// CHECK:           arith.extf
// CHECK-NEXT:      arith.extf
// CHECK-NEXT:      arith.mulf
// CHECK-NEXT:      arith.mulf
// CHECK:         tensor.expand_shape
// CHECK-COUNT-3: linalg.generic
// CHECK:         %[[BITS:.*]] = arith.bitcast %[[A]] : f32 to i32
// CHECK:         %[[NOTP2:.*]] = arith.constant 65536 : i32
// CHECK-NEXT:    %[[P:.*]] = arith.select %{{.*}}, %{{.*}}, %[[NOTP2]] : i32
// CHECK:         %[[P0:.*]] = tensor.from_elements %[[P]] : tensor<i32>
// CHECK:         linalg.generic {{.*}} ins(%[[S]], %{{.*}}, %[[P0]] : tensor<8x2xf8E8M0FNU>, tensor<8x2xf8E8M0FNU>, tensor<i32>)
// CHECK:         linalg.generic {{.*}} ins(%[[M]], %{{.*}}, %[[S]], %[[P0]] :
// CHECK-NOT:     linalg.generic
// CHECK:         return
func.func @runtime(%t: !t, %a: f32) -> !t {
  %r = mx.fold_scale %t, %a : !t, f32 -> !t
  return %r : !t
}

// A constant that is not a power of two takes the requantizing route too.
// CHECK-LABEL: func.func @not_power_of_two(
// CHECK:         arith.constant 3.000000e+00 : f32
// CHECK:         tensor.expand_shape
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT:     linalg.generic
// CHECK:         return
func.func @not_power_of_two(%t: !t) -> !t {
  %c = arith.constant 3.0 : f32
  %r = mx.fold_scale %t, %c : !t, f32 -> !t
  return %r : !t
}
