// Where Linux places a woken worker on a 2-vCPU VM (session 61).
//
//   cc -O2 -mavx512f -pthread wake-placement-pair.c -o pair
//   ./pair PIN GAP_MS     (PIN 0: unpinned; 1: caller on CPU 0, worker on CPU 1)
//
// The caller wakes a worker sleeping on a condition variable, both run
// ~3 ms of register-only FMAs, and the round's time is compared with one
// thread's alone ('.' >= 0.85 of it, 'o' >= 0.6, 'X' slower); 40 rounds
// GAP_MS apart; "same-cpu" counts the rounds where both ended on one CPU.
// On the developers' Zen 4 (2 vCPUs): unpinned, 50 ms gaps:
//   X.XXXoXXXoXXoXoXXoXXo.oXXXoXXoXXXXoXXXoX  same-cpu 26/40
// pinned, 50 ms gaps: all '.' but one 'o'; unpinned, no gap: all '.'.
// The woken worker is placed on the waker's vCPU (the idle one is passed
// over) and the pair shares it until the load balancer moves it.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static atomic_int gen, done; static pthread_mutex_t mu=PTHREAD_MUTEX_INITIALIZER; static pthread_cond_t cv=PTHREAD_COND_INITIALIZER; static int pin; static long iters=200000; static int cpu_of[2];
static float sink[2];
static void work(int id){
  __m512 a[12]; for(int i=0;i<12;i++) a[i]=_mm512_set1_ps(i+1.f);
  volatile float mv=0.999f, dv=0.001f; __m512 m=_mm512_set1_ps(mv), d=_mm512_set1_ps(dv);
  for(long n=0;n<iters;n++) {for(int i=0;i<12;i++) a[i]=_mm512_fmadd_ps(a[i],m,d); __asm__ volatile("" : "+v"(a[0]),"+v"(a[1]),"+v"(a[2]),"+v"(a[3]),"+v"(a[4]),"+v"(a[5]),"+v"(a[6]),"+v"(a[7]),"+v"(a[8]),"+v"(a[9]),"+v"(a[10]),"+v"(a[11]));}
  __m512 s=a[0]; for(int i=1;i<12;i++) s=_mm512_add_ps(s,a[i]); sink[id]=_mm512_reduce_add_ps(s);
  cpu_of[id]=sched_getcpu();
}
static void *worker(void *arg){
  if(pin){cpu_set_t c;CPU_ZERO(&c);CPU_SET(1,&c);pthread_setaffinity_np(pthread_self(),sizeof c,&c);}
  int seen=0; for(;;){ int g; pthread_mutex_lock(&mu); while((g=atomic_load(&gen))==seen) pthread_cond_wait(&cv,&mu); pthread_mutex_unlock(&mu); /* yield-sleep */ seen=g; if(g<0) break; work(1); atomic_fetch_add(&done,1);} return 0;}
int main(int argc,char**argv){
  pin=argc>1&&atoi(argv[1]); int gap_ms=argc>2?atoi(argv[2]):50;
  if(pin){cpu_set_t c;CPU_ZERO(&c);CPU_SET(0,&c);sched_setaffinity(0,sizeof c,&c);}
  pthread_t t; pthread_create(&t,0,worker,0);
  double alone; {double t0=now(); work(0); t0=now(); work(0); alone=now()-t0;}
  char line[64]; int same=0;
  for(int r=0;r<40;r++){
    usleep(gap_ms*1000);
    double t0=now(); pthread_mutex_lock(&mu); atomic_fetch_add(&gen,1); pthread_cond_signal(&cv); pthread_mutex_unlock(&mu); work(0); while(atomic_load(&done)<=r); double dt=now()-t0;
    double ratio=alone/dt; line[r]= ratio>0.85?'.':(ratio>0.6?'o':'X'); same+=cpu_of[0]==cpu_of[1];
  }
  line[40]=0; printf("pin=%d gap=%dms alone %.2f ms  %s  same-cpu %d/40\n",pin,gap_ms,alone*1e3,line,same);
  pthread_mutex_lock(&mu); atomic_store(&gen,-1); pthread_cond_signal(&cv); pthread_mutex_unlock(&mu); return 0;}
