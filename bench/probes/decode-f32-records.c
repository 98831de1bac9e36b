// A limit probe, not project code: the f32-activation MXFP4 decode (1 x N x K,
// exact: one FMA per code, each column's FMAs in K order) over two layouts of B,
// 1 and 2 threads (pthreads, each half the columns), B hot (one copy) and from
// DRAM (COPIES copies in turn, more than the L3):
//   T: today's tiled B (kernels/common/problem.py tile_b_codes): block rows of
//      1 KiB tiles of 64 columns, a tile row = 32 bytes (byte j: columns 2j, 2j+1),
//      the scales a separate (K/32) x N byte array; kb outside, tiles inside;
//      prefetch 4 tiles ahead (the stream kernel's loop).
//   R: int-decode's FP4 records (kernels/dot/units.py): per 64-column panel one
//      run down K of 1088-byte records (64 scale bytes, then 8 groups of 2 lines;
//      dword lane j of a line: 4 K-consecutive codes of column j in its low
//      nibbles, of column 16 + j in its high ones); a thread's panels read 2 side
//      by side, each prefetched 8 records ahead; C in registers down all of K.
// Measured 2026-12-03 16:35-16:40 (session 40), Intel Xeon (KVM, 2 vCPUs,
// AVX-512), N = K = 8192, 3 runs of 2 rounds; GB/s of FP4 (4.25 bits/weight):
//   1 thread:  hot T 6.1-8.5, R 6.9-8.2;  DRAM T 6.9-7.3, R 7.3-8.0
//   2 threads: hot T 11.2-12.3 (one 5.5), R 12.7-15.4;  DRAM T 11.7-12.7 (one
//              6.3), R 12.1-14.1 (two outliers 7.1, 8.4)
// R is 2-10 % faster at 1 thread and 5-15 % at 2 in most pairs: the records
// help, but not by the 1.3-1.5x the decode targets would need.
// gcc -O2 -march=native -pthread decode-f32-records.c -o r && ./r
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#define N 8192
#define K 8192
#define KB (K / 32)
#define PANELS (N / 64)
#define COPIES 5
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static const float tblv[16]={0,.5f,1,1.5f,2,3,4,6,-0.f,-.5f,-1,-1.5f,-2,-3,-4,-6};
static float x[K] __attribute__((aligned(64)));
static float out[N] __attribute__((aligned(64)));
static uint8_t *Bt[COPIES], *St[COPIES], *Br[COPIES];
static inline __m512 scale(const uint8_t*s){  // 16 E8M0 codes -> 2^(e-127) (codes 1..254)
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)s)),23));}
static void tiled(const uint8_t*B,const uint8_t*S,int lo,int hi){
  __m512 tbl=_mm512_loadu_ps(tblv); int tiles=N/64;
  for(int blk=0;blk<KB;blk++) for(int t=lo;t<hi;t++){
    const uint8_t*p=B+((size_t)blk*tiles+t)*1024;
    int ta=t+4; const uint8_t*q=ta<hi?B+((size_t)blk*tiles+ta)*1024:B+((size_t)(blk+1<KB?blk+1:blk)*tiles+lo)*1024;
    for(int l=0;l<1024;l+=64) _mm_prefetch((const char*)q+l,_MM_HINT_T0);
    __m512 a0=_mm512_setzero_ps(),a1=a0,a2=a0,a3=a0;
    for(int k=0;k<32;k++){
      __m512 xb=_mm512_set1_ps(x[blk*32+k]);
      __m512i b0=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32)));
      __m512i b1=_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(p+k*32+16)));
      a0=_mm512_fmadd_ps(_mm512_permutexvar_ps(b0,tbl),xb,a0);
      a1=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b0,4),tbl),xb,a1);
      a2=_mm512_fmadd_ps(_mm512_permutexvar_ps(b1,tbl),xb,a2);
      a3=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b1,4),tbl),xb,a3);
    }
    const uint8_t*s=S+(size_t)blk*N+t*64; float*c=out+t*64;
    _mm512_storeu_ps(c,_mm512_fmadd_ps(a0,scale(s),_mm512_loadu_ps(c)));
    _mm512_storeu_ps(c+16,_mm512_fmadd_ps(a1,scale(s+16),_mm512_loadu_ps(c+16)));
    _mm512_storeu_ps(c+32,_mm512_fmadd_ps(a2,scale(s+32),_mm512_loadu_ps(c+32)));
    _mm512_storeu_ps(c+48,_mm512_fmadd_ps(a3,scale(s+48),_mm512_loadu_ps(c+48)));
  }
}
// one record (one block of one panel) into the panel's 4 accumulators c[0..3]
static inline void record(const uint8_t*r,int blk,__m512 tbl,__m512*c){
  __m512 p[4]={_mm512_setzero_ps(),_mm512_setzero_ps(),_mm512_setzero_ps(),_mm512_setzero_ps()};
  const uint8_t*d=r+64;
  for(int g=0;g<8;g++){
    __m512i L0=_mm512_loadu_si512((const void*)(d+g*128)), L1=_mm512_loadu_si512((const void*)(d+g*128+64));
    #pragma GCC unroll 4
    for(int q=0;q<4;q++){
      __m512 xb=_mm512_set1_ps(x[blk*32+g*4+q]);
      p[0]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(L0,8*q),tbl),xb,p[0]);
      p[1]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(L0,8*q+4),tbl),xb,p[1]);
      p[2]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(L1,8*q),tbl),xb,p[2]);
      p[3]=_mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(L1,8*q+4),tbl),xb,p[3]);
    }
  }
  for(int v=0;v<4;v++) c[v]=_mm512_fmadd_ps(p[v],scale(r+16*v),c[v]);
}
static void records(const uint8_t*B,int lo,int hi){  // panels [lo, hi), 2 side by side
  __m512 tbl=_mm512_loadu_ps(tblv);
  for(int j=lo;j<hi;j+=2){
    int two=j+1<hi; const uint8_t*r0=B+(size_t)j*KB*1088, *r1=two?B+(size_t)(j+1)*KB*1088:r0;
    __m512 c0[4],c1[4]; for(int v=0;v<4;v++){c0[v]=_mm512_setzero_ps();c1[v]=c0[v];}
    for(int blk=0;blk<KB;blk++){
      const uint8_t*a=r0+(size_t)(blk+8)*1088, *b=r1+(size_t)(blk+8)*1088;
      for(int l=0;l<1088;l+=64){_mm_prefetch((const char*)a+l,_MM_HINT_T0); if(two)_mm_prefetch((const char*)b+l,_MM_HINT_T0);}
      record(r0+(size_t)blk*1088,blk,tbl,c0);
      if(two) record(r1+(size_t)blk*1088,blk,tbl,c1);
    }
    for(int v=0;v<4;v++){_mm512_storeu_ps(out+j*64+16*v,c0[v]); if(two)_mm512_storeu_ps(out+(j+1)*64+16*v,c1[v]);}
  }
}
static int MODE, COPY;
static void*th(void*arg){ int i=(int)(long)arg;
  if(MODE==0) tiled(Bt[COPY],St[COPY],i*(N/64)/2,(i+1)*(N/64)/2); else records(Br[COPY],i*PANELS/2,(i+1)*PANELS/2); return 0;}
