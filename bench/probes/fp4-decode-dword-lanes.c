// A limit probe, not project code: the f32-activation FP4 decode inner loop
// (widen FP4 codes to f32 through a 16-entry vpermd/vpermps table, FMA with a
// broadcast activation), in cache, in two layouts of B:
//   A: today's tiled B (kernels/common/problem.py tile_b_codes): a row of a
//      64-column tile is 32 bytes, byte j = columns 2j (low nibble) and 2j+1;
//      per 32 codes: vpmovzxbd, vpermd, vpsrld, vpermd, 2 FMA.
//   B/C: 8 codes per dword lane (dword j, nibble i = column 16i + j of a
//      128-column tile row): per 128 codes one 64-byte load, 7 vpsrld,
//      8 vpermd, 8 FMA; C runs two tiles at once (16 accumulator chains).
// Each column's FMAs stay in k order (the blocked order's per-block sum).
// Measured 2026-12-03 on an Intel Xeon (KVM, AVX-512, Sapphire Rapids class):
//   A 18.3-18.9, B 21.5-21.6, C 21.6-22.1 G codes/s: +15 % for B/C.
// The catch: B/C need 128-column tiles (16 dwords of one row), which
// N = 2880 (gpt-oss) does not divide.
// Session 42 added, on today's layout (no new stored form):
//   D: one vpermb puts bytes 8i + j/2 of a 32-byte row in dword j and a
//      vpsrlvd by 0/4 picks each lane's nibble (then 3 vpsrld, 4 vpermps);
//   F: A over two tiles at once (8 chains); G: D over two tiles at once.
// Measured 2026-12-03 on an AMD EPYC (Zen 4, KVM, 2 vCPUs), 3 runs:
//   A 25.9-26.1, B 28.8-28.9 (+11 %), C 31.6-31.8 (+22 %), D 23.7-23.9,
//   F 27.2-27.4 (+5 %), G 24.6-25.1 G codes/s; an earlier run without D/F/G
//   A 25.9-26.7, B 30.7-31.7, C 32.3-33.5.  So only a new stored layout (B/C)
//   pays; the vpermb route from today's layout is slower than A.
// Session 47 added, again on today's layout:
//   E: the 32-byte row broadcast to both 256-bit halves (vbroadcasti32x8), a
//      vpsrlvd by 0/4 per half, then 3 vpsrld by 8 and 4 vpermps (no vpmovzxbd);
//   H: E over two tiles at once (8 chains).
// Measured 2026-12-04 on the same kind of Zen 4, 3 runs: A 25.4-26.2,
//   E 22.0-25.0, H 23.2-26.0 G codes/s (B 28.5-29.8, C 30.5-33.0): the
//   broadcast costs what the vpmovzxbd did; no route from today's layout beats A.
// gcc -O2 -march=sapphirerapids fp4-decode-dword-lanes.c -o fp4dec && ./fp4dec
// (-march=native on the Zen 4: gcc 12 has no znver4)
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
#define K 256
#define NCOL 512
static uint8_t codes[K*NCOL/2] __attribute__((aligned(64)));
static float x[K] __attribute__((aligned(64)));
static float out[NCOL] __attribute__((aligned(64)));
static const float tblv[16]={0,.5f,1,1.5f,2,3,4,6,-0.f,-.5f,-1,-1.5f,-2,-3,-4,-6};

