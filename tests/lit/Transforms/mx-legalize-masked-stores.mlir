// RUN: mx-opt %s --mx-legalize-masked-stores="arch=x86_64" | FileCheck %s
// RUN: mx-opt %s --mx-legalize-masked-stores="arch=aarch64" | FileCheck %s --check-prefix=ARM
// FIXME(upstream): llvm-project #179489.  LLVM 22's x86 backend compiles the
// masked store of @narrow, whose mask is a constant with one lane set, into a
// 4-byte store of the lane's i32 (the three bytes after it overwritten).  The
// pass makes every narrow-integer mask opaque to LLVM: one inline asm per
// function yields a bit that is 0 at run time, splatted and XOR-ed in.

// CHECK-LABEL: llvm.func @narrow
// CHECK:      %[[Z:.*]] = llvm.mlir.constant(0 : i64) : i64
// CHECK-NEXT: %[[O:.*]] = llvm.inline_asm "", "=r,0" %[[Z]] : (i64) -> i64
// CHECK-NEXT: %[[B:.*]] = llvm.trunc %[[O]] : i64 to i1
// CHECK:      %[[T:.*]] = llvm.trunc %{{.*}} : vector<16xi32> to vector<16xi8>
// CHECK:      %[[P:.*]] = llvm.mlir.poison : vector<16xi1>
// CHECK:      %[[I:.*]] = llvm.insertelement %[[B]], %[[P]][%{{.*}} : i32] : vector<16xi1>
// CHECK:      %[[S:.*]] = llvm.shufflevector %[[I]], %[[P]] [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] : vector<16xi1>
// CHECK:      %[[X:.*]] = llvm.xor %[[M:.*]], %[[S]] : vector<16xi1>
// CHECK:      llvm.intr.masked.store %[[T]], %{{.*}}, %[[X]] {alignment = 1 : i32} : vector<16xi8>, vector<16xi1> into !llvm.ptr
// ARM-LABEL:  llvm.func @narrow
// ARM-NOT:    llvm.inline_asm
// ARM:        llvm.intr.masked.store %{{.*}}, %{{.*}}, %{{.*}} {alignment = 1 : i32}
llvm.func @narrow(%src: !llvm.ptr, %dst: !llvm.ptr) {
  %v = llvm.load %src : !llvm.ptr -> vector<16xi32>
  %t = llvm.trunc %v : vector<16xi32> to vector<16xi8>
  %m = llvm.mlir.constant(dense<[true, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false]> : vector<16xi1>) : vector<16xi1>
  llvm.intr.masked.store %t, %dst, %m {alignment = 1 : i32} : vector<16xi8>, vector<16xi1> into !llvm.ptr
  llvm.return
}

// f32 (and i64) masked stores are left alone: no truncating store to widen.
// CHECK-LABEL: llvm.func @wide
// CHECK-NOT:   llvm.inline_asm
// CHECK-NOT:   llvm.xor
// CHECK:       llvm.intr.masked.store
llvm.func @wide(%v: vector<8xf32>, %dst: !llvm.ptr, %m: vector<8xi1>) {
  llvm.intr.masked.store %v, %dst, %m {alignment = 4 : i32} : vector<8xf32>, vector<8xi1> into !llvm.ptr
  llvm.return
}
