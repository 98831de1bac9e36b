// RUN: not mx-runner %s -e main --entry-point-result=void 2>&1 | FileCheck %s
// Was: a traceback (RuntimeError 'compiled function not found'); now names the symbol.
// CHECK-NOT: Traceback
// CHECK: runner-unresolved-external.mlir:{{[0-9]+}}:{{[0-9]+}}: error: unresolved external function 'no_such_symbol_xyz'
func.func private @no_such_symbol_xyz()
func.func @main() {
  call @no_such_symbol_xyz() : () -> ()
  return
}