// A: tile of 64 columns, row k of a tile = 32 bytes (byte j: cols 2j, 2j+1), rows of a tile contiguous.
__attribute__((noinline)) void loopA(void){
  __m512 tbl=_mm512_loadu_ps(tblv);
  for(int t=0;t<NCOL/64;t++){
    const uint8_t*p=codes+t*K*32;
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b0=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32)));
      __m512i b1=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32+16)));
      a0=_mm512_fmadd_ps(_mm512_permutexvar_ps(b0,tbl),xb,a0);
      a1=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b0,4),tbl),xb,a1);
      a2=_mm512_fmadd_ps(_mm512_permutexvar_ps(b1,tbl),xb,a2);
      a3=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b1,4),tbl),xb,a3);
    }
    _mm512_storeu_ps(out+t*64,a0);_mm512_storeu_ps(out+t*64+16,a1);_mm512_storeu_ps(out+t*64+32,a2);_mm512_storeu_ps(out+t*64+48,a3);
  }
}
// B: tile of 128 columns, row k of a tile = 64 bytes (dword j nibble i: col 16i+j).
__attribute__((noinline)) void loopB(void){
  __m512 tbl=_mm512_loadu_ps(tblv);
  for(int t=0;t<NCOL/128;t++){
    const uint8_t*p=codes+t*K*64;
    __m512 a[8]; for(int i=0;i<8;i++) a[i]=_mm512_setzero_ps();
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b=_mm512_loadu_si512((const void*)(p+k*64));
      #pragma GCC unroll 8
      for(int i=0;i<8;i++){ a[i]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b,tbl),xb,a[i]); b=_mm512_srli_epi32(b,4); }
    }
    for(int i=0;i<8;i++) _mm512_storeu_ps(out+t*128+16*i,a[i]);
  }
}
// C: like B but two tiles at once (16 chains).
__attribute__((noinline)) void loopC(void){
  __m512 tbl=_mm512_loadu_ps(tblv);
  for(int t=0;t<NCOL/256;t++){
    const uint8_t*p=codes+t*K*128;
    __m512 a[16]; for(int i=0;i<16;i++) a[i]=_mm512_setzero_ps();
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b=_mm512_loadu_si512((const void*)(p+k*128));
      __m512i c=_mm512_loadu_si512((const void*)(p+k*128+64));
      #pragma GCC unroll 8
      for(int i=0;i<8;i++){ a[i]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b,tbl),xb,a[i]); b=_mm512_srli_epi32(b,4);
        a[8+i]=_mm512_fmadd_ps(_mm512_permutexvar_ps(c,tbl),xb,a[8+i]); c=_mm512_srli_epi32(c,4);}
    }
    for(int i=0;i<16;i++) _mm512_storeu_ps(out+t*256+16*i,a[i]);
  }
}

// D: today's stored tile (32-byte rows), one vpermb puts bytes 8i + j/2 in dword j, a vpsrlvd by 0/4 picks the nibble.
static uint8_t pidx[64] __attribute__((aligned(64)));
static int shv[16] __attribute__((aligned(64)));
__attribute__((noinline)) void loopD(void){
  __m512 tbl=_mm512_loadu_ps(tblv); __m512i ix=_mm512_load_si512(pidx); __m512i sv=_mm512_load_si512(shv);
  for(int t=0;t<NCOL/64;t++){
    const uint8_t*p=codes+t*K*32;
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i r=_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p+k*32)));
      __m512i b=_mm512_srlv_epi32(_mm512_permutexvar_epi8(ix,r),sv);
      a0=_mm512_fmadd_ps(_mm512_permutexvar_ps(b,tbl),xb,a0);
      a1=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b,8),tbl),xb,a1);
      a2=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b,16),tbl),xb,a2);
      a3=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b,24),tbl),xb,a3);
    }
    _mm512_storeu_ps(out+t*64,a0);_mm512_storeu_ps(out+t*64+16,a1);_mm512_storeu_ps(out+t*64+32,a2);_mm512_storeu_ps(out+t*64+48,a3);
  }
}
// F: A, two tiles at once (8 chains).
__attribute__((noinline)) void loopF(void){
  __m512 tbl=_mm512_loadu_ps(tblv);
  for(int t=0;t<NCOL/128;t++){
    const uint8_t*p=codes+2*t*K*32; const uint8_t*q=p+K*32;
    __m512 a[8]; for(int i=0;i<8;i++) a[i]=_mm512_setzero_ps();
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b0=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32)));
      __m512i b1=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32+16)));
      __m512i b2=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(q+k*32)));
      __m512i b3=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(q+k*32+16)));
      a[0]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b0,tbl),xb,a[0]);
      a[1]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b0,4),tbl),xb,a[1]);
      a[2]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b1,tbl),xb,a[2]);
      a[3]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b1,4),tbl),xb,a[3]);
      a[4]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b2,tbl),xb,a[4]);
      a[5]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b2,4),tbl),xb,a[5]);
      a[6]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b3,tbl),xb,a[6]);
      a[7]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b3,4),tbl),xb,a[7]);
    }
    for(int i=0;i<8;i++) _mm512_storeu_ps(out+t*128+16*i,a[i]);
  }
}
// G: D, two tiles at once (8 chains).
__attribute__((noinline)) void loopG(void){
  __m512 tbl=_mm512_loadu_ps(tblv); __m512i ix=_mm512_load_si512(pidx); __m512i sv=_mm512_load_si512(shv);
  for(int t=0;t<NCOL/128;t++){
    const uint8_t*p=codes+2*t*K*32; const uint8_t*q=p+K*32;
    __m512 a[8]; for(int i=0;i<8;i++) a[i]=_mm512_setzero_ps();
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b=_mm512_srlv_epi32(_mm512_permutexvar_epi8(ix,_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(p+k*32)))),sv);
      __m512i c=_mm512_srlv_epi32(_mm512_permutexvar_epi8(ix,_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(q+k*32)))),sv);
      #pragma GCC unroll 4
      for(int i=0;i<4;i++){ a[i]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b,tbl),xb,a[i]); b=_mm512_srli_epi32(b,8);
        a[4+i]=_mm512_fmadd_ps(_mm512_permutexvar_ps(c,tbl),xb,a[4+i]); c=_mm512_srli_epi32(c,8);}
    }
    for(int i=0;i<8;i++) _mm512_storeu_ps(out+t*128+16*i,a[i]);
  }
}

