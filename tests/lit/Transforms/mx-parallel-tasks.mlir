// RUN: mx-opt %s --split-input-file --verify-diagnostics --mx-parallel-tasks | FileCheck %s

// The loop (0 to 8 step 1) becomes a loop that claims its iterations from a
// counter shared by the team (one atomic add each); the function takes the
// counter's address (claims) last and carries the most threads with work.
// CHECK-LABEL: func.func @kernel
// CHECK-SAME: (%[[OUT:.*]]: memref<8xf32>, %[[CLAIMS:.*]]: index)
// CHECK-SAME: attributes {mx.tasks = 8 : i64}
// CHECK: %[[BUF:.*]] = memref.alloc
// CHECK: %[[ADDR:.*]] = arith.index_cast %[[CLAIMS]] : index to i64
// CHECK: %[[PTR:.*]] = llvm.inttoptr %[[ADDR]] : i64 to !llvm.ptr
// CHECK: %[[ONE:.*]] = arith.constant 1 : i64
// CHECK: scf.while : () -> index {
// CHECK:   %[[OLD:.*]] = llvm.atomicrmw add %[[PTR]], %[[ONE]] monotonic
// CHECK:   %[[K:.*]] = arith.index_cast %[[OLD]] : i64 to index
// CHECK:   %[[OFF:.*]] = arith.muli %[[K]], %c1
// CHECK:   %[[I:.*]] = arith.addi %c0, %[[OFF]]
// CHECK:   %[[MORE:.*]] = arith.cmpi slt, %[[I]], %c8
// CHECK:   scf.condition(%[[MORE]]) %[[I]] : index
// CHECK: } do {
// CHECK: ^bb0(%[[J:.*]]: index):
// CHECK:   memref.store %{{.*}}, %[[OUT]][%[[J]]]
// CHECK-NOT: scf.parallel
// CHECK: memref.dealloc %[[BUF]]
func.func @kernel(%out: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant 1.0 : f32
  %buf = memref.alloc() : memref<8xf32>
  memref.store %z, %buf[%c0] : memref<8xf32>
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    %v = memref.load %buf[%c0] : memref<8xf32>
    memref.store %v, %out[%i] : memref<8xf32>
    scf.reduce
  }
  memref.dealloc %buf : memref<8xf32>
  return
}

// -----

// No parallel loop: unchanged.
// CHECK-LABEL: func.func @serial(%{{.*}}: memref<8xf32>) {
func.func @serial(%out: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 1.0 : f32
  memref.store %z, %out[%c0] : memref<8xf32>
  return
}

// -----

// Every thread runs the code around the loop: a write there to memory the
// function did not allocate is refused.
func.func @writes_outside(%out: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant 0.0 : f32
  // expected-error @+1 {{outside the parallel loop writes memory the function did not allocate}}
  memref.store %z, %out[%c0] : memref<8xf32>
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    memref.store %z, %out[%i] : memref<8xf32>
    scf.reduce
  }
  return
}

// -----

func.func @two_loops(%out: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant 0.0 : f32
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    memref.store %z, %out[%i] : memref<8xf32>
    scf.reduce
  }
  // expected-error @+1 {{2 parallel loops (one is supported)}}
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    memref.store %z, %out[%i] : memref<8xf32>
    scf.reduce
  }
  return
}
