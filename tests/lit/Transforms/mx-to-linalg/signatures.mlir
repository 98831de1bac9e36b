// RUN: mx-opt %s --mx-to-linalg=subbyte-storage=unpacked | FileCheck %s

// The 1:N split through signatures: each !mx.tensor becomes (mantissa, scale),
// mantissa first, in func.func arguments and results (public, private and
// declarations), func.call, func.return and block arguments; no mx type and
// no unrealized_conversion_cast survives.

!a = !mx.tensor<32x64xf8E4M3FN, block_size = 32, scale_type = f8E8M0FNU>
!b = !mx.tensor<64x48xf6E2M3FN, block_size = 32, scale_type = f8E8M0FNU, axis = 0>

// CHECK-LABEL: func.func @passthrough(
// CHECK-SAME:    %[[AM:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[AS:[^:]*]]: tensor<32x2xf8E8M0FNU>, %[[X:[^:]*]]: f32, %[[BM:[^:]*]]: tensor<64x48xf6E2M3FN>, %[[BS:[^:]*]]: tensor<2x48xf8E8M0FNU>)
// CHECK-SAME:    -> (tensor<64x48xf6E2M3FN>, tensor<2x48xf8E8M0FNU>, f32, tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)
// CHECK-NEXT:    return %[[BM]], %[[BS]], %[[X]], %[[AM]], %[[AS]]
func.func @passthrough(%a: !a, %x: f32, %b: !b) -> (!b, f32, !a) {
  return %b, %x, %a : !b, f32, !a
}

// CHECK-LABEL: func.func private @decl(tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>) -> (tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)
func.func private @decl(!a) -> !a

// CHECK-LABEL: func.func private @helper(
// CHECK-SAME:    %[[M:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[S:[^:]*]]: tensor<32x2xf8E8M0FNU>) -> tensor<32x64xf32>
// CHECK:         linalg.generic {{.*}} ins(%[[M]], %[[S]] :
func.func private @helper(%a: !a) -> tensor<32x64xf32> {
  %d = mx.dequantize_block %a : !a -> tensor<32x64xf32>
  return %d : tensor<32x64xf32>
}

// CHECK-LABEL: func.func @calls(
// CHECK-SAME:    %[[M:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[S:[^:]*]]: tensor<32x2xf8E8M0FNU>) -> tensor<32x64xf32>
// CHECK:         %[[R:.*]]:2 = call @decl(%[[M]], %[[S]]) : (tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>) -> (tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)
// CHECK:         %[[D:.*]] = call @helper(%[[R]]#0, %[[R]]#1) : (tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>) -> tensor<32x64xf32>
// CHECK:         return %[[D]]
func.func @calls(%a: !a) -> tensor<32x64xf32> {
  %r = call @decl(%a) : (!a) -> !a
  %d = call @helper(%r) : (!a) -> tensor<32x64xf32>
  return %d : tensor<32x64xf32>
}

// Block arguments of a function's other blocks, reached by cf.br / cf.cond_br.
// CHECK-LABEL: func.func @branches(
// CHECK-SAME:    %[[C:[^:]*]]: i1, %[[M0:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[S0:[^:]*]]: tensor<32x2xf8E8M0FNU>, %[[M1:[^:]*]]: tensor<32x64xf8E4M3FN>, %[[S1:[^:]*]]: tensor<32x2xf8E8M0FNU>)
// CHECK:         cf.cond_br %[[C]], ^bb1(%[[M0]], %[[S0]] : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>), ^bb1(%[[M1]], %[[S1]] : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)
// CHECK:       ^bb1(%[[M:.*]]: tensor<32x64xf8E4M3FN>, %[[S:.*]]: tensor<32x2xf8E8M0FNU>):
// CHECK:         cf.br ^bb2(%[[M]], %[[S]] : tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)
// CHECK:       ^bb2(%[[MM:.*]]: tensor<32x64xf8E4M3FN>, %[[SS:.*]]: tensor<32x2xf8E8M0FNU>):
// CHECK:         linalg.generic {{.*}} ins(%[[MM]], %[[SS]] :
func.func @branches(%c: i1, %a0: !a, %a1: !a) -> tensor<32x64xf32> {
  cf.cond_br %c, ^bb1(%a0 : !a), ^bb1(%a1 : !a)
^bb1(%x: !a):
  cf.br ^bb2(%x : !a)
^bb2(%y: !a):
  %d = mx.dequantize_block %y : !a -> tensor<32x64xf32>
  return %d : tensor<32x64xf32>
}

// quantize -> call -> return: the pair flows straight through.
// CHECK-LABEL: func.func @chain(
// CHECK-SAME:    %[[X:[^:]*]]: tensor<32x64xf32>) -> (tensor<32x64xf8E4M3FN>, tensor<32x2xf8E8M0FNU>)
// CHECK:         %[[S:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<32x2xf8E8M0FNU>)
// CHECK:         %[[M:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[S]] :
// CHECK:         %[[R:.*]]:2 = call @decl(%[[M]], %[[S]])
// CHECK:         return %[[R]]#0, %[[R]]#1
func.func @chain(%x: tensor<32x64xf32>) -> !a {
  %q = mx.quantize_block %x : tensor<32x64xf32> -> !a
  %r = call @decl(%q) : (!a) -> !a
  return %r : !a
}

// CHECK-NOT: !mx.tensor
// CHECK-NOT: unrealized_conversion_cast