static double run(int mode,int threads,int copies){  // seconds per call, best of 5 rounds over the copies
  double best=1e9; MODE=mode;
  for(int r=0;r<5;r++){ double t0=now();
    for(int c=0;c<copies;c++){ COPY=c; memset(out,0,sizeof out);
      if(threads==1) th((void*)0), th((void*)1);  // the two halves in turn
      else { pthread_t a,b; pthread_create(&a,0,th,(void*)0); pthread_create(&b,0,th,(void*)1); pthread_join(a,0); pthread_join(b,0); }
    }
    double d=(now()-t0)/copies; if(d<best) best=d; }
  return best;
}
int main(void){
  size_t bt=(size_t)N*K/2, st=(size_t)N*KB, br=(size_t)PANELS*(KB+8)*1088;
  for(int c=0;c<COPIES;c++){
    Bt[c]=aligned_alloc(2<<20,(bt+(2<<20))&~((size_t)(2<<20)-1)); St[c]=aligned_alloc(64,st); Br[c]=aligned_alloc(2<<20,(br+(2<<20))&~((size_t)(2<<20)-1));
    madvise(Bt[c],bt,MADV_HUGEPAGE); madvise(Br[c],br,MADV_HUGEPAGE);
    for(size_t i=0;i<bt;i++) Bt[c][i]=(uint8_t)(i*2654435761u>>13);
    for(size_t i=0;i<st;i++) St[c][i]=120+(i%8);
    for(size_t i=0;i<br;i++) Br[c][i]=(i%1088)<64?120+(i%8):(uint8_t)(i*2654435761u>>13);
  }
  for(int i=0;i<K;i++) x[i]=1.0f/(i+1);
  double bytes=(double)N*K*4.25/8;
  for(int rep=0;rep<2;rep++) for(int t=1;t<=2;t++){
    double th_=run(0,t,1), tr_=run(1,t,1), td=run(0,t,COPIES), rd=run(1,t,COPIES);
    printf("%d thread(s): hot tiled %.2f ms (%.1f GB/s) records %.2f ms (%.1f GB/s) | DRAM tiled %.2f ms (%.1f GB/s) records %.2f ms (%.1f GB/s)\n",
      t,th_*1e3,bytes/th_/1e9,tr_*1e3,bytes/tr_/1e9,td*1e3,bytes/td/1e9,rd*1e3,bytes/rd/1e9);
  }
  printf("%g\n",out[0]); return 0;
}
