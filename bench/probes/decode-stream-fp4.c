// A limit probe, not project code: the f32-activation FP4 decode loop of
// fp4-decode-dword-lanes.c (today's layout: 1 KiB tiles of 32 rows x 32 bytes),
// streamed from memory over 128 MiB, read as 1, 2, 4 or 8 sequential streams
// (the array split in that many parts, one tile of each in turn) with and
// without software prefetch (T0 or T1, bytes ahead in each stream); argument
// 1: madvise(MADV_HUGEPAGE) on the array.
// Measured 2026-12-03, Intel Xeon (KVM, AVX-512, 2 vCPUs), best of 7, 1 thread:
//   4 KiB pages: 1 stream no pf 5.33 GB/s, pf 4 KiB 7.45, pf 16 KiB 7.27 (T1 7.04);
//                2 streams 6.58 / pf 8.10; 4 streams 8.25 / pf 8.62; 8: 8.00 / 8.21
//   huge pages:  1 stream 5.86 / pf 8.36; 4 streams 8.44 / pf 9.27
// In one process beside mlir_mx.Linear (1 x 8192 x 8192 MXFP4, 60 calls
// alternating, medians): Linear 5.66 ms, this loop 1 stream pf 4 KiB 5.09 ms,
// 4 streams pf 4 KiB 4.64 ms.  The same interleave in the stream kernel
// (StreamConfig streams = 2, 4, 8) gave 6.86 / 7.08 / 8.11 ms against 6.91
// (no gain; bench/results/decode-streams-2026-12-03.md).
// gcc -O2 -march=native decode-stream-fp4.c -o s && ./s 0 && ./s 1
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static const float tblv[16]={0,.5f,1,1.5f,2,3,4,6,-0.f,-.5f,-1,-1.5f,-2,-3,-4,-6};
float x[32] __attribute__((aligned(64)));
float out[64];
static inline void tile(const uint8_t*p, __m512 tbl, __m512*s){
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(int k=0;k<32;k++){
      __m512 xb=_mm512_set1_ps(x[k]);
      __m512i b0=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32)));
      __m512i b1=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32+16)));
      a0=_mm512_fmadd_ps(_mm512_permutexvar_ps(b0,tbl),xb,a0);
      a1=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b0,4),tbl),xb,a1);
      a2=_mm512_fmadd_ps(_mm512_permutexvar_ps(b1,tbl),xb,a2);
      a3=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b1,4),tbl),xb,a3);
    }
    s[0]=_mm512_add_ps(s[0],a0);s[1]=_mm512_add_ps(s[1],a1);s[2]=_mm512_add_ps(s[2],a2);s[3]=_mm512_add_ps(s[3],a3);
}
// ns streams: the array split in ns parts, tiles taken round-robin; pf bytes ahead in each stream (T0), pf2 (T1/L2) further.
__attribute__((noinline)) void fp4(const uint8_t*B, size_t bytes, int ns, int pf, int hint){
  __m512 tbl=_mm512_loadu_ps(tblv);
  __m512 s[4]={_mm512_setzero_ps(),_mm512_setzero_ps(),_mm512_setzero_ps(),_mm512_setzero_ps()};
  size_t part=bytes/ns;
  for(size_t t=0;t<part;t+=1024){
    for(int j=0;j<ns;j++){
      const uint8_t*p=B+j*part+t;
      if(pf){ if(hint==0) for(int l=0;l<1024;l+=64) _mm_prefetch((const char*)p+pf+l,_MM_HINT_T0);
              else for(int l=0;l<1024;l+=64) _mm_prefetch((const char*)p+pf+l,_MM_HINT_T1);}
      tile(p,tbl,s);
    }
  }
  for(int i=0;i<4;i++) _mm512_storeu_ps(out+16*i,s[i]);
}
int main(int argc,char**argv){
  size_t big=(size_t)128<<20; int huge=argc>1&&atoi(argv[1]);
  uint8_t*B=aligned_alloc(2<<20,big);
  if(huge) madvise(B,big,MADV_HUGEPAGE);
  for(size_t i=0;i<big;i++) B[i]=(uint8_t)(i*2654435761u>>13);
  for(int i=0;i<32;i++) x[i]=1.0f/(i+1);
  struct {int ns,pf,hint;const char*n;} V[]={{1,0,0,"1 stream, no pf"},{1,4096,0,"1 stream pf4K T0"},{1,16384,0,"1 stream pf16K T0"},{1,16384,1,"1 stream pf16K T1"},
    {2,0,0,"2 streams no pf"},{2,4096,0,"2 streams pf4K"},{4,0,0,"4 streams no pf"},{4,4096,0,"4 streams pf4K"},{8,0,0,"8 streams no pf"},{8,2048,0,"8 streams pf2K"}};
  int nv=sizeof V/sizeof V[0]; double best[16]; for(int i=0;i<nv;i++) best[i]=1e9;
  for(int rep=0;rep<7;rep++) for(int v=0;v<nv;v++){
    double t0=now(); fp4(B,big,V[v].ns,V[v].pf,V[v].hint); double dt=now()-t0; if(dt<best[v]) best[v]=dt;
  }
  for(int v=0;v<nv;v++) printf("%-20s %.2f GB/s  %.1f G codes/s\n",V[v].n,big/best[v]/1e9,2*big/best[v]/1e9);
  printf("%g\n",out[0]); return 0;
}
