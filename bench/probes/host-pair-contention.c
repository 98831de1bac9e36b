// A limit probe, not project code: is the other vCPU really ours?  12 chains
// of zmm FMAs (register-bound, no memory), 2 M iterations, alone on one
// thread, then on two threads at once (pthreads), 12 rounds 0.3 s apart.
// On a host that places the guest's vCPUs beside other tenants' threads
// (SMT siblings), the time alone moves between rounds and the pair runs
// slower than alone, while /proc/stat shows no steal.
// Measured 2026-12-06 (session 60), AMD EPYC Zen 4 (KVM, 2 vCPUs):
//   alone 16.5-26.4 ms, pair / alone 0.90-1.81 over 12 rounds.
// gcc -O2 -march=native -pthread host-pair-contention.c -o p && ./p
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static double run(long iters){ __m512 a[12]; for(int i=0;i<12;i++)a[i]=_mm512_set1_ps(i*0.001f); __m512 b=_mm512_set1_ps(0.999f),c=_mm512_set1_ps(0.001f);
 double t0=now(); for(long n=0;n<iters;n++){ for(int i=0;i<12;i++) a[i]=_mm512_fmadd_ps(a[i],b,c);} double t=now()-t0;
 float s=0; for(int i=0;i<12;i++) s+=_mm512_reduce_add_ps(a[i]); if(s==12345.f)printf("x"); return t;}
static void*w(void*p){*(double*)p=run(2000000);return 0;}
int main(){ for(int r=0;r<12;r++){ double t1=run(2000000); double ta,tb; pthread_t th; pthread_create(&th,0,w,&tb); ta=run(2000000); pthread_join(th,0);
  printf("alone %.1f ms  pair %.1f / %.1f ms  ratio %.2f\n",t1*1e3,ta*1e3,tb*1e3,(ta>tb?ta:tb)/t1); struct timespec s={0,300000000}; nanosleep(&s,0);} }
