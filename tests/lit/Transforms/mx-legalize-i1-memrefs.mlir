// RUN: mx-opt %s --mx-legalize-i1-memrefs | FileCheck %s
// Without the pass, finalize-memref-to-llvm aborts on the i1 store; with it
// the module lowers:
// RUN: mx-opt %s --mx-legalize-i1-memrefs --finalize-memref-to-llvm --convert-arith-to-llvm --convert-func-to-llvm --reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM

// CHECK-LABEL: func.func @flags
// CHECK-SAME: (%[[M:.*]]: memref<?xi8>, %[[B:.*]]: i1) -> i1
// CHECK:   %[[A:.*]] = memref.alloc() : memref<3xi8>
// CHECK:   %[[W:.*]] = arith.extui %[[B]] : i1 to i8
// CHECK:   memref.store %[[W]], %[[A]][%{{.*}}] : memref<3xi8>
// CHECK:   memref.cast %[[A]] : memref<3xi8> to memref<?xi8>
// CHECK:   %[[L:.*]] = memref.load %[[M]][%{{.*}}] : memref<?xi8>
// CHECK:   %[[T:.*]] = arith.trunci %[[L]] : i8 to i1
// CHECK:   return %[[T]] : i1
// LLVM-LABEL: llvm.func @flags
// LLVM: llvm.store %{{.*}}, %{{.*}} : i8, !llvm.ptr
func.func @flags(%m: memref<?xi1>, %b: i1) -> i1 {
  %c0 = arith.constant 0 : index
  %a = memref.alloc() : memref<3xi1>
  memref.store %b, %a[%c0] : memref<3xi1>
  %cast = memref.cast %a : memref<3xi1> to memref<?xi1>
  memref.dealloc %a : memref<3xi1>
  %v = memref.load %m[%c0] : memref<?xi1>
  return %v : i1
}
