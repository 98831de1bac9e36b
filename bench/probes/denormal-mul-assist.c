// A limit probe, not project code: does an f32 multiply with a subnormal
// input cost a microcode assist here (MXCSR as a user's process has it: no
// DAZ/FTZ)?  It decides whether FP8 E4M3 codes can be widened without
// vcvtph2ps by placing the code's bits into an f32 (sign | mag << 20, the
// value times 2^-120, a subnormal for E4M3's subnormal codes) and multiplying
// by 2^120 (exact).
// Measured 2026-12-03 on the developers' Intel Xeon (Sapphire Rapids class,
// KVM): normal input 0.81-1.13 ns per mul + fma, subnormal input 63-66 ns
// (about 70x: an assist per instruction).  So on Intel the trick would make
// every E4M3 subnormal code cost an assist; the f32 kernels keep the f16
// route (docs/numerics.md: no f32 subnormal ever appears in the widening).
// gcc -O2 -mavx2 -mfma denormal-mul-assist.c -o dn && ./dn && ./dn subnormal
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(int argc,char**argv){
  float v = argc>1 ? 1e-40f : 1e-30f;  // subnormal or normal input
  __m256 x[8], acc[8], m=_mm256_set1_ps(0x1p120f), y=_mm256_set1_ps(1.0f);
  for(int i=0;i<8;i++){x[i]=_mm256_set1_ps(v*(1+i*0.01f)); acc[i]=_mm256_setzero_ps();}
  long N=100000000;
  double t0=now();
  for(long i=0;i<N/8;i++){
    #pragma GCC unroll 8
    for(int j=0;j<8;j++){ __m256 w=_mm256_mul_ps(x[j],m); acc[j]=_mm256_fmadd_ps(w,y,acc[j]); }
    __asm__ volatile("" : "+x"(x[0]),"+x"(x[1]),"+x"(x[2]),"+x"(x[3]),"+x"(x[4]),"+x"(x[5]),"+x"(x[6]),"+x"(x[7]));
  }
  double t1=now();
  float s=0; for(int j=0;j<8;j++) s+=acc[j][0];
  printf("%s input: %.3f ns per mul+fma (%g)\n", argc>1?"subnormal":"normal", (t1-t0)/N*1e9, s);
}
