// Explicit targets (the default, arch=host features=host, depends on the machine).
// The second function of the file calls an x86 intrinsic: the run fails
// there (stderr) after printing the first (stdout).
// RUN: not mx-opt %s --split-input-file --mx-host-target="arch=x86_64 features=pni,ssse3,sse4_1,sse4_2,avx,avx2,fma,f16c" 2>/dev/null | FileCheck %s --check-prefix=AVX2
// RUN: not mx-opt %s --split-input-file --mx-host-target="arch=x86_64 features=pni,ssse3,sse4_1,sse4_2,avx,avx2,fma,f16c" 2>&1 >/dev/null | FileCheck %s --check-prefix=AVX2-ERR
// RUN: not mx-opt %s --split-input-file --mx-host-target="arch=aarch64 features=asimddp cpu=apple-m1" 2>/dev/null | FileCheck %s --check-prefix=ARM
// RUN: not mx-opt %s --split-input-file --mx-host-target="arch=aarch64 features=asimddp cpu=apple-m1" 2>&1 >/dev/null | FileCheck %s --check-prefix=ARM-ERR
// RUN: not mx-opt %s --split-input-file --mx-host-target="arch=x86_64 features=pni,ssse3,sse4_1,sse4_2,avx,avx2,f16c" 2>&1 | FileCheck %s --check-prefix=NOFMA

// AVX2-LABEL: llvm.func @axpy
// AVX2-SAME: target_features = #llvm.target_features<[{{.*}}"+avx2", "+fma", "+f16c"{{.*}}"-avx512f"
// AVX2-NOT: target_cpu
// AVX2-LABEL: llvm.func @declared
// AVX2-NOT: target_features
// ARM-LABEL: llvm.func @axpy
// ARM-SAME: target_cpu = "apple-m1", target_features = #llvm.target_features<["+dotprod", "-i8mm"
// NOFMA: error: this x86_64 CPU lacks fma, which mlir-mx needs: fma: fused multiply-add
llvm.func @axpy(%a: vector<8xf32>, %x: vector<8xf32>, %y: vector<8xf32>) -> vector<8xf32> {
  %r = llvm.intr.fmuladd(%a, %x, %y) : (vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
  llvm.return %r : vector<8xf32>
}
llvm.func @declared(vector<8xf32>) -> vector<8xf32>

// -----

// An x86 intrinsic compiled for aarch64 (LLVM would abort): a diagnostic.
// ARM-ERR: error: intrinsic llvm.x86.avx512.permvar.sf.512 is an x86_64 instruction: this code was generated for x86_64 CPU features and cannot be compiled for aarch64
// An AVX-512 intrinsic on an AVX2 CPU: a diagnostic.
// AVX2-ERR: error: intrinsic llvm.x86.avx512.permvar.sf.512 needs avx512f, which the target CPU lacks
llvm.func @permute(%v: vector<16xf32>, %i: vector<16xi32>) -> vector<16xf32> {
  %r = llvm.call_intrinsic "llvm.x86.avx512.permvar.sf.512"(%v, %i) : (vector<16xf32>, vector<16xi32>) -> vector<16xf32>
  llvm.return %r : vector<16xf32>
}
