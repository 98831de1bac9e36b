// A limit probe, not project code: the int-decode kernel's record loop
// (kernels/dot/kernel.py at M = 1, FP4 records of 1088 bytes: 64 scale bytes,
// then 16 x 64 bytes of nibbles; 8 vpdpbusd groups per 32-row block) written
// with intrinsics, reading its records as 1 or 4 runs side by side, with and
// without a T0 prefetch pf bytes ahead in each run.  bench() is called through
// ctypes on a Linear's own records buffer (bench/results/decode-streams-2026-12-03.md,
// "Session 39"); main() runs it on its own buffer.
// Measured 2026-12-03, Intel Xeon (KVM, AVX-512, 2 vCPUs), 1 thread, best of 5:
//   own buffer: 1 run 6.38 GB/s, 4 runs 8.43; prefetch 4 records: 8.69 / 10.54
//   beside Linear (medians of 30, alternating): Linear 5.35 ms, 1 run 5.98,
//   1 run + prefetch 4.34, 4 runs + prefetch 3.58
// gcc -O2 -march=native decode-int-records.c -o r && ./r
// gcc -O2 -march=native -shared -fPIC -DNO_MAIN decode-int-records.c -o libr.so
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
float out[64]; int32_t aw[256*8];
static inline void rec(const uint8_t*p, const int32_t*a, __m512*c, __m512i tbl, __m512i m4){
  __m512 s[4]; for(int v=0;v<4;v++){ __m512i e=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+16*v))); s[v]=_mm512_castsi512_ps(_mm512_slli_epi32(e,23)); }
  __m512i acc[4]; for(int v=0;v<4;v++) acc[v]=_mm512_setzero_si512();
  for(int g=0;g<8;g++){ __m512i A=_mm512_set1_epi32(a[g]);
    __m512i r0=_mm512_loadu_si512(p+64+128*g), r1=_mm512_loadu_si512(p+128+128*g);
    acc[0]=_mm512_dpbusd_epi32(acc[0],_mm512_shuffle_epi8(tbl,_mm512_and_si512(r0,m4)),A);
    acc[1]=_mm512_dpbusd_epi32(acc[1],_mm512_shuffle_epi8(tbl,_mm512_and_si512(_mm512_srli_epi16(r0,4),m4)),A);
    acc[2]=_mm512_dpbusd_epi32(acc[2],_mm512_shuffle_epi8(tbl,_mm512_and_si512(r1,m4)),A);
    acc[3]=_mm512_dpbusd_epi32(acc[3],_mm512_shuffle_epi8(tbl,_mm512_and_si512(_mm512_srli_epi16(r1,4),m4)),A);}
  for(int v=0;v<4;v++) c[v]=_mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[v]),s[v]),_mm512_set1_ps(0.5f),c[v]);
}
__attribute__((noinline)) void run(const uint8_t*B,size_t nrec,int ns,int pf){
  __m512i tbl=_mm512_set1_epi32(0x03020100), m4=_mm512_set1_epi8(15);
  size_t per=nrec/ns; // records per stream; panels of 256 records
  for(size_t panel=0; panel<per/256; panel++){
    __m512 c[4][4]; for(int s=0;s<ns;s++) for(int v=0;v<4;v++) c[s][v]=_mm512_setzero_ps();
    for(int b=0;b<256;b++) for(int s=0;s<ns;s++){ const uint8_t*p=B+((size_t)s*per+panel*256+b)*1088;
      if(pf) for(int l=0;l<1088;l+=64) _mm_prefetch((const char*)p+pf+l,_MM_HINT_T0);
      rec(p,aw+8*b,c[s],tbl,m4);}
    for(int s=0;s<ns;s++) for(int v=0;v<4;v++) out[16*v]+=_mm512_reduce_add_ps(c[s][v]);
  }
}
#ifndef NO_MAIN
int main(){ size_t nrec=32768*4; size_t big=nrec*1088; uint8_t*B=aligned_alloc(2<<20,(big+(2<<20))&~((size_t)(2<<20)-1)); madvise(B,big,MADV_HUGEPAGE);
  for(size_t i=0;i<big;i++) B[i]=(uint8_t)(i*2654435761u>>13); for(int i=0;i<2048;i++) aw[i]=i*7;
  int NS[]={1,4,1,4,1,4}; int PF[]={0,0,4352,4352,8704,8704};
  for(int i=0;i<6;i++){ double best=1e9; for(int r=0;r<5;r++){double t0=now(); run(B,nrec,NS[i],PF[i]); double dt=now()-t0; if(dt<best)best=dt;}
    printf("streams %d pf %5d: %.2f GB/s\n",NS[i],PF[i],big/best/1e9);}
  printf("%g\n",out[0]); }
#endif
double bench(const uint8_t*B, size_t nrec, int ns, int pf){ for(int i=0;i<2048;i++) aw[i]=i*7; double best=1e9; for(int r=0;r<5;r++){double t0=now(); run(B,nrec,ns,pf); double dt=now()-t0; if(dt<best)best=dt;} return best; }
