// A limit probe, not project code (issue 51, session 53): what bounds a
// decode at 2 threads on this 2-vCPU machine.  At 1 and 2 threads (pthreads,
// started together), per thread:
//   - a dependent add chain (1 per cycle: the clock),
//   - 12 independent zmm FMA chains (the FMA ports; halved if the two vCPUs
//     were SMT siblings of one core),
//   - a read of a 64 MiB array (a 1 x 8192 x 8192 MXFP8 weight's size; L3
//     on this Xeon), each thread its 1/T, as 1 or 8 sequential streams;
// best of R runs, in the thread's CPU time (leaves out the time a loaded
// machine deschedules it; includes what the hypervisor steals) and in wall
// time (what a decode sees; only meaningful on a quiet machine).
// Measured 2026-12-05 (session 53), Intel Xeon (KVM, 2 vCPUs), load average
// 3.5 (mx-bench beside it), best of 21, per thread in CPU time / all threads
// in wall time:
//   dependent add: 4.02 / 2.67 G/s (1 thread), 3.72 / 6.78 (2): the clock
//     (3.4-4.1 GHz over the session's runs) holds at 2 threads
//   zmm FMA:       7.70 / 7.70 G/s (1 thread), 7.69 / 15.35 (2): two cores,
//     not SMT siblings (mx-bench's quiet FMA roof: 235.7 -> 448.1 GFLOP/s)
//   64 MiB read, 1 stream per thread: 25.82 / 25.78 GB/s (1), 26.81 / 51.76 (2)
//   64 MiB read, 8 streams per thread: 31.54 / 31.49 GB/s (1), 32.12 / 63.44 (2)
// So the two cores' L3 reads add up; a 2-thread MXFP8 decode (37.6 GB/s
// quiet in session 52) is not bound by them.
// gcc -O2 -march=native -pthread two-core-limits.c -o t && ./t [R]
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double tnow(clockid_t c){struct timespec t;clock_gettime(c,&t);return t.tv_sec+1e-9*t.tv_nsec;}
#define KEEP(x) __asm__ volatile("" : "+v"(x))
#define ITERS 20000000L
#define BIG ((size_t)64 << 20)
static uint8_t *B;
float sink[16]; // printed at the end, so no loop is dead
static void fma12(void){
  __m512 acc[12]; __m512 a=_mm512_set1_ps(1.0f), b=_mm512_set1_ps(1e-9f); KEEP(a); KEEP(b);
  for(int i=0;i<12;i++) acc[i]=_mm512_set1_ps((float)i);
  for(long it=0;it<ITERS;it++){
    _Pragma("GCC unroll 16") for(int i=0;i<12;i++) acc[i]=_mm512_fmadd_ps(acc[i],a,b);
  }
  __m512 s=acc[0]; for(int i=1;i<12;i++) s=_mm512_add_ps(s,acc[i]); _mm512_storeu_ps(sink,s);
}
static void chain(void){ long x=1; for(long it=0;it<ITERS*12;it++) __asm__ volatile("add $1, %0" : "+r"(x)); sink[0]=(float)x; }
static void rd(const uint8_t*p0, size_t bytes, int ns){
  __m512i s[8]; for(int i=0;i<8;i++) s[i]=_mm512_setzero_si512();
  size_t part=bytes/ns;
  for(size_t t=0;t<part;t+=256) for(int j=0;j<ns;j++){ const uint8_t*p=p0+j*part+t;
    s[j&7]=_mm512_add_epi32(s[j&7],_mm512_add_epi32(_mm512_add_epi32(_mm512_loadu_si512(p),
      _mm512_loadu_si512(p+64)),_mm512_add_epi32(_mm512_loadu_si512(p+128),_mm512_loadu_si512(p+192))));}
  __m512i a=s[0]; for(int i=1;i<8;i++) a=_mm512_add_epi32(a,s[i]); _mm512_storeu_si512(sink,a);
}
typedef struct { int kind, id, nth; double cpu, wall; } job;
static void* run(void*p){ job*j=p; double c0=tnow(CLOCK_THREAD_CPUTIME_ID), w0=tnow(CLOCK_MONOTONIC);
  if(j->kind==0) chain(); else if(j->kind==1) fma12();
  else rd(B + j->id*(BIG/j->nth), BIG/j->nth, j->kind==2 ? 1 : 8);
  j->cpu=tnow(CLOCK_THREAD_CPUTIME_ID)-c0; j->wall=tnow(CLOCK_MONOTONIC)-w0; return 0; }
int main(int argc,char**argv){
  int reps = argc>1 ? atoi(argv[1]) : 15;
  B=aligned_alloc(2<<20,BIG); for(size_t i=0;i<BIG;i++) B[i]=(uint8_t)(i*2654435761u>>13);
  const char*name[4]={"dependent add (G/s)","zmm FMA (G/s)","64 MiB read, 1 stream (GB/s)","64 MiB read, 8 streams (GB/s)"};
  for(int kind=0;kind<4;kind++) for(int nth=1;nth<=2;nth++){
    double bc=1e9,bw=1e9;
    for(int r=0;r<reps;r++){ pthread_t t[2]; job j[2];
      for(int i=0;i<nth;i++){ j[i]=(job){kind,i,nth,0,0}; pthread_create(&t[i],0,run,&j[i]); }
      double w=0; for(int i=0;i<nth;i++){ pthread_join(t[i],0); if(j[i].cpu<bc) bc=j[i].cpu; if(j[i].wall>w) w=j[i].wall; }
      if(w<bw) bw=w; }
    double n = kind<2 ? (double)ITERS*12 : (double)BIG/nth;
    printf("%-30s %d thread(s): per thread %.2f (CPU time), all threads %.2f (wall), best of %d\n",
      name[kind], nth, n/bc*1e-9, n*nth/bw*1e-9, reps);
  }
  printf("(%g)\n", sink[0]);
  return 0;
}