// E: today's stored tile, the 32-byte row broadcast to both halves (vbroadcasti32x8), vpsrlvd by 0/4 per half, then 3 vpsrld by 8.
static int shE[16] __attribute__((aligned(64)));
__attribute__((noinline)) void loopE(void){
  __m512 tbl=_mm512_loadu_ps(tblv); __m512i sv=_mm512_load_si512(shE);
  for(int t=0;t<NCOL/64;t++){
    const uint8_t*p=codes+t*K*32;
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b=_mm512_srlv_epi32(_mm512_broadcast_i32x8(_mm256_loadu_si256((const __m256i*)(p+k*32))),sv);
      a0=_mm512_fmadd_ps(_mm512_permutexvar_ps(b,tbl),xb,a0);
      a1=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b,8),tbl),xb,a1);
      a2=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b,16),tbl),xb,a2);
      a3=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b,24),tbl),xb,a3);
    }
    _mm512_storeu_ps(out+t*64,a0);_mm512_storeu_ps(out+t*64+16,a1);_mm512_storeu_ps(out+t*64+32,a2);_mm512_storeu_ps(out+t*64+48,a3);
  }
}
// H: E, two tiles at once (8 chains).
__attribute__((noinline)) void loopH(void){
  __m512 tbl=_mm512_loadu_ps(tblv); __m512i sv=_mm512_load_si512(shE);
  for(int t=0;t<NCOL/128;t++){
    const uint8_t*p=codes+2*t*K*32; const uint8_t*q=p+K*32;
    __m512 a[8]; for(int i=0;i<8;i++) a[i]=_mm512_setzero_ps();
    for(int k=0;k<K;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b=_mm512_srlv_epi32(_mm512_broadcast_i32x8(_mm256_loadu_si256((const __m256i*)(p+k*32))),sv);
      __m512i c=_mm512_srlv_epi32(_mm512_broadcast_i32x8(_mm256_loadu_si256((const __m256i*)(q+k*32))),sv);
      #pragma GCC unroll 4
      for(int i=0;i<4;i++){ a[i]=_mm512_fmadd_ps(_mm512_permutexvar_ps(b,tbl),xb,a[i]); b=_mm512_srli_epi32(b,8);
        a[4+i]=_mm512_fmadd_ps(_mm512_permutexvar_ps(c,tbl),xb,a[4+i]); c=_mm512_srli_epi32(c,8);}
    }
    for(int i=0;i<8;i++) _mm512_storeu_ps(out+t*128+16*i,a[i]);
  }
}
int main(void){
  for(int j=0;j<16;j++){ for(int i=0;i<4;i++) pidx[4*j+i]=8*i+j/2; shv[j]=4*(j&1); shE[j]=j<8?0:4;}
  for(int i=0;i<K*NCOL/2;i++) codes[i]=rand();
  for(int i=0;i<K;i++) x[i]=1.0f/(i+1);
  void (*f[8])(void)={loopA,loopB,loopC,loopD,loopF,loopG,loopE,loopH}; const char*nm[8]={"A bytes+vpmovzxbd","B dword nibbles, 8 chains","C dword nibbles, 16 chains","D vpermb+vpsrlvd, 4 chains","F A x2 tiles, 8 chains","G D x2 tiles, 8 chains","E bcast+vpsrlvd, 4 chains","H E x2 tiles, 8 chains"};
  for(int rep=0;rep<3;rep++) for(int j=0;j<8;j++){
    int R=20000; double t0=now(); for(int r=0;r<R;r++) f[j](); double dt=now()-t0;
    printf("%-28s %.2f Gcodes/s\n", nm[j], (double)K*NCOL*R/dt/1e9);
  }
  return 0;
}
