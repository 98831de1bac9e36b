// A limit probe, not project code: reciprocal throughput of the instructions
// the f32 kernels' FP4/FP8 widening runs on an AVX2 CPU (8 independent chains
// each, so latency does not limit; the last two rows carry a dependence and
// measure less). Measured 2026-12-02 on an AMD EPYC (Zen 3, 2 vCPUs, ~2.9 GHz):
//   vcvtph2ps ymm 0.47 ns (~1.4 cycles), vpshufb ymm 0.18-0.19 ns,
//   vpunpcklbw ymm 0.20-0.22 ns, vfmadd ymm 0.22 ns,
//   vcvtph2ps + vpshufb + vfmadd mixed 0.72 ns per triple (~2.1 cycles),
//   vpmovzxbd ymm 0.45 ns.
// So each vcvtph2ps costs about two FMAs' issue slots here: the f16 route
// (2 vcvtph2ps per 16 codes) bounds the FP4 decode loop before its FMAs do.
// gcc -O2 -mavx2 -mfma -mf16c avx2-widen-throughput.c -o avx2-widen-throughput
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
#define N 200000000L
int main(void){
  __m128i h[8]; __m256 f[8]; __m256i b[8]; __m256 acc[8];
  for(int i=0;i<8;i++){h[i]=_mm_set1_epi16(0x3c00+i); f[i]=_mm256_set1_ps(1.0f+i); b[i]=_mm256_set1_epi8(i); acc[i]=_mm256_setzero_ps();}
  __m256i tbl=_mm256_setr_epi8(0,56,60,62,64,66,68,70,0,-72,-68,-66,-64,-62,-60,-58,0,56,60,62,64,66,68,70,0,-72,-68,-66,-64,-62,-60,-58);
  double t0=now();
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ f[j]=_mm256_cvtph_ps(h[j]); h[j]=_mm_add_epi16(h[j],_mm_set1_epi16(1)); }
    __asm__ volatile("" :: "x"(f[0]),"x"(f[1]),"x"(f[2]),"x"(f[3]),"x"(f[4]),"x"(f[5]),"x"(f[6]),"x"(f[7]));
  }
  double t1=now();
  printf("vcvtph2ps ymm (+paddw): %.3f ns per instr\n", (t1-t0)/N*1e9);
  t0=now();
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ b[j]=_mm256_shuffle_epi8(tbl,b[j]); }
    __asm__ volatile("" :: "x"(b[0]),"x"(b[1]),"x"(b[2]),"x"(b[3]),"x"(b[4]),"x"(b[5]),"x"(b[6]),"x"(b[7]));
  }
  t1=now(); printf("vpshufb ymm: %.3f ns per instr\n", (t1-t0)/N*1e9);
  t0=now();
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ b[j]=_mm256_unpacklo_epi8(b[j],tbl); }
    __asm__ volatile("" :: "x"(b[0]),"x"(b[1]),"x"(b[2]),"x"(b[3]),"x"(b[4]),"x"(b[5]),"x"(b[6]),"x"(b[7]));
  }
  t1=now(); printf("vpunpcklbw ymm: %.3f ns per instr\n", (t1-t0)/N*1e9);
  t0=now();
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ acc[j]=_mm256_fmadd_ps(f[j],f[(j+1)&7],acc[j]); }
    __asm__ volatile("" :: "x"(acc[0]),"x"(acc[1]),"x"(acc[2]),"x"(acc[3]),"x"(acc[4]),"x"(acc[5]),"x"(acc[6]),"x"(acc[7]));
  }
  t1=now(); printf("vfmadd ymm (8 chains): %.3f ns per instr\n", (t1-t0)/N*1e9);
  t0=now();
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ f[j]=_mm256_cvtph_ps(_mm256_castsi256_si128(b[j])); b[j]=_mm256_shuffle_epi8(tbl,b[j]); acc[j]=_mm256_fmadd_ps(f[j],f[(j+3)&7],acc[j]);}
    __asm__ volatile("" :: "x"(acc[0]),"x"(acc[1]),"x"(acc[2]),"x"(acc[3]),"x"(acc[4]),"x"(acc[5]),"x"(acc[6]),"x"(acc[7]));
  }
  t1=now(); printf("mix cvt+pshufb+fma: %.3f ns per triple\n", (t1-t0)/N*1e9);
  t0=now();
  __m256 t8=_mm256_setr_ps(0,0.5f,1,1.5f,2,3,4,6);
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ f[j]=_mm256_permutevar8x32_ps(t8,b[j]); b[j]=_mm256_add_epi32(b[j],_mm256_castps_si256(f[j])); }
    __asm__ volatile("" :: "x"(f[0]),"x"(f[1]),"x"(f[2]),"x"(f[3]),"x"(f[4]),"x"(f[5]),"x"(f[6]),"x"(f[7]));
  }
  t1=now(); printf("vpermps ymm (+paddd dep): %.3f ns per pair\n", (t1-t0)/N*1e9);
  t0=now();
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ b[j]=_mm256_cvtepu8_epi32(_mm256_castsi256_si128(b[j])); }
    __asm__ volatile("" :: "x"(b[0]),"x"(b[1]),"x"(b[2]),"x"(b[3]),"x"(b[4]),"x"(b[5]),"x"(b[6]),"x"(b[7]));
  }
  t1=now(); printf("vpmovzxbd ymm: %.3f ns per instr\n", (t1-t0)/N*1e9);
  return 0;
}
