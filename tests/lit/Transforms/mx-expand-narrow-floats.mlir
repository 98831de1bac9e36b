// RUN: mx-opt %s --mx-expand-narrow-floats | FileCheck %s
// RUN: mx-opt %s --mx-expand-narrow-floats=f16-widening=false | FileCheck %s --check-prefix=INT

// No arith.extf / arith.truncf / arith.scaling_* on a narrow float survives
// (CHECK-NOT in every function); narrow values go through same-width integer
// bitcasts.  Numerics are tested bit-exactly in tests/execution.

// CHECK-LABEL: func.func @extf_e4m3
// The f16 widening path: byte -> f16 bits -> hardware f16 -> f32, times 2^8.
// CHECK: arith.bitcast %{{.*}} : f8E4M3FN to i8
// CHECK: arith.bitcast %{{.*}} : i16 to f16
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: arith.mulf
// CHECK-NOT: f8E4M3FN to f32
// CHECK: return
func.func @extf_e4m3(%a: f8E4M3FN) -> f32 {
  %0 = arith.extf %a : f8E4M3FN to f32
  return %0 : f32
}

// The format table's recipe for FP4 (ElementFormat.widening, the kernels'
// codec): the code widened to a byte, placed into an f16, hardware f16 -> f32,
// times 2^14.  With f16-widening=false: the f32 bits built in integer
// arithmetic.  Both are checked on every code in tests/passes.
// CHECK-LABEL: func.func @extf_f4_vector
// CHECK: arith.bitcast %{{.*}} : vector<2x4xf4E2M1FN> to vector<2x4xi4>
// CHECK: arith.extui %{{.*}} : vector<2x4xi4> to vector<2x4xi8>
// CHECK: arith.bitcast %{{.*}} : vector<2x4xi16> to vector<2x4xf16>
// CHECK: arith.extf %{{.*}} : vector<2x4xf16> to vector<2x4xf32>
// CHECK: arith.mulf
// CHECK-NOT: arith.extf
// CHECK: return
// INT-LABEL: func.func @extf_f4_vector
// INT: arith.bitcast %{{.*}} : vector<2x4xf4E2M1FN> to vector<2x4xi4>
// INT: arith.extui %{{.*}} : vector<2x4xi4> to vector<2x4xi32>
// INT: arith.select
// INT: arith.bitcast %{{.*}} : vector<2x4xi32> to vector<2x4xf32>
// INT-NOT: arith.extf
// INT: return
func.func @extf_f4_vector(%a: vector<2x4xf4E2M1FN>) -> vector<2x4xf32> {
  %0 = arith.extf %a : vector<2x4xf4E2M1FN> to vector<2x4xf32>
  return %0 : vector<2x4xf32>
}

// E8M0 code 0 is 2^-127 (0x00400000 = 4194304), code 255 is NaN.
// CHECK-LABEL: func.func @extf_e8m0
// CHECK: arith.bitcast %{{.*}} : f8E8M0FNU to i8
// CHECK-DAG: arith.constant 4194304 : i32
// CHECK-DAG: arith.constant 2143289344 : i32
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK-NOT: arith.extf
// CHECK: return
func.func @extf_e8m0(%s: f8E8M0FNU) -> f32 {
  %0 = arith.extf %s : f8E8M0FNU to f32
  return %0 : f32
}

// CHECK-LABEL: func.func @truncf_e5m2
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: arith.addf
// CHECK: arith.select
// CHECK: arith.trunci %{{.*}} : i32 to i8
// CHECK: arith.bitcast %{{.*}} : i8 to f8E5M2
// CHECK-NOT: arith.truncf
// CHECK: return
func.func @truncf_e5m2(%a: f32) -> f8E5M2 {
  %0 = arith.truncf %a : f32 to f8E5M2
  return %0 : f8E5M2
}

// CHECK-LABEL: func.func @truncf_f6_from_f16
// CHECK: arith.extf %{{.*}} : vector<8xf16> to vector<8xf32>
// CHECK: arith.trunci %{{.*}} : vector<8xi32> to vector<8xi6>
// CHECK: arith.bitcast %{{.*}} : vector<8xi6> to vector<8xf6E3M2FN>
// CHECK-NOT: arith.truncf
// CHECK: return
func.func @truncf_f6_from_f16(%a: vector<8xf16>) -> vector<8xf6E3M2FN> {
  %0 = arith.truncf %a : vector<8xf16> to vector<8xf6E3M2FN>
  return %0 : vector<8xf6E3M2FN>
}

// CHECK-LABEL: func.func @truncf_e8m0
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: arith.shrui
// CHECK: arith.trunci %{{.*}} : i32 to i8
// CHECK: arith.bitcast %{{.*}} : i8 to f8E8M0FNU
// CHECK-NOT: arith.truncf
// CHECK: return
func.func @truncf_e8m0(%a: f32) -> f8E8M0FNU {
  %0 = arith.truncf %a : f32 to f8E8M0FNU
  return %0 : f8E8M0FNU
}

// CHECK-LABEL: func.func @scaling
// CHECK: arith.bitcast %{{.*}} : f8E8M0FNU to i8
// CHECK: arith.mulf
// CHECK: arith.divf
// CHECK: arith.bitcast %{{.*}} : i4 to f4E2M1FN
// CHECK-NOT: arith.scaling
// CHECK: return
func.func @scaling(%a: f8E4M3FN, %s: f8E8M0FNU, %x: f32) -> (f32, f4E2M1FN) {
  %0 = arith.scaling_extf %a, %s : f8E4M3FN, f8E8M0FNU to f32
  %1 = arith.scaling_truncf %x, %s : f32, f8E8M0FNU to f4E2M1FN
  return %0, %1 : f32, f4E2M1FN
}

// Standard float conversions are left alone.
// CHECK-LABEL: func.func @untouched
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @untouched(%a: f16) -> bf16 {
  %0 = arith.extf %a : f16 to f32
  %1 = arith.truncf %0 : f32 to bf16
  return %1 : bf16
}
