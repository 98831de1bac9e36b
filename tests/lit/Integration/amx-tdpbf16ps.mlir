// The AMX self-test's kernel (mlir_mx.kernels.amx): upstream's amx dialect
// lowered by convert-vector-to-llvm{enable-amx=true} to the x86 tile
// intrinsics, then given an explicit target by mx-host-target: with
// amx_tile and amx_bf16 the function gets +amx-tile,+amx-bf16; without
// amx_bf16 the intrinsic is refused before LLVM could abort (issue 51).
// RUN: mx-opt %s --pass-pipeline="builtin.module(convert-vector-to-llvm{enable-amx=true},finalize-memref-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts,mx-host-target{arch=x86_64 features=pni,ssse3,sse4_1,sse4_2,avx,avx2,fma,f16c,amx_tile,amx_bf16})" | FileCheck %s
// RUN: not mx-opt %s --pass-pipeline="builtin.module(convert-vector-to-llvm{enable-amx=true},finalize-memref-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts,mx-host-target{arch=x86_64 features=pni,ssse3,sse4_1,sse4_2,avx,avx2,fma,f16c,amx_tile})" 2>&1 | FileCheck %s --check-prefix=NOBF16

// CHECK-LABEL: llvm.func @tdpbf16ps
// CHECK-SAME: "+amx-tile", "+amx-bf16"
// CHECK-COUNT-3: llvm.call_intrinsic "llvm.x86.tileloadd64.internal"
// CHECK: llvm.call_intrinsic "llvm.x86.tdpbf16ps.internal"
// CHECK: llvm.call_intrinsic "llvm.x86.tilestored64.internal"
// NOBF16: error: intrinsic llvm.x86.tdpbf16ps.internal needs amx_bf16, which the target CPU lacks
func.func @tdpbf16ps(%a: memref<16x32xbf16>, %b: memref<16x32xbf16>, %c: memref<16x16xf32>) {
  %c0 = arith.constant 0 : index
  %ta = amx.tile_load %a[%c0, %c0] : memref<16x32xbf16> into !amx.tile<16x32xbf16>
  %tb = amx.tile_load %b[%c0, %c0] : memref<16x32xbf16> into !amx.tile<16x32xbf16>
  %tc = amx.tile_load %c[%c0, %c0] : memref<16x16xf32> into !amx.tile<16x16xf32>
  %r = amx.tile_mulf %ta, %tb, %tc : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>
  amx.tile_store %c[%c0, %c0], %r : memref<16x16xf32>, !amx.tile<16x16xf32>
  return
}
