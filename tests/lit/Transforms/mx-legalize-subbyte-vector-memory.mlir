// RUN: mx-opt %s --split-input-file --verify-diagnostics --mx-legalize-subbyte-vector-memory | FileCheck %s

// A 1-D in-bounds read of an f4 memref becomes scalar loads + from_elements;
// an f8 read is left alone (one byte per element either way).
// CHECK-LABEL: func.func @read
// CHECK-COUNT-4: memref.load %arg0[%{{.*}}, %{{.*}}] : memref<2x4xf4E2M1FN>
// CHECK: vector.from_elements %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : vector<4xf4E2M1FN>
// CHECK: vector.transfer_read %arg1
func.func @read(%m: memref<2x4xf4E2M1FN>, %n: memref<4xf8E4M3FN>, %i: index) -> (vector<4xf4E2M1FN>, vector<4xf8E4M3FN>) {
  %c0 = arith.constant 0 : index
  %p = arith.constant 0.0 : f4E2M1FN
  %q = arith.constant 0.0 : f8E4M3FN
  %v = vector.transfer_read %m[%i, %c0], %p {in_bounds = [true]} : memref<2x4xf4E2M1FN>, vector<4xf4E2M1FN>
  %w = vector.transfer_read %n[%c0], %q {in_bounds = [true]} : memref<4xf8E4M3FN>, vector<4xf8E4M3FN>
  return %v, %w : vector<4xf4E2M1FN>, vector<4xf8E4M3FN>
}

// -----

// Stores: extract + scalar stores.
// CHECK-LABEL: func.func @write
// CHECK-COUNT-3: vector.extract %arg1[{{[0-9]}}] : f6E3M2FN from vector<3xf6E3M2FN>
// CHECK-NOT: vector.store
func.func @write(%m: memref<3xf6E3M2FN>, %v: vector<3xf6E3M2FN>) {
  %c0 = arith.constant 0 : index
  vector.store %v, %m[%c0] : memref<3xf6E3M2FN>, vector<3xf6E3M2FN>
  return
}

// -----

// A transfer that may be out of bounds cannot be scalarized blindly: a
// located error, never wrong numbers.
func.func @oob(%m: memref<3xf4E2M1FN>, %i: index) -> vector<4xf4E2M1FN> {
  %p = arith.constant 0.0 : f4E2M1FN
  // expected-error@+1 {{cannot lower a vector access (possibly out-of-bounds transfer) of a memref with sub-byte elements correctly}}
  %v = vector.transfer_read %m[%i], %p : memref<3xf4E2M1FN>, vector<4xf4E2M1FN>
  return %v : vector<4xf4E2M1FN>
}
